//! `Model`: a loaded GGUF model with its tokenizer, ready to generate text.

use std::path::Path;
use std::sync::Arc;

use kestrel_generate::{
    Completion, FinishReason, GenerateError, GenerateMetrics, GenerateParams, Generator,
    GeneratorOptions, KlDivergence, KldAccumulator, LogProbReader, Perplexity, TokenIter,
};
use kestrel_gguf::{GgufModel, OpenOptions};
use kestrel_tensor::{Device, DeviceRequest};
use kestrel_tokenizer::{ChatMessage, ChatTemplate, DecodeOptions, EncodeOptions, Tokenizer};

use crate::device::{cpu_instead, parse_device, resolve_device};
use crate::{Error, GenerateOptions, LoadOptions, Prompter};

/// The result of a generation.
#[derive(Clone, Debug)]
pub struct Output {
    /// The prompt's token ids (with BOS when added).
    pub prompt_ids: Vec<u32>,
    /// Generated ids.
    pub ids: Vec<u32>,
    /// Generated text (end-of-generation tokens and stop strings not included).
    pub text: String,
    /// Why generation ended.
    pub finish: FinishReason,
    /// Counts and timings.
    pub metrics: GenerateMetrics,
}

/// Token counts of a chat reply, as OpenAI reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens of the rendered conversation.
    pub prompt_tokens: usize,
    /// Of those, tokens reused from the session's cache.
    pub cached_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Their sum.
    pub total_tokens: usize,
}

/// A chat reply.
#[derive(Clone, Debug)]
pub struct Response {
    /// The assistant's text.
    pub text: String,
    /// Token counts.
    pub usage: Usage,
    /// Why generation ended.
    pub finish: FinishReason,
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
    tokenizer: Arc<Tokenizer>,
    prompter: Prompter,
    last_metrics: GenerateMetrics,
    concurrency: usize,
    sessions: crate::session_pool::SessionPool,
    device_note: Option<String>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("generator", &self.generator)
            .finish()
    }
}

/// What [`Model::classify`] returns for one prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct Classification {
    /// The most likely next token after the prompt.
    pub token: u32,
    /// Its text.
    pub text: String,
    /// The last position's logits (when asked for).
    pub logits: Option<Vec<f32>>,
}

impl Model {
    /// Load a model by name: a file path, an alias (`gemma-3-270m`, `smollm2-135m`,
    /// [`hub::aliases`](crate::hub::aliases)), or a Hugging Face reference (`org/name:Q4_K_M`,
    /// `org/name/file.gguf`). Cached copies are used (kestrel's model folder, then the Hugging
    /// Face cache); otherwise the file is downloaded with resume and a sha256 check. Settings
    /// come from the environment ([`Hub::from_env`](crate::hub::Hub::from_env)).
    ///
    /// ```no_run
    /// use kestrel::{LoadOptions, Model};
    /// let mut model = Model::load("smollm2-135m", LoadOptions::default())?;
    /// # Ok::<(), kestrel::Error>(())
    /// ```
    pub fn load(name: &str, opts: LoadOptions) -> Result<Model, Error> {
        Self::load_with(name, opts, &crate::hub::Hub::from_env())
    }

    /// [`load`](Self::load) with explicit hub settings.
    pub fn load_with(name: &str, opts: LoadOptions, hub: &crate::hub::Hub) -> Result<Model, Error> {
        let path = hub.resolve(name)?;
        Self::load_file(path, opts)
    }

