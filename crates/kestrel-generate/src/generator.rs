//! `Generator`: a model ready to run — config, engine, prefill and decode plans (the CPU
//! engine's, or one CUDA plan), tokenizer and a default [`Session`] — with the greedy loop over
//! ids, the sampled/streamed generation entry points (the loop itself is in `stream.rs`;
//! perplexity is in `perplexity/`).

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use kestrel_arch::{DecoderConfig, Logits};
use kestrel_gguf::{GgufModel, Value};
use kestrel_graph::{CudaPlan, ExecutionPlan};
use kestrel_kv::{KvDType, KvLayout, PagedCache, RecurrentLayout};
use kestrel_sampling::TokenTrie;
use kestrel_tensor::cuda::CudaDevice;
use kestrel_tensor::{cpu, CpuEngine, DType, Device, TensorError};
use kestrel_tokenizer::{Tokenizer, TokenizerOptions};

use crate::batch::BatchState;
use crate::batch_store::{CudaSeqs, SeqStore, StepRunner};
use crate::core::{trie_of, Core, Plans};
use crate::embed::Pooling;
use crate::stream::{Completion, StreamError, Token, TokenIter, TokenStream};
use crate::weights::Weights;
use crate::{BatchEvent, BatchOptions, BatchRequest, CancelToken, Scheduler};
use crate::{GenerateError, GenerateMetrics, GenerateParams, Session};

/// Texts of control tokens that end a turn, as llama.cpp recognizes them (besides the ids the
/// metadata names).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "<|return|>",
    "<|call|>",
];

/// How to set up a [`Generator`].
#[derive(Clone, Debug)]
pub struct GeneratorOptions {
    /// Threads (0: all available cores).
    pub threads: usize,
    /// Context length in tokens (0: the model's training context, at most 4096).
    pub ctx: usize,
    /// Most prompt tokens processed in one prefill step.
    pub batch: usize,
    /// KV cache element type.
    pub kv_dtype: KvDType,
    /// Where the model runs: the CPU engine, or a CUDA GPU (weights uploaded once, KV caches
    /// in device memory, f16 or q8_0; a scheduler's sequences as pages of one device pool,
    /// their decodes in batched steps).
    pub device: Device,
    /// LoRA adapters applied to every step, in order, each with its scale (llama.cpp's
    /// `--lora-scaled FILE SCALE`; `--lora FILE` is scale 1). Checked against the model.
    pub adapters: Vec<(Arc<kestrel_arch::LoraAdapter>, f32)>,
}

impl Default for GeneratorOptions {
    fn default() -> Self {
        GeneratorOptions {
            threads: 0,
            ctx: 0,
            batch: 512,
            kv_dtype: KvDType::F16,
            device: Device::Cpu,
            adapters: Vec::new(),
        }
    }
}

/// What `generate_ids` returns.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// Generated ids (the stop token, if one ended it, is included).
    pub ids: Vec<u32>,
    /// True when a stop token ended it.
    pub stopped: bool,
    /// Counts and timings.
    pub metrics: GenerateMetrics,
}

/// A model ready to generate.
///
/// It holds a default [`Session`] that [`prefill`](Self::prefill), [`step`](Self::step),
/// [`generate_ids`](Self::generate_ids), [`iter`](Self::iter) and [`generate`](Self::generate)
/// use; [`new_session`](Self::new_session) makes more, for callers that keep several
/// conversations.
pub struct Generator {
    pub(crate) core: Core,
    pub(crate) session: Session,
    tokenizer: Option<Arc<Tokenizer>>,
    trie: OnceLock<TokenTrie>,
    pub(crate) opts: GeneratorOptions,
    /// The batched plan and KV block pool of the last scheduler (kept for the next one).
    batch: Option<BatchState>,
    /// The embedding plan, made on first use.
    pub(crate) embed: Option<crate::embed::EmbedState>,
}

impl Generator {
    /// The pooling the model's metadata asks for.
    pub fn pooling(&self) -> Pooling {
        crate::embed::pooling(&self.core)
    }

