//! Where a [`Scheduler`](crate::Scheduler)'s sequences keep their keys and values, and how a
//! step runs them: the CPU engine's paged block pool with its batched plan (every weight read
//! once for all rows), or, on a GPU, one device cache per sequence run through the
//! generator's CUDA plan.
//!
//! On the GPU a step's decode tokens run as batched steps of up to 64 sequences
//! (`CudaPlan::run_batch`: each weight read once for all of them, each token reaching its own
//! sequence's cache, captured once per batch size and replayed), and its prompt chunks one
//! sequence at a time in the prefill chunks a single generation uses, so each sequence's
//! logits are the bits it gets alone. The GPU store (`cuda_seqs.rs`) reserves each sequence's
//! whole budget at admission, like the pool: pages of a device pool (paged attention, a prefix
//! cache sharing pages) where the plan can page, else a device cache a sequence.

use kestrel_graph::{BatchSeq, CudaKvCache, ExecutionPlan, Picks};
use kestrel_kv::{KvError, PagedCache, PoolStats, SeqId};

use crate::core::{Core, Plans};
pub(crate) use crate::cuda_seqs::CudaSeqs;
use crate::GenerateError;

/// What runs a scheduler's steps (kept apart from the caches, so the rows it returns stay
/// borrowed while the caches change).
// One per generator, never moved in a hot path: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum StepRunner {
    /// The CPU engine's batched plan.
    Cpu(ExecutionPlan),
    /// The generator's CUDA plan: prompt chunks one sequence at a time, decodes in batched
    /// steps of up to the plan's `max_batch`.
    Cuda {
        /// Most tokens in one step.
        step_tokens: usize,
        /// The prefill chunk of the generator's plan (a single generation's chunking).
        chunk: usize,
        /// The logits rows of the last step's outputs that need them, one after another, and
        /// each output's row among them (`usize::MAX`: none): outputs whose token the device
        /// picked take no host memory (64 of Gemma 3's would be 67 MB).
        rows: Vec<f32>,
        row_at: Vec<usize>,
        n_vocab: usize,
        /// A step's decode tokens, run as batched steps (`CudaPlan::run_batch`) unless
        /// `batch` is off (`KESTREL_CUDA_BATCH=0`: each alone, for comparison; the same bits).
        decodes: Vec<Decode>,
        batch: bool,
        /// One batched step's decodes and token ids (reused: a step allocates little).
        group: Vec<Decode>,
        ids: Vec<u32>,
        /// Each output's token when the device picked it (greedy outputs), else `NOT_PICKED`.
        picked: Vec<u32>,
        /// Top-k outputs' candidates, found on the device: `top[o]` = (start, count) in
        /// `top_ids` / `top_vals`, `None` for outputs that are not.
        top: Vec<Option<(usize, usize)>>,
        top_ids: Vec<u32>,
        top_vals: Vec<f32>,
    },
}

/// What a step needs of an output's logits: the whole row, only its argmax (a plain-greedy
/// decode), or only its `k` best candidates (a top-k sampler with nothing else reading the
/// logits). A GPU finds the last two on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    /// The whole row (copied back).
    Logits,
    /// Its argmax (found on the device).
    Greedy,
    /// Its `k` best candidates (found on the device).
    TopK(usize),
}

/// A step's outputs: logits rows, and what the device picked or found in their place.
pub(crate) struct StepOut<'a> {
    /// Rows of `n_vocab` logits: output `o`'s is row `row_at[o]`, or row `o` when `row_at` is
    /// empty (the CPU's: every output's); none for outputs the device picked or found
    /// candidates for.
    rows: &'a [f32],
    row_at: &'a [usize],
    /// Each output's token where the device picked it, else `NOT_PICKED` (may be shorter).
    pub picked: &'a [u32],
    top: &'a [Option<(usize, usize)>],
    top_ids: &'a [u32],
    top_vals: &'a [f32],
}

