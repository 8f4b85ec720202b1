//! AVX2 kernels for the 4-bit table types: IQ4_NL and MXFP4 (against q8_0 activations) and
//! IQ4_XS (against q8_K). IQ4_NL/IQ4_XS are the types llama.cpp's IQ files use most (matrices
//! whose rows are not whole 256-blocks fall back to IQ4_NL); MXFP4 is gpt-oss's expert type.
//! The 16-entry value table is looked up with `vpshufb` for 32 codes at once, and the byte
//! products are summed by `vpmaddubsw` + `vpmaddwd` ([`super::avx2::sum_i8`]).
//!
//! The integer lanes are exact and the f32 lanes follow the scalar twins' order
//! (`cpu::qdot::table_x86`, ggml's x86 order: one FMA of 8 lanes per block, no horizontal sum
//! per block), so results are bit for bit the twins' (tests below).

use std::arch::x86_64::*;

use kestrel_gguf::quant::iq4_nl::KVALUES_IQ4NL;
use kestrel_gguf::quant::mxfp4::{e8m0_to_f32_half, KVALUES_MXFP4};
use kestrel_gguf::quant::{BlockQ8K, BlockQ8_0, QK_K};

use super::avx2::sum_i8;
use super::avx2_kquants::{fp16, fp16_at, hsum8};
use crate::cpu::kernel_table::{Kernels, TypeKernels};

/// Bytes of one IQ4_NL block: f16 scale, 16 bytes of codes.
const NL_BYTES: usize = 18;
/// Bytes of one MXFP4 block: E8M0 exponent byte, 16 bytes of codes.
const MX_BYTES: usize = 17;
/// Bytes of one IQ4_XS super-block: f16 scale, u16 high scale bits, 4 bytes of low scale bits,
/// 128 bytes of codes.
const XS_BYTES: usize = 136;

/// A 16-value table in both 128-bit lanes, for `vpshufb`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn table_of(values: &[i8; 16]) -> __m256i {
    // SAFETY: reads 16 bytes of a 16-byte array.
    let t = unsafe { _mm_loadu_si128(values.as_ptr().cast()) };
    _mm256_set_m128i(t, t)
}

/// IQ4_NL's table.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn table() -> __m256i {
    table_of(&KVALUES_IQ4NL)
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
pub(crate) fn hsum(v: __m256i) -> i32 {
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
    // SAFETY: the caller's CPU features.
    unsafe { tile_table::<NL_BYTES>(w, y, n_act, out, table(), |b| fp16_at(b, 0)) }
}

/// MXFP4 rows against one q8_0 row.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_mxfp4(w: &[u8], y: &[BlockQ8_0], out: &mut [f32]) {
    // SAFETY: the caller's CPU features.
    unsafe { tile_mxfp4(w, y, 1, out) }
}

/// MXFP4 tile, as [`tile_iq4_nl`]: the E2M1 table (doubled, as ggml's) and half the E8M0 scale.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn tile_mxfp4(w: &[u8], y: &[BlockQ8_0], n_act: usize, out: &mut [f32]) {
    let table = table_of(&KVALUES_MXFP4);
    // SAFETY: the caller's CPU features.
    unsafe { tile_table::<MX_BYTES>(w, y, n_act, out, table, |b| e8m0_to_f32_half(b[0])) }
}

/// A 32-value table type against q8_0: `BYTES`-byte blocks whose last 16 bytes are the codes,
/// `scale` reading the block's scale from its first bytes. Per activation row two 8-lane f32
/// accumulators take the blocks in turn (one FMA per block), the odd last block is added after
/// the lanes' sum: `qdot::table_x86::dot_pairs`'s order.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_table<const BYTES: usize>(
    w: &[u8],
    y: &[BlockQ8_0],
    n_act: usize,
    out: &mut [f32],
    table: __m256i,
    scale: impl Fn(&[u8]) -> f32 + Copy,
) {
    // SAFETY (all arms): the caller's CPU features.
    unsafe {
        match n_act {
            1 => tile_table_n::<BYTES, 1>(w, y, out, table, scale),
            2 => tile_table_n::<BYTES, 2>(w, y, out, table, scale),
            3 => tile_table_n::<BYTES, 3>(w, y, out, table, scale),
            4 => tile_table_n::<BYTES, 4>(w, y, out, table, scale),
            5 => tile_table_n::<BYTES, 5>(w, y, out, table, scale),
            6 => tile_table_n::<BYTES, 6>(w, y, out, table, scale),
            7 => tile_table_n::<BYTES, 7>(w, y, out, table, scale),
            8 => tile_table_n::<BYTES, 8>(w, y, out, table, scale),
            _ => panic!("a tile takes 1 to 8 activation rows, not {n_act}"),
        }
    }
}