    /// The L2-normalized, pooled final hidden states of `ids` (prefilled in chunks from an
    /// empty cache; the generator's session is reset, so the next generation prefills anew).
    pub fn embed(&mut self, ids: &[u32], pooling: Pooling) -> Result<Vec<f32>, GenerateError> {
        let batch = self.opts.batch;
        crate::embed::embed(
            &mut self.core,
            &mut self.embed,
            &mut self.session,
            batch,
            ids,
            pooling,
        )
    }
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("arch", &self.core.cfg.arch)
            .field("ctx", &self.core.ctx)
            .finish()
    }
}

/// The KV cache a model's decoder needs: its KV heads (per layer where layers differ) and head
/// sizes in `dtype` (keys only for a latent cache: DeepSeek's multi-head latent attention caches
/// 576 values per token and layer, as llama.cpp does, where plain heads would take
/// `2 · n_head · 192`).
///
/// # Errors
/// None today; kept for layouts a model may ask for that a cache cannot hold.
pub fn kv_layout(cfg: &DecoderConfig, dtype: KvDType) -> Result<KvLayout, GenerateError> {
    let heads: Vec<usize> = (0..cfg.n_layer)
        .filter(|&il| cfg.attention_layers[il])
        .map(|il| cfg.n_head_kv[il])
        .collect();
    let n_kv_head = heads.first().copied().unwrap_or(1);
    let layer_kv_heads = if heads.iter().all(|&h| h == n_kv_head) {
        Vec::new()
    } else {
        heads
    };
    // State-space layers keep a state per sequence instead of keys and values.
    let recurrent = match &cfg.ssm {
        Some(ssm) if cfg.recurrent_layers.iter().any(|&r| r) => {
            let (conv, state) = ssm.state_sizes();
            RecurrentLayout {
                n_layers: cfg.recurrent_layers.iter().filter(|&&r| r).count(),
                conv,
                ssm: state,
            }
        }
        _ => RecurrentLayout::NONE,
    };
    Ok(KvLayout {
        n_layers: cfg.n_attention_layers(),
        n_kv_head,
        layer_kv_heads,
        k_head_dim: cfg.head_dim_k,
        v_head_dim: cfg.kv_value_dim(),
        dtype,
        recurrent,
    })
}