    /// Load a GGUF file (any shard of a split model).
    pub fn load_file(path: impl AsRef<Path>, opts: LoadOptions) -> Result<Model, Error> {
        let (device, mut device_note) = resolve_device(&opts.device)?;
        let sessions = crate::session_pool::SessionPool::new(opts.session_pool)?;
        let model = Arc::new(GgufModel::open_with(path, OpenOptions { mmap: opts.mmap })?);
        let gen_opts = GeneratorOptions {
            threads: opts.threads,
            ctx: opts.ctx,
            batch: opts.batch,
            kv_dtype: opts.kv_dtype,
            device,
            adapters: opts
                .lora
                .iter()
                .map(|(path, scale)| {
                    let a = kestrel_arch::LoraAdapter::open(path)
                        .map_err(kestrel_generate::GenerateError::from)?;
                    Ok((std::sync::Arc::new(a), *scale))
                })
                .collect::<Result<Vec<_>, Error>>()?,
        };
        let auto = matches!(parse_device(&opts.device), Ok(DeviceRequest::Auto));
        let generator = match Generator::new(Arc::clone(&model), gen_opts.clone()) {
            // `auto` found a GPU but the model needs what the GPU engine lacks: the CPU runs it.
            Err(e) if auto && device != Device::Cpu && cpu_instead(&e) => {
                device_note = Some(format!("auto: {e}; running on the CPU"));
                Generator::new(
                    model,
                    GeneratorOptions {
                        device: Device::Cpu,
                        ..gen_opts
                    },
                )?
            }
            r => r?,
        };
        let tokenizer = generator.tokenizer().cloned().ok_or(Error::InvalidOption {
            name: "model",
            reason: "the file has no vocabulary (tokenizer.ggml.model = none)".into(),
        })?;
        let template =
            ChatTemplate::from_metadata(&generator.model().metadata(), &tokenizer, None).ok();
        let prompter = Prompter::new(tokenizer.clone(), template);
        Ok(Model {
            generator,
            tokenizer,
            prompter,
            last_metrics: GenerateMetrics::default(),
            concurrency: opts.concurrency,
            sessions,
            device_note,
        })
    }

    /// The device the model runs on (`cpu` or `cuda:N`).
    pub fn device(&self) -> Device {
        self.generator.device()
    }

