//! The options of loading a model ([`LoadOptions`]) and of one generation
//! ([`GenerateOptions`]), with the builder methods that mirror the seed project's `With...`
//! options.

use kestrel_generate::{CancelToken, GenerateParams};
use kestrel_kv::KvDType;
use kestrel_sampling::{Grammar, SamplingConfig};

use crate::{AdapterInfo, Error};

/// How to load a model.
///
/// ```
/// use kestrel::{KvDType, LoadOptions};
/// let opts = LoadOptions::default()
///     .with_device("cpu")
///     .with_threads(2)
///     .with_max_seq_len(2048)
///     .with_kv_dtype(KvDType::Q8_0)
///     .with_mmap(true)
///     .with_concurrency(8);
/// assert_eq!(opts.ctx, 2048);
/// ```
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Where to run: `cpu` (default), `cuda`, `cuda:N` or `auto` (a GPU when a CUDA build,
    /// driver and GPU are there, else the CPU: [`Model::device_note`](crate::Model::device_note) says why). On CUDA the
    /// model runs one sequence a step with f16 KV caches.
    pub device: String,
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
    /// Most sequences [`Model::generate_batch`](crate::Model::generate_batch) runs at once (0: one per prompt, at most 16).
    pub concurrency: usize,
    /// KV sessions kept, so this many conversations stay cached at once (1..=64; each holds a
    /// whole context's cache, made when first needed).
    pub session_pool: usize,
    /// LoRA adapter files (GGUF, as llama.cpp's `convert_lora_to_gguf.py` writes them) applied
    /// to every generation, in order, each with its scale.
    pub lora: Vec<(std::path::PathBuf, f32)>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            device: "cpu".into(),
            threads: 0,
            ctx: 0,
            mmap: true,
            kv_dtype: KvDType::F16,
            batch: 512,
            concurrency: 0,
            session_pool: 1,
            lora: Vec::new(),
        }
    }
}

impl LoadOptions {
    /// `cpu`, `cuda`, `cuda:N` or `auto`.
    pub fn with_device(mut self, device: impl Into<String>) -> Self {
        self.device = device.into();
        self
    }
    /// Threads (0: all cores).
    pub fn with_threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }
    /// Context length in tokens (0: the model's, at most 4096).
    pub fn with_max_seq_len(mut self, n: usize) -> Self {
        self.ctx = n;
        self
    }
    /// KV cache element type.
    pub fn with_kv_dtype(mut self, d: KvDType) -> Self {
        self.kv_dtype = d;
        self
    }
    /// Memory-map the file (true) or read it.
    pub fn with_mmap(mut self, yes: bool) -> Self {
        self.mmap = yes;
        self
    }
    /// Prompt tokens per prefill step.
    pub fn with_batch(mut self, n: usize) -> Self {
        self.batch = n;
        self
    }
    /// Most sequences batched together by [`Model::generate_batch`](crate::Model::generate_batch).
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }
    /// Conversations kept cached at once (see [`LoadOptions::session_pool`]).
    pub fn with_session_pool(mut self, n: usize) -> Self {
        self.session_pool = n;
        self
    }
    /// Applies the LoRA adapter at `path` with `scale` (llama.cpp's `--lora-scaled`; 1.0 is
    /// `--lora`), after those added before.
    pub fn with_lora(mut self, path: impl Into<std::path::PathBuf>, scale: f32) -> Self {
        self.lora.push((path.into(), scale));
        self
    }
}

/// How to generate: sampling, grammar, stop conditions, tokenization of the prompt.
///
/// The defaults are the seed project's ([`SamplingConfig::default`]): temperature 1.0, no
/// filtering, 256 new tokens, a random seed. Builder methods mirror its `With...` options.
///
/// ```
/// use kestrel::GenerateOptions;
/// let opts = GenerateOptions::default()
///     .with_temperature(0.7)
///     .with_top_k(40)
///     .with_top_p(0.95)
///     .with_max_tokens(64)
///     .with_seed(42)
///     .with_stop_strings(["\n\n"]);
/// assert_eq!(opts.sampling.top_k, 40);
/// let greedy = GenerateOptions::greedy().with_max_tokens(16);
/// assert_eq!(greedy.sampling.temperature, 0.0);
/// let json = GenerateOptions::default()
///     .with_json_schema(r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#)?;
/// assert!(json.grammar.is_some());
/// # Ok::<(), kestrel::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Sampler chain, token budget, stop ids and stop strings.
    pub sampling: SamplingConfig,
    /// Constrain the output to a grammar (GBNF or a JSON Schema's).
    pub grammar: Option<Grammar>,
    /// Add BOS as the model's metadata says.
    pub add_bos: bool,
    /// Parse special-token text in the prompt (`<|im_start|>`) as those tokens.
    pub parse_special: bool,
    /// Stop when this token is cancelled.
    pub cancel: Option<CancelToken>,
    /// Report each token's log-probability and this many alternatives ([`Token::logprob`](kestrel_generate::Token)).
    pub logprobs: Option<usize>,
    /// The model's LoRA adapters this generation uses, by name ([`Model::adapters`](crate::Model::adapters)), each
    /// with its scale; the others are off. `None`: the model's scales.
    pub adapters: Option<Vec<(String, f32)>>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            sampling: SamplingConfig::default(),
            grammar: None,
            add_bos: true,
            parse_special: false,
            cancel: None,
            logprobs: None,
            adapters: None,
        }
    }
}