impl<'a> StepOut<'a> {
    /// Output `o`'s logits, where the step returned them.
    pub fn row(&self, o: usize, n_vocab: usize) -> Option<&'a [f32]> {
        let i = if self.row_at.is_empty() {
            o
        } else {
            *self.row_at.get(o)?
        };
        self.rows
            .get(i.checked_mul(n_vocab)?..i.checked_add(1)?.checked_mul(n_vocab)?)
    }

    /// Output `o`'s top-k candidates (ids and logits, best first) where the device found them.
    pub fn top(&self, o: usize) -> Option<(&'a [u32], &'a [f32])> {
        let (at, n) = (*self.top.get(o)?)?;
        Some((
            self.top_ids.get(at..at + n)?,
            self.top_vals.get(at..at + n)?,
        ))
    }
}

/// Where a scheduler's sequences keep their keys and values.
// One per generator, never moved in a hot path: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum SeqStore {
    /// The CPU engine's paged pool.
    Paged(PagedCache),
    /// A GPU: one device cache per running sequence.
    Cuda(CudaSeqs),
}

impl StepRunner {
    /// Most tokens one step takes.
    pub(crate) fn max_tokens(&self) -> usize {
        match self {
            StepRunner::Cpu(plan) => plan.max_tokens(),
            StepRunner::Cuda { step_tokens, .. } => *step_tokens,
        }
    }

    /// The prefill chunk a sequence's prompt is cut into, when the runner needs one (the
    /// GPU's, so a sequence is prefilled as it is alone).
    pub(crate) fn prefill_chunk(&self) -> Option<usize> {
        match self {
            StepRunner::Cpu(_) => None,
            StepRunner::Cuda { chunk, .. } => Some(*chunk),
        }
    }

