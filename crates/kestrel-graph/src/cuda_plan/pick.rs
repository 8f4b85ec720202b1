//! What a step returns besides its logits: the argmax of each output row (greedy decoding) or
//! its top-k candidates (top-k sampling), found on the device so a few bytes come back instead
//! of the rows.

use kestrel_tensor::cuda::{DeviceTopK, MAX_TOP_K};
use kestrel_tensor::TensorError;

use super::{internal, CudaKvCache, CudaPlan};
use crate::GraphError;

/// What a batched step's caller wants of its output rows ([`CudaPlan::run_batch_picks`]):
/// each row's argmax, its best `top_k` candidates, the first rows' logits; any of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Picks {
    /// Each row's argmax (as [`CudaPlan::run_batch_greedy`]).
    pub argmax: bool,
    /// Each row's best `k` candidates (as [`CudaPlan::run_batch_top_k`]; a smaller k's are
    /// their first ones, the order being total).
    pub top_k: Option<usize>,
    /// The logits of the first this many rows (as [`CudaPlan::run_batch`] returns them; the
    /// caller puts the sequences that want them first, so only theirs come back).
    pub logits: usize,
}

/// A batched step's rows as [`Picks`] asked for them (empty, or `None`, where not asked).
#[derive(Debug)]
pub struct Picked<'a> {
    /// Row `i`'s argmax.
    pub argmax: &'a [i32],
    /// Each row's top-k candidates.
    pub top: Option<&'a DeviceTopK>,
    /// The first [`Picks::logits`] rows' logits, one after another.
    pub logits: &'a [f32],
}

impl CudaPlan {
    /// [`Self::run`] for greedy decoding: the id of the largest value of the last output row
    /// (the next token; ties to the lowest id, as `kestrel_tensor::cpu::argmax`), found on the
    /// device, so 4 bytes come back instead of the logits.
    ///
    /// # Errors
    /// As [`Self::run`].
    pub fn run_greedy(
        &mut self,
        cache: &mut CudaKvCache,
        tokens: &[u32],
    ) -> Result<u32, GraphError> {
        let (rows, t) = self.step_one(cache, tokens)?;
        let id = self.argmax_out(rows, t == 1)?.last().copied().unwrap_or(0);
        u32::try_from(id).map_err(|_| internal("negative argmax"))
    }

    /// The argmax of each of the step's `rows` output rows, found on the device and copied
    /// back (4 bytes a row); collects the step's profile.
    pub(super) fn argmax_out(&mut self, rows: usize, decode: bool) -> Result<&[i32], GraphError> {
        self.output_rows(rows)?;
        let out = self.acts[self.output]
            .as_ref()
            .ok_or_else(|| internal("output buffer missing"))?;
        self.dev.argmax_ids(out, &mut self.d_argmax)?;
        if let Some(p) = self.profile.as_mut() {
            p.collect(decode)?;
        }
        Ok(self.d_argmax.as_slice())
    }

    /// [`Self::run`] for top-k sampling: the last output row's `k` (1 to 256) best candidates
    /// as ids and logits, best first, in the sampler's order (NaN and -inf never candidates;
    /// larger logits first in `total_cmp`'s order, ties by lower id; fewer when the row has
    /// fewer candidates), found on the device, so 8 bytes a candidate come back instead of the
    /// logits. The sampler goes on from them as from its own top-k.
    ///
    /// # Errors
    /// As [`Self::run`]; `k` out of range.
    pub fn run_top_k(
        &mut self,
        cache: &mut CudaKvCache,
        tokens: &[u32],
        k: usize,
    ) -> Result<(&[u32], &[f32]), GraphError> {
        check_k(k)?;
        // Room first: a failed allocation must not leave the cache a token ahead.
        self.top_k_room(tokens.len())?;
        let (rows, t) = self.step_one(cache, tokens)?;
        let top = self.top_k_out(rows, k, t == 1)?;
        Ok(top.row(rows.saturating_sub(1)))
    }

