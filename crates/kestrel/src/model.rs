//! `Model`: a loaded GGUF model with its tokenizer, ready to generate text.

use std::path::Path;
use std::sync::Arc;

use kestrel_generate::{GenerateMetrics, Generator, GeneratorOptions, Perplexity};
use kestrel_gguf::{GgufModel, OpenOptions};
use kestrel_kv::KvDType;
use kestrel_tokenizer::{DecodeOptions, EncodeOptions, Tokenizer, TokenizerOptions};

use crate::Error;

/// How to load a model.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Threads (0: all cores).
    pub threads: usize,
    /// Context length (0: the model's, at most 4096).
    pub ctx: usize,
    /// Memory-map the file (default) or read it into memory.
    pub mmap: bool,
    /// KV cache element type.
    pub kv_dtype: KvDType,
    /// Prompt tokens per prefill step.
    pub batch: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            threads: 0,
            ctx: 0,
            mmap: true,
            kv_dtype: KvDType::F16,
            batch: 512,
        }
    }
}

/// How to generate.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Most new tokens.
    pub max_tokens: usize,
    /// Sampling temperature; only 0 (greedy) is supported so far.
    pub temperature: f32,
    /// Add BOS as the model's metadata says.
    pub add_bos: bool,
    /// Parse special-token text in the prompt (`<|im_start|>`) as those tokens.
    pub parse_special: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            temperature: 0.0,
            add_bos: true,
            parse_special: false,
        }
    }
}

/// The result of a generation.
#[derive(Clone, Debug)]
pub struct Output {
    /// The prompt's token ids (with BOS when added).
    pub prompt_ids: Vec<u32>,
    /// Generated ids.
    pub ids: Vec<u32>,
    /// Generated text (end-of-generation tokens not rendered).
    pub text: String,
    /// Counts and timings.
    pub metrics: GenerateMetrics,
}

/// A loaded model.
///
/// ```no_run
/// use kestrel::{GenerateOptions, LoadOptions, Model};
/// let mut model = Model::load_file("gemma-3-270m-q4_k_m.gguf", LoadOptions::default())?;
/// let out = model.generate("The capital of France is", &GenerateOptions::default())?;
/// println!("{}", out.text);
/// # Ok::<(), kestrel::Error>(())
/// ```
pub struct Model {
    generator: Generator,
    tokenizer: Tokenizer,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("generator", &self.generator)
            .finish()
    }
}

impl Model {
    /// Load a GGUF file (any shard of a split model).
    pub fn load_file(path: impl AsRef<Path>, opts: LoadOptions) -> Result<Model, Error> {
        let model = Arc::new(GgufModel::open_with(path, OpenOptions { mmap: opts.mmap })?);
        let tokenizer = Tokenizer::from_metadata(&model.metadata(), TokenizerOptions::default())?;
        let generator = Generator::new(
            model,
            GeneratorOptions {
                threads: opts.threads,
                ctx: opts.ctx,
                batch: opts.batch,
                kv_dtype: opts.kv_dtype,
            },
        )?;
        Ok(Model {
            generator,
            tokenizer,
        })
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The generator underneath (config, context, plans).
    pub fn generator(&self) -> &Generator {
        &self.generator
    }

    /// The generator underneath, to drive prefill and decode steps directly (benchmarks,
    /// custom decode loops).
    pub fn generator_mut(&mut self) -> &mut Generator {
        &mut self.generator
    }

    /// Tokenize a prompt as `generate` does.
    pub fn encode(&self, prompt: &str, opts: &GenerateOptions) -> Result<Vec<u32>, Error> {
        Ok(self.tokenizer.encode(
            prompt,
            EncodeOptions::default()
                .add_special(opts.add_bos)
                .parse_special(opts.parse_special),
        )?)
    }

    /// Generate a continuation of `prompt`.
    pub fn generate(&mut self, prompt: &str, opts: &GenerateOptions) -> Result<Output, Error> {
        self.generate_stream(prompt, opts, |_| true)
    }

    /// Generate, calling `on_text` with each piece of text as soon as it is complete UTF-8;
    /// returning `false` stops.
    pub fn generate_stream(
        &mut self,
        prompt: &str,
        opts: &GenerateOptions,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> Result<Output, Error> {
        if opts.temperature != 0.0 {
            return Err(Error::InvalidOption {
                name: "temperature",
                reason: "only greedy decoding (temperature 0) is implemented so far".into(),
            });
        }
        let prompt_ids = self.encode(prompt, opts)?;
        let stops: Vec<u32> = self.generator.stop_ids().to_vec();
        let mut text = String::new();
        let mut decoder = self.tokenizer.decoder(false);
        let mut err = None;
        let generation = self
            .generator
            .generate_ids(&prompt_ids, opts.max_tokens, &mut |id| {
                if stops.contains(&id) {
                    return Ok(true);
                }
                match decoder.push(id) {
                    Ok(Some(piece)) => {
                        text.push_str(&piece);
                        Ok(on_text(&piece))
                    }
                    Ok(None) => Ok(true),
                    Err(e) => {
                        err = Some(e);
                        Ok(false)
                    }
                }
            })?;
        if let Some(e) = err {
            return Err(e.into());
        }
        let tail = decoder.finish();
        if !tail.is_empty() {
            text.push_str(&tail);
            on_text(&tail);
        }
        Ok(Output {
            prompt_ids,
            ids: generation.ids,
            text,
            metrics: generation.metrics,
        })
    }

    /// Perplexity of `text` over windows of `n_ctx` tokens, as llama-perplexity computes it.
    pub fn perplexity(&mut self, text: &str, n_ctx: usize) -> Result<Perplexity, Error> {
        let ids = self.tokenizer.encode(text, EncodeOptions::default())?;
        let md = self.generator.model().metadata();
        let add_bos = md.get_bool("tokenizer.ggml.add_bos_token").unwrap_or(false);
        let bos = if add_bos {
            md.get_u32("tokenizer.ggml.bos_token_id").ok()
        } else {
            None
        };
        Ok(self.generator.perplexity(&ids, n_ctx, bos)?)
    }

    /// Decode ids to text.
    pub fn decode(&self, ids: &[u32]) -> Result<String, Error> {
        Ok(self.tokenizer.decode(ids, DecodeOptions::default())?)
    }
}