    /// Runs one step over `store`: `tokens` cut into `segs`; returns the logits of the rows
    /// `outputs` names (token indices, in segment order), one row each, or, where the device
    /// picked an output's token or found its top-k candidates, those instead (the logits row
    /// is then not written). `pick[o]`: what output `o` needs (a GPU finds argmaxes and top-k
    /// candidates there; the CPU returns every row). The caller commits the segments.
    /// `adapter_scales`: each segment's adapter scales, one per adapter (the GPU plan binds
    /// them before each segment it runs).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run(
        &mut self,
        store: &mut SeqStore,
        core: &mut Core,
        tokens: &[u32],
        segs: &[BatchSeq],
        (outputs, pick): (&[usize], &[Pick]),
        adapter_scales: &[f32],
    ) -> Result<StepOut<'_>, GenerateError> {
        match (self, store) {
            (StepRunner::Cpu(plan), SeqStore::Paged(pool)) => Ok(StepOut {
                rows: plan.run_batch(&core.engine, pool, tokens, segs, outputs, adapter_scales)?,
                row_at: &[],
                picked: &[],
                top: &[],
                top_ids: &[],
                top_vals: &[],
            }),
            (
                StepRunner::Cuda {
                    rows,
                    row_at,
                    n_vocab,
                    decodes,
                    batch,
                    group,
                    ids,
                    picked,
                    top,
                    top_ids,
                    top_vals,
                    ..
                },
                SeqStore::Cuda(c),
            ) => {
                picked.clear();
                picked.resize(outputs.len(), NOT_PICKED);
                top.clear();
                top.resize(outputs.len(), None);
                top_ids.clear();
                top_vals.clear();
                let Plans::Cuda(plan) = &mut core.plans else {
                    return Err(mismatch());
                };
                let n_vocab = *n_vocab;
                rows.clear();
                row_at.clear();
                row_at.resize(outputs.len(), usize::MAX);
                let n = plan.adapter_slots();
                let scales_of = |k: usize| {
                    adapter_scales.get(k * n..(k + 1) * n).ok_or_else(|| {
                        GenerateError::InvalidOption {
                            name: "batch",
                            reason: "fewer adapter scales than segments".into(),
                        }
                    })
                };
                decodes.clear();
                let mut start = 0;
                let mut o = 0;
                for (k, s) in segs.iter().enumerate() {
                    let end = start + s.len;
                    let cache = c.cache(s.seq)?;
                    if cache.len() != s.pos0 {
                        return Err(GenerateError::InvalidOption {
                            name: "batch",
                            reason: format!(
                                "sequence {} holds {} positions, its segment starts at {}",
                                s.seq,
                                cache.len(),
                                s.pos0
                            ),
                        });
                    }
                    let chunk =
                        tokens
                            .get(start..end)
                            .ok_or_else(|| GenerateError::InvalidOption {
                                name: "batch",
                                reason: "a segment past the step's tokens".into(),
                            })?;
                    // The plan returns a segment's last row: an output when asked for.
                    let slot = (outputs.get(o) == Some(&(end - 1))).then(|| {
                        o += 1;
                        o - 1
                    });
                    start = end;
                    // One token whose logits are wanted: batched with the step's others.
                    if let (true, [token], Some(slot)) = (*batch, chunk, slot) {
                        decodes.push(Decode {
                            seg: k,
                            seq: s.seq,
                            token: *token,
                            slot,
                            pick: match pick.get(slot).copied().unwrap_or(Pick::Logits) {
                                // Its plan runs batched steps one sequence at a time.
                                Pick::TopK(_) if !plan.batches_in_one_step() => Pick::Logits,
                                p => p,
                            },
                        });
                        continue;
                    }
                    if n > 0 {
                        plan.set_adapter_scales(scales_of(k)?)?;
                    }
                    let logits = plan.run(cache, chunk)?;
                    if let Some(slot) = slot {
                        copy_row((rows, row_at), slot, logits, n_vocab)?;
                    }
                }
                // The decodes, up to a batched step's most at a time, sequences at the same
                // adapter scales together (the plan binds one set a step), each group in
                // sequence order. Where the plan batches in one step, a group's decodes take
                // their picks (argmax, top-k at the largest k wanted, the logits) from one
                // step's rows, so each weight is read once for all of them; else a group
                // shares its pick.
                let max = plan.max_batch().max(1);
                let one_step = plan.batches_in_one_step();
                while let Some(first) = decodes.first() {
                    let (scales, group_pick) = (scales_of(first.seg)?, first.pick);
                    group.clear();
                    let mut i = 0;
                    while i < decodes.len() && group.len() < max {
                        if scales_of(decodes[i].seg)? == scales
                            && (one_step || decodes[i].pick == group_pick)
                        {
                            group.push(decodes.remove(i));
                        } else {
                            i += 1;
                        }
                    }
                    // Those that want their logits first (so only their rows come back), then
                    // in sequence order; row j of the step is group[j]'s.
                    group.sort_by_key(|d| (d.pick != Pick::Logits, d.seq));
                    if n > 0 {
                        plan.set_adapter_scales(scales)?;
                    }
                    ids.clear();
                    ids.extend(group.iter().map(|d| d.token));
                    // A sequence's id is its slot in `c.caches`.
                    let mut slots: Vec<Option<&mut CudaKvCache>> =
                        c.caches.iter_mut().map(Option::as_mut).collect();
                    let mut caches: Vec<&mut CudaKvCache> = Vec::with_capacity(group.len());
                    for d in group.iter() {
                        let cache = slots.get_mut(d.seq).and_then(Option::take);
                        caches.push(cache.ok_or(GenerateError::Kv(KvError::UnknownSeq(d.seq)))?);
                    }
                    if one_step {
                        let want = Picks {
                            argmax: group.iter().any(|d| d.pick == Pick::Greedy),
                            top_k: group
                                .iter()
                                .filter_map(|d| match d.pick {
                                    Pick::TopK(k) => Some(k),
                                    _ => None,
                                })
                                .max(),
                            logits: group.iter().filter(|d| d.pick == Pick::Logits).count(),
                        };
                        let out = plan.run_batch_picks(&mut caches, ids, want)?;
                        for (j, d) in group.iter().enumerate() {
                            let short = || GenerateError::InvalidOption {
                                name: "batch",
                                reason: "the batched step returned too few rows".into(),
                            };
                            match d.pick {
                                Pick::Greedy => {
                                    let id = *out.argmax.get(j).ok_or_else(short)?;
                                    picked[d.slot] = id.max(0) as u32;
                                }
                                Pick::TopK(k) => {
                                    // A smaller k's candidates are the largest k's first ones.
                                    let found =
                                        out.top.filter(|t| t.rows() > j).ok_or_else(short)?;
                                    let (ids, vals) = found.row(j);
                                    let n = ids.len().min(k);
                                    top[d.slot] = Some((top_ids.len(), n));
                                    top_ids.extend_from_slice(&ids[..n]);
                                    top_vals.extend_from_slice(&vals[..n]);
                                }
                                Pick::Logits => {
                                    let row = out
                                        .logits
                                        .get(j * n_vocab..(j + 1) * n_vocab)
                                        .ok_or_else(short)?;
                                    copy_row((rows, row_at), d.slot, row, n_vocab)?;
                                }
                            }
                        }
                        continue;
                    }
                    match group_pick {
                        Pick::Greedy => {
                            // Only their argmax is wanted: found on the device.
                            let next = plan.run_batch_greedy(&mut caches, ids)?;
                            for (d, &id) in group.iter().zip(next) {
                                picked[d.slot] = id;
                            }
                            continue;
                        }
                        // A plan that runs each sequence alone takes no device top-k (its top-k
                        // decodes asked for their logits above).
                        Pick::TopK(_) | Pick::Logits => {}
                    }
                    let logits = plan.run_batch(&mut caches, ids)?;
                    for (j, d) in group.iter().enumerate() {
                        let row = logits.get(j * n_vocab..(j + 1) * n_vocab).ok_or_else(|| {
                            GenerateError::InvalidOption {
                                name: "batch",
                                reason: "the batched step returned too few rows".into(),
                            }
                        })?;
                        copy_row((rows, row_at), d.slot, row, n_vocab)?;
                    }
                }
                Ok(StepOut {
                    rows,
                    row_at,
                    picked,
                    top,
                    top_ids,
                    top_vals,
                })
            }
            _ => Err(mismatch()),
        }
    }
}

