//! What runs the model for a generator ([`Core`]: config, engine, compiled plans, the last
//! step's logits) and the prefill/step loop every way of generating shares (single sessions,
//! streams, the batched scheduler, embeddings, adapters). The bottom of the generator's
//! modules: they import it, it imports none of them but the session, the weights and the
//! adapter use.

use std::sync::{Arc, OnceLock};

use kestrel_arch::DecoderConfig;
use kestrel_gguf::GgufModel;
use kestrel_graph::{CudaKvCache, CudaPlan, ExecutionPlan};
use kestrel_kv::{ContiguousCache, KvCache, KvLayout};
use kestrel_sampling::TokenTrie;
use kestrel_tensor::{CpuEngine, Device};
use kestrel_tokenizer::Tokenizer;

use crate::session::SessionKv;
use crate::weights::Weights;
use crate::{GenerateError, Session};

/// The compiled steps of the device the generator runs on.
// One per generator, never moved in a hot path: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Plans {
    /// The CPU engine: a plan for prefill chunks and one for single-token steps.
    Cpu {
        prefill: ExecutionPlan,
        decode: ExecutionPlan,
    },
    /// One CUDA plan for both (its buffers are sized for the prefill chunk; a decode step uses
    /// the first row).
    Cuda(CudaPlan),
}

/// What runs the model: config, engine, plans, and the logits of the last step.
pub(crate) struct Core {
    pub(crate) model: Arc<GgufModel>,
    /// The model's weights with the generator's adapters: what every graph reads.
    pub(crate) weights: Weights,
    pub(crate) cfg: DecoderConfig,
    /// The CPU engine (also what the CPU-only paths of a CUDA generator would use).
    pub(crate) engine: CpuEngine,
    pub(crate) plans: Plans,
    pub(crate) device: Device,
    pub(crate) layout: KvLayout,
    pub(crate) ctx: usize,
    pub(crate) stop_ids: Vec<u32>,
    /// The last position's logits of the last prefill or step (the sampler edits them in place).
    pub(crate) logits: Vec<f32>,
    /// The adapter scales of the chunk being run (reused: a step allocates nothing).
    pub(crate) chunk_scales: Vec<f32>,
}

impl Core {
    /// Prefill `prompt` into `session`, reusing the longest prefix the session already holds;
    /// the last position's logits land in `self.logits`. Returns the number of reused tokens.
    pub(crate) fn feed(
        &mut self,
        session: &mut Session,
        prompt: &[u32],
    ) -> Result<usize, GenerateError> {
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
        self.check_session(session)?;
        let mut common = session
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        if common == prompt.len() {
            common -= 1; // the last prompt token runs again, for its logits
        }
        session.truncate(common);
        // A recurrent state cannot go back part of the way: the session may have started over.
        let common = session.tokens.len();
        let batch = match &self.plans {
            Plans::Cpu { prefill, .. } => prefill.max_tokens(),
            Plans::Cuda(plan) => plan.max_tokens(),
        };
        // Chunks of `batch`, cut where an activated adapter starts to act.
        let mut pos = common;
        while pos < prompt.len() {
            let mut end = (pos + batch).min(prompt.len());
            if let Some(change) = session.adapters.next_change(pos) {
                end = end.min(change);
            }
            self.run_chunk(session, &prompt[pos..end], false, end == prompt.len())?;
            pos = end;
        }
        Ok(common)
    }

