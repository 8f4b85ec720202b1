//! The Q6_Kx16 layout: its sizes and offsets, and the activation side a kernel reads.
use kestrel_gguf::quant::{BlockQ6K, BlockQ8K};

use crate::cpu::packed::groups::GROUP_ROWS;

/// Quant bytes of one super-block of a group: `ql` then `qh`.
pub(crate) const QUANT_BYTES: usize = 48 * 64;

/// Offset of `qh` in a super-block's quants.
pub(crate) const QH_AT: usize = 32 * 64;

/// Scale bytes of one super-block of a group: 16 × 16 i8 scales, then 16 f16 `d`.
pub(crate) const SCALE_BYTES: usize = 16 * GROUP_ROWS + 2 * GROUP_ROWS;

/// Bytes of a Q6_K block.
pub(crate) const Q6K_BYTES: usize = std::mem::size_of::<BlockQ6K>();

/// The activation side of a call: q8_K rows and, per block, `-32 · bsum` of its 16 groups.
#[derive(Clone, Copy)]
pub(crate) struct ActQ8K<'a> {
    pub(crate) acts: &'a [BlockQ8K],
    pub(crate) corr: &'a [i32],
}

impl ActQ8K<'_> {
    /// Rows `t0..t1` of `nb` blocks each.
    pub(crate) fn rows(&self, t0: usize, t1: usize, nb: usize) -> ActQ8K<'_> {
        ActQ8K {
            acts: &self.acts[t0 * nb..t1 * nb],
            corr: &self.corr[t0 * nb * 16..t1 * nb * 16],
        }
    }
}