/// One decode token of a GPU step, waiting to run batched: its segment, sequence, token and
/// output row.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Decode {
    seg: usize,
    seq: SeqId,
    token: u32,
    slot: usize,
    /// What it needs of its logits.
    pick: Pick,
}

/// An output whose token the device did not pick (its logits row holds the logits).
pub(crate) const NOT_PICKED: u32 = u32::MAX;

/// Puts one sequence's logits at output row `slot`.
fn copy_row(
    (rows, row_at): (&mut Vec<f32>, &mut [usize]),
    slot: usize,
    logits: &[f32],
    n_vocab: usize,
) -> Result<(), GenerateError> {
    if logits.len() != n_vocab {
        return Err(GenerateError::InvalidOption {
            name: "batch",
            reason: format!(
                "the plan returned {} logits for a vocabulary of {n_vocab}",
                logits.len()
            ),
        });
    }
    let at = row_at
        .get_mut(slot)
        .ok_or_else(|| GenerateError::InvalidOption {
            name: "batch",
            reason: format!("output {slot} past the step's outputs"),
        })?;
    *at = rows.len() / n_vocab.max(1);
    rows.extend_from_slice(logits);
    Ok(())
}

fn mismatch() -> GenerateError {
    GenerateError::InvalidOption {
        name: "batch",
        reason: "the batch store is on another device than the model".into(),
    }
}

