//! A sequence's keys and values on the GPU ([`CudaKvCache`]), and what a step writes them
//! through: one sequence's cache, or, in a batched decode step, each token's own cache through
//! the plan's [`KvTable`](kestrel_tensor::cuda::KvTable) ([`StepKv`]). Also the captured graph of a
//! one-token step ([`GraphSlot`]), kept in the cache for single steps and in the plan per batch
//! size for batched ones.

use kestrel_tensor::cuda::{DeviceGraph, DeviceTensor};
use kestrel_tensor::{DType, Shape};

use super::CudaPlan;
use crate::GraphError;

/// A captured one-token (or one-token-a-sequence) step and what capturing it waits for.
#[derive(Default)]
pub(super) struct GraphSlot {
    /// The step's graph: (plan id, device epoch, graph).
    pub(super) graph: Option<(u64, u64, DeviceGraph)>,
    /// A step ran plainly with (plan id, device epoch): the next one may capture.
    pub(super) warm: Option<(u64, u64)>,
}

/// The caches a step writes and reads.
pub(super) enum StepKv<'c> {
    /// One sequence's.
    One(&'c mut CudaKvCache),
    /// Each token's own, through the plan's table (written for this step by `run_batch`).
    Table,
}

/// One attention layer's device cache.
pub(super) struct LayerCache {
    pub(super) k: DeviceTensor,
    pub(super) v: DeviceTensor,
}

/// One sequence's keys and values on the GPU: a key and a value matrix of `capacity` rows per
/// attention layer, f16 or q8_0 ([`CudaPlan::set_kv_dtype`]), shaped for the plan that made it
/// ([`CudaPlan::new_cache`]).
pub struct CudaKvCache {
    pub(super) layers: Vec<Option<LayerCache>>,
    /// Each layer's K/V row width (`None` for a layer without attention): the plan checks it.
    pub(super) widths: Vec<Option<usize>>,
    /// F16 or Q8_0.
    pub(super) dtype: DType,
    pub(super) capacity: usize,
    pub(super) len: usize,
    /// The decode step's graph.
    pub(super) slot: GraphSlot,
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
    /// position `len`, so a shared prefix is reused without copying.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// The element type of its keys and values: F16 or Q8_0.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Device bytes held (keys and values, every layer).
    pub fn memory_bytes(&self) -> usize {
        self.widths
            .iter()
            .flatten()
            .map(|&w| 2 * self.dtype.row_bytes(w).unwrap_or(0) * self.capacity)
            .sum()
    }
}

impl CudaPlan {
    /// A new, empty KV cache for one sequence of up to `capacity` positions, on this plan's GPU,
    /// of the plan's KV type ([`CudaPlan::set_kv_dtype`]).
    ///
    /// # Errors
    /// Out of device memory (with the sizes asked and free).
    pub fn new_cache(&self, capacity: usize) -> Result<CudaKvCache, GraphError> {
        let capacity = capacity.max(1);
        let mut layers = Vec::with_capacity(self.kv_widths.len());
        for w in &self.kv_widths {
            layers.push(match w {
                Some(w) => {
                    let shape = Shape::matrix(capacity, *w)?;
                    Some(LayerCache {
                        k: self.dev.zeros(self.kv_dtype, shape)?,
                        v: self.dev.zeros(self.kv_dtype, shape)?,
                    })
                }
                None => None,
            });
        }
        Ok(CudaKvCache {
            layers,
            widths: self.kv_widths.clone(),
            dtype: self.kv_dtype,
            capacity,
            len: 0,
            slot: GraphSlot::default(),
        })
    }
}
