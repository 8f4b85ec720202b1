//! AVX2 kernels for the IQ grid types against q8_K activations: IQ2_XXS, IQ2_XS, IQ2_S,
//! IQ3_XXS and IQ3_S (the low-bit types of llama.cpp's IQ files).
//!
//! Each 32 values of a weight block are decoded (as they are reached for one activation row,
//! once per block for all the rows of a tile) into the grid magnitudes as unsigned bytes (4
//! grid entries of 8 values, or 8 of 4, from the tables), the signs as ±1 bytes, and the
//! scales as i16 lanes. An activation
//! row then costs per 32 values one `vpsignb` (the signs moved onto the activations, whose
//! q8_K quants lie in -127..=127, so negation never wraps), one `vpmaddubsw` (magnitudes ≤ 62:
//! no saturation) and one `vpmaddwd` by the scales.
//!
//! The block's integer sum is exact, so it equals the scalar twin's (`cpu::qdot_iq::isum_*`),
//! and the f32 terms follow the twin's order (`dot_grid`): results are bit for bit the twins'.

use std::arch::x86_64::*;

use kestrel_gguf::quant::iq_grids::{
    IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
};
use kestrel_gguf::quant::{BlockQ8K, QK_K};

use super::avx2_kquants::fp16_at;
use super::iq4::hsum;
use crate::cpu::dispatch::{Kernels, TypeKernels};

/// Groups of 32 values in a block.
const GROUPS: usize = QK_K / 32;

// The tables as statics, so the kernels index one copy in memory.
static G2XXS: &[u64; 256] = &IQ2XXS_GRID;
static G2XS: &[u64; 512] = &IQ2XS_GRID;
static G2S: &[u64; 1024] = &IQ2S_GRID;
static G3XXS: &[u32; 256] = &IQ3XXS_GRID;
static G3S: &[u32; 512] = &IQ3S_GRID;
static KSIGNS: &[u8; 128] = &KSIGNS_IQ2XS;

/// 32 values of a weight block ready for integer dots.
#[derive(Clone, Copy)]
struct Group {
    /// Grid magnitudes.
    g: __m256i,
    /// ±1 per value.
    s: __m256i,
    /// The scale of each i16 pair lane (lanes 0..8: values 0..16 of the group, 8..16: 16..32).
    sc: __m256i,
}

/// The integer lanes of one group with its 32 activation quants.
///
/// # Safety
/// `q8` must point at 32 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_dot(x: Group, q8: *const i8) -> __m256i {
    // SAFETY: the caller's 32 bytes.
    let q = unsafe { _mm256_loadu_si256(q8.cast()) };
    let p = _mm256_maddubs_epi16(x.g, _mm256_sign_epi8(q, x.s));
    _mm256_madd_epi16(p, x.sc)
}

#[inline(always)]
fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline(always)]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Four sign bytes (one per 8 values, first in the low byte) as 32 bytes of ±1.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn signs32(bytes: u32) -> __m256i {
    let v = _mm256_set1_epi32(bytes as i32);
    let spread = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bits = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, spread), bits), bits);
    _mm256_or_si256(set, _mm256_set1_epi8(1))
}

/// The 4-value entries of `grid` at 8 indices (i32 lanes of `idx`), gathered.
///
/// # Safety
/// Every index must lie within `grid`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gather4(grid: &[u32], idx: __m256i) -> __m256i {
    // SAFETY: the caller's indices.
    unsafe { _mm256_i32gather_epi32::<4>(grid.as_ptr().cast(), idx) }
}

/// 8 index bytes at `p` as i32 lanes, plus 256 in lane `k` where bit `k` of `qh` is set.
///
/// # Safety
/// `p` must point at 8 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn idx9(p: *const u8, qh: u8) -> __m256i {
    // SAFETY: the caller's 8 bytes.
    let lo = _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(p.cast()) });
    let bits = _mm256_set_epi32(128, 64, 32, 16, 8, 4, 2, 1);
    let set = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(qh as i32), bits), bits);
    _mm256_or_si256(lo, _mm256_and_si256(set, _mm256_set1_epi32(256)))
}

/// Four 8-value grid entries as 32 magnitudes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn grid8(e: [u64; 4]) -> __m256i {
    _mm256_set_epi64x(e[3] as i64, e[2] as i64, e[1] as i64, e[0] as i64)
}