/// Ids that end generation: the metadata's eos/eot/eom, and control tokens with a known
/// end-of-turn text.
fn stop_ids(model: &GgufModel) -> Vec<u32> {
    let md = model.metadata();
    let mut ids: Vec<u32> = [
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    ]
    .iter()
    .filter_map(|k| md.get_u32(k).ok())
    .collect();
    if let Ok(tokens) = md.get_array("tokenizer.ggml.tokens") {
        let types = md.get_array("tokenizer.ggml.token_type").ok();
        for (i, t) in tokens.iter().enumerate() {
            let Value::String(text) = t else { continue };
            let control = types
                .and_then(|a| a.get(i))
                .and_then(|v| v.as_integer())
                .is_none_or(|ty| ty == 3);
            if control && EOG_TEXTS.iter().any(|e| e.as_bytes() == text) {
                ids.push(i as u32);
            }
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

impl Generator {
    /// Set up a model for generation.
    pub fn new(model: Arc<GgufModel>, opts: GeneratorOptions) -> Result<Generator, GenerateError> {
        let cfg = DecoderConfig::from_model(&model)?;
        let ctx = match opts.ctx {
            0 => cfg.n_ctx_train.clamp(1, 4096),
            n => n,
        };
        if opts.batch == 0 {
            return Err(GenerateError::InvalidOption {
                name: "batch",
                reason: "must be at least 1".into(),
            });
        }
        // 0 threads: one per logical CPU (the engine's own default).
        let engine = CpuEngine::new(opts.threads)?;
        let on_cpu = !matches!(opts.device, Device::Cuda(_));
        let weights = Weights::new(model.clone(), opts.adapters.clone(), on_cpu)?;
        let graph = weights.graph(&cfg, Logits::Last)?;
        let lookup = |name: &str| weights.get(name);
        let plans = match opts.device {
            Device::Cuda(ordinal) => {
                let kv = match opts.kv_dtype {
                    KvDType::F16 => DType::F16,
                    KvDType::Q8_0 => DType::Q8_0,
                    other => {
                        return Err(GenerateError::InvalidOption {
                            name: "cache-type",
                            reason: format!(
                                "{} KV caches are not on CUDA yet (f16 and q8_0 are)",
                                other.name()
                            ),
                        })
                    }
                };
                let dev = CudaDevice::open(ordinal).map_err(TensorError::Cuda)?;
                let mut plan =
                    CudaPlan::compile(&graph, Arc::new(dev), opts.batch.min(ctx), &lookup)?;
                plan.set_kv_dtype(kv)?;
                Plans::Cuda(plan)
            }
            _ => Plans::Cpu {
                prefill: ExecutionPlan::compile(&graph, opts.batch.min(ctx), &lookup)?,
                decode: ExecutionPlan::compile(&graph, 1, &lookup)?,
            },
        };
        let layout = kv_layout(&cfg, opts.kv_dtype)?;
        let stop_ids = stop_ids(&model);
        let tokenizer = tokenizer_of(&model)?;
        let logits = vec![0.0; cfg.n_vocab];
        let core = Core {
            model,
            weights,
            cfg,
            engine,
            plans,
            device: opts.device,
            layout,
            ctx,
            stop_ids,
            logits,
            chunk_scales: Vec::new(),
        };
        let session = Session::new(core.new_kv()?, core.weights.scales());
        Ok(Generator {
            core,
            batch: None,
            embed: None,
            session,
            tokenizer,
            trie: OnceLock::new(),
            opts,
        })
    }

    /// The model's tokenizer (`None` for a file with no vocabulary, `tokenizer.ggml.model` =
    /// `none`, which is fed ids directly).
    pub fn tokenizer(&self) -> Option<&Arc<Tokenizer>> {
        self.tokenizer.as_ref()
    }

    /// A new empty session with its own KV cache, for this generator's model and context.
    pub fn new_session(&self) -> Result<Session, GenerateError> {
        Ok(Session::new(
            self.core.new_kv()?,
            self.core.weights.scales(),
        ))
    }

    /// The device the model runs on.
    pub fn device(&self) -> Device {
        self.core.device
    }

    /// The default session (the one `iter`, `generate`, `prefill` and `step` use).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Mutable access to the default session (to reset or truncate it).
    pub fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    /// The vocabulary as a byte trie for grammar masks, built on first use.
    pub fn token_trie(&self) -> Result<&TokenTrie, GenerateError> {
        trie_of(&self.trie, self.tokenizer.as_deref(), &self.core)
    }

    /// Start a generation on the default session: prefills `prompt` (reusing the prefix the
    /// session already holds) and returns an iterator that yields one [`Token`](crate::Token)
    /// per decode step.
    pub fn iter(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
    ) -> Result<TokenIter<'_>, GenerateError> {
        let Generator {
            core,
            session,
            tokenizer,
            trie,
            ..
        } = self;
        TokenIter::start(core, session, tokenizer.as_deref(), trie, prompt, params)
    }

    /// [`iter`](Self::iter) on a session of the caller's.
    pub fn iter_in<'a>(
        &'a mut self,
        session: &'a mut Session,
        prompt: &[u32],
        params: &GenerateParams,
    ) -> Result<TokenIter<'a>, GenerateError> {
        let Generator {
            core,
            tokenizer,
            trie,
            ..
        } = self;
        TokenIter::start(core, session, tokenizer.as_deref(), trie, prompt, params)
    }

    /// Generate on the default session, calling `stream` with every token; an error from the
    /// stream stops generation and is returned as [`GenerateError::Callback`].
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        stream: &mut dyn TokenStream,
    ) -> Result<Completion, GenerateError> {
        self.iter(prompt, params)?.drive(stream)
    }

    /// [`generate`](Self::generate) on a session of the caller's.
    pub fn generate_in(
        &mut self,
        session: &mut Session,
        prompt: &[u32],
        params: &GenerateParams,
        stream: &mut dyn TokenStream,
    ) -> Result<Completion, GenerateError> {
        self.iter_in(session, prompt, params)?.drive(stream)
    }

    /// The model's configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.core.cfg
    }

    /// The model.
    pub fn model(&self) -> &Arc<GgufModel> {
        &self.core.model
    }

    /// The GPU the model runs on (`None` on the CPU).
    pub fn cuda_device(&self) -> Option<&Arc<CudaDevice>> {
        match &self.core.plans {
            Plans::Cuda(plan) => Some(plan.device()),
            Plans::Cpu { .. } => None,
        }
    }

    /// Context length in tokens.
    pub fn ctx(&self) -> usize {
        self.core.ctx
    }

    /// Ids that end generation.
    pub fn stop_ids(&self) -> &[u32] {
        &self.core.stop_ids
    }

    /// Bytes of the default session's KV cache.
    pub fn kv_bytes(&self) -> usize {
        self.session.kv_bytes()
    }

    /// Run the prompt through the model from an empty default session and return the last
    /// position's logits.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<&[f32], GenerateError> {
        self.session.reset();
        self.session
            .use_adapters(self.core.adapter_use(None, prompt)?);
        self.core.feed(&mut self.session, prompt)?;
        Ok(&self.core.logits)
    }

    /// Bring `session` to hold `prompt`, prefilling only what follows the longest prefix it
    /// already holds, and return the last position's logits. It runs at the generator's
    /// adapter scales (a cache computed at others starts over).
    pub fn prefill_in(
        &mut self,
        session: &mut Session,
        prompt: &[u32],
    ) -> Result<&[f32], GenerateError> {
        session.use_adapters(self.core.adapter_use(None, prompt)?);
        self.core.feed(session, prompt)?;
        Ok(&self.core.logits)
    }

    /// [`step`](Self::step) on a session of the caller's.
    pub fn step_in(&mut self, session: &mut Session, token: u32) -> Result<&[f32], GenerateError> {
        self.core.step(session, token)?;
        Ok(&self.core.logits)
    }

    /// One decode step: append `token` at the next position of the default session and return
    /// the logits that follow it. Allocates nothing.
    pub fn step(&mut self, token: u32) -> Result<&[f32], GenerateError> {
        self.core.step(&mut self.session, token)?;
        Ok(&self.core.logits)
    }

    /// Tokens in the default session's KV cache.
    pub fn seq_len(&self) -> usize {
        self.session.kv.seq_len()
    }

    /// Greedy generation of up to `max_new` tokens after `prompt`. `on_token` sees each new id
    /// as it is produced; returning `Ok(false)` stops early, `Err` stops with an error.
    pub fn generate_ids(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        on_token: &mut dyn FnMut(u32) -> Result<bool, String>,
    ) -> Result<Generation, GenerateError> {
        self.core.check_room(prompt.len(), max_new)?;
        let mut metrics = GenerateMetrics {
            prompt_tokens: prompt.len(),
            ..Default::default()
        };
        let mut ids = Vec::with_capacity(max_new);
        if max_new == 0 {
            return Ok(Generation {
                ids,
                stopped: false,
                metrics,
            });
        }
        let t0 = Instant::now();
        let mut next = argmax(self.prefill(prompt)?);
        metrics.prefill = t0.elapsed();
        let t1 = Instant::now();
        let mut stopped = false;
        loop {
            ids.push(next);
            let is_stop = self.core.is_stop(next);
            let go_on = on_token(next).map_err(GenerateError::Callback)?;
            if is_stop {
                stopped = true;
                break;
            }
            if !go_on || ids.len() >= max_new {
                break;
            }
            // On a GPU the argmax runs there: 4 bytes back instead of the logits.
            next = self.core.step_greedy(&mut self.session, next)?;
        }
        metrics.decode = t1.elapsed();
        metrics.generated_tokens = ids.len();
        Ok(Generation {
            ids,
            stopped,
            metrics,
        })
    }

    /// A continuous-batching scheduler over this model (see [`Scheduler`]). The batched plan
    /// and the KV block pool are made on first use and kept while `opts` stay the same.
    pub fn scheduler(&mut self, opts: &BatchOptions) -> Result<Scheduler<'_>, GenerateError> {
        let bad = |reason: String| {
            Err(GenerateError::InvalidOption {
                name: "batch",
                reason,
            })
        };
        if opts.max_seqs == 0 || opts.max_step_tokens < opts.max_seqs {
            return bad(format!(
                "max_seqs {} must be at least 1 and at most max_step_tokens {}",
                opts.max_seqs, opts.max_step_tokens
            ));
        }
        if !opts.block_size.is_power_of_two() || opts.block_size > 4096 {
            return bad(format!(
                "block size {} must be a power of two up to 4096",
                opts.block_size
            ));
        }
        let core = &mut self.core;
        if self.batch.as_ref().is_none_or(|b| &b.opts != opts) {
            self.batch = None; // free the old pool before making the new one
            if let Plans::Cuda(plan) = &mut core.plans {
                plan.drop_pool();
            }
            let max_tokens = opts
                .max_step_tokens
                .min(core.ctx.saturating_mul(opts.max_seqs));
            let blocks = match opts.kv_blocks {
                0 => core
                    .ctx
                    .div_ceil(opts.block_size)
                    .saturating_mul(opts.max_seqs),
                n => n,
            };
            let (runner, store) = match &mut core.plans {
                Plans::Cpu { .. } => {
                    let graph = core.weights.graph(&core.cfg, Logits::Last)?;
                    let weights = core.weights.clone();
                    let lookup = |name: &str| weights.get(name);
                    let plan =
                        ExecutionPlan::compile_batch(&graph, max_tokens, opts.max_seqs, &lookup)?;
                    let pool = PagedCache::new(core.layout.clone(), opts.block_size, blocks)?;
                    if opts.prefix_cache && core.layout.recurrent.is_some() {
                        eprintln!(
                            "kestrel: prefix caching is off for {}: its state-space layers keep one state per sequence, not per-token blocks to share",
                            core.cfg.arch
                        );
                    }
                    (StepRunner::Cpu(plan), SeqStore::Paged(pool))
                }
                Plans::Cuda(plan) => (
                    StepRunner::Cuda {
                        step_tokens: max_tokens,
                        chunk: plan.max_tokens(),
                        rows: Vec::new(),
                        row_at: Vec::with_capacity(opts.max_seqs),
                        n_vocab: core.cfg.n_vocab,
                        decodes: Vec::with_capacity(opts.max_seqs),
                        batch: std::env::var("KESTREL_CUDA_BATCH").map_or(true, |v| v != "0"),
                        group: Vec::with_capacity(8),
                        ids: Vec::with_capacity(8),
                        picked: Vec::with_capacity(opts.max_seqs),
                        top: Vec::with_capacity(opts.max_seqs),
                        top_ids: Vec::new(),
                        top_vals: Vec::new(),
                    },
                    SeqStore::Cuda(CudaSeqs::for_plan(plan, opts, blocks)?),
                ),
            };
            self.batch = Some(BatchState {
                opts: opts.clone(),
                runner,
                store,
            });
        }
        let Some(state) = self.batch.as_mut() else {
            return bad("the batch state could not be made".into());
        };
        Ok(Scheduler::new(
            core,
            state,
            self.tokenizer.as_deref(),
            &self.trie,
        ))
    }

    /// Generate for all `requests` through one scheduler (continuous batching: requests join
    /// as earlier ones finish). Returns one result per request, in order.
    pub fn batch_generate(
        &mut self,
        requests: Vec<BatchRequest>,
        opts: &BatchOptions,
    ) -> Result<Vec<Result<Completion, GenerateError>>, GenerateError> {
        self.batch_generate_stream(requests, opts, &mut |_, _| Ok(()))
    }

    /// [`batch_generate`](Self::batch_generate), handing each token to `on_token` with its
    /// request's index as it is produced. A callback error ends that request only (its result
    /// is the error); the others go on.
    pub fn batch_generate_stream(
        &mut self,
        requests: Vec<BatchRequest>,
        opts: &BatchOptions,
        on_token: &mut dyn FnMut(usize, &Token) -> Result<(), StreamError>,
    ) -> Result<Vec<Result<Completion, GenerateError>>, GenerateError> {
        let n = requests.len();
        let mut results: Vec<Option<Result<Completion, GenerateError>>> =
            (0..n).map(|_| None).collect();
        let mut cancels = Vec::with_capacity(n);
        let mut sched = self.scheduler(opts)?;
        let mut index = Vec::with_capacity(n); // request id -> position
        for (i, mut req) in requests.into_iter().enumerate() {
            let cancel = req
                .params
                .cancel
                .get_or_insert_with(CancelToken::new)
                .clone();
            match sched.submit(req) {
                Ok(id) => {
                    if index.len() <= id {
                        index.resize(id + 1, usize::MAX);
                    }
                    index[id] = i;
                }
                Err(e) => results[i] = Some(Err(e)),
            }
            cancels.push(cancel);
        }
        let mut failed: Vec<Option<String>> = vec![None; n];
        while !sched.is_idle() {
            let progressed = sched.step(&mut |ev| match ev {
                BatchEvent::Token(id, tok) => {
                    let i = index[id];
                    if failed[i].is_none() {
                        if let Err(e) = on_token(i, &tok) {
                            failed[i] = Some(e.to_string());
                            cancels[i].cancel();
                        }
                    }
                }
                BatchEvent::Done(id, res) => {
                    let i = index[id];
                    results[i] = Some(match failed[i].take() {
                        Some(msg) => Err(GenerateError::Callback(msg)),
                        None => res,
                    });
                }
            })?;
            if !progressed && !sched.is_idle() {
                return Err(GenerateError::InvalidOption {
                    name: "batch",
                    reason: "the scheduler made no progress with requests waiting".into(),
                });
            }
        }
        Ok(results
            .into_iter()
            .map(|r| {
                r.unwrap_or(Err(GenerateError::InvalidOption {
                    name: "batch",
                    reason: "the request never finished".into(),
                }))
            })
            .collect())
    }

    /// The LoRA adapters applied, in order, with their current scales.
    pub fn adapters(&self) -> &[(Arc<kestrel_arch::LoraAdapter>, f32)] {
        self.core.weights.adapters()
    }

    /// The adapter scales a generation with `choice` ([`GenerateParams::adapters`]) runs at:
    /// the generator's for `None`, else the listed adapters at their scales and the rest 0.
    ///
    /// # Errors
    /// An index past the adapters, a scale that is not finite.
    pub fn adapter_scales_for(
        &self,
        choice: Option<&[(usize, f32)]>,
    ) -> Result<Vec<f32>, GenerateError> {
        self.core.adapter_scales(choice)
    }

    /// Sets the scale of every adapter (one per [`adapters`](Self::adapters) entry, 0 turning
    /// one off) for generations that choose none of their own, as llama-server's
    /// `POST /lora-adapters` does; no weight is reloaded. Caches computed at the old scales
    /// (sessions, the batch's prefix cache) are not reused.
    ///
    /// # Errors
    /// A wrong count or a scale that is not finite.
    pub fn set_adapter_scales(&mut self, scales: &[f32]) -> Result<(), GenerateError> {
        if scales == self.core.weights.scales() {
            return Ok(());
        }
        self.core.set_adapter_scales(scales)?;
        if let Some(b) = &mut self.batch {
            b.store.clear_prefix_cache();
        }
        Ok(())
    }

    /// Options it was made with.
    pub fn options(&self) -> &GeneratorOptions {
        &self.opts
    }
}

/// The tokenizer of a model, unless its vocabulary is `none`.
pub(crate) fn tokenizer_of(model: &GgufModel) -> Result<Option<Arc<Tokenizer>>, GenerateError> {
    let md = model.metadata();
    let kind = md
        .get("tokenizer.ggml.model")
        .and_then(|v| v.as_str().map(str::to_string));
    // llama.cpp's vocabulary-less types: `no_vocab`/`none` (a model driven by ids or
    // embeddings) and `test` (its random-weight test files). Text commands then say there is no
    // tokenizer; ids still run.
    if matches!(kind.as_deref(), Some("none" | "no_vocab" | "test")) {
        return Ok(None);
    }
    Ok(Some(Arc::new(Tokenizer::from_metadata(
        &md,
        TokenizerOptions::default(),
    )?)))
}

fn argmax(logits: &[f32]) -> u32 {
    cpu::argmax(logits).unwrap_or(0) as u32
}
