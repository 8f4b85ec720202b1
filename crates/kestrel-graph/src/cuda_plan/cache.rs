//! A sequence's keys and values on the GPU ([`CudaKvCache`]), and what a step writes them
//! through: one sequence's cache, or, in a batched decode step, each token's own cache through
//! the plan's [`KvTable`](kestrel_tensor::cuda::KvTable) ([`StepKv`]). Also the captured graph of a
//! one-token step ([`GraphSlot`]), kept in the cache for single steps and in the plan per batch
//! size for batched ones. The paged cache's page table ([`PagedKv`], used by `pool.rs`) and the
//! recurrent layers' states ([`LayerState`], used by `ssm.rs`) are defined here, so both of
//! those modules build on this one and it on neither.

use std::sync::Arc;

use kestrel_tensor::cuda::{CudaDevice, DeviceGraph, DeviceTensor};
use kestrel_tensor::{DType, Shape};

use super::CudaPlan;
use crate::GraphError;

/// A captured one-token (or one-token-a-sequence) step and what capturing it waits for.
#[derive(Default)]
pub(super) struct GraphSlot {
    /// The step's graph: (plan id, device epoch, the step's tokens, graph). The tokens are
    /// checked before a replay: the launches hold table addresses laid out for that many.
    pub(super) graph: Option<(u64, u64, usize, DeviceGraph)>,
    /// A step ran plainly with (plan id, device epoch): the next one may capture.
    pub(super) warm: Option<(u64, u64)>,
}

/// The caches a step writes and reads.
pub(super) enum StepKv<'c> {
    /// One sequence's contiguous cache.
    One(&'c mut CudaKvCache),
    /// Each token's own, through the plan's table (written for this step by `run_batch`).
    Table,
    /// One paged sequence's, through the plan's table (written for this step by `run`).
    Paged,
}

/// One recurrent (state-space) layer's state: the convolution's last inputs and the scan's
/// state, and their copies at the cache's checkpoint.
pub(super) struct LayerState {
    pub(super) conv: DeviceTensor,
    pub(super) ssm: DeviceTensor,
    pub(super) saved: Option<(DeviceTensor, DeviceTensor)>,
}

/// A new sequence's zeroed states.
pub(super) fn new_states(
    dev: &CudaDevice,
    sizes: &[Option<(usize, usize)>],
) -> Result<Vec<Option<LayerState>>, GraphError> {
    sizes
        .iter()
        .map(|s| {
            s.map(|(conv, ssm)| {
                Ok(LayerState {
                    conv: dev.zeros_f32(Shape::vector(conv))?,
                    ssm: dev.zeros_f32(Shape::vector(ssm))?,
                    saved: None,
                })
            })
            .transpose()
        })
        .collect()
}

/// A paged cache's page table and the pool it maps into.
pub(super) struct PagedKv {
    pub(super) pages: kestrel_tensor::cuda::KvPages,
    pub(super) pool: u64,
    pub(super) pool_pages: usize,
    /// Most positions it may map.
    pub(super) max_positions: usize,
    /// Positions adopted from pages another sequence computed ([`CudaKvCache::adopt_prefix`]):
    /// a step never writes below them.
    pub(super) shared: usize,
}

/// One attention layer's device cache.
pub(super) struct LayerCache {
    pub(super) k: DeviceTensor,
    pub(super) v: DeviceTensor,
}

/// One sequence's keys and values on the GPU: a key and a value matrix of `capacity` rows per
/// attention layer, f16 or q8_0 ([`CudaPlan::set_kv_dtype`]), shaped for the plan that made it
/// ([`CudaPlan::new_cache`]); or pages of the plan's pool ([`CudaPlan::new_paged_cache`],
/// `pool.rs`).
pub struct CudaKvCache {
    pub(super) layers: Vec<Option<LayerCache>>,
    /// Each layer's K/V row width (`None` for a layer without attention): the plan checks it.
    pub(super) widths: Vec<Option<usize>>,
    /// F16 or Q8_0.
    pub(super) dtype: DType,
    /// Each recurrent layer's state (state-space layers), the length a checkpoint saved them
    /// at, and the device that copies them back.
    pub(super) states: Vec<Option<LayerState>>,
    pub(super) checkpoint: Option<usize>,
    /// A step began updating the states and did not finish: they are ahead of `len`.
    pub(super) dirty: bool,
    pub(super) dev: Arc<CudaDevice>,
    pub(super) capacity: usize,
    pub(super) len: usize,
    /// The decode step's graph.
    pub(super) slot: GraphSlot,
    /// A paged cache's page table (its `layers` are then empty).
    pub(super) paged: Option<PagedKv>,
}

