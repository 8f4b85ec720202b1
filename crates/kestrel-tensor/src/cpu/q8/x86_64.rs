//! AVX2 activation quantizers: ggml's x86 `quantize_row_q8_0` / `quantize_row_q8_1`
//! instruction for instruction (`amax` by `vmaxps`, `d = amax/127`, `id = 127/amax`,
//! `vroundps` to nearest even, `vcvtps2dq`, saturating packs), so the bytes equal the scalar
//! twins in `cpu::q8` (and libggml's).

use std::arch::x86_64::*;

use kestrel_gguf::quant::BlockQ8_0;

use crate::cpu::q8_block::{BlockQ8_1, QK8};

/// One block: `(d, the 32 quants as i8 in order, the 8-lane i32 sum vector)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block(x: *const f32) -> (f32, __m256i, __m256i) {
    // SAFETY: the caller keeps 32 floats at `x` in bounds; unaligned loads.
    let v = unsafe {
        [
            _mm256_loadu_ps(x),
            _mm256_loadu_ps(x.add(8)),
            _mm256_loadu_ps(x.add(16)),
            _mm256_loadu_ps(x.add(24)),
        ]
    };
    let sign = _mm256_set1_ps(-0.0);
    let mut m = _mm256_andnot_ps(sign, v[0]);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[1]));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[2]));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[3]));
    let mut m4 = _mm_max_ps(_mm256_extractf128_ps::<1>(m), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    let amax = _mm_cvtss_f32(m4);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mul = _mm256_set1_ps(id);
    let q = v.map(|vi| {
        _mm256_cvtps_epi32(_mm256_round_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(_mm256_mul_ps(vi, mul)))
    });
    let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    let p01 = _mm256_packs_epi32(q[0], q[1]);
    let p23 = _mm256_packs_epi32(q[2], q[3]);
    let bytes = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(p01, p23),
        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7),
    );
    (d, bytes, sum)
}

/// f32 to f16 bits, round to nearest even.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_bits(x: f32) -> u16 {
    _mm_extract_epi16::<0>(_mm_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm_set_ss(x))) as u16
}

/// Wrapping sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum_i32_8(a: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)))
}

/// `quantize_row_q8_0` (`x.len() == 32 * y.len()`).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_row_q8_0(x: &[f32], y: &mut [BlockQ8_0]) {
    assert_eq!(x.len(), y.len() * QK8, "quantize_row_q8_0: lengths");
    for (i, yb) in y.iter_mut().enumerate() {
        // SAFETY: block i's 32 floats are in x (asserted above).
        let (d, bytes, _) = unsafe { block(x.as_ptr().add(i * QK8)) };
        yb.d = half::f16::from_bits(f16_bits(d));
        // SAFETY: 32 bytes, unaligned store.
        unsafe { _mm256_storeu_si256(yb.qs.as_mut_ptr().cast(), bytes) };
    }
}

/// `quantize_row_q8_1` (`x.len() == 32 * y.len()`).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_row_q8_1(x: &[f32], y: &mut [BlockQ8_1]) {
    assert_eq!(x.len(), y.len() * QK8, "quantize_row_q8_1: lengths");
    for (i, yb) in y.iter_mut().enumerate() {
        // SAFETY: block i's 32 floats are in x (asserted above).
        let (d, bytes, sum) = unsafe { block(x.as_ptr().add(i * QK8)) };
        yb.d = half::f16::from_bits(f16_bits(d));
        yb.s = half::f16::from_bits(f16_bits(d * hsum_i32_8(sum) as f32));
        // SAFETY: 32 bytes, unaligned store.
        unsafe { _mm256_storeu_si256(yb.qs.as_mut_ptr().cast(), bytes) };
    }
}

#[cfg(test)]
mod tests {
    use crate::cpu::testutil::check_quantizers;

    /// The scalar twins' bytes (see `check_quantizers`).
    #[test]
    fn avx2_quantizers_equal_scalar_twins() {
        if !crate::cpu::isa::has_avx2() {
            eprintln!("skipped: no AVX2/FMA/F16C");
            return;
        }
        // SAFETY (each): the features were checked above.
        check_quantizers((
            |x, y| unsafe { super::quantize_row_q8_0(x, y) },
            |x, y| unsafe { super::quantize_row_q8_1(x, y) },
        ));
    }
}
