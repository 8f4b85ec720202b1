//! AVX2 (+ FMA, F16C) dots of the K-quants Q2_K..Q6_K with q8_K activations, bit for bit the
//! scalar twins in [`crate::cpu::qdot_k_x86`], which follow ggml's x86 kernels
//! (`ggml_vec_dot_q*_K_q8_K`, the AVX2 branch that AVX512 builds run too).
//!
//! Per 32-value chunk: `vpmaddubsw` (unsigned weight quant × signed activation, pairs; no
//! saturation is possible with quants below 64), then `vpmaddwd` against the chunk's i16 scales
//! gives 8 i32 lanes, lane `l` covering bytes `4l..4l+4`: the twins' lanes. Per super-block one
//! `vfmadd` of `d` into an 8-lane f32 accumulator, mins as the twins do, ggml's horizontal sums
//! at the end.
//!
//! Weight rows are raw bytes at any alignment (unaligned loads only). Each kernel reads
//! `min(w.len() / block_bytes, y.len())` blocks, so a wrong length (caught by a
//! `debug_assert`) never reads out of bounds.

// Q2_K's, Q3_K's and Q6_K's are in the dispatch table ([`with_kquants`]); the table's Q4_K
// and Q5_K twins sum in other orders (llama.cpp's repacked gemv/gemm, ggml's generic): Q4_K
// runs `kquant_lanes_avx2` there, Q5_K its twin compiled for AVX2+FMA. The tests check all of them.
#![cfg_attr(not(test), allow(dead_code))]

use std::arch::x86_64::*;

use kestrel_gguf::quant::BlockQ8K;

use crate::cpu::kernel_table;
use crate::cpu::kernel_table::{Kernels, TypeKernels};

use crate::cpu::qdot::k4_scales;
use crate::cpu::qdot::k_x86::q3_scales;

const Q2K_BYTES: usize = 84;
const Q3K_BYTES: usize = 110;
const Q4K_BYTES: usize = 144;
const Q5K_BYTES: usize = 176;
const Q6K_BYTES: usize = 210;

/// f16 bits at `b[o..o + 2]` (little-endian) to f32, exactly.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn fp16_at(b: &[u8], o: usize) -> f32 {
    fp16(u16::from_le_bytes([b[o], b[o + 1]]))
}

/// f16 bits to f32, exactly (F16C).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn fp16(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// ggml's `hsum_float_8`: lanes `i + 4` and `i` added, then `(0 + 2) + (1 + 3)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum8(v: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps::<1>(v), _mm256_castps256_ps128(v));
    hsum4(r)
}

/// `(0 + 2) + (1 + 3)` of four lanes (`movehl`, then `movehdup`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum4(r: __m128) -> f32 {
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)))
}

/// Horizontal i32 sum (exact in any order; wraps as `vphaddd` would).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum_i32x4(v: __m128i) -> i32 {
    let v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
    let v = _mm_add_epi32(v, _mm_shuffle_epi32::<0b10_11_00_01>(v));
    _mm_cvtsi128_si32(v)
}

/// 32 bytes at `b[o..o + 32]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load32(b: &[u8], o: usize) -> __m256i {
    let s = &b[o..o + 32];
    // SAFETY: `s` has 32 bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// 16 bytes at `b[o..o + 16]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load16(b: &[u8], o: usize) -> __m128i {
    let s = &b[o..o + 16];
    // SAFETY: `s` has 16 bytes; the load is unaligned.
    unsafe { _mm_loadu_si128(s.as_ptr().cast()) }
}

/// Activation chunk `c` (values `32c..32c + 32`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q8_chunk(yb: &BlockQ8K, c: usize) -> __m256i {
    let s = &yb.qs[32 * c..32 * c + 32];
    // SAFETY: 32 bytes; unaligned load.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// The 16 `bsums` as i16 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bsums(yb: &BlockQ8K) -> __m256i {
    // SAFETY: `bsums` is 16 i16 = 32 bytes; unaligned load.
    unsafe { _mm256_loadu_si256(yb.bsums.as_ptr().cast()) }
}

/// i16 scales for chunk `c` of a type with one i8 scale per 16 values (`sc`, 16 bytes):
/// `sc[2c]` in the low 8 lanes, `sc[2c + 1]` in the high 8, sign-extended.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_scales(sc: __m128i, c: usize) -> __m256i {
    let lo = (2 * c) as i64 * 0x0101_0101_0101_0101;
    let hi = (2 * c + 1) as i64 * 0x0101_0101_0101_0101;
    _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, _mm_set_epi64x(hi, lo)))
}

