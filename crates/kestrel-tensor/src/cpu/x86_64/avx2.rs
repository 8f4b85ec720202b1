//! AVX2 kernels (with FMA and F16C): the q8_0 family, byte products summed by
//! `vpmaddubsw` + `vpmaddwd` (ggml's `mul_sum_i8_pairs_float` in an AVX2 build).

use std::arch::x86_64::*;

/// Lane sums of signed × signed bytes: `|x| · sign(y, x)` through `vpmaddubsw` (i16 pairs,
/// no saturation: |x| ≤ 128 and |y| ≤ 127 keep each pair within ±32512), then `vpmaddwd` by
/// ones.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn sum_i8(x: __m256i, y: __m256i) -> __m256i {
    sum_u8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// Lane sums of unsigned × signed bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sum_u8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
}

q8_family_kernels!("avx2,fma,f16c", 4);
