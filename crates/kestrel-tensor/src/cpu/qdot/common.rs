//! What every scalar dot shares: reading a row's blocks in place or through a copy
//! ([`for_each_block`]), f16 to f32 ([`h`]) and the 8-lane horizontal sum of ggml's x86 kernels
//! ([`hsum_float_8`]).

use bytemuck::Pod;
use half::f16;

/// Calls `f(i, &block)` for each block of `row`, in place when `row` is aligned for `B`, else
/// through a copy of each block.
#[inline(always)]
pub(crate) fn for_each_block<B: Pod>(row: &[u8], mut f: impl FnMut(usize, &B)) {
    match bytemuck::try_cast_slice::<u8, B>(row) {
        Ok(blocks) => {
            for (i, b) in blocks.iter().enumerate() {
                f(i, b);
            }
        }
        Err(_) => {
            for (i, c) in row.chunks_exact(std::mem::size_of::<B>()).enumerate() {
                let b: B = bytemuck::pod_read_unaligned(c);
                f(i, &b);
            }
        }
    }
}

#[inline(always)]
pub(crate) fn h(x: f16) -> f32 {
    x.to_f32()
}

/// `hsum_float_8` of ggml's x86 kernels: lanes `i + 4` and `i` added, then `(0 + 2) + (1 + 3)`.
#[inline(always)]
pub(crate) fn hsum_float_8(acc: &[f32; 8]) -> f32 {
    let r: [f32; 4] = std::array::from_fn(|i| acc[i + 4] + acc[i]);
    (r[0] + r[2]) + (r[1] + r[3])
}
