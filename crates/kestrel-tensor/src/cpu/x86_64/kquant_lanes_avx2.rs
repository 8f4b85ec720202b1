//! AVX2 (+ FMA, F16C) Q4_K and Q6_K kernels in the float orders llama.cpp's x86 paths use for
//! them, bit for bit their scalar twins in [`crate::cpu::qdot_k_x86`]:
//! - Q4_K in the repacked `q4_K_8x8` orders: gemv ([`dot_q4_k_8x8_gemv`], decode and the
//!   single-row order) and gemm ([`dot_q4_k_8x8_gemm`], groups of activation rows);
//! - Q6_K in b11434's tiled order ([`dot_q6_k_tiled`], 8 or more activation rows).
//!
//! Those orders keep one f32 accumulator per (weight row, activation row) and add one exact
//! integer per super-block (or per pair of sub-blocks) to it. Here up to 8 such pairs share
//! the 8 lanes of one register: the integers are computed with `vpmaddubsw` (unsigned quants
//! × signed activations; no saturation: quants below 64) and `vpmaddwd` against the scales,
//! [`reduce8`] sums each pair's 8 partial lanes into its own lane, and one `vfmadd` advances
//! all 8 accumulators, each in its twin's order.
//!
//! [`dot_q4_k_8x8_gemv`]: crate::cpu::qdot::k_x86::dot_q4_k_8x8_gemv
//! [`dot_q4_k_8x8_gemm`]: crate::cpu::qdot::k_x86::dot_q4_k_8x8_gemm
//! [`dot_q6_k_tiled`]: crate::cpu::qdot::k_x86::dot_q6_k_tiled

// Rows, activations and lanes index parallel arrays.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use kestrel_gguf::quant::BlockQ8K;

use super::avx2::{fp16, rd16};
use crate::cpu::qdot::k4_scales;

const Q4K_BYTES: usize = 144;
const Q6K_BYTES: usize = 210;

/// Lane `i` of the result: the (wrapping) sum of the 8 lanes of `v[i]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn reduce8(v: &[__m256i; 8]) -> __m256i {
    let s01 = _mm256_hadd_epi32(v[0], v[1]);
    let s23 = _mm256_hadd_epi32(v[2], v[3]);
    let s45 = _mm256_hadd_epi32(v[4], v[5]);
    let s67 = _mm256_hadd_epi32(v[6], v[7]);
    // [v0 v1 v2 v3 (low halves) | v0 v1 v2 v3 (high halves)], the same for v4..v7.
    let a = _mm256_hadd_epi32(s01, s23);
    let b = _mm256_hadd_epi32(s45, s67);
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(a, b),
        _mm256_permute2x128_si256::<0x31>(a, b),
    )
}

/// The 8 `i32` of each `m[i]` (4 each) regrouped: result `p` holds element `p` of every `m[i]`
/// in lane `i`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn transpose_8x4(m: &[__m128i; 8]) -> [__m256i; 4] {
    let a = _mm256_set_m128i(m[4], m[0]);
    let b = _mm256_set_m128i(m[5], m[1]);
    let c = _mm256_set_m128i(m[6], m[2]);
    let d = _mm256_set_m128i(m[7], m[3]);
    let t0 = _mm256_unpacklo_epi32(a, b);
    let t1 = _mm256_unpacklo_epi32(c, d);
    let t2 = _mm256_unpackhi_epi32(a, b);
    let t3 = _mm256_unpackhi_epi32(c, d);
    [
        _mm256_unpacklo_epi64(t0, t1),
        _mm256_unpackhi_epi64(t0, t1),
        _mm256_unpacklo_epi64(t2, t3),
        _mm256_unpackhi_epi64(t2, t3),
    ]
}

/// The 8 sums of 32 activations of a q8_K block (`bsums` pairs) as i16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bsums32(yb: &BlockQ8K) -> __m128i {
    // SAFETY: 16 i16 in the block.
    let (lo, hi) = unsafe {
        let p = yb.bsums.as_ptr().cast::<__m128i>();
        (_mm_loadu_si128(p), _mm_loadu_si128(p.add(1)))
    };
    _mm_hadd_epi16(lo, hi)
}

