//! AVX-512 kernels (F/BW/VL + VNNI, on top of AVX2/FMA/F16C): the q8_0 family with four byte
//! products per lane summed by one `vpdpbusd` (ggml's `mul_sum_us8_pairs_float` in an
//! AVX512-VNNI build). The integer lane sums equal the AVX2 ones exactly.

use std::arch::x86_64::*;

/// Lane sums of signed × signed bytes: `|x| · sign(y, x)` through `vpdpbusd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn sum_i8(x: __m256i, y: __m256i) -> __m256i {
    sum_u8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// Lane sums of unsigned × signed bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn sum_u8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), x, y)
}

q8_family_kernels!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", 4);
