//! `Generator`: a model ready to run — config, engine, prefill and decode plans, KV cache — and
//! the greedy decode loop over token ids. Text in and out (tokenizer, streaming text, stop
//! strings) and sampling build on it.

use std::sync::Arc;
use std::time::Instant;

use kestrel_arch::{build_decoder, weight_tensor, DecoderConfig, Logits};
use kestrel_gguf::{GgufModel, Value};
use kestrel_graph::ExecutionPlan;
use kestrel_kv::{ContiguousCache, KvCache, KvDType, KvLayout};
use kestrel_tensor::{cpu, CpuEngine};

use crate::{GenerateError, GenerateMetrics};

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
}

impl Default for GeneratorOptions {
    fn default() -> Self {
        GeneratorOptions {
            threads: 0,
            ctx: 0,
            batch: 512,
            kv_dtype: KvDType::F16,
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

/// Perplexity over a text, computed as llama-perplexity does.
#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    /// exp(mean negative log-likelihood).
    pub ppl: f64,
    /// Its standard error.
    pub err: f64,
    /// Windows evaluated.
    pub chunks: usize,
    /// Tokens scored.
    pub scored: usize,
}

/// A model ready to generate.
pub struct Generator {
    model: Arc<GgufModel>,
    cfg: DecoderConfig,
    engine: CpuEngine,
    prefill: ExecutionPlan,
    decode: ExecutionPlan,
    kv: ContiguousCache,
    ctx: usize,
    stop_ids: Vec<u32>,
    opts: GeneratorOptions,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("arch", &self.cfg.arch)
            .field("ctx", &self.ctx)
            .finish()
    }
}

fn kv_layout(cfg: &DecoderConfig, dtype: KvDType) -> Result<KvLayout, GenerateError> {
    let n_kv_head = cfg.n_head_kv[0];
    if cfg.n_head_kv.iter().any(|&h| h != n_kv_head) {
        return Err(GenerateError::InvalidOption {
            name: "model",
            reason: "layers with different KV head counts are not supported yet".into(),
        });
    }
    Ok(KvLayout {
        n_layers: cfg.n_layer,
        n_kv_head,
        k_head_dim: cfg.head_dim_k,
        v_head_dim: cfg.head_dim_v,
        dtype,
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
        let threads = match opts.threads {
            0 => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            n => n,
        };
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
        let engine = CpuEngine::new(threads)?;
        let graph = build_decoder(&cfg, &model, Logits::Last)?;
        let lookup = |name: &str| weight_tensor(&model, name);
        let prefill = ExecutionPlan::compile(&graph, opts.batch.min(ctx), &lookup)?;
        let decode = ExecutionPlan::compile(&graph, 1, &lookup)?;
        let kv = ContiguousCache::new(kv_layout(&cfg, opts.kv_dtype)?, ctx)?;
        let stop_ids = stop_ids(&model);
        Ok(Generator {
            model,
            cfg,
            engine,
            prefill,
            decode,
            kv,
            ctx,
            stop_ids,
            opts,
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.cfg
    }

    /// The model.
    pub fn model(&self) -> &Arc<GgufModel> {
        &self.model
    }

    /// Context length in tokens.
    pub fn ctx(&self) -> usize {
        self.ctx
    }

    /// Ids that end generation.
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// Bytes of the KV cache.
    pub fn kv_bytes(&self) -> usize {
        self.kv.memory_bytes()
    }

    /// Run the prompt through the model from an empty cache and return the last position's
    /// logits.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<&[f32], GenerateError> {
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        if prompt.len() > self.ctx {
            return Err(GenerateError::ContextTooSmall {
                prompt: prompt.len(),
                max_new: 0,
                needed: prompt.len(),
                ctx: self.ctx,
            });
        }
        self.kv.reset();
        let batch = self.prefill.max_tokens();
        let last_start = (prompt.len() - 1) / batch * batch;
        for chunk in prompt[..last_start].chunks(batch) {
            let pos = self.kv.seq_len();
            self.prefill.run(&self.engine, &mut self.kv, chunk, pos)?;
        }
        let pos = self.kv.seq_len();
        Ok(self
            .prefill
            .run(&self.engine, &mut self.kv, &prompt[last_start..], pos)?)
    }

    /// One decode step: append `token` at the next position and return the logits that follow
    /// it. Allocates nothing.
    pub fn step(&mut self, token: u32) -> Result<&[f32], GenerateError> {
        let pos = self.kv.seq_len();
        Ok(self.decode.run(&self.engine, &mut self.kv, &[token], pos)?)
    }

    /// Tokens in the KV cache.
    pub fn seq_len(&self) -> usize {
        self.kv.seq_len()
    }

    /// Greedy generation of up to `max_new` tokens after `prompt`. `on_token` sees each new id
    /// as it is produced; returning `Ok(false)` stops early, `Err` stops with an error.
    pub fn generate_ids(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        on_token: &mut dyn FnMut(u32) -> Result<bool, String>,
    ) -> Result<Generation, GenerateError> {
        let needed = prompt.len().saturating_add(max_new);
        if needed > self.ctx {
            return Err(GenerateError::ContextTooSmall {
                prompt: prompt.len(),
                max_new,
                needed,
                ctx: self.ctx,
            });
        }
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
            let is_stop = self.stop_ids.binary_search(&next).is_ok();
            let go_on = on_token(next).map_err(GenerateError::Callback)?;
            if is_stop {
                stopped = true;
                break;
            }
            if !go_on || ids.len() >= max_new {
                break;
            }
            next = argmax(self.step(next)?);
        }
        metrics.decode = t1.elapsed();
        metrics.generated_tokens = ids.len();
        Ok(Generation {
            ids,
            stopped,
            metrics,
        })
    }

    /// Perplexity of `tokens` as llama-perplexity computes it: non-overlapping windows of
    /// `n_ctx` tokens, each from an empty cache, the first token of each window replaced by
    /// `bos` when given, scoring the predictions of the second half of each window.
    pub fn perplexity(
        &mut self,
        tokens: &[u32],
        n_ctx: usize,
        bos: Option<u32>,
    ) -> Result<Perplexity, GenerateError> {
        if n_ctx < 4 || n_ctx > self.ctx {
            return Err(GenerateError::InvalidOption {
                name: "ctx",
                reason: format!("perplexity window {n_ctx} must be within 4..={}", self.ctx),
            });
        }
        let n_chunks = tokens.len() / n_ctx;
        if n_chunks == 0 {
            return Err(GenerateError::InvalidOption {
                name: "text",
                reason: format!(
                    "{} tokens are fewer than one window of {n_ctx}",
                    tokens.len()
                ),
            });
        }
        let graph = build_decoder(&self.cfg, &self.model, Logits::All)?;
        let model = self.model.clone();
        let lookup = |name: &str| weight_tensor(&model, name);
        let mut plan = ExecutionPlan::compile(&graph, n_ctx, &lookup)?;
        let n_vocab = self.cfg.n_vocab;
        let first = n_ctx / 2;
        let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
        let mut window = vec![0u32; n_ctx];
        for c in 0..n_chunks {
            let start = c * n_ctx;
            window.copy_from_slice(&tokens[start..start + n_ctx]);
            if let Some(b) = bos {
                window[0] = b;
            }
            self.kv.reset();
            let logits = plan.run(&self.engine, &mut self.kv, &window, 0)?;
            for j in first..n_ctx - 1 {
                let row = &logits[j * n_vocab..(j + 1) * n_vocab];
                let target = tokens[start + j + 1] as usize;
                let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
                let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
                let logp = row
                    .get(target)
                    .map(|&x| x as f64 - max - sum.ln())
                    .unwrap_or(f64::NEG_INFINITY);
                nll -= logp;
                nll2 += logp * logp;
                count += 1;
            }
        }
        self.kv.reset();
        let mean = nll / count as f64;
        let mean2 = nll2 / count as f64;
        let var = mean2 - mean * mean;
        let ppl = mean.exp();
        let err = if var > 0.0 && count > 1 {
            (var / (count - 1) as f64).sqrt() * ppl
        } else {
            0.0
        };
        Ok(Perplexity {
            ppl,
            err,
            chunks: n_chunks,
            scored: count,
        })
    }

    /// Options it was made with.
    pub fn options(&self) -> &GeneratorOptions {
        &self.opts
    }
}

fn argmax(logits: &[f32]) -> u32 {
    cpu::argmax(logits).unwrap_or(0) as u32
}
