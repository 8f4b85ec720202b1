//! NEON kernels with the dot-product extension (FEAT_DotProd): the q8_0 family and Q4_K/Q6_K
//! with four byte products per lane summed by one `sdot` (through `asm!`: Rust's `vdotq_s32` is not stable).
//! The integer lane sums equal the plain NEON ones exactly.

use std::arch::aarch64::*;

/// `acc + ` the 4-byte lane sums of `x` · `y` (`sdot`).
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub(crate) fn sdot(acc: int32x4_t, x: int8x16_t, y: int8x16_t) -> int32x4_t {
    let mut r = acc;
    // SAFETY: `sdot` reads and writes only these registers; the feature is enabled.
    unsafe {
        std::arch::asm!(
            "sdot {r:v}.4s, {x:v}.16b, {y:v}.16b",
            r = inout(vreg) r,
            x = in(vreg) x,
            y = in(vreg) y,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

/// The 8 lane sums of a 32-byte block product.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn lane_sums(x: B32, y: B32) -> (int32x4_t, int32x4_t) {
    let z = vdupq_n_s32(0);
    (sdot(z, x.0, y.0), sdot(z, x.1, y.1))
}

/// The 4-byte lane sums of `x` · `y` (16 bytes).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn quad_sums(x: int8x16_t, y: int8x16_t) -> int32x4_t {
    sdot(vdupq_n_s32(0), x, y)
}

q8_family_kernels!("neon,dotprod");
kquant_kernels!("neon,dotprod");
iq4_kernels!("neon,dotprod");
iq_grid_kernels!("neon,dotprod");
