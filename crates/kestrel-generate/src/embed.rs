//! Embeddings from a decoder model: the hidden states after the final norm, pooled over the
//! tokens (mean or last, as the file's `<arch>.pooling_type` says; mean when it says nothing)
//! and L2-normalized. On a GPU the hidden-state plan shares the generator's uploaded weights
//! and runs in the default session's device cache.

use kestrel_arch::Logits;
use kestrel_graph::{CudaPlan, ExecutionPlan};

use crate::core::{Core, Plans};
use crate::session::SessionKv;
use crate::{GenerateError, Session};

/// How token states become one vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pooling {
    /// The mean over every token.
    Mean,
    /// The last token's state (causal models that summarize at the end).
    Last,
    /// The first token's state.
    First,
}

impl Pooling {
    /// The pooling a GGUF's `<arch>.pooling_type` names (llama.cpp's numbering: 1 mean,
    /// 2 cls, 3 last); mean for none or unknown.
    pub fn from_gguf(value: Option<u32>) -> Pooling {
        match value {
            Some(2) => Pooling::First,
            Some(3) => Pooling::Last,
            _ => Pooling::Mean,
        }
    }
}

/// The embedding plan, made on first use.
pub(crate) struct EmbedState {
    plan: EmbedPlan,
    pooled: Vec<f64>,
}

/// The hidden-state plan on the generator's device.
// One per generator: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
enum EmbedPlan {
    Cpu(ExecutionPlan),
    Cuda(CudaPlan),
}

impl EmbedPlan {
    fn max_tokens(&self) -> usize {
        match self {
            EmbedPlan::Cpu(p) => p.max_tokens(),
            EmbedPlan::Cuda(p) => p.max_tokens(),
        }
    }
}

/// The pooling the model's metadata asks for.
pub(crate) fn pooling(core: &Core) -> Pooling {
    let md = core.model.metadata();
    let arch = md
        .get("general.architecture")
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    Pooling::from_gguf(md.get_u32(&format!("{arch}.pooling_type")).ok())
}

/// The L2-normalized, pooled final hidden states of `ids` (prefilled in chunks from an
/// empty cache; the generator's session is reset, so the next generation prefills anew).
#[allow(clippy::too_many_arguments)]
pub(crate) fn embed(
    core: &mut Core,
    state: &mut Option<EmbedState>,
    session: &mut Session,
    batch: usize,
    ids: &[u32],
    pooling: Pooling,
) -> Result<Vec<f32>, GenerateError> {
    if ids.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    core.check_room(ids.len(), 0)?;
    let n_embd = core.cfg.n_embd;
    if state.is_none() {
        let graph = core.weights.graph(&core.cfg, Logits::Hidden)?;
        let weights = core.weights.clone();
        let lookup = |name: &str| weights.get(name);
        let chunk = batch.min(core.ctx);
        let plan = match &core.plans {
            Plans::Cpu { .. } => EmbedPlan::Cpu(ExecutionPlan::compile(&graph, chunk, &lookup)?),
            Plans::Cuda(p) => {
                EmbedPlan::Cuda(CudaPlan::compile_sharing(&graph, p, chunk, &lookup)?)
            }
        };
        *state = Some(EmbedState {
            plan,
            pooled: vec![0.0; n_embd],
        });
    }
    let Some(state) = state.as_mut() else {
        return Err(GenerateError::InvalidOption {
            name: "embed",
            reason: "no embedding plan".into(),
        });
    };
    let kv = session;
    kv.reset();
    state.pooled.fill(0.0);
    let chunk = state.plan.max_tokens();
    // The generator's adapter scales (they may have changed since the plan was made).
    let scales = core.weights.scales();
    let mut pos = 0;
    for part in ids.chunks(chunk) {
        let rows = match (&mut state.plan, &mut kv.kv) {
            (EmbedPlan::Cpu(p), SessionKv::Cpu(c)) => {
                if p.adapter_slots() > 0 {
                    p.set_adapter_scales(&scales)?;
                }
                p.run(&core.engine, c, part, pos)?
            }
            (EmbedPlan::Cuda(p), SessionKv::Cuda(c)) => {
                if p.adapter_slots() > 0 {
                    p.set_adapter_scales(&scales)?;
                }
                p.run(c, part)?
            }
            _ => {
                return Err(GenerateError::InvalidOption {
                    name: "embed",
                    reason: "the session's cache is on another device than the model".into(),
                })
            }
        };
        let take = |r: usize, pooled: &mut [f64]| {
            for (p, &x) in pooled.iter_mut().zip(&rows[r * n_embd..(r + 1) * n_embd]) {
                *p += f64::from(x);
            }
        };
        match pooling {
            Pooling::Mean => (0..part.len()).for_each(|r| take(r, &mut state.pooled)),
            Pooling::First if pos == 0 => take(0, &mut state.pooled),
            Pooling::Last if pos + part.len() == ids.len() => {
                take(part.len() - 1, &mut state.pooled)
            }
            _ => {}
        }
        pos += part.len();
    }
    kv.reset();
    let norm = state.pooled.iter().map(|x| x * x).sum::<f64>().sqrt();
    let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
    Ok(state.pooled.iter().map(|&x| (x * scale) as f32).collect())
}
