//! Advanced SIMD (NEON) kernels, every aarch64 CPU: the q8_0 family and Q4_K/Q6_K with the
//! byte products widened by `smull` and summed pairwise (`saddlp`, `addp`) into i32 lanes of
//! four products each, the lanes `sdot` gives at the dot-product level (see `q8_family`,
//! `kquants`).

use std::arch::aarch64::*;

/// The 4-byte lane sums of `x` · `y` (16 bytes): `vmull` to i16 products (|p| ≤ 2^14, exact),
/// `vpaddlq` to i32 pairs, `vpaddq` to quads.
#[inline]
#[target_feature(enable = "neon")]
fn quad_sums(x: int8x16_t, y: int8x16_t) -> int32x4_t {
    let lo = vpaddlq_s16(vmull_s8(vget_low_s8(x), vget_low_s8(y)));
    let hi = vpaddlq_s16(vmull_high_s8(x, y));
    vpaddq_s32(lo, hi)
}

/// The 8 lane sums of a 32-byte block product.
#[inline]
#[target_feature(enable = "neon")]
fn lane_sums(x: B32, y: B32) -> (int32x4_t, int32x4_t) {
    (quad_sums(x.0, y.0), quad_sums(x.1, y.1))
}

q8_family_kernels!("neon");
kquant_kernels!("neon");
iq4_kernels!("neon");
iq_grid_kernels!("neon");