    /// [`Self::run_batch`] for top-k sampling: each sequence's `k` (1 to 256) best candidates,
    /// as [`Self::run_top_k`] finds them (row `i` of the result: `caches[i]`'s), so 8 bytes a
    /// candidate come back instead of the logits.
    ///
    /// # Errors
    /// As [`Self::run_batch`]; `k` out of range; a graph whose batched steps run each sequence
    /// alone ([`Self::batches_in_one_step`]: take [`Self::run_batch`]).
    pub fn run_batch_top_k(
        &mut self,
        caches: &mut [&mut CudaKvCache],
        tokens: &[u32],
        k: usize,
    ) -> Result<&DeviceTopK, GraphError> {
        check_k(k)?;
        if !self.batches_in_one_step() {
            return Err(GraphError::Batch(
                "device top-k of a batched step that runs each sequence alone".into(),
            ));
        }
        self.top_k_room(tokens.len())?;
        let rows = self
            .batch_step(caches, tokens)?
            .ok_or_else(|| internal("a one-step batch ran each sequence alone"))?;
        self.top_k_out(rows, k, true)
    }

    /// One batched step of `caches` (as [`Self::run_batch`]), then what `want` asks of its rows:
    /// their argmax, their top-k candidates and/or their logits, from one pass over the
    /// weights, so decodes that pick their tokens differently (greedy, top-k at several k,
    /// the whole row) still share a step.
    ///
    /// # Errors
    /// As [`Self::run_batch_top_k`].
    pub fn run_batch_picks(
        &mut self,
        caches: &mut [&mut CudaKvCache],
        tokens: &[u32],
        want: Picks,
    ) -> Result<Picked<'_>, GraphError> {
        if let Some(k) = want.top_k {
            check_k(k)?;
        }
        if !self.batches_in_one_step() {
            return Err(GraphError::Batch(
                "device picks of a batched step that runs each sequence alone".into(),
            ));
        }
        if want.logits > tokens.len() {
            return Err(GraphError::Batch(format!(
                "the logits of {} rows of a step of {}",
                want.logits,
                tokens.len()
            )));
        }
        if want.top_k.is_some() {
            self.top_k_room(tokens.len())?;
        }
        let rows = self
            .batch_step(caches, tokens)?
            .ok_or_else(|| internal("a one-step batch ran each sequence alone"))?;
        self.output_rows(rows)?;
        let out = self.acts[self.output]
            .as_ref()
            .ok_or_else(|| internal("output buffer missing"))?;
        if want.argmax {
            self.dev.argmax_ids(out, &mut self.d_argmax)?;
        }
        if let Some(k) = want.top_k {
            let topk = self
                .d_topk
                .as_mut()
                .ok_or_else(|| internal("no top-k buffer"))?;
            self.dev.top_k(out, k, topk)?;
        }
        if want.logits > 0 {
            // Only the first rows: their shape, then back to the step's.
            self.output_rows(want.logits)?;
            let out = self.acts[self.output]
                .as_ref()
                .ok_or_else(|| internal("output buffer missing"))?;
            self.dev.download_into_host(out, &mut self.out)?;
            self.output_rows(rows)?;
        }
        if let Some(p) = self.profile.as_mut() {
            p.collect(true)?;
        }
        Ok(Picked {
            argmax: if want.argmax {
                &self.d_argmax.as_slice()[..rows]
            } else {
                &[]
            },
            top: want.top_k.and(self.d_topk.as_ref()),
            logits: if want.logits > 0 {
                self.out.values()?
            } else {
                &[]
            },
        })
    }

    /// Makes the top-k buffer (once, for the plan's most output rows).
    fn top_k_room(&mut self, rows: usize) -> Result<(), GraphError> {
        if self.d_topk.as_ref().is_none_or(|d| d.capacity() < rows) {
            self.d_topk = Some(self.dev.new_top_k(rows.max(self.max_batch))?);
        }
        Ok(())
    }

    /// The top `k` candidates of each of the step's `rows` output rows, found on the device
    /// and copied back; collects the step's profile.
    fn top_k_out(
        &mut self,
        rows: usize,
        k: usize,
        decode: bool,
    ) -> Result<&DeviceTopK, GraphError> {
        self.output_rows(rows)?;
        self.top_k_room(rows)?;
        let out = self.acts[self.output]
            .as_ref()
            .ok_or_else(|| internal("output buffer missing"))?;
        let topk = self
            .d_topk
            .as_mut()
            .ok_or_else(|| internal("no top-k buffer"))?;
        self.dev.top_k(out, k, topk)?;
        if let Some(p) = self.profile.as_mut() {
            p.collect(decode)?;
        }
        Ok(topk)
    }
}

/// `k` in 1..=[`MAX_TOP_K`], or the error saying so.
fn check_k(k: usize) -> Result<(), GraphError> {
    if k == 0 || k > MAX_TOP_K {
        return Err(GraphError::Tensor(TensorError::InvalidParam {
            op: "cuda top_k",
            why: "k must be 1 to 256",
        }));
    }
    Ok(())
}