/// Per-lane floats of `W` weight-row values and `T` activation-row values: lane `r·T + t` is
/// `w[r] · a[t]` (lanes past `W·T` are 0).
#[inline(always)]
fn products<const W: usize, const T: usize>(w: &[f32; W], a: &[f32; T]) -> [f32; 8] {
    let mut out = [0f32; 8];
    for r in 0..W {
        for t in 0..T {
            out[r * T + t] = w[r] * a[t];
        }
    }
    out
}

/// Q4_K: `W` weight rows (`rb` bytes apart at `w`) against `T` activation rows (`y`, `nb`
/// blocks each), `W·T ≤ 8`, into `out[r·T + t]`: the gemv order (`GEMM = false`: one `fma`
/// per super-block) or the gemm order (one per pair of sub-blocks).
///
/// # Safety
/// AVX2, FMA and F16C; `W` rows of `nb` blocks at `w`; `y` holds `T · nb` blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k<const W: usize, const T: usize, const GEMM: bool>(
    w: *const u8,
    rb: usize,
    y: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
) {
    let zero = _mm256_setzero_si256();
    let nib = _mm256_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = _mm256_setzero_ps();
    for i in 0..nb {
        let mut dw = [0f32; W];
        let mut dmw = [0f32; W];
        let mut sc = [[0u8; 8]; W];
        let mut mins16 = [_mm_setzero_si128(); W];
        for r in 0..W {
            let b = w.wrapping_add(r * rb + i * Q4K_BYTES);
            // SAFETY: the block lies in the weights (the caller's contract).
            let packed: [u8; 12] = unsafe { *b.add(4).cast::<[u8; 12]>() };
            // SAFETY: as above.
            unsafe {
                dw[r] = fp16(rd16(b));
                dmw[r] = fp16(rd16(b.add(2)));
            }
            let (s, m) = k4_scales(&packed);
            sc[r] = s;
            mins16[r] = _mm_cvtepu8_epi16(_mm_loadl_epi64(m.as_ptr().cast()));
        }
        let yb: [&BlockQ8K; T] = std::array::from_fn(|t| &y[t * nb + i]);
        let ya: [f32; T] = std::array::from_fn(|t| yb[t].d);
        let bs: [__m128i; T] = std::array::from_fn(|t| bsums32(yb[t]));
        // Σ min · bsum per pair of sub-blocks, then regrouped per pair.
        let mut mins = [_mm_setzero_si128(); 8];
        for r in 0..W {
            for t in 0..T {
                mins[r * T + t] = _mm_madd_epi16(mins16[r], bs[t]);
            }
        }
        let mins = transpose_8x4(&mins);
        let d = products(&dw, &ya);
        let dm = products(&dmw, &ya);
        // SAFETY: 8 floats each.
        let (d, dm) = unsafe { (_mm256_loadu_ps(d.as_ptr()), _mm256_loadu_ps(dm.as_ptr())) };
        let mut total = [zero; 8];
        for p in 0..4 {
            let mut v = [zero; 8];
            for r in 0..W {
                let b = w.wrapping_add(r * rb + i * Q4K_BYTES + 16 + 32 * p);
                // SAFETY: 32 quant bytes of the block.
                let q = unsafe { _mm256_loadu_si256(b.cast()) };
                let lo = _mm256_and_si256(q, nib);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), nib);
                let s0 = _mm256_set1_epi16(i16::from(sc[r][2 * p]));
                let s1 = _mm256_set1_epi16(i16::from(sc[r][2 * p + 1]));
                for t in 0..T {
                    // SAFETY: 64 activation bytes of the block.
                    let (a0, a1) = unsafe {
                        let a = yb[t].qs.as_ptr().add(64 * p).cast::<__m256i>();
                        (_mm256_loadu_si256(a), _mm256_loadu_si256(a.add(1)))
                    };
                    v[r * T + t] = _mm256_add_epi32(
                        _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), s0),
                        _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), s1),
                    );
                }
            }
            if GEMM {
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(&v)), d, acc);
                acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins[p]), dm, acc_min);
            } else {
                for l in 0..W * T {
                    total[l] = _mm256_add_epi32(total[l], v[l]);
                }
            }
        }
        if !GEMM {
            let m = _mm256_add_epi32(
                _mm256_add_epi32(mins[0], mins[1]),
                _mm256_add_epi32(mins[2], mins[3]),
            );
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(&total)), d, acc);
            acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), dm, acc_min);
        }
    }
    let mut res = [0f32; 8];
    // SAFETY: 8 floats.
    unsafe { _mm256_storeu_ps(res.as_mut_ptr(), _mm256_sub_ps(acc, acc_min)) };
    out[..W * T].copy_from_slice(&res[..W * T]);
}