/// [`tile_table`] for `N` activation rows (accumulators in registers).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_table_n<const BYTES: usize, const N: usize>(
    w: &[u8],
    y: &[BlockQ8_0],
    out: &mut [f32],
    table: __m256i,
    scale: impl Fn(&[u8]) -> f32,
) {
    let nb = y.len() / N;
    if nb == 0 {
        return;
    }
    let rb = nb * BYTES;
    let n_w = out.len() / N;
    let paired = nb - nb % 2;
    for (r, row) in w.chunks_exact(rb).take(n_w).enumerate() {
        let mut acc0 = [_mm256_setzero_ps(); N];
        let mut acc1 = [_mm256_setzero_ps(); N];
        let mut i = 0;
        while i < paired {
            let (b0, b1) = (&row[i * BYTES..], &row[(i + 1) * BYTES..]);
            let (d0, d1) = (scale(b0), scale(b1));
            // SAFETY: each block holds 16 code bytes at its end.
            let (x0, x1) = unsafe {
                (
                    values(b0.as_ptr().add(BYTES - 16), table),
                    values(b1.as_ptr().add(BYTES - 16), table),
                )
            };
            for t in 0..N {
                let (y0, y1) = (&y[t * nb + i], &y[t * nb + i + 1]);
                // SAFETY: a q8_0 block holds 32 quants.
                let (q0, q1) = unsafe {
                    (
                        _mm256_loadu_si256(y0.qs.as_ptr().cast()),
                        _mm256_loadu_si256(y1.qs.as_ptr().cast()),
                    )
                };
                let s0 = _mm256_set1_ps(fp16(y0.d.to_bits()) * d0);
                let s1 = _mm256_set1_ps(fp16(y1.d.to_bits()) * d1);
                acc0[t] = _mm256_fmadd_ps(s0, _mm256_cvtepi32_ps(sum_i8(x0, q0)), acc0[t]);
                acc1[t] = _mm256_fmadd_ps(s1, _mm256_cvtepi32_ps(sum_i8(x1, q1)), acc1[t]);
            }
            i += 2;
        }
        for t in 0..N {
            let mut sumf = hsum8(_mm256_add_ps(acc0[t], acc1[t]));
            if nb % 2 == 1 {
                let blk = &row[paired * BYTES..];
                let yb = &y[t * nb + paired];
                // SAFETY: as above.
                let x = unsafe { values(blk.as_ptr().add(BYTES - 16), table) };
                // SAFETY: as above.
                let s = unsafe { block_sum(x, yb.qs.as_ptr()) };
                sumf = (fp16(yb.d.to_bits()) * scale(blk)).mul_add(s as f32, sumf);
            }
            out[r * N + t] = sumf;
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

/// IQ4_XS tile, as [`tile_iq4_nl`]: per block and activation row the lanes' exact integer sums
/// over its 8 groups (each times its scale), one FMA (`dot_iq4_xs_x86`'s order).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn tile_iq4_xs(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    // SAFETY (all arms): the caller's CPU features.
    unsafe {
        match n_act {
            1 => tile_iq4_xs_n::<1>(w, y, out),
            2 => tile_iq4_xs_n::<2>(w, y, out),
            3 => tile_iq4_xs_n::<3>(w, y, out),
            4 => tile_iq4_xs_n::<4>(w, y, out),
            5 => tile_iq4_xs_n::<5>(w, y, out),
            6 => tile_iq4_xs_n::<6>(w, y, out),
            7 => tile_iq4_xs_n::<7>(w, y, out),
            8 => tile_iq4_xs_n::<8>(w, y, out),
            _ => panic!("a tile takes 1 to 8 activation rows, not {n_act}"),
        }
    }
}

/// [`tile_iq4_xs`] for `N` activation rows.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_iq4_xs_n<const N: usize>(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
    let nb = y.len() / N;
    if nb == 0 {
        return;
    }
    let table = table();
    let n_w = out.len() / N;
    for (r, row) in w.chunks_exact(nb * XS_BYTES).take(n_w).enumerate() {
        let mut acc = [_mm256_setzero_ps(); N];
        for (ibl, blk) in row.chunks_exact(XS_BYTES).enumerate() {
            let d = fp16_at(blk, 0);
            // Per group: |value| bytes, the values (whose signs move onto the activations, as
            // `sum_i8` does) and the scale in each i16 lane.
            let mut ax = [_mm256_setzero_si256(); QK_K / 32];
            let mut x = [_mm256_setzero_si256(); QK_K / 32];
            let mut ls = [_mm256_setzero_si256(); QK_K / 32];
            for g in 0..QK_K / 32 {
                // SAFETY: group `g`'s 16 code bytes lie within the block's 128 at offset 8.
                x[g] = unsafe { values(blk.as_ptr().add(8 + 16 * g), table) };
                ax[g] = _mm256_sign_epi8(x[g], x[g]);
                ls[g] = _mm256_set1_epi16((xs_scale(blk, g) - 32) as i16);
            }
            for (t, a) in acc.iter_mut().enumerate() {
                let yb = &y[t * nb + ibl];
                let mut sumi = _mm256_setzero_si256();
                for g in 0..QK_K / 32 {
                    // SAFETY: group `g`'s 32 quants of the q8_K block.
                    let q = unsafe { _mm256_loadu_si256(yb.qs.as_ptr().add(32 * g).cast()) };
                    let p16 = _mm256_maddubs_epi16(ax[g], _mm256_sign_epi8(q, x[g]));
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, ls[g]));
                }
                let ds = _mm256_set1_ps(d * yb.d);
                *a = _mm256_fmadd_ps(ds, _mm256_cvtepi32_ps(sumi), *a);
            }
        }
        for (t, a) in acc.iter().enumerate() {
            out[r * N + t] = hsum8(*a);
        }
    }
}

