//! AVX2 kernels for IQ4_NL (against q8_0 activations) and IQ4_XS (against q8_K): the non-linear
//! 4-bit types llama.cpp's IQ files use most (matrices whose rows are not whole 256-blocks fall
//! back to IQ4_NL). The 16-entry value table is looked up with `vpshufb` for 32 codes at once,
//! and the byte products are summed by `vpmaddubsw` + `vpmaddwd` ([`super::avx2::sum_i8`]).
//!
//! Each block's integer sum is exact, and the f32 terms are added in the scalar twins' order
//! (`cpu::qdot::dot_iq4_nl` / `dot_iq4_xs`), so results are bit for bit the twins' (tests
//! below); the speed comes from the integer work, which is most of a scalar dot.

use std::arch::x86_64::*;

use half::f16;
use kestrel_gguf::quant::iq4_nl::KVALUES_IQ4NL;
use kestrel_gguf::quant::{BlockQ8K, BlockQ8_0, QK_K};

use super::avx2::sum_i8;
use crate::cpu::dispatch::{Kernels, TypeKernels};

/// Bytes of one IQ4_NL block: f16 scale, 16 bytes of codes.
const NL_BYTES: usize = 18;
/// Bytes of one IQ4_XS super-block: f16 scale, u16 high scale bits, 4 bytes of low scale bits,
/// 128 bytes of codes.
const XS_BYTES: usize = 136;

/// The value table in both 128-bit lanes, for `vpshufb`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn table() -> __m256i {
    // SAFETY: reads 16 bytes of a 16-byte array.
    let t = unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()) };
    _mm256_set_m128i(t, t)
}

/// The 32 table values of 16 code bytes: byte `j` gives value `j` (low nibble, low lane) and
/// value `j + 16` (high nibble, high lane), the order of the activations.
///
/// # Safety
/// `qs` must point at 16 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values(qs: *const u8, table: __m256i) -> __m256i {
    // SAFETY: the caller's 16 bytes.
    let q = unsafe { _mm_loadu_si128(qs.cast()) };
    let m = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(q, m);
    let hi = _mm_and_si128(_mm_srli_epi16(q, 4), m);
    _mm256_shuffle_epi8(table, _mm256_set_m128i(hi, lo))
}

/// The exact sum of 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// The integer dot of 32 table values with 32 activation quants.
///
/// # Safety
/// `q8` must point at 32 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_sum(x: __m256i, q8: *const i8) -> i32 {
    // SAFETY: the caller's 32 bytes.
    let y = unsafe { _mm256_loadu_si256(q8.cast()) };
    hsum(sum_i8(x, y))
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// IQ4_NL rows (`w` holds `out.len()` rows of `y.len()` blocks) against one q8_0 row.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_iq4_nl(w: &[u8], y: &[BlockQ8_0], out: &mut [f32]) {
    // SAFETY: the caller's CPU features.
    unsafe { tile_iq4_nl(w, y, 1, out) }
}

/// IQ4_NL: `out[r · n_act + t]` = weight row `r` · activation row `t` (`y` holds the
/// activation rows back to back); each weight block is decoded once for all of them.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn tile_iq4_nl(w: &[u8], y: &[BlockQ8_0], n_act: usize, out: &mut [f32]) {
    let Some(nb) = y.len().checked_div(n_act).filter(|&nb| nb > 0) else {
        return;
    };
    let rb = nb * NL_BYTES;
    let table = table();
    let n_w = out.len() / n_act;
    for (r, row) in w.chunks_exact(rb).take(n_w).enumerate() {
        let acc = &mut out[r * n_act..(r + 1) * n_act];
        acc.fill(0.0);
        for (i, blk) in row.chunks_exact(NL_BYTES).enumerate() {
            let d = f16_at(blk, 0);
            // SAFETY: a block holds 16 code bytes after its scale.
            let x = unsafe { values(blk.as_ptr().add(2), table) };
            for (t, a) in acc.iter_mut().enumerate() {
                let yb = &y[t * nb + i];
                // SAFETY: a q8_0 block holds 32 quants.
                let s = unsafe { block_sum(x, yb.qs.as_ptr()) };
                // `dot_iq4_nl`'s order.
                *a += yb.d.to_f32() * d * s as f32;
            }
        }
    }
}

/// The 6-bit scale of group `g` of an IQ4_XS super-block.
fn xs_scale(blk: &[u8], g: usize) -> i32 {
    let h = u16::from_le_bytes([blk[2], blk[3]]);
    let l = (blk[4 + g / 2] >> (4 * (g % 2))) & 0xf;
    (l | ((((h >> (2 * g)) & 3) as u8) << 4)) as i32
}

/// IQ4_XS rows against one q8_K row.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_iq4_xs(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
    // SAFETY: the caller's CPU features.
    unsafe { tile_iq4_xs(w, y, 1, out) }
}