impl std::fmt::Debug for CudaKvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaKvCache")
            .field("layers", &self.widths.iter().flatten().count())
            .field("dtype", &self.dtype)
            .field("capacity", &self.capacity)
            .field("len", &self.len)
            .finish()
    }
}

impl CudaKvCache {
    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True before the first step.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most positions the cache holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position (the next step starts a new sequence at position 0).
    pub fn reset(&mut self) {
        self.len = 0;
    }

    /// Whether the cache holds a captured decode graph (for tests and benchmarks).
    pub fn has_graph(&self) -> bool {
        self.slot.graph.is_some()
    }

    /// Keeps the first `len` positions (no-op when it holds fewer): the next step writes
    /// position `len`, so a shared prefix is reused without copying. A recurrent state cannot go
    /// back part of the way: it returns to its checkpoint when that was taken at `len`, else the
    /// sequence starts over (length 0), as the CPU's caches do.
    pub fn truncate(&mut self, len: usize) {
        if !self.recurrent() || (len >= self.len && !self.dirty) {
            self.len = self.len.min(len);
            return;
        }
        if self.checkpoint == Some(len) && len <= self.len && self.restore().is_ok() {
            self.len = len;
            self.dirty = false;
            return;
        }
        self.len = 0;
        self.checkpoint = None;
        self.dirty = false;
    }

    /// Whether [`Self::truncate`]`(len)` keeps the first `len` positions: always without
    /// recurrent states; with them, only staying, going back to 0, or to the checkpoint.
    pub fn can_truncate(&self, len: usize) -> bool {
        !self.recurrent()
            || len == 0
            || (len >= self.len && !self.dirty)
            || (self.checkpoint == Some(len) && len <= self.len)
    }

    fn recurrent(&self) -> bool {
        self.states.iter().any(Option::is_some)
    }

    /// Saves the recurrent states at the current length, so a later [`Self::truncate`] to it
    /// returns there (speculative decoding's drafts); nothing to do without states.
    ///
    /// # Errors
    /// Out of device memory, a driver error.
    pub fn checkpoint(&mut self) -> Result<(), GraphError> {
        if self.dirty {
            self.truncate(self.len);
        }
        for s in self.states.iter_mut().flatten() {
            if s.saved.is_none() {
                s.saved = Some((
                    self.dev.zeros_f32(s.conv.shape())?,
                    self.dev.zeros_f32(s.ssm.shape())?,
                ));
            }
            if let Some((c, m)) = s.saved.as_mut() {
                copy_all(&self.dev, &s.conv, c)?;
                copy_all(&self.dev, &s.ssm, m)?;
            }
        }
        self.checkpoint = Some(self.len);
        Ok(())
    }

    /// Copies the checkpoint's states back.
    fn restore(&mut self) -> Result<(), GraphError> {
        for s in self.states.iter_mut().flatten() {
            let (c, m) = s
                .saved
                .as_ref()
                .ok_or_else(|| GraphError::Internal("no checkpoint".into()))?;
            copy_all(&self.dev, c, &mut s.conv)?;
            copy_all(&self.dev, m, &mut s.ssm)?;
        }
        Ok(())
    }

    /// The element type of its keys and values: F16 or Q8_0.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Device bytes held (keys and values, every layer; recurrent states and their
    /// checkpoint copies; a paged cache's page table, not the pool's pages).
    pub fn memory_bytes(&self) -> usize {
        if let Some(p) = &self.paged {
            return 4 * p.pages.max_pages();
        }
        let kv: usize = self
            .layers
            .iter()
            .flatten()
            .map(|l| {
                let bytes = |t: &DeviceTensor| t.row_bytes() * t.shape().n_rows();
                bytes(&l.k) + bytes(&l.v)
            })
            .sum();
        let states: usize = self
            .states
            .iter()
            .flatten()
            .map(|s| {
                let n = s.conv.shape().elem_count() + s.ssm.shape().elem_count();
                4 * n * if s.saved.is_some() { 2 } else { 1 }
            })
            .sum();
        kv + states
    }
}