    /// Runs `tokens` at the session's next positions on the generator's device (the decode
    /// plan when `decode`) and appends them to the session; the last position's logits land in
    /// `self.logits` when `keep`.
    fn run_chunk(
        &mut self,
        session: &mut Session,
        tokens: &[u32],
        decode: bool,
        keep: bool,
    ) -> Result<(), GenerateError> {
        let pos = session.kv.seq_len();
        let logits = match (&mut self.plans, &mut session.kv) {
            (Plans::Cpu { prefill, decode: d }, SessionKv::Cpu(kv)) => {
                let plan = if decode { d } else { prefill };
                if plan.adapter_slots() > 0 {
                    // The session's scales at this chunk (it never crosses a change).
                    self.chunk_scales.clear();
                    session.adapters.extend_at(pos, &mut self.chunk_scales);
                    plan.set_adapter_scales(&self.chunk_scales)?;
                }
                plan.run(&self.engine, kv, tokens, pos)?
            }
            (Plans::Cuda(plan), SessionKv::Cuda(kv)) => {
                if plan.adapter_slots() > 0 {
                    self.chunk_scales.clear();
                    session.adapters.extend_at(pos, &mut self.chunk_scales);
                    plan.set_adapter_scales(&self.chunk_scales)?;
                }
                plan.run(kv, tokens)?
            }
            _ => return Err(foreign_session()),
        };
        if keep {
            copy_logits(&mut self.logits, logits)?;
        }
        session.tokens.extend_from_slice(tokens);
        Ok(())
    }

    /// Append `token` to `session` and compute the logits that follow it. Allocates nothing.
    pub(crate) fn step(&mut self, session: &mut Session, token: u32) -> Result<(), GenerateError> {
        room_for_one(session.kv.seq_len(), self.ctx)?;
        self.run_chunk(session, &[token], true, true)
    }

    /// Append `token` to `session` and return the greedy next token (the largest logit's id,
    /// ties to the lowest): on the GPU found there, so 4 bytes come back instead of the logits
    /// (`self.logits` then keeps the previous step's); on the CPU the logits' argmax.
    pub(crate) fn step_greedy(
        &mut self,
        session: &mut Session,
        token: u32,
    ) -> Result<u32, GenerateError> {
        if !self.on_gpu() {
            self.step(session, token)?;
            return Ok(kestrel_tensor::cpu::argmax(&self.logits).unwrap_or(0) as u32);
        }
        let (plan, kv) = gpu_step(&mut self.plans, &mut self.chunk_scales, self.ctx, session)?;
        let next = plan.run_greedy(kv, &[token])?;
        session.tokens.push(token);
        Ok(next)
    }

    /// Append `token` to `session` (on a GPU) and return the `k` best candidates of the logits
    /// that follow it, found on the device (8 bytes each come back instead of the logits; the
    /// sampler goes on with `Sampler::pick_top`), and the stop ids. `self.logits` keeps the
    /// previous step's.
    pub(crate) fn step_top_k<'s>(
        &'s mut self,
        session: &mut Session,
        token: u32,
        k: usize,
    ) -> Result<TopStep<'s>, GenerateError> {
        let (plan, kv) = gpu_step(&mut self.plans, &mut self.chunk_scales, self.ctx, session)?;
        let (ids, logits) = plan.run_top_k(kv, &[token], k)?;
        session.tokens.push(token);
        Ok(TopStep {
            ids,
            logits,
            stop_ids: &self.stop_ids,
        })
    }

    /// Whether the model runs on a GPU.
    pub(crate) fn on_gpu(&self) -> bool {
        matches!(self.plans, Plans::Cuda(_))
    }

    /// A prompt of `prompt` tokens and `max_new` new ones fit in the context.
    pub(crate) fn check_room(&self, prompt: usize, max_new: usize) -> Result<(), GenerateError> {
        let needed = prompt.saturating_add(max_new);
        if needed > self.ctx {
            return Err(GenerateError::ContextTooSmall {
                prompt,
                max_new,
                needed,
                ctx: self.ctx,
            });
        }
        Ok(())
    }

    pub(crate) fn is_stop(&self, id: u32) -> bool {
        self.stop_ids.binary_search(&id).is_ok()
    }

    fn check_session(&self, session: &Session) -> Result<(), GenerateError> {
        let same = match &session.kv {
            SessionKv::Cpu(kv) => {
                matches!(self.plans, Plans::Cpu { .. })
                    && kv.layout() == &self.layout
                    && kv.capacity() == self.ctx
            }
            // The CUDA plan checks the cache's layer shapes itself.
            SessionKv::Cuda(kv) => {
                matches!(self.plans, Plans::Cuda(_)) && kv.capacity() == self.ctx
            }
        };
        if !same {
            return Err(foreign_session());
        }
        Ok(())
    }

    /// A new empty cache of the context's length on the generator's device.
    pub(crate) fn new_kv(&self) -> Result<SessionKv, GenerateError> {
        Ok(match &self.plans {
            Plans::Cpu { .. } => {
                SessionKv::Cpu(ContiguousCache::new(self.layout.clone(), self.ctx)?)
            }
            Plans::Cuda(plan) => SessionKv::Cuda(plan.new_cache(self.ctx)?),
        })
    }
}