/// IQ4_XS tile, as [`tile_iq4_nl`].
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn tile_iq4_xs(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    let Some(nb) = y.len().checked_div(n_act).filter(|&nb| nb > 0) else {
        return;
    };
    let rb = nb * XS_BYTES;
    let table = table();
    let n_w = out.len() / n_act;
    for (r, row) in w.chunks_exact(rb).take(n_w).enumerate() {
        let acc = &mut out[r * n_act..(r + 1) * n_act];
        acc.fill(0.0);
        for (ibl, blk) in row.chunks_exact(XS_BYTES).enumerate() {
            let d = f16_at(blk, 0);
            let mut x = [_mm256_setzero_si256(); QK_K / 32];
            for (g, xg) in x.iter_mut().enumerate() {
                // SAFETY: group `g`'s 16 code bytes lie within the block's 128 at offset 8.
                *xg = unsafe { values(blk.as_ptr().add(8 + 16 * g), table) };
            }
            for (t, a) in acc.iter_mut().enumerate() {
                let yb = &y[t * nb + ibl];
                let d4d8 = d * yb.d;
                for (g, &xg) in x.iter().enumerate() {
                    let dl = d4d8 * (xs_scale(blk, g) - 32) as f32;
                    // SAFETY: group `g`'s 32 quants of the q8_K block.
                    let s = unsafe { block_sum(xg, yb.qs.as_ptr().add(32 * g)) };
                    // `dot_iq4_xs`'s order.
                    *a += dl * s as f32;
                }
            }
        }
    }
}

/// `base` with the IQ4_NL and IQ4_XS kernels of this module (when the CPU has AVX2; `base`
/// unchanged otherwise).
pub(crate) fn with_iq4(mut base: Kernels) -> Kernels {
    if !super::has_avx2() {
        return base;
    }
    fn nl_rows(w: &[u8], y: &[BlockQ8_0], out: &mut [f32]) {
        // SAFETY: only reachable through a table made after detection (above).
        unsafe { rows_iq4_nl(w, y, out) }
    }
    fn nl_tile(w: &[u8], y: &[BlockQ8_0], n_act: usize, out: &mut [f32]) {
        // SAFETY: as above.
        unsafe { tile_iq4_nl(w, y, n_act, out) }
    }
    fn xs_rows(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
        // SAFETY: as above.
        unsafe { rows_iq4_xs(w, y, out) }
    }
    fn xs_tile(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
        // SAFETY: as above.
        unsafe { tile_iq4_xs(w, y, n_act, out) }
    }
    base.iq4_nl = TypeKernels {
        rows: nl_rows,
        tile: nl_tile,
        tile_rows: 4,
        tile_acts: 8,
        ..base.iq4_nl
    };
    base.iq4_xs = TypeKernels {
        rows: xs_rows,
        tile: xs_tile,
        tile_rows: 4,
        tile_acts: 8,
        ..base.iq4_xs
    };
    base
}

#[cfg(test)]
mod tests {
    use bytemuck::Zeroable;

    use crate::cpu::dispatch::{Isa, Kernels};
    use crate::cpu::q8;
    use crate::cpu::qdot::{dot_iq4_nl, dot_iq4_xs};
    use crate::cpu::testutil::{quantized_row, Rng};
    use crate::DType;

    use super::*;

    /// `m` weight rows against `n_act` activation rows, aligned and shifted by one byte: every
    /// ISA's rows and tile kernels equal the scalar twin's dots bit for bit.
    fn check(dtype: DType, k: usize, m: usize, n_act: usize, seed: u64, scale: f32) {
        let mut rng = Rng::new(seed);
        let mut w = Vec::new();
        for _ in 0..m {
            w.extend(quantized_row(&mut rng, dtype, k).0);
        }
        let mut shifted = vec![0u8; w.len() + 1];
        shifted[1..].copy_from_slice(&w);
        let x = rng.vec(k * n_act, scale);
        let mut y0 = vec![BlockQ8_0::zeroed(); k / 32 * n_act];
        let mut yk = vec![BlockQ8K::zeroed(); k / QK_K * n_act];
        q8::quantize_row_q8_0(&x, &mut y0);
        if dtype == DType::IQ4XS {
            q8::quantize_row_q8_k(&x, &mut yk);
        }
        let rb = w.len() / m;
        let mut want = vec![0f32; m * n_act];
        for r in 0..m {
            for t in 0..n_act {
                let wr = &w[r * rb..(r + 1) * rb];
                want[r * n_act + t] = match dtype {
                    DType::IQ4NL => dot_iq4_nl(wr, &y0[t * k / 32..(t + 1) * k / 32]),
                    _ => dot_iq4_xs(wr, &yk[t * k / QK_K..(t + 1) * k / QK_K]),
                };
            }
        }
        for isa in Isa::available() {
            let kern = Kernels::for_isa(isa).unwrap();
            for row in [&w[..], &shifted[1..]] {
                let mut got = vec![0f32; m * n_act];
                match dtype {
                    DType::IQ4NL => (kern.iq4_nl.tile)(row, &y0, n_act, &mut got),
                    _ => (kern.iq4_xs.tile)(row, &yk, n_act, &mut got),
                }
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&want),
                    bits(&got),
                    "{dtype:?} tile {} k={k}",
                    isa.name()
                );
                if n_act == 1 {
                    let mut got = vec![0f32; m];
                    match dtype {
                        DType::IQ4NL => (kern.iq4_nl.rows)(row, &y0, &mut got),
                        _ => (kern.iq4_xs.rows)(row, &yk, &mut got),
                    }
                    assert_eq!(bits(&want), bits(&got), "{dtype:?} rows {}", isa.name());
                }
            }
        }
    }

    #[test]
    fn iq4_kernels_equal_the_scalar_twins() {
        for (seed, k, m, n_act) in [
            (1u64, 256, 3, 1),
            (2, 512, 4, 3),
            (3, 1024, 2, 8),
            (4, 256, 1, 5),
        ] {
            for scale in [1.0f32, 1e-3, 40.0] {
                check(DType::IQ4NL, k, m, n_act, seed, scale);
                check(DType::IQ4XS, k, m, n_act, seed, scale);
            }
        }
        // IQ4_NL's rows need not be whole 256-blocks.
        check(DType::IQ4NL, 96, 5, 2, 9, 1.0);
    }
}
