//! Activation quantization for the quantized matmul, as ggml's CPU backend does it on x86.
//!
//! Before a weight row of type `T` is dotted with an activation row, ggml converts the
//! activation row to `T`'s `vec_dot_type` (`type_traits_cpu[T].vec_dot_type`, converted with
//! that type's `from_float`):
//!
//! | weight | activation block | converter here |
//! | --- | --- | --- |
//! | Q4_0, Q5_0, Q8_0, IQ4_NL | q8_0 | [`quantize_row_q8_0`] |
//! | Q4_1, Q5_1 | q8_1 | [`quantize_row_q8_1`] |
//! | Q2_K..Q6_K, IQ4_XS | q8_K | [`quantize_row_q8_k`] |
//! | F16 | f16 | [`convert_row_f16`] (round to nearest even) |
//! | BF16 | bf16 | [`quant::float::f32_to_bf16`] |
//! | F32 | f32 | none |
//!
//! **Which q8_0/q8_1 quantizer.** ggml has two: the reference `quantize_row_q8_{0,1}_ref`
//! (`d = amax/127`, `id = 1/d`, `roundf`: ties away from zero) and the x86 SIMD
//! `quantize_row_q8_{0,1}` in `ggml-cpu/arch/x86/quants.c` that an AVX or AVX2 build runs
//! (`id = 127/amax`, `_mm256_round_ps(_MM_ROUND_NEAREST)`: ties to even). Activations go through
//! the second on every x86 build llama.cpp ships, so that is the one mirrored here, on every
//! target: a value exactly halfway (`x*id = 2.5`) becomes 2, where the reference gives 3, and
//! `127/amax` can differ from `1/(amax/127)` in the last bit. Checked against the installed
//! `libggml-cpu.so` (`quantize_row_q8_0` gives 2 where `quantize_row_q8_0_ref` gives 3).
//! q8_1 also stores `s = f16(d * Σq)` with the f32 `d` (not the f16-rounded one).
//!
//! q8_K has one quantizer on x86 (`quantize_row_q8_K` calls `quantize_row_q8_K_ref`:
//! `iscale = -127/max`, round half to even by the magic-number trick, `d = 1/iscale`, sums of
//! each 16 quants), which `kestrel_gguf::quant::q8_k` already ports.

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86_64;

use half::{bf16, f16};
use kestrel_gguf::quant::{self, BlockQ8K, BlockQ8_0};

pub use super::q8_block::{BlockQ8_1, QK8};

/// One block's quants as the x86 SIMD quantizer makes them: returns `(d, quants as i32)`.
#[inline]
fn quantize_block_x86(x: &[f32; QK8]) -> (f32, [i32; QK8]) {
    // Max of |x| (the lane order does not change a max of finite values).
    let mut amax = 0f32;
    for &v in x {
        let a = v.abs();
        // `_mm256_max_ps(acc, a)` returns its second operand unless the first is greater.
        amax = if amax > a { amax } else { a };
    }
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut q = [0i32; QK8];
    for (q, &v) in q.iter_mut().zip(x) {
        let r = (v * id).round_ties_even();
        // `_mm256_cvtps_epi32` gives i32::MIN for NaN and out-of-range values.
        *q = if r.is_nan() || r.abs() >= 2147483648.0 {
            i32::MIN
        } else {
            r as i32
        };
    }
    (d, q)
}

/// Saturates to i8 as `_mm256_packs_epi32` then `_mm256_packs_epi16` do.
#[inline]
fn sat_i8(v: i32) -> i8 {
    v.clamp(i8::MIN as i32, i8::MAX as i32) as i8
}