impl GenerateOptions {
    /// Greedy decoding (temperature 0), everything else default.
    pub fn greedy() -> Self {
        GenerateOptions {
            sampling: SamplingConfig::greedy(),
            ..Default::default()
        }
    }

    /// Sampling temperature (0: greedy).
    pub fn with_temperature(mut self, t: f32) -> Self {
        self.sampling.temperature = t;
        self
    }

    /// Keep the `k` most likely tokens (0: off).
    pub fn with_top_k(mut self, k: usize) -> Self {
        self.sampling.top_k = k;
        self
    }

    /// Nucleus sampling mass (1: off).
    pub fn with_top_p(mut self, p: f32) -> Self {
        self.sampling.top_p = p;
        self
    }

    /// Minimum probability relative to the most likely token (0: off).
    pub fn with_min_p(mut self, p: f32) -> Self {
        self.sampling.min_p = p;
        self
    }

    /// Most new tokens.
    pub fn with_max_tokens(mut self, n: usize) -> Self {
        self.sampling.max_new_tokens = n;
        self
    }

    /// Repetition penalty over the last 64 tokens (1: off).
    pub fn with_repetition_penalty(mut self, p: f32) -> Self {
        self.sampling.repeat_penalty = p;
        self
    }

    /// Strings that end generation (not included in the text).
    pub fn with_stop_strings<I, S>(mut self, stops: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.sampling.stop_strings = stops.into_iter().map(Into::into).collect();
        self
    }

    /// RNG seed: the same seed and inputs give the same output.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.sampling.seed = Some(seed);
        self
    }

    /// Constrain the output to a grammar.
    pub fn with_grammar(mut self, grammar: Grammar) -> Self {
        self.grammar = Some(grammar);
        self
    }

    /// Constrain the output to GBNF text (llama.cpp's grammar syntax).
    pub fn with_gbnf(self, gbnf: &str) -> Result<Self, Error> {
        Ok(self.with_grammar(Grammar::from_gbnf(gbnf)?))
    }

    /// Constrain the output to JSON valid against a JSON Schema (its text; properties are
    /// generated in the order they are written).
    pub fn with_json_schema(self, schema: &str) -> Result<Self, Error> {
        Ok(self.with_grammar(Grammar::from_json_schema_str(schema)?))
    }

    /// Report each token's log-probability and the `top` most likely alternatives.
    pub fn with_logprobs(mut self, top: usize) -> Self {
        self.logprobs = Some(top);
        self
    }

    /// Stop when `cancel` is cancelled.
    pub fn with_cancel(mut self, cancel: CancelToken) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Uses the model's LoRA adapter `name` ([`Model::adapters`](crate::Model::adapters): its file name without
    /// `.gguf`, its path as loaded, or its index) at `scale`, with the others chosen so far;
    /// adapters not chosen are off for this generation (the seed's `WithAdapter`).
    ///
    /// ```no_run
    /// use kestrel::{GenerateOptions, LoadOptions, Model};
    /// let mut model = Model::load(
    ///     "smollm2-135m",
    ///     LoadOptions::default().with_lora("french.gguf", 0.0).with_lora("terse.gguf", 0.0),
    /// )?;
    /// let french = GenerateOptions::default().with_adapter("french", 1.0);
    /// let both = french.clone().with_adapter("terse", 0.5);
    /// println!("{}", model.generate("Hello", &french)?.text);
    /// println!("{}", model.generate("Hello", &both)?.text);
    /// # Ok::<(), kestrel::Error>(())
    /// ```
    pub fn with_adapter(mut self, name: impl Into<String>, scale: f32) -> Self {
        self.adapters
            .get_or_insert_with(Vec::new)
            .push((name.into(), scale));
        self
    }

    /// The base model alone: every LoRA adapter off for this generation.
    pub fn without_adapters(mut self) -> Self {
        self.adapters = Some(Vec::new());
        self
    }

    /// The generator-level parameters these options make (what a
    /// [`Scheduler`](kestrel_generate::Scheduler) request takes) for a model with `adapters`
    /// ([`Model::adapters`](crate::Model::adapters)): adapter names become their indices.
    ///
    /// # Errors
    /// An adapter name the model does not have.
    pub fn params(&self, adapters: &[AdapterInfo]) -> Result<GenerateParams, Error> {
        let adapters = match &self.adapters {
            Some(choice) => Some(crate::adapters::resolve(adapters, choice)?),
            None => None,
        };
        Ok(GenerateParams {
            sampling: self.sampling.clone(),
            grammar: self.grammar.clone(),
            cancel: self.cancel.clone(),
            logprobs: self.logprobs,
            adapters,
        })
    }
}