/// Eight 4-value grid entries as 32 magnitudes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn grid4(e: [u32; 8]) -> __m256i {
    _mm256_set_epi32(
        e[7] as i32,
        e[6] as i32,
        e[5] as i32,
        e[4] as i32,
        e[3] as i32,
        e[2] as i32,
        e[1] as i32,
        e[0] as i32,
    )
}

/// Scale `lo` for a group's first 16 values, `hi` for the next 16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scales16(lo: i32, hi: i32) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16))
}

/// An IQ2_XXS block (66 bytes: f16 d, per 32 values 4 index bytes then a u32 of 4 × 7 sign bits
/// and a 4-bit scale).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn group_iq2_xxs(b: &[u8], ib: usize) -> Group {
    let at = 2 + 8 * ib;
    let aux1 = u32_at(b, at + 4);
    let g = grid8(std::array::from_fn(|l| G2XXS[b[at + l] as usize]));
    let sb: [u8; 4] = std::array::from_fn(|l| KSIGNS[((aux1 >> (7 * l)) & 127) as usize]);
    let s = signs32(u32::from_le_bytes(sb));
    let ls = 2 * (aux1 >> 28) as i32 + 1;
    let sc = scales16(ls, ls);
    Group { g, s, sc }
}

/// An IQ2_XS block (74 bytes: f16 d, 32 u16 of 9-bit index + 7 sign bits, 8 scale bytes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn group_iq2_xs(b: &[u8], ib: usize) -> Group {
    let q: [u16; 4] = std::array::from_fn(|l| u16_at(b, 2 + 2 * (4 * ib + l)));
    let g = grid8(std::array::from_fn(|l| G2XS[(q[l] & 511) as usize]));
    let sb: [u8; 4] = std::array::from_fn(|l| KSIGNS[(q[l] >> 9) as usize]);
    let s = signs32(u32::from_le_bytes(sb));
    let sc = b[66 + ib] as i32;
    let sc = scales16(2 * (sc & 0xf) + 1, 2 * (sc >> 4) + 1);
    Group { g, s, sc }
}

/// An IQ2_S block (82 bytes: f16 d, 32 index low bytes, 32 sign bytes, 8 high-bit bytes, 8
/// scale bytes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn group_iq2_s(b: &[u8], ib: usize) -> Group {
    let qh = b[66 + ib] as usize;
    let g = grid8(std::array::from_fn(|l| {
        G2S[b[2 + 4 * ib + l] as usize | (qh << (8 - 2 * l)) & 0x300]
    }));
    let s = signs32(u32_at(b, 34 + 4 * ib));
    let sc = b[74 + ib] as i32;
    let sc = scales16(2 * (sc & 0xf) + 1, 2 * (sc >> 4) + 1);
    Group { g, s, sc }
}

/// An IQ3_XXS block (98 bytes: f16 d, 64 index bytes, then per 32 values a u32 of 4 × 7 sign
/// bits and a 4-bit scale).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn group_iq3_xxs(b: &[u8], ib: usize) -> Group {
    let aux = u32_at(b, 66 + 4 * ib);
    let g = grid4(std::array::from_fn(|k| G3XXS[b[2 + 8 * ib + k] as usize]));
    let sb: [u8; 4] = std::array::from_fn(|l| KSIGNS[((aux >> (7 * l)) & 127) as usize]);
    let s = signs32(u32::from_le_bytes(sb));
    let ls = 2 * (aux >> 28) as i32 + 1;
    let sc = scales16(ls, ls);
    Group { g, s, sc }
}

/// An IQ3_S block (110 bytes: f16 d, 64 index low bytes, 8 ninth-bit bytes, 32 sign bytes, 4
/// scale bytes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn group_iq3_s(b: &[u8], ib: usize) -> Group {
    let qh = b[66 + ib] as usize;
    // Entry k of 8: byte k, its ninth bit bit k of qh (`vpgatherdd`, which measured faster
    // than 8 inserts here; for the other types the inserts were faster on Zen 3).
    // SAFETY: 8 index bytes of the block; 9-bit indices lie within the 512 entries.
    let g = unsafe { gather4(G3S, idx9(b.as_ptr().add(2 + 8 * ib), qh as u8)) };
    let s = signs32(u32_at(b, 74 + 4 * ib));
    let ls = 2 * ((b[106 + ib / 2] >> (4 * (ib % 2))) & 0xf) as i32 + 1;
    let sc = scales16(ls, ls);
    Group { g, s, sc }
}