/// `base` with the IQ4_NL, MXFP4 and IQ4_XS kernels of this module (when the CPU has AVX2; `base`
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
    fn mx_rows(w: &[u8], y: &[BlockQ8_0], out: &mut [f32]) {
        // SAFETY: as above.
        unsafe { rows_mxfp4(w, y, out) }
    }
    fn mx_tile(w: &[u8], y: &[BlockQ8_0], n_act: usize, out: &mut [f32]) {
        // SAFETY: as above.
        unsafe { tile_mxfp4(w, y, n_act, out) }
    }
    base.mxfp4 = TypeKernels {
        rows: mx_rows,
        tile: mx_tile,
        tile_rows: 4,
        tile_acts: 8,
        ..base.mxfp4
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

    use crate::cpu::isa::Isa;
    use crate::cpu::kernel_table::Kernels;
    use crate::cpu::q8;
    use crate::cpu::qdot::table_x86::{dot_iq4_nl_x86, dot_iq4_xs_x86, dot_mxfp4_x86};
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
                    DType::IQ4NL => dot_iq4_nl_x86(wr, &y0[t * k / 32..(t + 1) * k / 32]),
                    DType::MXFP4 => dot_mxfp4_x86(wr, &y0[t * k / 32..(t + 1) * k / 32]),
                    _ => dot_iq4_xs_x86(wr, &yk[t * k / QK_K..(t + 1) * k / QK_K]),
                };
            }
        }
        for isa in Isa::available() {
            let kern = Kernels::for_isa(isa).unwrap();
            for row in [&w[..], &shifted[1..]] {
                let mut got = vec![0f32; m * n_act];
                match dtype {
                    DType::IQ4NL => (kern.iq4_nl.tile)(row, &y0, n_act, &mut got),
                    DType::MXFP4 => (kern.mxfp4.tile)(row, &y0, n_act, &mut got),
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
                        DType::MXFP4 => (kern.mxfp4.rows)(row, &y0, &mut got),
                        _ => (kern.iq4_xs.rows)(row, &yk, &mut got),
                    }
                    assert_eq!(bits(&want), bits(&got), "{dtype:?} rows {}", isa.name());
                }
            }
        }
    }

    #[test]
    fn table_kernels_equal_the_scalar_twins() {
        for (seed, k, m, n_act) in [
            (1u64, 256, 3, 1),
            (2, 512, 4, 3),
            (3, 1024, 2, 8),
            (4, 256, 1, 5),
        ] {
            for scale in [1.0f32, 1e-3, 40.0] {
                check(DType::IQ4NL, k, m, n_act, seed, scale);
                check(DType::MXFP4, k, m, n_act, seed, scale);
                check(DType::IQ4XS, k, m, n_act, seed, scale);
            }
        }
        // IQ4_NL's and MXFP4's rows need not be whole 256-blocks.
        check(DType::IQ4NL, 96, 5, 2, 9, 1.0);
        check(DType::MXFP4, 96, 5, 2, 9, 1.0);
    }
}