/// `vpmaddwd(scale, vpmaddubsw(q, y))`: 8 i32 lanes of one chunk.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn chunk(q: __m256i, y: __m256i, scale: __m256i) -> __m256i {
    _mm256_madd_epi16(scale, _mm256_maddubs_epi16(q, y))
}

/// Q4_K's and Q5_K's mins lanes: `vpmaddwd(mins, vphaddw(bsums[0..8], bsums[8..16]))`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn mins_prod(yb: &BlockQ8K, mins: &[u8; 8]) -> __m128i {
    let s = bsums(yb);
    let pairs = _mm_hadd_epi16(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
    let m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(i64::from_le_bytes(*mins)));
    _mm_madd_epi16(m, pairs)
}

/// Q4_K · q8_K; the twin is [`crate::cpu::qdot::k_x86::dot_q4_k_x86`].
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), y.len() * Q4K_BYTES);
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (b, yb) in w.chunks_exact(Q4K_BYTES).zip(y) {
        let d = yb.d * fp16_at(b, 0);
        let dmin = -yb.d * fp16_at(b, 2);
        let (sc, mn) = k4_scales(b[4..16].try_into().unwrap());
        let prod = mins_prod(yb, &mn);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let bits = load32(b, 16 + 32 * j);
            let lo = _mm256_and_si256(bits, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
            let s0 = _mm256_set1_epi16(i16::from(sc[2 * j]));
            let s1 = _mm256_set1_epi16(i16::from(sc[2 * j + 1]));
            let p0 = chunk(lo, q8_chunk(yb, 2 * j), s0);
            let p1 = chunk(hi, q8_chunk(yb, 2 * j + 1), s1);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum8(acc) + hsum4(acc_m)
}

/// Q5_K · q8_K; the twin is [`crate::cpu::qdot::k_x86::dot_q5_k_x86`].
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), y.len() * Q5K_BYTES);
    let m4 = _mm256_set1_epi8(0x0f);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for (b, yb) in w.chunks_exact(Q5K_BYTES).zip(y) {
        let d = yb.d * fp16_at(b, 0);
        let dmin = -yb.d * fp16_at(b, 2);
        let (sc, mn) = k4_scales(b[4..16].try_into().unwrap());
        let isum = hsum_i32x4(mins_prod(yb, &mn));
        summs = dmin.mul_add(isum as f32, summs);
        // Bit c of each qh byte is the fifth bit of chunk c; shifted down 2 per pair of chunks
        // (16-bit shifts: a byte's bit 0 only ever receives its own bits, at most 7 places).
        let mut hb = load32(b, 16);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let bits = load32(b, 48 + 32 * j);
            let h0 = _mm256_slli_epi16::<4>(_mm256_and_si256(hb, one));
            let h1 = _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<1>(hb), one));
            hb = _mm256_srli_epi16::<2>(hb);
            let lo = _mm256_or_si256(_mm256_and_si256(bits, m4), h0);
            let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4), h1);
            let s0 = _mm256_set1_epi16(i16::from(sc[2 * j]));
            let s1 = _mm256_set1_epi16(i16::from(sc[2 * j + 1]));
            let p0 = chunk(lo, q8_chunk(yb, 2 * j), s0);
            let p1 = chunk(hi, q8_chunk(yb, 2 * j + 1), s1);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum8(acc) + summs
}

