//! AVX-512 (F/BW/VL) dot kernels for Q5_K against q8_K, bit for bit the scalar twin in
//! `cpu::qdot` (ggml's generic `ggml_vec_dot_q5_K_q8_K` order). Q4_K and Q6_K, whose llama.cpp
//! x86 orders kestrel mirrors, are in [`super::kquants_vnni`].
//!
//! The twins accumulate exact integer products into 8 lanes by position modulo 8
//! (`aux32[l]`), then per super-block `sums[l] += d · aux32[l]` in f32 and, for Q4_K/Q5_K,
//! `sumf -= dmin · Σ bsums·mins`; at the end `sumf += sums[l]` for `l = 0..8`. Here each
//! 32-value chunk's products are formed as i16 (`vpmullw`, exact), and two `vpmaddwd` with
//! the chunk's scale in the even or the odd i16 of each pair split them into even and odd
//! positions; the 16 i32 lanes of each are folded into the 8 residues at the end of the
//! super-block. Integer sums are exact in any order, so the f32 steps see the same `aux32`.

use std::arch::x86_64::*;

use kestrel_gguf::quant::{BlockQ8K, QK_K};

use crate::cpu::qdot::k4_scales;

/// Bytes of one Q4_K / Q5_K block.
const Q4K_BYTES: usize = 144;
const Q5K_BYTES: usize = 176;

/// f16 bits to f32 (exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn fp16(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// Little-endian u16 at `p`.
#[inline(always)]
unsafe fn rd16(p: *const u8) -> u16 {
    // SAFETY: the caller keeps `p..p+2` in bounds.
    unsafe { u16::from_le_bytes([*p, *p.add(1)]) }
}

/// Even and odd position accumulators of one super-block.
struct Acc {
    even: __m512i,
    odd: __m512i,
}

impl Acc {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    fn new() -> Acc {
        Acc {
            even: _mm512_setzero_si512(),
            odd: _mm512_setzero_si512(),
        }
    }

    /// Adds `scale · a[p] · q8[p]` for the 32 positions of one chunk; `s_lo` scales positions
    /// 0..16, `s_hi` 16..32 (equal for Q4_K/Q5_K, one per 16 for Q6_K).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    unsafe fn chunk(&mut self, a: __m256i, q8: *const i8, s_lo: i16, s_hi: i16) {
        // SAFETY: the caller keeps 32 bytes at `q8` in bounds.
        let b = unsafe { _mm256_loadu_si256(q8.cast()) };
        let p = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(a), _mm512_cvtepi8_epi16(b));
        let lo = i32::from(s_lo as u16);
        let hi = i32::from(s_hi as u16);
        let se = _mm512_inserti64x4::<1>(_mm512_set1_epi32(lo), _mm256_set1_epi32(hi));
        let so = _mm512_inserti64x4::<1>(_mm512_set1_epi32(lo << 16), _mm256_set1_epi32(hi << 16));
        self.even = _mm512_add_epi32(self.even, _mm512_madd_epi16(p, se));
        self.odd = _mm512_add_epi32(self.odd, _mm512_madd_epi16(p, so));
    }

    /// `aux32[0..8]`: lane `i` of `even` holds position `2i` of each chunk (residue
    /// `2(i mod 4)`), of `odd` position `2i + 1`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    fn fold(&self) -> __m256i {
        let fold4 = |v: __m512i| {
            let h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
            _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
        };
        let (e, o) = (fold4(self.even), fold4(self.odd));
        _mm256_set_m128i(_mm_unpackhi_epi32(e, o), _mm_unpacklo_epi32(e, o))
    }
}

/// `sums[l] += d · aux32[l]` (multiply, then add: the twin's rounding).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn add_scaled(sums: __m256, d: f32, aux: __m256i) -> __m256 {
    _mm256_add_ps(
        sums,
        _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(aux)),
    )
}

/// `sumf + sums[0] + ... + sums[7]`, in that order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn finish(mut sumf: f32, sums: __m256) -> f32 {
    let mut s = [0f32; 8];
    // SAFETY: 8 floats, unaligned store.
    unsafe { _mm256_storeu_ps(s.as_mut_ptr(), sums) };
    for v in s {
        sumf += v;
    }
    sumf
}

/// `Σ bsums[j] · mins[j / 2]` (exact).
#[inline(always)]
fn mins_sum(yb: &BlockQ8K, mins: &[u8; 8]) -> i32 {
    let mut sumi = 0i32;
    for (j, &b) in yb.bsums.iter().enumerate() {
        sumi += i32::from(b) * i32::from(mins[j / 2]);
    }
    sumi
}