    /// Why `auto` chose the CPU (no CUDA build, driver or GPU, or a model that needs what the
    /// GPU engine lacks yet, such as mixture-of-experts layers), for one log line; `None`
    /// otherwise.
    pub fn device_note(&self) -> Option<&str> {
        self.device_note.as_deref()
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The tokenizer and chat template, detached from the model (cheap to clone, `Send +
    /// Sync`): tokenize and render conversations on other threads.
    pub fn prompter(&self) -> &Prompter {
        &self.prompter
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
        self.prompter
            .encode(prompt, opts.add_bos, opts.parse_special)
    }

    /// Generate a continuation of `prompt`.
    pub fn generate(&mut self, prompt: &str, opts: &GenerateOptions) -> Result<Output, Error> {
        self.generate_stream(prompt, opts, |_| true)
    }

    /// Generate, calling `on_text` with each piece of text as soon as it is final (complete
    /// UTF-8, not part of a possible stop string); returning `false` stops.
    pub fn generate_stream(
        &mut self,
        prompt: &str,
        opts: &GenerateOptions,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> Result<Output, Error> {
        let prompt_ids = self.encode(prompt, opts)?;
        let c = self.run(&prompt_ids, opts, &mut on_text)?;
        Ok(Output {
            prompt_ids,
            ids: c.ids,
            text: c.text,
            finish: c.finish,
            metrics: c.metrics,
        })
    }

    /// Generate for several prompts at once through the continuous-batching scheduler: one
    /// forward pass per step serves every running sequence, so aggregate throughput grows with
    /// the batch. Returns one result per prompt, in order (a bad prompt fails alone).
    ///
    /// ```no_run
    /// use kestrel::{GenerateOptions, LoadOptions, Model};
    /// let mut model = Model::load_file("gemma-3-270m-q4_k_m.gguf", LoadOptions::default())?;
    /// let outs = model.generate_batch(&["Hello", "The sky is"], &GenerateOptions::greedy().with_max_tokens(16))?;
    /// for o in outs {
    ///     println!("{}", o?.text);
    /// }
    /// # Ok::<(), kestrel::Error>(())
    /// ```
    pub fn generate_batch(
        &mut self,
        prompts: &[&str],
        opts: &GenerateOptions,
    ) -> Result<Vec<Result<Output, Error>>, Error> {
        use kestrel_generate::{BatchOptions, BatchRequest};
        let mut encoded = Vec::with_capacity(prompts.len());
        for p in prompts {
            encoded.push(self.encode(p, opts)?);
        }
        let requests = encoded
            .iter()
            .map(|ids| {
                Ok(BatchRequest {
                    prompt: ids.clone(),
                    params: opts.params(&self.adapters())?,
                })
            })
            .collect::<Result<_, Error>>()?;
        let batch = BatchOptions {
            max_seqs: match self.concurrency {
                0 => prompts.len().clamp(1, 16),
                n => n,
            },
            ..BatchOptions::default()
        };
        let outs = self.generator.batch_generate(requests, &batch)?;
        // metrics(): the last request's (each carries its own)
        if let Some(Ok(c)) = outs.iter().rev().find(|r| r.is_ok()) {
            self.last_metrics = c.metrics.clone();
        }
        Ok(outs
            .into_iter()
            .zip(encoded)
            .map(|(r, prompt_ids)| {
                r.map(|c| Output {
                    prompt_ids,
                    ids: c.ids,
                    text: c.text,
                    finish: c.finish,
                    metrics: c.metrics,
                })
                .map_err(Error::from)
            })
            .collect())
    }

    /// Generation with prompt-lookup speculative decoding (n-gram drafts from the text so far,
    /// verified several tokens per forward pass), faster when the text repeats. Greedy `opts`
    /// give exactly greedy [`generate`](Self::generate)'s output; with sampling, drafts are
    /// accepted by the rejection rule, so the output is distributed as plain sampling's.
    /// `opts` may not have a grammar or stop strings.
    pub fn generate_lookup(
        &mut self,
        prompt: &str,
        opts: &GenerateOptions,
        lookup: kestrel_generate::LookupOptions,
    ) -> Result<(Output, kestrel_generate::SpecStats), Error> {
        check_speculative(opts)?;
        self.check_model_adapters(opts)?;
        let prompt_ids = self.encode(prompt, opts)?;
        let stop_ids = opts.sampling.stop_token_ids.clone();
        self.select_session(&prompt_ids, &GenerateParams::default())?;
        let (g, stats) = self.generator.generate_lookup_sampled(
            &prompt_ids,
            &opts.sampling,
            lookup,
            &mut |id| Ok(!stop_ids.contains(&id)),
        )?;
        let out = self.output_of(prompt_ids, g, &stop_ids)?;
        self.last_metrics = out.metrics.clone();
        Ok((out, stats))
    }

    /// Generation verified against a draft model (see
    /// [`Generator::generate_speculative_sampled`](kestrel_generate::Generator::generate_speculative_sampled)):
    /// `draft` proposes up to `max_draft` tokens, this model checks them in one pass. Greedy:
    /// exactly this model's greedy output; sampled: distributed as this model's sampling.
    /// `opts` as for [`generate_lookup`](Self::generate_lookup).
    pub fn generate_speculative(
        &mut self,
        draft: &mut Model,
        prompt: &str,
        opts: &GenerateOptions,
        max_draft: usize,
    ) -> Result<(Output, kestrel_generate::SpecStats), Error> {
        check_speculative(opts)?;
        self.check_model_adapters(opts)?;
        let prompt_ids = self.encode(prompt, opts)?;
        let stop_ids = opts.sampling.stop_token_ids.clone();
        self.select_session(&prompt_ids, &GenerateParams::default())?;
        let (g, stats) = self.generator.generate_speculative_sampled(
            &mut draft.generator,
            &prompt_ids,
            &opts.sampling,
            max_draft,
            &mut |id| Ok(!stop_ids.contains(&id)),
        )?;
        let out = self.output_of(prompt_ids, g, &stop_ids)?;
        self.last_metrics = out.metrics.clone();
        Ok((out, stats))
    }

    fn output_of(
        &self,
        prompt_ids: Vec<u32>,
        g: kestrel_generate::Generation,
        stop_ids: &[u32],
    ) -> Result<Output, Error> {
        let last_is_stop = g
            .ids
            .last()
            .is_some_and(|id| g.stopped || stop_ids.contains(id));
        let shown = if last_is_stop {
            &g.ids[..g.ids.len() - 1]
        } else {
            &g.ids[..]
        };
        let text = self
            .tokenizer
            .decode(shown, kestrel_tokenizer::DecodeOptions::default())?;
        let finish = if g.stopped {
            FinishReason::EndOfGeneration
        } else if last_is_stop {
            FinishReason::StopToken
        } else {
            FinishReason::Length
        };
        Ok(Output {
            prompt_ids,
            ids: g.ids,
            text,
            finish,
            metrics: g.metrics,
        })
    }

    /// Generate as an iterator of [`Token`]s (`id`, final `text`), one per decode step.
    ///
    /// ```no_run
    /// use kestrel::{GenerateOptions, LoadOptions, Model};
    /// let mut model = Model::load_file("gemma-3-270m-q4_k_m.gguf", LoadOptions::default())?;
    /// for tok in model.generate_iter("Once upon a time", &GenerateOptions::greedy().with_max_tokens(32))? {
    ///     print!("{}", tok?.text);
    /// }
    /// # Ok::<(), kestrel::Error>(())
    /// ```
    pub fn generate_iter(
        &mut self,
        prompt: &str,
        opts: &GenerateOptions,
    ) -> Result<TokenIter<'_>, Error> {
        let ids = self.encode(prompt, opts)?;
        let params = opts.params(&self.adapters())?;
        self.select_session(&ids, &params)?;
        Ok(self.generator.iter(&ids, &params)?)
    }

    /// Render `messages` with the model's chat template (the file's, else a built-in guessed
    /// from the architecture), ending with the assistant's turn header.
    pub fn format_messages(&self, messages: &[ChatMessage]) -> Result<String, Error> {
        if self.prompter.template().is_none() {
            // say why there is none
            let md = self.generator.model().metadata();
            ChatTemplate::from_metadata(&md, &self.tokenizer, None)?;
        }
        self.prompter.render(messages, None)
    }

    /// Answer a conversation. The model keeps its KV cache between calls, so a conversation
    /// that grows turn by turn is prefilled only from where it changed.
    pub fn chat(
        &mut self,
        messages: &[ChatMessage],
        opts: &GenerateOptions,
    ) -> Result<Response, Error> {
        self.chat_stream(messages, opts, |_| true)
    }

    /// [`chat`](Self::chat), calling `on_text` with each final piece of the reply; returning
    /// `false` stops.
    pub fn chat_stream(
        &mut self,
        messages: &[ChatMessage],
        opts: &GenerateOptions,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> Result<Response, Error> {
        let text = self.format_messages(messages)?;
        // the template writes BOS itself when it wants one: never add a second
        let ids = self.prompter.encode_rendered(&text, opts.add_bos)?;
        let c = self.run(&ids, opts, &mut on_text)?;
        let m = &c.metrics;
        Ok(Response {
            usage: Usage {
                prompt_tokens: m.prompt_tokens,
                cached_tokens: m.cached_tokens,
                completion_tokens: m.generated_tokens,
                total_tokens: m.prompt_tokens + m.generated_tokens,
            },
            text: c.text,
            finish: c.finish,
            metrics: c.metrics,
        })
    }

    /// What the model is: architecture, sizes, context, quantization.
    ///
    /// ```no_run
    /// # let model = kestrel::Model::load_file("m.gguf", Default::default())?;
    /// let i = model.info();
    /// println!("{} {} layers, {} ({} per group), {:.2} bits/weight", i.architecture, i.layers, i.quant, i.group_size, i.bits_per_weight);
    /// # Ok::<(), kestrel::Error>(())
    /// ```
    pub fn info(&self) -> crate::ModelInfo {
        crate::ModelInfo::of(self.generator.model(), self.generator.ctx())
    }

    /// One forward pass per prompt: the most likely next token at the last position (and the
    /// logits when `with_logits`), go-inference's `Classify`. Resets the chat cache.
    pub fn classify(
        &mut self,
        prompts: &[&str],
        with_logits: bool,
    ) -> Result<Vec<Classification>, Error> {
        let mut out = Vec::with_capacity(prompts.len());
        for p in prompts {
            let ids = self.prompter.encode(p, true, false)?;
            let g = &mut self.generator;
            let logits = g.prefill(&ids)?;
            let token = logits
                .iter()
                .enumerate()
                .fold((0usize, f32::NEG_INFINITY), |b, (i, &x)| {
                    if x > b.1 {
                        (i, x)
                    } else {
                        b
                    }
                })
                .0 as u32;
            let logits = with_logits.then(|| logits.to_vec());
            g.session_mut().reset();
            out.push(Classification {
                token,
                text: self.tokenizer.decode(&[token], DecodeOptions::default())?,
                logits,
            });
        }
        Ok(out)
    }

    /// Speculative generation with a draft model (the seed's `SpeculativeGenerate`): the same
    /// as [`generate_speculative`](Self::generate_speculative) with `draft_len` tokens drafted
    /// per step.
    pub fn speculative_generate(
        &mut self,
        draft: &mut Model,
        prompt: &str,
        draft_len: usize,
        opts: &GenerateOptions,
    ) -> Result<Output, Error> {
        Ok(self.generate_speculative(draft, prompt, opts, draft_len)?.0)
    }

    /// Most sequences [`generate_batch`](Self::generate_batch) runs at once (0: one per
    /// prompt, at most 16).
    pub fn set_max_batch_concurrency(&mut self, n: usize) {
        self.concurrency = n;
    }

    /// KV sessions kept (the pool size) and made so far.
    pub fn sessions(&self) -> (usize, usize) {
        (self.sessions.size(), self.sessions.in_use())
    }

    /// Forget every cached conversation (the next prompt is prefilled from scratch).
    pub fn reset_sessions(&mut self) {
        self.generator.session_mut().reset();
        self.sessions.reset();
    }

    /// The last generation's metrics.
    pub fn metrics(&self) -> &GenerateMetrics {
        &self.last_metrics
    }

    fn run(
        &mut self,
        ids: &[u32],
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Completion, Error> {
        let cancel = opts.cancel.clone().unwrap_or_default();
        let params = GenerateParams {
            cancel: Some(cancel.clone()),
            ..opts.params(&self.adapters())?
        };
        self.select_session(ids, &params)?;
        let mut iter = self.generator.iter(ids, &params)?;
        for tok in iter.by_ref() {
            let tok = tok?;
            if !tok.text.is_empty() && !on_text(&tok.text) {
                cancel.cancel();
            }
        }
        let c = iter.completion()?;
        self.last_metrics = c.metrics.clone();
        Ok(c)
    }

    /// Perplexity of `text` over windows of `n_ctx` tokens, as llama-perplexity computes it.
    pub fn perplexity(&mut self, text: &str, n_ctx: usize) -> Result<Perplexity, Error> {
        self.perplexity_chunks(text, n_ctx, None)
    }

    /// [`perplexity`](Self::perplexity) over the first `chunks` windows only (all when
    /// `None`), as `llama-perplexity --chunks`.
    pub fn perplexity_chunks(
        &mut self,
        text: &str,
        n_ctx: usize,
        chunks: Option<usize>,
    ) -> Result<Perplexity, Error> {
        let ids = self.tokenizer.encode(text, EncodeOptions::default())?;
        let n = chunks.map_or(ids.len(), |c| ids.len().min(c.saturating_mul(n_ctx)));
        let bos = self.perplexity_bos();
        Ok(self.generator.perplexity(&ids[..n], n_ctx, bos)?)
    }

    /// [`perplexity_chunks`](Self::perplexity_chunks), also writing every scored position's
    /// log-probabilities to `path` in llama-perplexity's `--kl-divergence-base` format, for
    /// [`kl_divergence`](Self::kl_divergence) here or `llama-perplexity --kl-divergence` to
    /// compare another model or build against. A 262k vocabulary takes 134 MB a 512-token
    /// window. The file is removed if the run fails.
    pub fn kl_divergence_base(
        &mut self,
        text: &str,
        n_ctx: usize,
        chunks: Option<usize>,
        path: impl AsRef<Path>,
    ) -> Result<Perplexity, Error> {
        let path = path.as_ref();
        let ids = self.tokenizer.encode(text, EncodeOptions::default())?;
        let bos = self.perplexity_bos();
        let file = std::fs::File::create(path).map_err(|e| {
            Error::Generate(Box::new(GenerateError::Io {
                what: path.display().to_string(),
                source: e,
            }))
        })?;
        let out = std::io::BufWriter::with_capacity(1 << 20, file);
        match self
            .generator
            .kl_divergence_base(&ids, n_ctx, chunks, bos, out)
        {
            Ok((p, _)) => Ok(p),
            Err(e) => {
                let _ = std::fs::remove_file(path);
                Err(e.into())
            }
        }
    }

    /// KL divergence of this model's token distributions from the base in `path` (written by
    /// [`kl_divergence_base`](Self::kl_divergence_base) or `llama-perplexity
    /// --kl-divergence-base`), over the file's tokens and window (its first `chunks` windows
    /// when given), with llama-perplexity's statistics. The file is read a row at a time;
    /// `on_chunk` sees the running figures after each window. The model's context must hold
    /// the file's window.
    pub fn kl_divergence(
        &mut self,
        path: impl AsRef<Path>,
        chunks: Option<usize>,
        on_chunk: impl FnMut(&KldAccumulator),
    ) -> Result<KlDivergence, Error> {
        let mut base = LogProbReader::open(path)?;
        let bos = self.perplexity_bos();
        Ok(self
            .generator
            .kl_divergence(&mut base, chunks, bos, on_chunk)?)
    }

    /// An importance matrix of `text` as `llama-imatrix -f` computes it (windows of
    /// `opts.n_ctx` tokens, BOS first where the model adds one), for `kestrel quantize
    /// --imatrix` or `llama-quantize --imatrix`: write `run.sums` with
    /// [`ImatrixSums::write`](kestrel_gguf::quantize::ImatrixSums::write). `on_chunk` gets
    /// each finished window's number and the perplexity so far. CPU only; resets the chat
    /// cache.
    pub fn imatrix(
        &mut self,
        text: &str,
        opts: &kestrel_generate::ImatrixOptions,
        on_chunk: impl FnMut(usize, &Perplexity),
    ) -> Result<kestrel_generate::ImatrixRun, Error> {
        self.imatrix_onto(Default::default(), text, opts, on_chunk)
    }

    /// [`imatrix`](Self::imatrix) added onto `prior` (imatrix files read with
    /// [`ImatrixSums::load`](kestrel_gguf::quantize::ImatrixSums::load) and combined), as
    /// `llama-imatrix --in-file F -f TEXT` continues a matrix.
    pub fn imatrix_onto(
        &mut self,
        prior: kestrel_gguf::quantize::ImatrixSums,
        text: &str,
        opts: &kestrel_generate::ImatrixOptions,
        on_chunk: impl FnMut(usize, &Perplexity),
    ) -> Result<kestrel_generate::ImatrixRun, Error> {
        let ids = self.tokenizer.encode(text, EncodeOptions::default())?;
        let bos = self.perplexity_bos();
        Ok(self
            .generator
            .imatrix_onto(prior, &ids, opts, bos, on_chunk)?)
    }

    /// The token llama-perplexity puts first in every window: BOS when the model adds one.
    fn perplexity_bos(&self) -> Option<u32> {
        let md = self.generator.model().metadata();
        let add_bos = md.get_bool("tokenizer.ggml.add_bos_token").unwrap_or(false);
        if add_bos {
            md.get_u32("tokenizer.ggml.bos_token_id").ok()
        } else {
            None
        }
    }

    /// An embedding of `text`: the model's final hidden states pooled (mean or last token, as
    /// the file's `<arch>.pooling_type` says; mean when it says nothing) and L2-normalized, so
    /// the dot product of two embeddings is their cosine similarity. Resets the chat cache.
    ///
    /// ```no_run
    /// use kestrel::{LoadOptions, Model};
    /// let mut model = Model::load_file("SmolLM2-135M-Instruct.Q4_1.gguf", LoadOptions::default())?;
    /// let a = model.embed("a cat sat on the mat")?;
    /// let b = model.embed("a kitten rested on the rug")?;
    /// let cos: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    /// println!("cosine {cos:.3}");
    /// # Ok::<(), kestrel::Error>(())
    /// ```
    pub fn embed(&mut self, text: &str) -> Result<Vec<f32>, Error> {
        let ids = self.prompter.encode(text, true, false)?;
        self.embed_ids(&ids)
    }

    /// [`embed`](Self::embed) for token ids.
    pub fn embed_ids(&mut self, ids: &[u32]) -> Result<Vec<f32>, Error> {
        let pooling = self.generator.pooling();
        Ok(self.generator.embed(ids, pooling)?)
    }

    /// Decode ids to text.
    pub fn decode(&self, ids: &[u32]) -> Result<String, Error> {
        Ok(self.tokenizer.decode(ids, DecodeOptions::default())?)
    }
}

/// Speculative decoding applies neither grammars nor stop strings.
impl Model {
    /// The LoRA adapters the model was loaded with, in order, with their current scales.
    pub fn adapters(&self) -> Vec<crate::AdapterInfo> {
        crate::adapters::infos(&self.generator)
    }

    /// Sets adapter `name`'s scale (0: off) for the generations that choose no adapters of
    /// their own, as llama-server's `POST /lora-adapters` does; nothing is reloaded. Cached
    /// conversations computed at the old scales are prefilled again when next used.
    ///
    /// # Errors
    /// An adapter name the model does not have, a scale that is not finite.
    pub fn set_adapter_scale(&mut self, name: &str, scale: f32) -> Result<(), Error> {
        let all = self.adapters();
        let id = crate::find_adapter(&all, name)?;
        let mut scales: Vec<f32> = all.iter().map(|a| a.scale).collect();
        scales[id] = scale;
        self.set_adapter_scales(&scales)
    }

    /// Sets every adapter's scale at once, in [`adapters`](Self::adapters)' order.
    ///
    /// # Errors
    /// As [`set_adapter_scale`](Self::set_adapter_scale), and a count other than the adapters'.
    pub fn set_adapter_scales(&mut self, scales: &[f32]) -> Result<(), Error> {
        Ok(self.generator.set_adapter_scales(scales)?)
    }

    /// Makes the pooled session that suits `ids` at `params`' adapter scales the active one.
    fn select_session(&mut self, ids: &[u32], params: &GenerateParams) -> Result<(), Error> {
        let scales = self
            .generator
            .adapter_scales_for(params.adapters.as_deref())?;
        self.sessions.select(&mut self.generator, ids, &scales)
    }

    /// Refuses adapter choices other than the model's scales (for the paths that run at them).
    fn check_model_adapters(&self, opts: &GenerateOptions) -> Result<(), Error> {
        let Some(choice) = &opts.adapters else {
            return Ok(());
        };
        let ids = crate::adapters::resolve(&self.adapters(), choice)?;
        let g = &self.generator;
        if g.adapter_scales_for(Some(&ids))? != g.adapter_scales_for(None)? {
            return Err(Error::InvalidOption {
                name: "adapter",
                reason: "speculative decoding runs at the model's adapter scales; set them with \
                         Model::set_adapter_scales"
                    .into(),
            });
        }
        Ok(())
    }
}

fn check_speculative(opts: &GenerateOptions) -> Result<(), Error> {
    if opts.grammar.is_some() || !opts.sampling.stop_strings.is_empty() {
        return Err(Error::InvalidOption {
            name: "speculative",
            reason: "speculative decoding takes no grammar and no stop strings".into(),
        });
    }
    opts.sampling.validate()?;
    Ok(())
}