/// Quantizes `x` (exactly `32 * y.len()` values) to q8_0 as ggml's x86 `quantize_row_q8_0`
/// (with AVX2 or NEON when the CPU has it; the bytes are the same).
pub fn quantize_row_q8_0(x: &[f32], y: &mut [BlockQ8_0]) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Avx2 && x.len() == y.len() * QK8 {
        // SAFETY: the active ISA is at least AVX2, so the CPU has AVX2/FMA/F16C.
        unsafe { x86_64::quantize_row_q8_0(x, y) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Neon && x.len() == y.len() * QK8 {
        // SAFETY: NEON is part of the aarch64 base architecture.
        unsafe { aarch64::quantize_row_q8_0(x, y) };
        return;
    }
    quantize_row_q8_0_scalar(x, y)
}

/// The scalar twin of [`quantize_row_q8_0`].
pub(crate) fn quantize_row_q8_0_scalar(x: &[f32], y: &mut [BlockQ8_0]) {
    debug_assert_eq!(x.len(), y.len() * QK8);
    for (xb, yb) in x.chunks_exact(QK8).zip(y.iter_mut()) {
        let Ok(xb) = <&[f32; QK8]>::try_from(xb) else {
            continue;
        };
        let (d, q) = quantize_block_x86(xb);
        yb.d = f16::from_f32(d);
        for (o, &v) in yb.qs.iter_mut().zip(&q) {
            *o = sat_i8(v);
        }
    }
}

/// Quantizes `x` (exactly `32 * y.len()` values) to q8_1 as ggml's x86 `quantize_row_q8_1`
/// (with AVX2 or NEON when the CPU has it; the bytes are the same).
pub fn quantize_row_q8_1(x: &[f32], y: &mut [BlockQ8_1]) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Avx2 && x.len() == y.len() * QK8 {
        // SAFETY: the active ISA is at least AVX2, so the CPU has AVX2/FMA/F16C.
        unsafe { x86_64::quantize_row_q8_1(x, y) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if crate::cpu::isa::active_isa() >= crate::cpu::isa::Isa::Neon && x.len() == y.len() * QK8 {
        // SAFETY: NEON is part of the aarch64 base architecture.
        unsafe { aarch64::quantize_row_q8_1(x, y) };
        return;
    }
    quantize_row_q8_1_scalar(x, y)
}

/// The scalar twin of [`quantize_row_q8_1`].
pub(crate) fn quantize_row_q8_1_scalar(x: &[f32], y: &mut [BlockQ8_1]) {
    debug_assert_eq!(x.len(), y.len() * QK8);
    for (xb, yb) in x.chunks_exact(QK8).zip(y.iter_mut()) {
        let Ok(xb) = <&[f32; QK8]>::try_from(xb) else {
            continue;
        };
        let (d, q) = quantize_block_x86(xb);
        yb.d = f16::from_f32(d);
        // `hsum_i32_8` of the 32-bit quants, before saturation (wrapping, as the SIMD adds).
        let sum = q.iter().fold(0i32, |a, &v| a.wrapping_add(v));
        yb.s = f16::from_f32(d * sum as f32);
        for (o, &v) in yb.qs.iter_mut().zip(&q) {
            *o = sat_i8(v);
        }
    }
}

/// Quantizes `x` (exactly `256 * y.len()` values) to q8_K as ggml's `quantize_row_q8_K`.
pub fn quantize_row_q8_k(x: &[f32], y: &mut [BlockQ8K]) {
    debug_assert_eq!(x.len(), y.len() * quant::QK_K);
    for (xb, yb) in x.chunks_exact(quant::QK_K).zip(y.iter_mut()) {
        if let Ok(xb) = <&[f32; quant::QK_K]>::try_from(xb) {
            *yb = quant::q8_k::quantize_block(xb);
        }
    }
}

/// Converts `x` to f16 bits as ggml's `ggml_cpu_fp32_to_fp16` (F16C `vcvtps2ph`, round to
/// nearest even; the `half` crate rounds the same way).
pub fn convert_row_f16(x: &[f32], y: &mut [u16]) {
    debug_assert_eq!(x.len(), y.len());
    for (o, &v) in y.iter_mut().zip(x) {
        *o = f16::from_f32(v).to_bits();
    }
}

/// Converts `x` to bf16 bits as ggml's `ggml_cpu_fp32_to_bf16` (round to nearest even). The
/// AVX512-BF16 build flushes subnormal inputs to zero there; this keeps them.
pub fn convert_row_bf16(x: &[f32], y: &mut [u16]) {
    debug_assert_eq!(x.len(), y.len());
    for (o, &v) in y.iter_mut().zip(x) {
        *o = bf16::to_bits(quant::float::f32_to_bf16(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::Rng;
    use bytemuck::Zeroable;

    #[test]
    fn q8_0_rounds_ties_to_even_like_ggml_x86() {
        let mut x = [0f32; QK8];
        x[0] = 127.0;
        x[1..9].copy_from_slice(&[0.5, 1.5, 2.5, -0.5, -2.5, 3.5, 100.5, -100.5]);
        let mut y = [BlockQ8_0::zeroed()];
        quantize_row_q8_0(&x, &mut y);
        // libggml-cpu.so's quantize_row_q8_0 (x86) on this block; the _ref one gives
        // [127, 1, 2, 3, -1, -3, 4, 101, -101].
        assert_eq!(&y[0].qs[..9], &[127, 0, 2, 2, 0, -2, 4, 100, -100]);
        assert_eq!(y[0].d.to_f32(), 1.0);
        let mut y1 = [BlockQ8_1::zeroed()];
        quantize_row_q8_1(&x, &mut y1);
        assert_eq!(y1[0].qs, y[0].qs);
        assert_eq!(y1[0].s.to_f32(), 133.0);
    }

    #[test]
    fn zero_blocks_quantize_to_zero() {
        let x = [0f32; 256];
        let mut y = [BlockQ8_0::zeroed(); 8];
        quantize_row_q8_0(&x, &mut y);
        assert!(y.iter().all(|b| b.d.to_f32() == 0.0 && b.qs == [0; 32]));
        let mut k = [BlockQ8K::zeroed()];
        quantize_row_q8_k(&x, &mut k);
        assert_eq!(k[0].d, 0.0);
    }

    #[test]
    fn q8_round_trip_error_is_within_half_a_step() {
        let mut rng = Rng::new(11);
        let x = rng.vec(512, 3.0);
        let mut y0 = vec![BlockQ8_0::zeroed(); 16];
        let mut y1 = vec![BlockQ8_1::zeroed(); 16];
        quantize_row_q8_0(&x, &mut y0);
        quantize_row_q8_1(&x, &mut y1);
        for (b, (yb0, yb1)) in y0.iter().zip(&y1).enumerate() {
            let xs = &x[b * 32..(b + 1) * 32];
            let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs()));
            let d = yb0.d.to_f32();
            assert!((d - amax / 127.0).abs() <= amax / 127.0 * 1e-3);
            let mut sum = 0i32;
            for (j, &v) in xs.iter().enumerate() {
                assert!((v - d * yb0.qs[j] as f32).abs() <= d * 0.5 + amax * 1e-3);
                sum += yb1.qs[j] as i32;
            }
            assert_eq!(yb0.qs, yb1.qs);
            assert_eq!(yb1.s, f16::from_f32(amax / 127.0 * sum as f32));
        }
    }
}