/// Q6_K in the tiled order: `W` weight rows against `T` activation rows as [`q4k`].
///
/// # Safety
/// As [`q4k`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k<const W: usize, const T: usize>(
    w: *const u8,
    rb: usize,
    y: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
) {
    let zero = _mm256_setzero_si256();
    let nib = _mm256_set1_epi8(0x0f);
    let three = _mm256_set1_epi8(3);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let yb: [&BlockQ8K; T] = std::array::from_fn(|t| &y[t * nb + i]);
        let ya: [f32; T] = std::array::from_fn(|t| yb[t].d);
        let mut dw = [0f32; W];
        let mut v = [zero; 8];
        for r in 0..W {
            let b = w.wrapping_add(r * rb + i * Q6K_BYTES);
            // SAFETY: the block lies in the weights (the caller's contract).
            let sc: [i8; 16] = unsafe { *b.add(192).cast::<[i8; 16]>() };
            // SAFETY: as above.
            dw[r] = unsafe { fp16(rd16(b.add(208))) };
            // The -32 offset: 32 · Σ scale · bsum per lane.
            // SAFETY: 16 bytes.
            let sc16 = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(sc.as_ptr().cast()) });
            for t in 0..T {
                // SAFETY: 16 i16.
                let bsum = unsafe { _mm256_loadu_si256(yb[t].bsums.as_ptr().cast()) };
                let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(sc16, bsum));
                v[r * T + t] = _mm256_sub_epi32(zero, off);
            }
            for c in 0..8 {
                let (j, k) = (c / 4, c % 4);
                // SAFETY: 32 bytes of ql and of qh in the block.
                let (ql, qh) = unsafe {
                    (
                        _mm256_loadu_si256(b.add(64 * j + 32 * (k % 2)).cast()),
                        _mm256_loadu_si256(b.add(128 + 32 * j).cast()),
                    )
                };
                let lo = if k / 2 == 0 {
                    _mm256_and_si256(ql, nib)
                } else {
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql), nib)
                };
                let hi = match k {
                    0 => _mm256_and_si256(qh, three),
                    1 => _mm256_and_si256(_mm256_srli_epi16::<2>(qh), three),
                    2 => _mm256_and_si256(_mm256_srli_epi16::<4>(qh), three),
                    _ => _mm256_and_si256(_mm256_srli_epi16::<6>(qh), three),
                };
                let q = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(hi));
                let s = _mm256_set_m128i(
                    _mm_set1_epi16(i16::from(sc[2 * c + 1])),
                    _mm_set1_epi16(i16::from(sc[2 * c])),
                );
                for t in 0..T {
                    // SAFETY: 32 activation bytes of the block.
                    let a = unsafe { _mm256_loadu_si256(yb[t].qs.as_ptr().add(32 * c).cast()) };
                    v[r * T + t] = _mm256_add_epi32(
                        v[r * T + t],
                        _mm256_madd_epi16(_mm256_maddubs_epi16(q, a), s),
                    );
                }
            }
        }
        let dw = products(&dw, &[1.0f32; T]);
        let ya = products(&[1.0f32; W], &ya);
        // SAFETY: 8 floats each.
        let (dw, ya) = unsafe { (_mm256_loadu_ps(dw.as_ptr()), _mm256_loadu_ps(ya.as_ptr())) };
        let isum = _mm256_cvtepi32_ps(reduce8(&v));
        acc = _mm256_fmadd_ps(_mm256_mul_ps(isum, dw), ya, acc);
    }
    let mut res = [0f32; 8];
    // SAFETY: 8 floats.
    unsafe { _mm256_storeu_ps(res.as_mut_ptr(), acc) };
    out[..W * T].copy_from_slice(&res[..W * T]);
}