/// A grid type's tile: `out[r · n_act + t]` = weight row `r` · activation row `t`, blocks of
/// `BYTES` bytes with the f16 `d` first; per block `d · y.d · isum` summed in f32, then times
/// `scale` (`qdot_iq::dot_grid`'s order). One activation row decodes each group as it goes;
/// more decode each block once for all of them.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_grid<const BYTES: usize>(
    w: &[u8],
    y: &[BlockQ8K],
    n_act: usize,
    out: &mut [f32],
    scale: f32,
    group: impl Fn(&[u8], usize) -> Group,
) {
    let Some(nb) = y.len().checked_div(n_act).filter(|&nb| nb > 0) else {
        return;
    };
    let n_w = out.len() / n_act;
    for (r, row) in w.chunks_exact(nb * BYTES).take(n_w).enumerate() {
        let acc = &mut out[r * n_act..(r + 1) * n_act];
        acc.fill(0.0);
        if n_act == 1 {
            for (i, blk) in row.chunks_exact(BYTES).enumerate() {
                let d = fp16_at(blk, 0);
                let yb = &y[i];
                let mut lanes = [_mm256_setzero_si256(); 2];
                for ib in 0..GROUPS {
                    // SAFETY: group `ib`'s 32 quants of the q8_K block's 256.
                    let p = unsafe { group_dot(group(blk, ib), yb.qs.as_ptr().add(32 * ib)) };
                    lanes[ib % 2] = _mm256_add_epi32(lanes[ib % 2], p);
                }
                let s = hsum(_mm256_add_epi32(lanes[0], lanes[1]));
                acc[0] += d * yb.d * s as f32;
            }
        } else {
            let z = _mm256_setzero_si256();
            let mut x = [Group { g: z, s: z, sc: z }; GROUPS];
            for (i, blk) in row.chunks_exact(BYTES).enumerate() {
                let d = fp16_at(blk, 0);
                for (ib, xg) in x.iter_mut().enumerate() {
                    *xg = group(blk, ib);
                }
                for (t, a) in acc.iter_mut().enumerate() {
                    let yb = &y[t * nb + i];
                    let mut lanes = [_mm256_setzero_si256(); 2];
                    for (ib, &xg) in x.iter().enumerate() {
                        // SAFETY: as above.
                        let p = unsafe { group_dot(xg, yb.qs.as_ptr().add(32 * ib)) };
                        lanes[ib % 2] = _mm256_add_epi32(lanes[ib % 2], p);
                    }
                    let s = hsum(_mm256_add_epi32(lanes[0], lanes[1]));
                    *a += d * yb.d * s as f32;
                }
            }
        }
        for a in acc.iter_mut() {
            *a *= scale;
        }
    }
}

macro_rules! grid_kernels {
    ($($field:ident: $bytes:expr, $scale:expr, $decode:ident;)*) => {
        /// `base` with this module's kernels (when the CPU has AVX2; `base` unchanged
        /// otherwise).
        pub(crate) fn with_iq_grid(mut base: Kernels) -> Kernels {
            if !super::has_avx2() {
                return base;
            }
            $(
                base.$field = {
                    fn tile(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
                        // SAFETY: only reachable through a table made after detection (above).
                        unsafe { tile_grid::<$bytes>(w, y, n_act, out, $scale, |b, ib| $decode(b, ib)) }
                    }
                    fn rows(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
                        tile(w, y, 1, out)
                    }
                    TypeKernels {
                        rows,
                        tile,
                        tile_rows: 4,
                        tile_acts: 8,
                        ..base.$field
                    }
                };
            )*
            base
        }
    };
}

grid_kernels! {
    iq2_xxs: 66, 0.125, group_iq2_xxs;
    iq2_xs: 74, 0.125, group_iq2_xs;
    iq2_s: 82, 0.125, group_iq2_s;
    iq3_xxs: 98, 0.25, group_iq3_xxs;
    iq3_s: 110, 1.0, group_iq3_s;
}