impl CudaPlan {
    /// Whether a cache's first positions can be copied into another sequence's cache
    /// ([`Self::copy_prefix`]): not for graphs with state-space layers, whose state holds every
    /// position at once.
    pub fn copies_prefixes(&self) -> bool {
        !self.recurrent()
    }

    /// Copies the first `n` positions of `src` (keys and values, every layer) into `dst`, which
    /// then holds those `n` positions (the next step writes position `n`): a prompt prefix
    /// another sequence computed, reused without prefilling it again. The rows are copied as
    /// they are, so `dst` continues exactly as `src`'s sequence did from there.
    ///
    /// # Errors
    /// Caches of another plan's shape or of different types, `n` past what `src` holds or what
    /// `dst` takes, a graph with state-space layers, a driver error.
    pub fn copy_prefix(
        &self,
        src: &CudaKvCache,
        dst: &mut CudaKvCache,
        n: usize,
    ) -> Result<(), GraphError> {
        if src.widths != self.kv_widths || dst.widths != self.kv_widths || src.dtype != dst.dtype {
            return Err(GraphError::Internal(
                "a prefix copied between caches of different shapes".into(),
            ));
        }
        if !self.copies_prefixes() {
            return Err(GraphError::Internal(
                "a prefix copied in a graph with state-space layers".into(),
            ));
        }
        if src.is_paged() || dst.is_paged() {
            // Paged caches share a prefix's pages instead.
            return Err(GraphError::Internal(
                "a prefix copied between paged caches".into(),
            ));
        }
        if n > src.len || n > dst.capacity {
            return Err(GraphError::ContextFull {
                needed: n,
                capacity: src.len.min(dst.capacity),
            });
        }
        for (l, (s, d)) in src.layers.iter().zip(dst.layers.iter_mut()).enumerate() {
            if let (Some(s), Some(d)) = (s, d) {
                self.dev.copy_rows(&s.k, 0, n, &mut d.k, 0)?;
                // A latent cache's values are its keys' front (its value tensor unused).
                if !self.kv_latent.get(l).copied().unwrap_or(false) {
                    self.dev.copy_rows(&s.v, 0, n, &mut d.v, 0)?;
                }
            }
        }
        dst.len = n;
        Ok(())
    }

    /// A new, empty KV cache for one sequence of up to `capacity` positions, on this plan's GPU,
    /// of the plan's KV type ([`CudaPlan::set_kv_dtype`]).
    ///
    /// # Errors
    /// Out of device memory (with the sizes asked and free).
    pub fn new_cache(&self, capacity: usize) -> Result<CudaKvCache, GraphError> {
        let capacity = capacity.max(1);
        Ok(CudaKvCache {
            layers: self.layer_caches(capacity)?,
            widths: self.kv_widths.clone(),
            dtype: self.kv_dtype,
            states: new_states(&self.dev, &self.ssm_sizes)?,
            checkpoint: None,
            dirty: false,
            dev: Arc::clone(&self.dev),
            capacity,
            len: 0,
            slot: GraphSlot::default(),
            paged: None,
        })
    }
}

impl CudaPlan {
    /// Each attention layer's key and value matrices of `rows` rows at the plan's KV type (a
    /// sequence's cache, or the pool's pages); `None` for layers without attention.
    pub(super) fn layer_caches(&self, rows: usize) -> Result<Vec<Option<LayerCache>>, GraphError> {
        let mut layers = Vec::with_capacity(self.kv_widths.len());
        for (l, w) in self.kv_widths.iter().enumerate() {
            layers.push(match w {
                Some(w) => {
                    // A latent cache's values are its keys' front: one unused row.
                    let latent = self.kv_latent.get(l).copied().unwrap_or(false);
                    let v_rows = if latent { 1 } else { rows };
                    let v_width = self.kv_v_widths.get(l).copied().unwrap_or(*w).max(1);
                    Some(LayerCache {
                        k: self.dev.zeros(self.kv_dtype, Shape::matrix(rows, *w)?)?,
                        v: self
                            .dev
                            .zeros(self.kv_dtype, Shape::matrix(v_rows, v_width)?)?,
                    })
                }
                None => None,
            });
        }
        Ok(layers)
    }
}

/// Copies all of `src` into `dst` (F32 vectors of one length).
fn copy_all(
    dev: &CudaDevice,
    src: &DeviceTensor,
    dst: &mut DeviceTensor,
) -> Result<(), GraphError> {
    let rows = src.shape().n_rows();
    Ok(dev.copy_rows(src, 0, rows, dst, 0)?)
}
