//! KV caches for kestrel: where attention finds the keys and values of earlier tokens.
//!
//! The [`KvCache`] trait is what the attention op reads and the decode loop drives: append a
//! step's keys and values for a layer, view a layer's cache in place (no gather copies), and
//! commit, truncate or reset the sequence. [`ContiguousCache`] preallocates every layer to the
//! context length in f32 or f16. [`PagedCache`] holds many sequences in one pool of fixed-size
//! blocks (paged attention reads them through each sequence's block table; [`BlockPool`] is its
//! block accounting alone, which a GPU scheduler uses for a pool in device memory); the batched
//! forward pass drives either through [`BatchKv`].

mod blocks;
mod buf;
mod contiguous;
mod error;
mod layout;
mod paged;
mod prefix;
mod state;

pub use blocks::BlockPool;
pub use contiguous::ContiguousCache;
pub use error::KvError;
pub use layout::{KvDType, KvLayout};
pub use paged::{PagedCache, PoolStats, PrefixStats, SeqId};
pub use state::{RecurrentLayout, RecurrentState};

/// Keys or values of one layer, as stored: the attention kernel's own slice type, so attention
/// reads the cache in place.
pub use kestrel_tensor::cpu::KvSlice;

/// Where each position of a view lives (contiguous, or through a block table).
pub use kestrel_tensor::cpu::KvRows;

/// Element `i` of a cache slice as f32 (for tests and debugging; kernels read slices directly).
pub fn kv_get(s: &KvSlice<'_>, i: usize) -> Option<f32> {
    match s {
        KvSlice::F32(s) => s.get(i).copied(),
        KvSlice::F16(s) => s.get(i).map(|v| v.to_f32()),
        KvSlice::Q8_0(s) => s
            .get(i / 32)
            .map(|b| b.d.to_f32() * f32::from(b.qs[i % 32])),
        KvSlice::Q4_0(s) => s.get(i / 32).map(|b| {
            let j = i % 32;
            let byte = b.qs[j % 16];
            let q = if j < 16 { byte & 0x0f } else { byte >> 4 };
            b.d.to_f32() * f32::from(q as i8 - 8)
        }),
        _ => None,
    }
}

/// A layer's cache: `len` tokens, each `n_kv_head × head_dim` keys (and values), token-major:
/// element `(t, h, d)` of the keys is at `(r * n_kv_head + h) * k_head_dim + d` where
/// `r = rows.row(t)` (`r = t` for a contiguous cache).
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
    /// The row of each position in `k` and `v`.
    pub rows: KvRows<'a>,
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
    /// Recurrent layer `layer`'s state (the layout's recurrent layers, numbered from 0), which
    /// a step updates in place. A step that fails after taking it leaves the sequence to start
    /// over at the next [`truncate`](KvCache::truncate).
    fn state(&mut self, layer: usize) -> Result<RecurrentState<'_>, KvError> {
        let _ = layer;
        Err(KvError::NoState)
    }
    /// Whether [`truncate`](KvCache::truncate)`(len)` keeps the first `len` positions: always
    /// for keys and values; a recurrent state only stays where it is, returns to 0, or returns
    /// to its [checkpoint](KvCache::checkpoint); at any other length `truncate` empties the
    /// sequence (the caller then runs it again from the start).
    fn can_truncate(&self, len: usize) -> bool {
        let _ = len;
        true
    }
    /// Remember the recurrent state at the current length, so that a later
    /// [`truncate`](KvCache::truncate) to this length keeps it (speculative decoding takes one
    /// before verifying a draft). Nothing to do without recurrent layers.
    fn checkpoint(&mut self) -> Result<(), KvError> {
        Ok(())
    }
}

/// The KV storage of one batched step: several sequences, each addressed by an index, written
/// and viewed per layer. A [`PagedCache`] is one; a single [`KvCache`] is one with sequence 0.
pub trait BatchKv: Send {
    /// Shape and dtype.
    fn layout(&self) -> &KvLayout;
    /// Write `k`/`v` of `layer` for sequence `seq` at positions `pos..pos + n`; the positions
    /// must already have room (a paged cache reserves blocks before the step).
    fn write_seq(
        &mut self,
        layer: usize,
        seq: SeqId,
        pos: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<(), KvError>;
    /// Layer `layer` of sequence `seq`, positions `0..len`.
    fn view_seq(&self, layer: usize, seq: SeqId, len: usize) -> Result<LayerView<'_>, KvError>;
    /// Recurrent layer `layer`'s state of sequence `seq` (see [`KvCache::state`]).
    fn state_seq(&mut self, layer: usize, seq: SeqId) -> Result<RecurrentState<'_>, KvError> {
        let _ = (layer, seq);
        Err(KvError::NoState)
    }
}

/// One sequence's [`KvCache`] as a batch of one (sequence 0).
pub struct SingleSeq<'a>(pub &'a mut dyn KvCache);

impl BatchKv for SingleSeq<'_> {
    fn layout(&self) -> &KvLayout {
        self.0.layout()
    }

    fn write_seq(
        &mut self,
        layer: usize,
        seq: SeqId,
        pos: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<(), KvError> {
        if seq != 0 {
            return Err(KvError::UnknownSeq(seq));
        }
        self.0.write(layer, pos, k, v)
    }

    fn view_seq(&self, layer: usize, seq: SeqId, len: usize) -> Result<LayerView<'_>, KvError> {
        if seq != 0 {
            return Err(KvError::UnknownSeq(seq));
        }
        self.0.view(layer, len)
    }

    fn state_seq(&mut self, layer: usize, seq: SeqId) -> Result<RecurrentState<'_>, KvError> {
        if seq != 0 {
            return Err(KvError::UnknownSeq(seq));
        }
        self.0.state(layer)
    }
}
