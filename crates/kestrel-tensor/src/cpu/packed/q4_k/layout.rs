//! The Q4_Kx16 layout: its sizes and offsets, and the activation side a kernel reads.
use kestrel_gguf::quant::{BlockQ4K, BlockQ8K};

use crate::cpu::packed::groups::GROUP_ROWS;

/// Quant bytes of one super-block of a group.
pub(crate) const QUANT_BYTES: usize = 32 * 64;

/// Scale bytes of one super-block of a group: scales, mins, `d`, `dmin`.
pub(crate) const SCALE_BYTES: usize = 2 * 8 * GROUP_ROWS + 2 * 2 * GROUP_ROWS;

/// Offset of the mins in a super-block's scale bytes.
pub(crate) const MINS_AT: usize = 8 * GROUP_ROWS;

/// Offset of the f16 `d` (then `dmin`) in a super-block's scale bytes.
pub(crate) const D_AT: usize = 16 * GROUP_ROWS;

/// Bytes of a Q4_K block.
pub(crate) const Q4K_BYTES: usize = std::mem::size_of::<BlockQ4K>();

/// The activation side of a call: q8_K rows and, per block, the sums of its 8 groups of 32.
#[derive(Clone, Copy)]
pub(crate) struct ActQ4K<'a> {
    pub(crate) acts: &'a [BlockQ8K],
    pub(crate) bs: &'a [i32],
}

impl ActQ4K<'_> {
    /// Rows `t0..t1` of `nb` blocks each.
    pub(crate) fn rows(&self, t0: usize, t1: usize, nb: usize) -> ActQ4K<'_> {
        ActQ4K {
            acts: &self.acts[t0 * nb..t1 * nb],
            bs: &self.bs[t0 * nb * 8..t1 * nb * 8],
        }
    }
}