/// The checked shape of a tile call: `(weight rows, blocks per row)`.
fn tile_shape(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &[f32], bytes: usize) -> (usize, usize) {
    let ok_t = (1..=4).contains(&n_act) && y.len().is_multiple_of(n_act);
    let nb = if ok_t { y.len() / n_act } else { 0 };
    let rb = nb * bytes;
    let n_w = w.len().checked_div(rb).unwrap_or(0);
    assert!(
        ok_t && rb > 0
            && (1..=TILE_ROWS).contains(&n_w)
            && n_w * rb == w.len()
            && out.len() == n_w * n_act,
        "K-quant tile: {} weight bytes, {} activation blocks in {n_act} rows, {} outputs",
        w.len(),
        y.len(),
        out.len()
    );
    (n_w, nb)
}

/// Weight rows a tile call takes at most (2 rows × 4 activation rows fill the 8 lanes).
pub(crate) const TILE_ROWS: usize = 2;

macro_rules! tile_fn {
    ($name:ident, $bytes:expr, $kernel:ident $(, $gemm:expr)?) => {
        /// 1 to [`TILE_ROWS`] weight rows against 1 to 4 activation rows, `out[r·T + t]`.
        ///
        /// # Safety
        /// AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) unsafe fn $name(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
            let (n_w, nb) = tile_shape(w, y, n_act, out, $bytes);
            let (p, rb) = (w.as_ptr(), nb * $bytes);
            // SAFETY: shapes checked above; the caller has the features.
            unsafe {
                match (n_w, n_act) {
                    (1, 1) => $kernel::<1, 1 $(, $gemm)?>(p, rb, y, nb, out),
                    (1, 2) => $kernel::<1, 2 $(, $gemm)?>(p, rb, y, nb, out),
                    (1, 3) => $kernel::<1, 3 $(, $gemm)?>(p, rb, y, nb, out),
                    (1, _) => $kernel::<1, 4 $(, $gemm)?>(p, rb, y, nb, out),
                    (_, 1) => $kernel::<2, 1 $(, $gemm)?>(p, rb, y, nb, out),
                    (_, 2) => $kernel::<2, 2 $(, $gemm)?>(p, rb, y, nb, out),
                    (_, 3) => $kernel::<2, 3 $(, $gemm)?>(p, rb, y, nb, out),
                    _ => $kernel::<2, 4 $(, $gemm)?>(p, rb, y, nb, out),
                }
            }
        }
    };
}

tile_fn!(tile_q4_k_gemm, Q4K_BYTES, q4k, true);
tile_fn!(tile_q4_k_gemv, Q4K_BYTES, q4k, false);
tile_fn!(tile_q6_k_tiled, Q6K_BYTES, q6k);