/// Checks `w` holds `blocks` blocks of `bytes`.
#[inline(always)]
pub(super) fn check(w: &[u8], blocks: usize, bytes: usize) {
    assert!(
        blocks.checked_mul(bytes) == Some(w.len()),
        "dot: {} weight bytes for {blocks} blocks of {bytes}",
        w.len()
    );
}

/// One unpacked K-quant super-block: its 8 chunks of 32 quants as i8 (offset removed), the
/// scale of each chunk's first and second 16 values, and the block's f16 scales.
struct Unpacked {
    q: [__m256i; QK_K / 32],
    s: [(i16, i16); QK_K / 32],
    d: f32,
    dmin: f32,
    mins: [u8; 8],
}

/// Unpack the Q4_K (or Q5_K, `q5`) block at `b`.
///
/// # Safety
/// `b` points at a whole block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn unpack_q45(b: *const u8, q5: bool) -> Unpacked {
    let m4 = _mm256_set1_epi8(0x0f);
    let one = _mm256_set1_epi8(1);
    let mut packed = [0u8; 12];
    // SAFETY: bytes 4..16 of the block are its scales.
    unsafe { std::ptr::copy_nonoverlapping(b.add(4), packed.as_mut_ptr(), 12) };
    let (scales, mins) = k4_scales(&packed);
    // SAFETY: the block's fields (d, dmin, qh for Q5_K, qs) are in bounds.
    let (d, dmin, qh, qs) = unsafe {
        let (qh, qs) = if q5 {
            (_mm256_loadu_si256(b.add(16).cast()), b.add(48))
        } else {
            (_mm256_setzero_si256(), b.add(16))
        };
        (fp16(rd16(b)), fp16(rd16(b.add(2))), qh, qs)
    };
    let mut u = Unpacked {
        q: [_mm256_setzero_si256(); QK_K / 32],
        s: [(0, 0); QK_K / 32],
        d,
        dmin,
        mins,
    };
    for j in 0..QK_K / 64 {
        // SAFETY: 32 bytes of quants per 64 values, in bounds.
        let q = unsafe { _mm256_loadu_si256(qs.add(32 * j).cast()) };
        let mut lo = _mm256_and_si256(q, m4);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
        if q5 {
            let c = 2 * j as i32;
            let bit = |k: i32| {
                let s = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(k));
                _mm256_slli_epi16::<4>(_mm256_and_si256(s, one))
            };
            lo = _mm256_or_si256(lo, bit(c));
            hi = _mm256_or_si256(hi, bit(c + 1));
        }
        let (s0, s1) = (scales[2 * j] as i16, scales[2 * j + 1] as i16);
        u.q[2 * j] = lo;
        u.q[2 * j + 1] = hi;
        u.s[2 * j] = (s0, s0);
        u.s[2 * j + 1] = (s1, s1);
    }
    u
}

/// `aux32[0..8]` of one unpacked weight block against one activation block.
///
/// # Safety
/// `q8` points at the activation block's 256 quants.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn aux_unpacked(u: &Unpacked, q8: *const i8) -> __m256i {
    let mut acc = Acc::new();
    for (c, (&a, &(lo, hi))) in u.q.iter().zip(&u.s).enumerate() {
        // SAFETY: chunk c is within the 256 activation quants.
        unsafe { acc.chunk(a, q8.add(32 * c), lo, hi) };
    }
    acc.fold()
}

/// Q4_K and Q5_K (`q5`) · q8_K.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn dot_q45(w: &[u8], y: &[BlockQ8K], q5: bool) -> f32 {
    let bs = if q5 { Q5K_BYTES } else { Q4K_BYTES };
    check(w, y.len(), bs);
    let mut sums = _mm256_setzero_ps();
    let mut sumf = 0f32;
    for (i, yb) in y.iter().enumerate() {
        // SAFETY: block i lies in w (checked above); the activation block holds 256 quants.
        let (u, aux) = unsafe {
            let u = unpack_q45(w.as_ptr().add(i * bs), q5);
            let aux = aux_unpacked(&u, yb.qs.as_ptr());
            (u, aux)
        };
        sums = add_scaled(sums, u.d * yb.d, aux);
        let dm = u.dmin * yb.d;
        sumf -= dm * mins_sum(yb, &u.mins) as f32;
    }
    finish(sumf, sums)
}

/// Q5_K · q8_K.
///
/// # Safety
/// The CPU has AVX2, FMA, F16C and AVX-512 F/BW/VL.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn dot_q5_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    // SAFETY: same features.
    unsafe { dot_q45(w, y, true) }
}