/// A step at position `pos` fits a context of `ctx`.
fn room_for_one(pos: usize, ctx: usize) -> Result<(), GenerateError> {
    if pos >= ctx {
        return Err(GenerateError::ContextTooSmall {
            prompt: pos,
            max_new: 1,
            needed: pos + 1,
            ctx,
        });
    }
    Ok(())
}

fn foreign_session() -> GenerateError {
    GenerateError::InvalidOption {
        name: "session",
        reason: "the session was made by a generator with another model, context or device".into(),
    }
}

fn copy_logits(dst: &mut [f32], src: &[f32]) -> Result<(), GenerateError> {
    if dst.len() != src.len() {
        return Err(GenerateError::InvalidOption {
            name: "model",
            reason: format!(
                "the plan returned {} logits for a vocabulary of {}",
                src.len(),
                dst.len()
            ),
        });
    }
    dst.copy_from_slice(src);
    Ok(())
}

/// The vocabulary trie in `cell`, built from the tokenizer's pieces on first use; it has one
/// entry per logit (ids past the tokenizer's vocabulary are empty, so never allowed).
pub(crate) fn trie_of<'a>(
    cell: &'a OnceLock<TokenTrie>,
    tokenizer: Option<&Tokenizer>,
    core: &Core,
) -> Result<&'a TokenTrie, GenerateError> {
    if let Some(t) = cell.get() {
        return Ok(t);
    }
    let tok = tokenizer.ok_or(GenerateError::NoTokenizer("grammars"))?;
    let pieces: Vec<Vec<u8>> = (0..core.cfg.n_vocab as u32)
        .map(|id| {
            tok.token_to_piece(id, false)
                .map(<[u8]>::to_vec)
                .unwrap_or_default()
        })
        .collect();
    Ok(cell.get_or_init(|| TokenTrie::new(&pieces, &core.stop_ids)))
}

// A sampler hands a GPU no larger top-k than the device takes.
const _: () = assert!(kestrel_sampling::MAX_DEVICE_TOP_K == kestrel_tensor::cuda::MAX_TOP_K);

/// A device top-k step's candidates (ids and logits, best first) and the generator's stop ids.
pub(crate) struct TopStep<'a> {
    pub ids: &'a [u32],
    pub logits: &'a [f32],
    pub stop_ids: &'a [u32],
}

/// The CUDA plan and `session`'s device cache for a one-token step, the context checked and
/// the session's adapter scales at its position bound (into `scales`).
fn gpu_step<'s, 'k>(
    plans: &'s mut Plans,
    scales: &mut Vec<f32>,
    ctx: usize,
    session: &'k mut Session,
) -> Result<(&'s mut CudaPlan, &'k mut CudaKvCache), GenerateError> {
    let pos = session.kv.seq_len();
    room_for_one(pos, ctx)?;
    let (Plans::Cuda(plan), SessionKv::Cuda(kv)) = (plans, &mut session.kv) else {
        return Err(GenerateError::NotOnDevice {
            what: "a device step of a session that is not on the GPU",
            device: "cpu".into(),
        });
    };
    if plan.adapter_slots() > 0 {
        scales.clear();
        session.adapters.extend_at(pos, scales);
        plan.set_adapter_scales(scales)?;
    }
    Ok((plan, kv))
}
