//! Batched decode on the GPU: [`CudaPlan::run_batch`] runs one token of each of up to 64
//! sequences in one step. Every op but attention is row-wise and takes the step's rows at once
//! (each weight read once for all of them: the quantized matvecs take 1-8 activation rows on
//! `__dp4a` and 9-64 on tensor cores, and a row's reduction order does not depend on how many
//! share the launch or which kernel runs it); the KV append and attention reach each token's own
//! [`CudaKvCache`] (contiguous, or pages of the plan's pool) through the plan's
//! [`KvTable`](kestrel_tensor::cuda::KvTable), written before each step, and attention runs
//! every token with a one-token step's kernel and settings. So a token's logits are the bits of its sequence decoding alone — the invariant the
//! CPU's batched plan keeps.
//!
//! What changes between steps (token ids, positions, the table's addresses) is in device memory
//! the plan owns, so each batch size's step is captured once (its second step) and replayed,
//! whichever sequences it holds, as one-token steps are.

use super::{internal, CudaKvCache, CudaPlan, StepKv};
use crate::ir::Rows;
use crate::GraphError;

impl CudaPlan {
    /// Most sequences [`Self::run_batch`] takes in one step.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Whether [`Self::run_batch`] takes this graph: a causal decoder with one output row a
    /// sequence (with graphs or not).
    pub fn batchable(&self) -> bool {
        self.graphable && self.nodes[self.output].rows == Rows::Outputs
    }

    /// Whether [`Self::run_batch`] runs its sequences in one step (each weight read once for
    /// all), not one after another: a batchable graph without state-space layers, latent
    /// attention or key and value heads of different sizes (whose kernels take one sequence's
    /// cache). [`Self::run_batch_top_k`] needs it.
    pub fn batches_in_one_step(&self) -> bool {
        let kv_dims_differ = self
            .kv_widths
            .iter()
            .zip(&self.kv_v_widths)
            .any(|(k, &v)| k.is_some_and(|k| k != v));
        self.batchable() && !self.recurrent() && !self.kv_latent.contains(&true) && !kv_dims_differ
    }

    /// Runs one decode step of several sequences: `tokens[i]` appended to `caches[i]` (at the
    /// position after its cached ones), all in one step. Returns one output row per sequence,
    /// in order (each sequence's next-token logits), copied back into a buffer the plan reuses.
    /// Each row is the bits [`Self::run`] gives that sequence alone.
    ///
    /// # Errors
    /// No sequences, more than [`Self::max_batch`], not one token per cache, a cache made by
    /// another plan or full, a graph that is not a causal decoder with one output row a
    /// sequence, a device error. (A cache cannot be in a step twice: `caches` are exclusive
    /// borrows.)
    pub fn run_batch(
        &mut self,
        caches: &mut [&mut CudaKvCache],
        tokens: &[u32],
    ) -> Result<&[f32], GraphError> {
        match self.batch_step(caches, tokens)? {
            Some(rows) => self.copy_out(rows, true),
            None => self.run_each(caches, tokens),
        }
    }

    /// [`Self::run_batch`] for greedy decoding: each sequence's next token (the argmax of the
    /// row `run_batch` would return, ties to the lowest id), found on the device, so 4 bytes a
    /// sequence come back instead of the logits.
    ///
    /// # Errors
    /// As [`Self::run_batch`].
    pub fn run_batch_greedy(
        &mut self,
        caches: &mut [&mut CudaKvCache],
        tokens: &[u32],
    ) -> Result<&[u32], GraphError> {
        self.each_ids.clear();
        match self.batch_step(caches, tokens)? {
            Some(rows) => {
                let mut ids = std::mem::take(&mut self.each_ids);
                let picked = self
                    .argmax_out(rows, true)
                    .map(|p| ids.extend(p.iter().map(|&i| i.max(0) as u32)));
                self.each_ids = ids;
                picked?;
            }
            None => {
                let mut ids = std::mem::take(&mut self.each_ids);
                let mut result = Ok(());
                for (c, &t) in caches.iter_mut().zip(tokens) {
                    match self.run_greedy(c, &[t]) {
                        Ok(id) => ids.push(id),
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                self.each_ids = ids;
                result?;
            }
        }
        Ok(&self.each_ids)
    }

    /// Runs a batched step's launches (not its copy back): the output rows it left, or `None`
    /// for a graph whose steps take one sequence's cache (the caller runs each alone).
    pub(super) fn batch_step(
        &mut self,
        caches: &mut [&mut CudaKvCache],
        tokens: &[u32],
    ) -> Result<Option<usize>, GraphError> {
        let n = caches.len();
        if n == 0 || n > self.max_batch {
            return Err(GraphError::Batch(format!(
                "a batched decode step takes 1 to {} sequences, not {n}",
                self.max_batch
            )));
        }
        if tokens.len() != n {
            return Err(GraphError::Batch(format!(
                "{} tokens for {n} sequences (one each)",
                tokens.len()
            )));
        }
        self.check_tokens(tokens)?;
        if !self.batchable() {
            return Err(GraphError::Batch(
                "batched decode needs a causal decoder graph with one output row a sequence".into(),
            ));
        }
        if !self.batches_in_one_step() {
            // The state-space, latent-attention and differing-head kernels take one sequence's
            // cache.
            return Ok(None);
        }
        self.positions.clear();
        for c in caches.iter() {
            if c.widths != self.kv_widths {
                return Err(internal("the KV cache was made by a plan of another graph"));
            }
            if c.dtype != self.kv_dtype {
                // The step's graph is captured for one cache type.
                return Err(GraphError::Batch(format!(
                    "a {} KV cache in a batched step of a plan whose caches are {}",
                    c.dtype, self.kv_dtype
                )));
            }
            if c.len >= c.capacity || c.len >= i32::MAX as usize {
                return Err(GraphError::ContextFull {
                    needed: c.len + 1,
                    capacity: c.capacity,
                });
            }
            self.positions.push(c.len as i32);
        }
        self.tokens.clear();
        self.tokens.extend(tokens.iter().map(|&t| t as i32));
        self.dev.set_ids(&mut self.d_positions, &self.positions)?;
        self.dev.set_ids(&mut self.d_tokens, &self.tokens)?;
        self.write_table(caches)?;

        if self.graphs() {
            // The slot leaves the plan for the step (the step borrows the plan).
            let mut slot = std::mem::take(&mut self.batch_slots[n - 1]);
            let r = self.step_graph(&mut StepKv::Table, &mut slot, tokens, 0);
            self.batch_slots[n - 1] = slot;
            r?;
        } else {
            self.step_plain(&mut StepKv::Table, tokens, 0)?;
        }
        for c in caches.iter_mut() {
            c.len += 1;
        }
        Ok(Some(Self::rows(
            &self.nodes[self.output],
            n,
            &StepKv::Table,
        )))
    }

    /// Writes the step's table: token `i` reaches `caches[i]` in every attention layer (its
    /// own matrices, or its pages of the plan's pool).
    fn write_table(&mut self, caches: &mut [&mut CudaKvCache]) -> Result<(), GraphError> {
        self.table()?.begin(caches.len())?;
        for (i, c) in caches.iter_mut().enumerate() {
            self.set_entries(c, i)?;
        }
        self.upload_table()
    }
}