impl SeqStore {
    /// Refuses a request whose budget (`tokens`) exceeds the whole store.
    pub(crate) fn check_fits(&self, tokens: usize) -> Result<(), GenerateError> {
        let (needed, free, total) = match self {
            SeqStore::Paged(pool) => (
                pool.blocks_for(tokens),
                pool.free_blocks(),
                pool.total_blocks(),
            ),
            SeqStore::Cuda(c) => (c.blocks_for(tokens), c.free_blocks(), c.total_blocks()),
        };
        if needed > total {
            return Err(GenerateError::Kv(KvError::OutOfBlocks {
                needed,
                free,
                total,
            }));
        }
        Ok(())
    }

    /// Makes room for a sequence of `prompt` that may grow to `needed` tokens: its id and the
    /// prompt tokens already cached (prefix cache, at most `reuse` of them), or `None` when it
    /// must wait for blocks.
    pub(crate) fn admit(
        &mut self,
        core: &Core,
        prompt: &[u32],
        needed: usize,
        reuse: usize,
    ) -> Result<Option<(SeqId, usize)>, GenerateError> {
        match self {
            SeqStore::Paged(pool) => {
                let seq = pool.add_seq();
                // The last prompt token always runs (for its logits).
                let upto = reuse.min(prompt.len().saturating_sub(1));
                let cached = if upto > 0 {
                    pool.attach_prefix(seq, &prompt[..upto])?
                } else {
                    0
                };
                match pool.reserve(seq, needed) {
                    Ok(()) => Ok(Some((seq, cached))),
                    Err(KvError::OutOfBlocks { .. }) => {
                        pool.free_seq(seq)?;
                        Ok(None)
                    }
                    Err(e) => {
                        pool.free_seq(seq)?;
                        Err(e.into())
                    }
                }
            }
            SeqStore::Cuda(c) => {
                let Plans::Cuda(plan) = &core.plans else {
                    return Err(mismatch());
                };
                c.admit(plan, prompt, needed, reuse)
            }
        }
    }

    /// Frees a sequence's blocks (its cache, on a GPU).
    pub(crate) fn free(&mut self, seq: SeqId) -> Result<(), GenerateError> {
        match self {
            SeqStore::Paged(pool) => Ok(pool.free_seq(seq)?),
            SeqStore::Cuda(c) => c.free(seq),
        }
    }

    /// Offers a sequence's first `tokens` to the prefix cache.
    pub(crate) fn publish(&mut self, seq: SeqId, tokens: &[u32]) -> Result<(), GenerateError> {
        match self {
            SeqStore::Paged(pool) => Ok(pool.publish_prefix(seq, tokens)?),
            SeqStore::Cuda(c) => c.publish(seq, tokens),
        }
    }

    /// Drops what the prefix cache holds (blocks computed at adapter scales no longer used).
    pub(crate) fn clear_prefix_cache(&mut self) {
        match self {
            SeqStore::Paged(pool) => pool.clear_prefix_cache(),
            SeqStore::Cuda(c) => c.clear_prefix_cache(),
        }
    }

    /// Positions a sequence holds.
    pub(crate) fn seq_len(&mut self, seq: SeqId) -> Result<usize, GenerateError> {
        match self {
            SeqStore::Paged(pool) => Ok(pool.seq_len(seq)?),
            SeqStore::Cuda(c) => Ok(c.cache(seq)?.len()),
        }
    }

    /// Occupancy.
    pub(crate) fn stats(&self) -> PoolStats {
        match self {
            SeqStore::Paged(pool) => pool.stats(),
            SeqStore::Cuda(c) => c.stats(),
        }
    }

    /// Records that a sequence now holds `len` positions (the GPU cache counts itself).
    pub(crate) fn commit(&mut self, seq: SeqId, len: usize) -> Result<(), GenerateError> {
        match self {
            SeqStore::Paged(pool) => Ok(pool.commit(seq, len)?),
            SeqStore::Cuda(c) => c.commit(seq, len),
        }
    }
}