/// Q6_K · q8_K; the twin is [`crate::cpu::qdot::k_x86::dot_q6_k_x86`] (quants 0..64 in the
/// chunk products, the `-32` offset from `bsums` per super-block).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q6_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), y.len() * Q6K_BYTES);
    let m4 = _mm256_set1_epi8(0x0f);
    let m3 = _mm256_set1_epi8(3);
    let mut acc = _mm256_setzero_ps();
    for (b, yb) in w.chunks_exact(Q6K_BYTES).zip(y) {
        let d = yb.d * fp16_at(b, 208);
        let sc = load16(b, 192);
        let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), bsums(yb)));
        let mut sumi = _mm256_setzero_si256();
        for j in 0..2 {
            let l0 = load32(b, 64 * j);
            let l1 = load32(b, 64 * j + 32);
            let hb = load32(b, 128 + 32 * j);
            let high = |s: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(s, m3));
            let q = [
                _mm256_or_si256(_mm256_and_si256(l0, m4), high(hb)),
                _mm256_or_si256(_mm256_and_si256(l1, m4), high(_mm256_srli_epi16::<2>(hb))),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(l0), m4),
                    high(_mm256_srli_epi16::<4>(hb)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(l1), m4),
                    high(_mm256_srli_epi16::<6>(hb)),
                ),
            ];
            for (k, &qk) in q.iter().enumerate() {
                let c = 4 * j + k;
                let p = chunk(qk, q8_chunk(yb, c), pair_scales(sc, c));
                sumi = _mm256_add_epi32(sumi, p);
            }
        }
        let sumi = _mm256_sub_epi32(sumi, offset);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum8(acc)
}