/// One super-block's weights unpacked for a tile: per 32-value chunk, the quants times their
/// scale as i16 (exact: |q · scale| ≤ 4096), split into the even positions (odd ones zero) and
/// the odd positions, so one `vpmaddwd` with the activations gives the same even/odd i32 lanes
/// as [`Acc::chunk`].
type Prepared = [(__m512i, __m512i); QK_K / 32];

/// Scale the i8 quants `a` (32 of them) by `s_lo` (positions 0..16) and `s_hi` (16..32) and
/// split even from odd positions.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn prep_chunk(a: __m256i, s_lo: i16, s_hi: i16) -> (__m512i, __m512i) {
    let scale = _mm512_inserti64x4::<1>(_mm512_set1_epi16(s_lo), _mm256_set1_epi16(s_hi));
    let ws = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(a), scale);
    (
        _mm512_maskz_mov_epi16(0x5555_5555, ws),
        _mm512_maskz_mov_epi16(0xAAAA_AAAA, ws),
    )
}

/// `aux32[0..8]` of one activation block against prepared weights (equal to what the
/// single-row kernels compute for it).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn aux_prepared(prep: &Prepared, q8: *const i8) -> __m256i {
    let mut acc = Acc::new();
    for (c, (we, wo)) in prep.iter().enumerate() {
        // SAFETY: the caller keeps the block's 256 quants at `q8` in bounds.
        let b = _mm512_cvtepi8_epi16(unsafe { _mm256_loadu_si256(q8.add(32 * c).cast()) });
        acc.even = _mm512_add_epi32(acc.even, _mm512_madd_epi16(*we, b));
        acc.odd = _mm512_add_epi32(acc.odd, _mm512_madd_epi16(*wo, b));
    }
    acc.fold()
}

/// The activation rows of a tile: `n_act` rows of `nb` blocks back to back.
#[inline(always)]
fn tile_shape(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &[f32], bs: usize) -> Option<usize> {
    let nb = y.len().checked_div(n_act).filter(|&nb| nb > 0)?;
    let n_w = out.len() / n_act;
    assert!(
        y.len() == nb * n_act && out.len() == n_w * n_act,
        "tile: {} activation blocks for {n_act} rows, {} outputs",
        y.len(),
        out.len()
    );
    check(w, n_w * nb, bs);
    Some(nb)
}

/// A K-quant tile: weight rows × up to 4 activation rows at a time; each weight block is
/// unpacked and scaled once for all of them. Bit for bit the single-row kernel per pair.
///
/// # Safety
/// `unpack` reads one block of `bs` bytes at the pointer it is given.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn tile_k(
    w: &[u8],
    y: &[BlockQ8K],
    n_act: usize,
    out: &mut [f32],
    bs: usize,
    has_mins: bool,
    unpack: impl Fn(*const u8) -> Unpacked,
) {
    let Some(nb) = tile_shape(w, y, n_act, out, bs) else {
        return;
    };
    let zero = (_mm512_setzero_si512(), _mm512_setzero_si512());
    for (r, orow) in out.chunks_exact_mut(n_act).enumerate() {
        for t0 in (0..n_act).step_by(4) {
            let tn = (n_act - t0).min(4);
            let mut sums = [_mm256_setzero_ps(); 4];
            let mut sumf = [0f32; 4];
            for i in 0..nb {
                // SAFETY: block (r, i) lies in w (checked by tile_shape).
                let u = unpack(unsafe { w.as_ptr().add((r * nb + i) * bs) });
                let mut prep: Prepared = [zero; QK_K / 32];
                for (p, (&a, &(lo, hi))) in prep.iter_mut().zip(u.q.iter().zip(&u.s)) {
                    *p = prep_chunk(a, lo, hi);
                }
                for t in 0..tn {
                    let yb = &y[(t0 + t) * nb + i];
                    // SAFETY: the activation block holds 256 quants.
                    let aux = unsafe { aux_prepared(&prep, yb.qs.as_ptr()) };
                    sums[t] = add_scaled(sums[t], u.d * yb.d, aux);
                    if has_mins {
                        let dm = u.dmin * yb.d;
                        sumf[t] -= dm * mins_sum(yb, &u.mins) as f32;
                    }
                }
            }
            for t in 0..tn {
                orow[t0 + t] = finish(sumf[t], sums[t]);
            }
        }
    }
}

