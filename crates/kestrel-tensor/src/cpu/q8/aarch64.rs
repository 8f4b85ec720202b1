//! NEON activation quantizers: ggml's x86 `quantize_row_q8_0` / `quantize_row_q8_1` results
//! (the scalar twins in `cpu::q8`), so the activations an aarch64 machine dots with are the
//! bytes an x86 one makes: `amax` by `fmax` (a max of finite values in any order), `d =
//! amax/127`, `id = 127/amax`, the products rounded to nearest even by `fcvtns`, saturating
//! narrows to bytes, q8_1's wrapping sum of the unsaturated quants. Activations are finite
//! (NaN inputs give a NaN-free but different block than x86's; both are garbage).

use std::arch::aarch64::*;

use half::f16;
use kestrel_gguf::quant::BlockQ8_0;

use crate::cpu::q8_block::{BlockQ8_1, QK8};

/// One block: `(d, the 32 quants saturated to bytes, the wrapping sum of the i32 quants)`.
///
/// # Safety
/// `x..x + 32` must be readable.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn block(x: *const f32) -> (f32, [int8x16_t; 2], i32) {
    // SAFETY: the caller keeps 32 floats at `x` readable.
    let v: [float32x4_t; 8] = std::array::from_fn(|i| unsafe { vld1q_f32(x.add(4 * i)) });
    let a = v.map(|x| vabsq_f32(x));
    let m = vmaxq_f32(
        vmaxq_f32(vmaxq_f32(a[0], a[1]), vmaxq_f32(a[2], a[3])),
        vmaxq_f32(vmaxq_f32(a[4], a[5]), vmaxq_f32(a[6], a[7])),
    );
    let amax = vmaxvq_f32(m);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let q = v.map(|vi| vcvtnq_s32_f32(vmulq_n_f32(vi, id)));
    let sum = vaddvq_s32(vaddq_s32(
        vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3])),
        vaddq_s32(vaddq_s32(q[4], q[5]), vaddq_s32(q[6], q[7])),
    ));
    let h: [int16x8_t; 4] =
        std::array::from_fn(|i| vcombine_s16(vqmovn_s32(q[2 * i]), vqmovn_s32(q[2 * i + 1])));
    let bytes = [
        vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])),
        vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])),
    ];
    (d, bytes, sum)
}

/// Stores a block's 32 quants.
#[inline]
#[target_feature(enable = "neon")]
fn store(qs: &mut [i8; QK8], b: [int8x16_t; 2]) {
    // SAFETY: 32 bytes.
    unsafe {
        vst1q_s8(qs.as_mut_ptr(), b[0]);
        vst1q_s8(qs.as_mut_ptr().add(16), b[1]);
    }
}

/// `quantize_row_q8_0` (`x.len() == 32 * y.len()`).
#[target_feature(enable = "neon")]
pub(crate) fn quantize_row_q8_0(x: &[f32], y: &mut [BlockQ8_0]) {
    assert_eq!(x.len(), y.len() * QK8, "quantize_row_q8_0: lengths");
    for (xb, yb) in x.chunks_exact(QK8).zip(y.iter_mut()) {
        // SAFETY: 32 floats.
        let (d, bytes, _) = unsafe { block(xb.as_ptr()) };
        yb.d = f16::from_f32(d);
        store(&mut yb.qs, bytes);
    }
}

/// `quantize_row_q8_1` (`x.len() == 32 * y.len()`).
#[target_feature(enable = "neon")]
pub(crate) fn quantize_row_q8_1(x: &[f32], y: &mut [BlockQ8_1]) {
    assert_eq!(x.len(), y.len() * QK8, "quantize_row_q8_1: lengths");
    for (xb, yb) in x.chunks_exact(QK8).zip(y.iter_mut()) {
        // SAFETY: 32 floats.
        let (d, bytes, sum) = unsafe { block(xb.as_ptr()) };
        yb.d = f16::from_f32(d);
        yb.s = f16::from_f32(d * sum as f32);
        store(&mut yb.qs, bytes);
    }
}

#[cfg(test)]
mod tests {
    use crate::cpu::testutil::check_quantizers;

    /// The scalar twins' bytes (see `check_quantizers`).
    #[test]
    fn neon_quantizers_equal_scalar_twins() {
        // SAFETY (each): NEON is part of the aarch64 base architecture.
        check_quantizers((
            |x, y| unsafe { super::quantize_row_q8_0(x, y) },
            |x, y| unsafe { super::quantize_row_q8_1(x, y) },
        ));
    }
}