/// Q2_K · q8_K; the twin is [`crate::cpu::qdot::k_x86::dot_q2_k_x86`].
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q2_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), y.len() * Q2K_BYTES);
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    for (b, yb) in w.chunks_exact(Q2K_BYTES).zip(y) {
        let d = yb.d * fp16_at(b, 80);
        let dmin = -yb.d * fp16_at(b, 82);
        let packed = load16(b, 0);
        let sc = _mm_and_si128(packed, m4);
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
        let prod = _mm256_madd_epi16(mins, bsums(yb));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..2 {
            let mut bits = load32(b, 16 + 32 * j);
            for k in 0..4 {
                let c = 4 * j + k;
                let q = _mm256_and_si256(bits, m3);
                bits = _mm256_srli_epi16::<2>(bits);
                let p = chunk(q, q8_chunk(yb, c), pair_scales(sc, c));
                sumi = _mm256_add_epi32(sumi, p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum8(acc)
}

/// Q3_K · q8_K; the twin is [`crate::cpu::qdot::k_x86::dot_q3_k_x86`].
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q3_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), y.len() * Q3K_BYTES);
    let m3 = _mm256_set1_epi8(3);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    for (b, yb) in w.chunks_exact(Q3K_BYTES).zip(y) {
        let d = yb.d * fp16_at(b, 108);
        let scales = q3_scales(b[96..108].try_into().unwrap());
        // SAFETY: 16 bytes; unaligned load.
        let sc = unsafe { _mm_loadu_si128(scales.as_ptr().cast()) };
        // Bit c of each hmask byte belongs to chunk c; shifted down one per chunk.
        let mut hb = load32(b, 0);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..2 {
            let mut bits = load32(b, 32 + 32 * j);
            for k in 0..4 {
                let c = 4 * j + k;
                let lo = _mm256_and_si256(bits, m3);
                bits = _mm256_srli_epi16::<2>(bits);
                // 4 where the high bit is clear.
                let minus = _mm256_slli_epi16::<2>(_mm256_andnot_si256(hb, one));
                hb = _mm256_srli_epi16::<1>(hb);
                let y8 = q8_chunk(yb, c);
                let p = _mm256_sub_epi16(
                    _mm256_maddubs_epi16(lo, y8),
                    _mm256_maddubs_epi16(minus, y8),
                );
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(pair_scales(sc, c), p));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum8(acc)
}

/// `base` (the AVX2 table) with the K-quants run as AVX2 code: Q6_K by [`dot_q6_k`] (bit for
/// bit its twin), and the twins that have no AVX2 kernel (Q4_K's gemv and gemm orders, Q5_K,
/// Q6_K's tiled order for wide steps) compiled with AVX2, FMA and F16C, so `mul_add` is one
/// instruction instead of a libm call and the loops vectorize; FMA is exact, so they round as
/// the portable twins do.
pub(crate) fn with_kquants(mut base: Kernels) -> Kernels {
    use crate::cpu::qdot::DQ5K;

    if !super::has_avx2() {
        return base;
    }
    macro_rules! compiled {
        ($name:ident, rows, $body:expr) => {
            fn $name(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
                #[target_feature(enable = "avx2,fma,f16c")]
                fn inner(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
                    $body(w, y, out)
                }
                // SAFETY: only reachable through a table made after detection (above).
                unsafe { inner(w, y, out) }
            }
        };
        ($name:ident, tile, $body:expr) => {
            fn $name(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
                #[target_feature(enable = "avx2,fma,f16c")]
                fn inner(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
                    $body(w, y, n_act, out)
                }
                // SAFETY: as above.
                unsafe { inner(w, y, n_act, out) }
            }
        };
    }
    compiled!(q5_k_rows, rows, kernel_table::scalar_rows::<DQ5K>);
    compiled!(q5_k_tile, tile, kernel_table::scalar_tile::<DQ5K>);
    macro_rules! by_dot {
        ($rows:ident, $tile:ident, $dot:ident) => {
            compiled!($rows, rows, |w, y, o| kernel_table::rows_by_dot(
                w,
                y,
                o,
                // SAFETY: AVX2, FMA and F16C (this function's features).
                |wr, y| unsafe { $dot(wr, y) }
            ));
            compiled!($tile, tile, |w, y, n, o| kernel_table::tile_by_dots(
                w,
                y,
                n,
                o,
                // SAFETY: as above.
                |wr, y| unsafe { $dot(wr, y) }
            ));
        };
    }
    by_dot!(q2_k_rows, q2_k_tile, dot_q2_k);
    by_dot!(q6_k_rows, q6_k_tile, dot_q6_k);
    by_dot!(q3_k_rows, q3_k_tile, dot_q3_k);
    base.q2_k = TypeKernels {
        rows: q2_k_rows,
        tile: q2_k_tile,
        ..base.q2_k
    };
    base.q3_k = TypeKernels {
        rows: q3_k_rows,
        tile: q3_k_tile,
        ..base.q3_k
    };
    // Q4_K and Q6_K's wide order: 8 (weight row, activation row) pairs in the lanes.
    macro_rules! lanes {
        ($name:ident, rows) => {
            fn $name(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
                // SAFETY: only reachable through a table made after detection (above).
                unsafe { super::kquant_lanes_avx2::$name(w, y, out) }
            }
        };
        ($name:ident, tile) => {
            fn $name(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
                // SAFETY: as above.
                unsafe { super::kquant_lanes_avx2::$name(w, y, n_act, out) }
            }
        };
    }
    lanes!(rows_q4_k, rows);
    lanes!(tile_q4_k_gemm, tile);
    lanes!(tile_q4_k_gemv, tile);
    lanes!(tile_q6_k_tiled, tile);
    base.q4_k = TypeKernels {
        rows: rows_q4_k,
        tile: tile_q4_k_gemm,
        tile_rows: super::kquant_lanes_avx2::TILE_ROWS,
        tile_acts: 4,
        single: Some(tile_q4_k_gemv),
        ..base.q4_k
    };
    base.q5_k = TypeKernels {
        rows: q5_k_rows,
        tile: q5_k_tile,
        ..base.q5_k
    };
    base.q6_k = TypeKernels {
        rows: q6_k_rows,
        tile: q6_k_tile,
        tile_rows: super::kquant_lanes_avx2::TILE_ROWS,
        tile_acts: 4,
        wide: Some((kernel_table::TILED_MIN_ROWS, tile_q6_k_tiled)),
        ..base.q6_k
    };
    base
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::qdot::k_x86::testing::*;
    use crate::cpu::qdot::k_x86::{
        dot_q2_k_x86, dot_q3_k_x86, dot_q4_k_x86, dot_q5_k_x86, dot_q6_k_x86,
    };
    use crate::cpu::testutil::Rng;
    use crate::DType;
    use proptest::prelude::*;

    type Dot = fn(&[u8], &[BlockQ8K]) -> f32;
    type SimdDot = unsafe fn(&[u8], &[BlockQ8K]) -> f32;

    fn has_avx2() -> bool {
        let ok = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c");
        if !ok {
            eprintln!("skipped: this CPU lacks AVX2/FMA/F16C");
        }
        ok
    }

    /// (AVX2 kernel, scalar twin).
    fn kernels(dtype: DType) -> (SimdDot, Dot) {
        match dtype {
            DType::Q2K => (dot_q2_k, dot_q2_k_x86),
            DType::Q3K => (dot_q3_k, dot_q3_k_x86),
            DType::Q4K => (dot_q4_k, dot_q4_k_x86),
            DType::Q5K => (dot_q5_k, dot_q5_k_x86),
            DType::Q6K => (dot_q6_k, dot_q6_k_x86),
            other => panic!("{other}"),
        }
    }

    /// The kernel and the twin on `w` (as given and 1 byte past a 64-byte boundary).
    fn same_bits(dtype: DType, w: &[u8], y: &[BlockQ8K]) {
        let (simd, twin) = kernels(dtype);
        let want = twin(w, y);
        // SAFETY: the caller checked the features.
        let got = unsafe { simd(w, y) };
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{dtype} blocks={}: avx2 {got} vs twin {want}",
            y.len()
        );
        let (buf, off) = misaligned(w);
        // SAFETY: as above.
        let got = unsafe { simd(&buf[off..off + w.len()], y) };
        assert_eq!(got.to_bits(), want.to_bits(), "{dtype} misaligned");
    }

    #[test]
    fn avx2_matches_twins_at_fixed_seeds() {
        if !has_avx2() {
            return;
        }
        let mut rng = Rng::new(21);
        for dtype in TYPES {
            for blocks in [1usize, 2, 3, 8] {
                let w = random_blocks(&mut rng, dtype, blocks);
                let y = activations(&mut rng, blocks, 1.0);
                same_bits(dtype, &w, &y);
                let (w, _) = crate::cpu::testutil::quantized_rows(&mut rng, dtype, 1, blocks * 256);
                same_bits(dtype, &w, &y);
            }
        }
    }

    /// Extreme quants: every weight byte 0x00 or 0xff (largest magnitudes, all high bits),
    /// activations at ±127/-128.
    #[test]
    fn avx2_matches_twins_at_extremes() {
        if !has_avx2() {
            return;
        }
        let mut rng = Rng::new(22);
        for dtype in TYPES {
            for fill in [0x00u8, 0xff] {
                let mut w = random_blocks(&mut rng, dtype, 2);
                let offs = f16_offsets(dtype);
                for blk in w.chunks_exact_mut(dtype.block_bytes()) {
                    for (i, v) in blk.iter_mut().enumerate() {
                        if !offs.iter().any(|&o| i == o || i == o + 1) {
                            *v = fill;
                        }
                    }
                }
                let mut y = activations(&mut rng, 2, 1.0);
                for yb in &mut y {
                    for (i, q) in yb.qs.iter_mut().enumerate() {
                        *q = if i % 3 == 0 { -128 } else { 127 };
                    }
                    for g in 0..16 {
                        yb.bsums[g] = yb.qs[16 * g..16 * g + 16].iter().map(|&q| q as i16).sum();
                    }
                }
                same_bits(dtype, &w, &y);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn avx2_matches_twins_on_random_blocks(
            seed in any::<u64>(),
            blocks in 1usize..=8,
            scale in prop_oneof![Just(1.0f32), 1e-3f32..1e3],
        ) {
            if !has_avx2() {
                return Ok(());
            }
            let mut rng = Rng::new(seed);
            for dtype in TYPES {
                let w = random_blocks(&mut rng, dtype, blocks);
                let y = activations(&mut rng, blocks, scale);
                same_bits(dtype, &w, &y);
            }
        }
    }

    /// Time per super-block of the twin and the AVX2 kernel:
    /// `cargo test --release -p kestrel-tensor --lib avx2_kquant_timing -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn avx2_kquant_timing() {
        if !has_avx2() {
            return;
        }
        let mut rng = Rng::new(23);
        let blocks = 16; // a 4096-wide row
        let rows = 64; // 64 rows: in L2 for every type
        let y = activations(&mut rng, blocks, 1.0);
        for dtype in TYPES {
            let w = random_blocks(&mut rng, dtype, blocks * rows);
            let rb = blocks * dtype.block_bytes();
            let (simd, twin) = kernels(dtype);
            let time = |f: &dyn Fn(&[u8]) -> f32, reps: usize| {
                let t = std::time::Instant::now();
                let mut s = 0f32;
                for _ in 0..reps {
                    for r in w.chunks_exact(rb) {
                        s += f(std::hint::black_box(r));
                    }
                }
                std::hint::black_box(s);
                t.elapsed().as_nanos() as f64 / (reps * rows * blocks) as f64
            };
            // SAFETY: features checked above.
            let t_simd = time(&|r| unsafe { simd(r, &y) }, 1000);
            let t_twin = time(&|r| twin(r, &y), 50);
            eprintln!("{dtype}: twin {t_twin:.1} ns/block, avx2 {t_simd:.1} ns/block");
        }
    }
}
