//! [`Encoder`]: an encoder-only model (BERT, all-MiniLM-L6-v2) ready to embed: its compiled
//! plan, a KV cache for one whole input, and its tokenizer. Each input runs in one step (its
//! tokens attend to each other), then token states are pooled and L2-normalized.

use std::sync::Arc;

use kestrel_arch::{build_encoder, weight_tensor, EncoderConfig, PoolingType};
use kestrel_gguf::GgufModel;
use kestrel_graph::ExecutionPlan;
use kestrel_kv::{ContiguousCache, KvCache, KvDType, KvLayout};
use kestrel_tensor::CpuEngine;
use kestrel_tokenizer::{EncodeOptions, Tokenizer};

use crate::generator::tokenizer_of;
use crate::{GenerateError, Pooling};

/// How to set up an [`Encoder`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EncoderOptions {
    /// Compute threads (0: one per logical CPU).
    pub threads: usize,
    /// Longest input in tokens (0: the model's position table, its training context).
    pub max_tokens: usize,
    /// Cut inputs longer than `max_tokens` (keeping the final separator), as sentence-transformers
    /// does, instead of refusing them.
    pub truncate: bool,
}

/// An encoder model with its plan, cache and tokenizer.
pub struct Encoder {
    cfg: EncoderConfig,
    engine: CpuEngine,
    plan: ExecutionPlan,
    kv: ContiguousCache,
    tokenizer: Option<Arc<Tokenizer>>,
    opts: EncoderOptions,
    pooled: Vec<f64>,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("arch", &self.cfg.arch)
            .field("max_tokens", &self.plan.max_tokens())
            .finish()
    }
}

impl Encoder {
    /// Set up an encoder model.
    ///
    /// # Errors
    /// The file is not an encoder, its tensors do not fit its metadata, or the threads cannot
    /// start.
    pub fn new(model: Arc<GgufModel>, opts: EncoderOptions) -> Result<Encoder, GenerateError> {
        let cfg = EncoderConfig::from_model(&model)?;
        let max = match opts.max_tokens {
            0 => cfg.n_ctx_train,
            n if n > cfg.n_ctx_train => {
                return Err(GenerateError::InvalidOption {
                    name: "max_tokens",
                    reason: format!(
                        "{n} is past the model's {} learned positions",
                        cfg.n_ctx_train
                    ),
                })
            }
            n => n,
        };
        if max == 0 {
            return Err(GenerateError::InvalidOption {
                name: "max_tokens",
                reason: "the model has no positions".into(),
            });
        }
        // 0 threads: one per logical CPU (the engine's own default).
        let engine = CpuEngine::new(opts.threads)?;
        let graph = build_encoder(&cfg, &model)?;
        let lookup = |name: &str| weight_tensor(&model, name);
        let plan = ExecutionPlan::compile(&graph, max, &lookup)?;
        let layout = KvLayout {
            n_layers: cfg.n_layer,
            n_kv_head: cfg.n_head,
            layer_kv_heads: Vec::new(),
            k_head_dim: cfg.head_dim,
            v_head_dim: cfg.head_dim,
            dtype: KvDType::F32,
            recurrent: kestrel_kv::RecurrentLayout::NONE,
        };
        let kv = ContiguousCache::new(layout, max)?;
        let tokenizer = tokenizer_of(&model)?;
        Ok(Encoder {
            pooled: vec![0.0; cfg.n_embd],
            cfg,
            engine,
            plan,
            kv,
            tokenizer,
            opts,
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    /// The tokenizer, if the file has one.
    pub fn tokenizer(&self) -> Option<&Arc<Tokenizer>> {
        self.tokenizer.as_ref()
    }

    /// The longest input in tokens.
    pub fn max_tokens(&self) -> usize {
        self.plan.max_tokens()
    }

    /// The pooling the file asks for; mean when it says none (sentence-transformers' default).
    pub fn pooling(&self) -> Pooling {
        match self.cfg.pooling {
            PoolingType::Cls => Pooling::First,
            PoolingType::Last => Pooling::Last,
            _ => Pooling::Mean,
        }
    }

    /// Token ids of `text` with the model's special tokens (`[CLS] … [SEP]`), cut to
    /// [`max_tokens`](Self::max_tokens) when the options say to truncate.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, GenerateError> {
        let tok = self
            .tokenizer
            .as_ref()
            .ok_or(GenerateError::NoTokenizer("text inputs"))?;
        let mut ids = tok.encode(text, EncodeOptions::default())?;
        let max = self.max_tokens();
        if self.opts.truncate && ids.len() > max {
            // Keep the closing separator, as BERT tokenizers truncate.
            if let Some(last) = ids.last().copied() {
                ids.truncate(max - 1);
                ids.push(last);
            }
        }
        Ok(ids)
    }

    /// Every token's final hidden state (`ids.len() × n_embd`, row-major).
    ///
    /// # Errors
    /// An empty input, or one longer than [`max_tokens`](Self::max_tokens).
    pub fn hidden_states(&mut self, ids: &[u32]) -> Result<&[f32], GenerateError> {
        if ids.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        let max = self.max_tokens();
        if ids.len() > max {
            return Err(GenerateError::ContextTooSmall {
                prompt: ids.len(),
                max_new: 0,
                needed: ids.len(),
                ctx: max,
            });
        }
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.cfg.n_vocab) {
            return Err(GenerateError::InvalidOption {
                name: "ids",
                reason: format!(
                    "token id {bad} is past the vocabulary of {}",
                    self.cfg.n_vocab
                ),
            });
        }
        self.kv.reset();
        // A graph without an output-row selection returns every token's row.
        let rows = self.plan.run(&self.engine, &mut self.kv, ids, 0)?;
        Ok(&rows[..ids.len() * self.cfg.n_embd])
    }

    /// The pooled, L2-normalized embedding of `ids`.
    pub fn embed_ids(&mut self, ids: &[u32], pooling: Pooling) -> Result<Vec<f32>, GenerateError> {
        let n_embd = self.cfg.n_embd;
        let mut pooled = std::mem::take(&mut self.pooled);
        pooled.fill(0.0);
        let result = self.hidden_states(ids).map(|rows| {
            let n = ids.len();
            let add = |pooled: &mut [f64], r: usize| {
                for (p, &x) in pooled.iter_mut().zip(&rows[r * n_embd..(r + 1) * n_embd]) {
                    *p += f64::from(x);
                }
            };
            match pooling {
                Pooling::First => add(&mut pooled, 0),
                Pooling::Last => add(&mut pooled, n - 1),
                _ => (0..n).for_each(|r| add(&mut pooled, r)),
            }
            let norm = pooled.iter().map(|x| x * x).sum::<f64>().sqrt();
            let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
            pooled.iter().map(|&x| (x * scale) as f32).collect()
        });
        self.pooled = pooled;
        result
    }

    /// The pooled (as the file says), L2-normalized embedding of `text`.
    pub fn embed(&mut self, text: &str) -> Result<Vec<f32>, GenerateError> {
        let ids = self.tokenize(text)?;
        self.embed_ids(&ids, self.pooling())
    }
}