#[cfg(test)]
mod tests {
    use bytemuck::Zeroable;

    use crate::cpu::dispatch::{Isa, Kernels, TypeKernels};
    use crate::cpu::q8;
    use crate::cpu::qdot_iq::{dot_iq2_s, dot_iq2_xs, dot_iq2_xxs, dot_iq3_s, dot_iq3_xxs};
    use crate::cpu::testutil::{quantized_row, Rng};
    use crate::DType;

    use super::*;

    type Dot = fn(&[u8], &[BlockQ8K]) -> f32;

    fn pick(k: &Kernels, dtype: DType) -> (TypeKernels<BlockQ8K>, Dot) {
        match dtype {
            DType::IQ2XXS => (k.iq2_xxs, dot_iq2_xxs),
            DType::IQ2XS => (k.iq2_xs, dot_iq2_xs),
            DType::IQ2S => (k.iq2_s, dot_iq2_s),
            DType::IQ3XXS => (k.iq3_xxs, dot_iq3_xxs),
            _ => (k.iq3_s, dot_iq3_s),
        }
    }

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
        let mut y = vec![BlockQ8K::zeroed(); k / QK_K * n_act];
        q8::quantize_row_q8_k(&x, &mut y);
        let nb = k / QK_K;
        let rb = w.len() / m;
        let dot = pick(&Kernels::for_isa(Isa::Scalar).unwrap(), dtype).1;
        let mut want = vec![0f32; m * n_act];
        for r in 0..m {
            for t in 0..n_act {
                want[r * n_act + t] = dot(&w[r * rb..(r + 1) * rb], &y[t * nb..(t + 1) * nb]);
            }
        }
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for isa in Isa::available() {
            let kern = pick(&Kernels::for_isa(isa).unwrap(), dtype).0;
            for row in [&w[..], &shifted[1..]] {
                let mut got = vec![0f32; m * n_act];
                (kern.tile)(row, &y, n_act, &mut got);
                assert_eq!(bits(&want), bits(&got), "{dtype:?} tile {}", isa.name());
                if n_act == 1 {
                    let mut got = vec![0f32; m];
                    (kern.rows)(row, &y, &mut got);
                    assert_eq!(bits(&want), bits(&got), "{dtype:?} rows {}", isa.name());
                }
            }
        }
    }

    #[test]
    fn grid_kernels_equal_the_scalar_twins() {
        for dtype in [
            DType::IQ2XXS,
            DType::IQ2XS,
            DType::IQ2S,
            DType::IQ3XXS,
            DType::IQ3S,
        ] {
            for (seed, k, m, n_act) in [(1u64, 256, 3, 1), (2, 512, 4, 3), (3, 1024, 2, 8)] {
                for scale in [1.0f32, 1e-3, 40.0] {
                    check(dtype, k, m, n_act, seed, scale);
                }
            }
        }
    }

    /// Every index, sign and scale bit reaches the result: flipping any one bit of a block
    /// changes the scalar twin's dot and the kernel's the same way.
    #[test]
    fn every_bit_of_a_block_is_read_as_the_twin_reads_it() {
        let mut rng = Rng::new(11);
        let x = rng.vec(QK_K, 1.0);
        let mut y = vec![BlockQ8K::zeroed(); 1];
        q8::quantize_row_q8_k(&x, &mut y);
        for dtype in [
            DType::IQ2XXS,
            DType::IQ2XS,
            DType::IQ2S,
            DType::IQ3XXS,
            DType::IQ3S,
        ] {
            let w = quantized_row(&mut rng, dtype, QK_K).0;
            for isa in Isa::available() {
                let (kern, dot) = pick(&Kernels::for_isa(isa).unwrap(), dtype);
                // The bytes after the f16 scale.
                for byte in 2..w.len() {
                    for bit in 0..8 {
                        let mut v = w.clone();
                        v[byte] ^= 1 << bit;
                        let mut got = [0f32];
                        (kern.rows)(&v, &y, &mut got);
                        assert_eq!(
                            got[0].to_bits(),
                            dot(&v, &y).to_bits(),
                            "{dtype:?} {} byte {byte} bit {bit}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }
}