/// Q5_K tile (see [`tile_k`]): `w` holds whole weight rows, `y` `n_act` activation rows,
/// `out[r · n_act + t]` gets weight row `r` · activation row `t`.
///
/// # Safety
/// As [`dot_q5_k`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn tile_q5_k(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    // SAFETY: as for Q4_K.
    unsafe { tile_k(w, y, n_act, out, Q5K_BYTES, true, |b| unpack_q45(b, true)) }
}

#[cfg(test)]
mod tests {
    use bytemuck::Zeroable;
    use proptest::prelude::*;

    use super::*;
    use crate::cpu::q8;
    use crate::cpu::qdot;
    use crate::cpu::testutil::{quantized_row, Rng};
    use crate::DType;

    fn check(dtype: DType, k: usize, seed: u64, scale: f32, random_bytes: bool) {
        if !super::super::has_avx512() {
            eprintln!("skipped: no AVX-512 F/BW/VL + VNNI");
            return;
        }
        let mut rng = Rng::new(seed);
        let (mut w, _) = quantized_row(&mut rng, dtype, k);
        if random_bytes {
            // Arbitrary quants and scales, keeping each block's f16 scales finite.
            let bs = dtype.row_bytes(QK_K).unwrap();
            let mut s = seed | 1;
            for (i, b) in w.iter_mut().enumerate() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let o = i % bs;
                let is_scale = match dtype {
                    DType::Q6K => o >= 208,
                    _ => o < 4,
                };
                if !is_scale {
                    *b = s as u8;
                }
            }
        }
        let x = rng.vec(k, scale);
        let mut y = vec![BlockQ8K::zeroed(); k / QK_K];
        q8::quantize_row_q8_k(&x, &mut y);
        let mut shifted = vec![0u8; w.len() + 1];
        shifted[1..].copy_from_slice(&w);
        for row in [&w[..], &shifted[1..]] {
            // SAFETY: features checked above.
            let (want, got) = unsafe { (qdot::dot_q5_k(row, &y), dot_q5_k(row, &y)) };
            assert_eq!(
                want.to_bits(),
                got.to_bits(),
                "{dtype:?} k={k} seed={seed}: scalar {want} simd {got}"
            );
        }
    }

    /// Q4_K and Q6_K moved to `kquants_vnni` (llama.cpp's x86 orders).
    const TYPES: [DType; 1] = [DType::Q5K];

    #[test]
    fn kquants_equal_scalar_twins() {
        for dtype in TYPES {
            for (i, k) in [256usize, 640, 2048].into_iter().enumerate() {
                if k % QK_K == 0 {
                    check(dtype, k, 3 + i as u64, 1.0, false);
                    check(dtype, k, 30 + i as u64, 1.0, true);
                }
            }
        }
    }

    /// `n_w` weight rows × `n_act` activation rows through the tile kernel equal the scalar
    /// twin's dot of each pair, bit for bit.
    fn check_tile(dtype: DType, blocks: usize, n_w: usize, n_act: usize, seed: u64) {
        if !super::super::has_avx512() {
            return;
        }
        let k = blocks * QK_K;
        let mut rng = Rng::new(seed);
        let rows: Vec<Vec<u8>> = (0..n_w)
            .map(|_| quantized_row(&mut rng, dtype, k).0)
            .collect();
        let w: Vec<u8> = rows.concat();
        let x = rng.vec(k * n_act, 3.0);
        let mut y = vec![BlockQ8K::zeroed(); blocks * n_act];
        q8::quantize_row_q8_k(&x, &mut y);
        let mut out = vec![0f32; n_w * n_act];
        // SAFETY: features checked above.
        unsafe { tile_q5_k(&w, &y, n_act, &mut out) }
        for (r, row) in rows.iter().enumerate() {
            for (t, ya) in y.chunks_exact(blocks).enumerate() {
                let want = qdot::dot_q5_k(row, ya);
                let got = out[r * n_act + t];
                assert_eq!(
                    want.to_bits(),
                    got.to_bits(),
                    "{dtype:?} row {r} act {t}: {want} vs {got}"
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn kquant_tiles_equal_scalar_twins(
            t in 0usize..1, blocks in 1usize..4, n_w in 1usize..5, n_act in 1usize..7,
            seed in any::<u64>()
        ) {
            check_tile(TYPES[t], blocks, n_w, n_act, seed);
        }

        #[test]
        fn kquants_equal_scalar_twins_random(
            t in 0usize..1, blocks in 1usize..9, seed in any::<u64>(), scale in 1e-3f32..1e3,
            random_bytes in any::<bool>()
        ) {
            check(TYPES[t], blocks * QK_K, seed, scale, random_bytes);
        }
    }
}