/// Q4_K decode: `out[r] = ` weight row `r` · `y` in the gemv order, 8 rows at a time.
///
/// # Safety
/// AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_q4_k(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
    let nb = y.len();
    let rb = nb * Q4K_BYTES;
    assert!(
        out.len().checked_mul(rb) == Some(w.len()),
        "dot: {} weight bytes for {} rows of {nb} Q4_K blocks",
        w.len(),
        out.len()
    );
    let p = w.as_ptr();
    for (g, o) in out.chunks_mut(8).enumerate() {
        let base = p.wrapping_add(8 * g * rb);
        // SAFETY: rows 8g.. lie in w (checked above); the caller has the features.
        unsafe {
            match o.len() {
                8 => q4k::<8, 1, false>(base, rb, y, nb, o),
                7 => q4k::<7, 1, false>(base, rb, y, nb, o),
                6 => q4k::<6, 1, false>(base, rb, y, nb, o),
                5 => q4k::<5, 1, false>(base, rb, y, nb, o),
                4 => q4k::<4, 1, false>(base, rb, y, nb, o),
                3 => q4k::<3, 1, false>(base, rb, y, nb, o),
                2 => q4k::<2, 1, false>(base, rb, y, nb, o),
                _ => q4k::<1, 1, false>(base, rb, y, nb, o),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::q8;
    use crate::cpu::qdot::k_x86::{dot_q4_k_8x8_gemm, dot_q4_k_8x8_gemv, dot_q6_k_tiled};
    use crate::cpu::testutil::{quantized_row, Rng};
    use crate::DType;
    use bytemuck::Zeroable;
    use proptest::prelude::*;

    type SimdTile = unsafe fn(&[u8], &[BlockQ8K], usize, &mut [f32]);
    type Twin = fn(&[u8], &[BlockQ8K]) -> f32;

    /// `m` rows of `dtype` × `n` activation rows of `nb` blocks: each kernel against its twin,
    /// bit for bit (rows also 1 byte past alignment).
    fn check(dtype: DType, nb: usize, m: usize, n: usize, seed: u64, scale: f32) {
        if !super::super::has_avx2() {
            eprintln!("skipped: no AVX2");
            return;
        }
        let mut rng = Rng::new(seed);
        let k = nb * 256;
        let mut w = vec![0u8; 1];
        for _ in 0..m {
            w.extend(quantized_row(&mut rng, dtype, k).0);
        }
        let x = rng.vec(k * n, scale);
        let mut y = vec![BlockQ8K::zeroed(); nb * n];
        q8::quantize_row_q8_k(&x, &mut y);
        let rb = (w.len() - 1) / m;
        let aligned = w[1..].to_vec();
        for wr in [&w[1..], &aligned[..]] {
            let row = |r: usize| &wr[r * rb..(r + 1) * rb];
            let act = |t: usize| &y[t * nb..(t + 1) * nb];
            if dtype == DType::Q4K {
                // Decode rows.
                let mut got = vec![0f32; m];
                // SAFETY: features checked above.
                unsafe { rows_q4_k(wr, act(0), &mut got) };
                for r in 0..m {
                    assert_eq!(
                        got[r].to_bits(),
                        dot_q4_k_8x8_gemv(row(r), act(0)).to_bits(),
                        "rows r={r}"
                    );
                }
            }
            if m > TILE_ROWS || n > 4 {
                continue;
            }
            let mut kernels: Vec<(SimdTile, Twin)> = Vec::new();
            if dtype == DType::Q4K {
                kernels.push((tile_q4_k_gemm, dot_q4_k_8x8_gemm));
                kernels.push((tile_q4_k_gemv, dot_q4_k_8x8_gemv));
            } else {
                kernels.push((tile_q6_k_tiled, dot_q6_k_tiled));
            }
            for (i, (kernel, twin)) in kernels.into_iter().enumerate() {
                let mut got = vec![0f32; m * n];
                // SAFETY: features checked above.
                unsafe { kernel(wr, &y, n, &mut got) };
                for r in 0..m {
                    for t in 0..n {
                        let want = twin(row(r), act(t));
                        assert_eq!(
                            got[r * n + t].to_bits(),
                            want.to_bits(),
                            "kernel {i} r={r} t={t}: {} vs {want}",
                            got[r * n + t]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn kernels_equal_twins() {
        for dtype in [DType::Q4K, DType::Q6K] {
            for (m, n) in [(1, 1), (2, 4), (1, 3), (2, 2), (9, 1), (17, 1)] {
                check(dtype, 3, m, n, 5 + m as u64 * 10 + n as u64, 1.0);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn kernels_equal_twins_random(
            q6 in any::<bool>(), nb in 1usize..5, m in 1usize..12, n in 1usize..5,
            seed in any::<u64>(), scale in 1e-3f32..1e3
        ) {
            let dtype = if q6 { DType::Q6K } else { DType::Q4K };
            check(dtype, nb, m, n, seed, scale);
        }
    }
}
