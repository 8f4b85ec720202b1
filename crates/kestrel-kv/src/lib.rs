//! KV caches for kestrel: where attention finds the keys and values of earlier tokens.
//!
//! The [`KvCache`] trait is what the attention op reads and the decode loop drives: append a
//! step's keys and values for a layer, view a layer's cache in place (no gather copies), and
//! commit, truncate or reset the sequence. [`ContiguousCache`] preallocates every layer to the
//! context length in f32 or f16. Quantized, paged and prefix caches come with batching.

mod contiguous;
mod error;
mod layout;

pub use contiguous::ContiguousCache;
pub use error::KvError;
pub use layout::{KvDType, KvLayout};

/// Keys or values of one layer, as stored: the attention kernel's own slice type, so attention
/// reads the cache in place.
pub use kestrel_tensor::cpu::KvSlice;

/// Element `i` of a cache slice as f32 (for tests and debugging; kernels read slices directly).
pub fn kv_get(s: &KvSlice<'_>, i: usize) -> Option<f32> {
    match s {
        KvSlice::F32(s) => s.get(i).copied(),
        KvSlice::F16(s) => s.get(i).map(|v| v.to_f32()),
    }
}

/// A layer's cache: `len` tokens, each `n_kv_head × head_dim` keys (and values), token-major:
/// element `(t, h, d)` of the keys is at `(t * n_kv_head + h) * k_head_dim + d`.
#[derive(Clone, Copy, Debug)]
pub struct LayerView<'a> {
    /// Keys of tokens `0..len`.
    pub k: KvSlice<'a>,
    /// Values of tokens `0..len`.
    pub v: KvSlice<'a>,
    /// Tokens visible.
    pub len: usize,
    /// KV heads.
    pub n_kv_head: usize,
    /// Key head size.
    pub k_head_dim: usize,
    /// Value head size.
    pub v_head_dim: usize,
}

/// A KV cache for one sequence.
///
/// A step writes keys and values at positions `pos..pos + n` of every layer with
/// [`write`](KvCache::write), then calls [`commit`](KvCache::commit) once to make them part of
/// the sequence. Views of a layer include positions written in the current step, so attention in
/// that step sees them.
pub trait KvCache: Send {
    /// Shape and dtype.
    fn layout(&self) -> &KvLayout;
    /// The most tokens it holds.
    fn capacity(&self) -> usize;
    /// Tokens committed so far.
    fn seq_len(&self) -> usize;
    /// Write `k` and `v` (f32, `n × n_kv_head × head_dim` each) of `layer` at positions
    /// `pos..pos + n`. Positions must lie within the capacity.
    fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) -> Result<(), KvError>;
    /// Layer `layer`'s keys and values for positions `0..len`.
    fn view(&self, layer: usize, len: usize) -> Result<LayerView<'_>, KvError>;
    /// Make positions `0..len` the sequence (after a step's writes).
    fn commit(&mut self, len: usize) -> Result<(), KvError>;
    /// Drop tokens past `len` (for rollback and session reuse).
    fn truncate(&mut self, len: usize);
    /// Empty the cache.
    fn reset(&mut self) {
        self.truncate(0);
    }
    /// Bytes of memory held.
    fn memory_bytes(&self) -> usize;
}
