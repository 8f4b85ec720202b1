//! AVX2 kernels for the IQ grid types against q8_K activations: IQ2_XXS, IQ2_XS, IQ2_S,
//! IQ3_XXS and IQ3_S (the low-bit types of llama.cpp's IQ files).
//!
//! A block is decoded two groups of 32 values at a time (as they are reached for one activation
//! row; once per block for all the rows of a tile) into the grid magnitudes as unsigned bytes
//! (4 grid entries of 8 values, or 8 of 4, read from the tables), the signs as ±1 bytes, and the
//! scales as i16 lanes. What can be computed for many values at once is: IQ2_XS's eighth sign
//! bit (the parity of the other seven, by a 16-entry table lookup per value pair), IQ3_S's
//! 9-bit grid indices, the scale lanes of a block. An activation row then costs per 32 values
//! one `vpsignb` (the signs moved onto the activations, whose q8_K quants lie in -127..=127, so
//! negation never wraps), one `vpmaddubsw` (magnitudes ≤ 62: no saturation) and one `vpmaddwd`
//! by the scales.
//!
//! The block's integer sum is exact, so it equals the scalar twin's (`cpu::qdot::iq::isum_*`),
//! and the f32 terms follow the twin's order (`dot_grid`): results are bit for bit the twins'.

use std::arch::x86_64::*;

use kestrel_gguf::quant::iq_grids::{
    IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
};
use kestrel_gguf::quant::{BlockQ8K, QK_K};

use super::avx2_kquants::fp16;
use super::iq4::hsum;
use crate::cpu::kernel_table::{Kernels, TypeKernels};

/// Pairs of 32-value groups in a block.
const PAIRS: usize = QK_K / 64;

// The tables as statics, so the kernels index one copy in memory.
static G2XXS: &[u64; 256] = &IQ2XXS_GRID;
static G2XS: &[u64; 512] = &IQ2XS_GRID;
static G2S: &[u64; 1024] = &IQ2S_GRID;
static G3XXS: &[u32; 256] = &IQ3XXS_GRID;
static G3S: &[u32; 512] = &IQ3S_GRID;

/// `KSIGNS_IQ2XS` as eight ±1 bytes per entry (bit `m` set: byte `m` is -1), the form the
/// 7-bit sign fields of IQ2_XXS and IQ3_XXS are read in.
static SIGNS8: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        let k = KSIGNS_IQ2XS[i];
        let mut m = 0;
        while m < 8 {
            let byte: u64 = if k >> m & 1 == 1 { 0xff } else { 0x01 };
            t[i] |= byte << (8 * m);
            m += 1;
        }
        i += 1;
    }
    t
};

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
fn u16_at<const N: usize>(b: &[u8; N], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline(always)]
fn u32_at<const N: usize>(b: &[u8; N], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// `bytes` sign masks (a byte per 8 values: -1 where the value's bit is set, 0 elsewhere) as
/// ±1 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pm_one(mask: __m256i) -> __m256i {
    _mm256_or_si256(mask, _mm256_set1_epi8(1))
}

/// Bit `m` of the byte that lane byte `8l + m` was shuffled from, as -1/0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bit_masks(spread: __m256i) -> __m256i {
    let bits = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits)
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
    pm_one(bit_masks(_mm256_shuffle_epi8(v, spread)))
}

/// Four 7-bit sign fields of `aux` (bits 0..28) as 32 bytes of ±1.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn signs_7bit(aux: u32) -> __m256i {
    let s = |l: u32| SIGNS8[((aux >> (7 * l)) & 127) as usize] as i64;
    _mm256_set_epi64x(s(3), s(2), s(1), s(0))
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
    _mm256_setr_epi32(
        e[0] as i32,
        e[1] as i32,
        e[2] as i32,
        e[3] as i32,
        e[4] as i32,
        e[5] as i32,
        e[6] as i32,
        e[7] as i32,
    )
}

/// The odd scales `2s + 1` of a block's 8 scale bytes (low nibble: a group's first 16 values,
/// high: the next 16), as 16 bytes `lo0, hi0, lo1, hi1, …` (IQ2_XS, IQ2_S).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn nibble_scales(bytes: u64) -> __m128i {
    let v = _mm_set_epi64x(0, bytes as i64);
    let m4 = _mm_set1_epi8(0xf);
    let lo = _mm_and_si128(v, m4);
    let hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
    let s = _mm_unpacklo_epi8(lo, hi);
    _mm_add_epi8(_mm_add_epi8(s, s), _mm_set1_epi8(1))
}

/// Group `ib`'s scale lanes from `nibble_scales`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn group_scales(scales: __m128i, ib: usize) -> __m256i {
    let pick = _mm_add_epi8(
        _mm_set1_epi8(2 * ib as i8),
        _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
    );
    _mm256_cvtepu8_epi16(_mm_shuffle_epi8(scales, pick))
}

/// One scale for all 32 values of a group.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn one_scale(ls: u32) -> __m256i {
    _mm256_set1_epi16((2 * ls + 1) as i16)
}

/// IQ2_XXS (66 bytes: f16 d, per 32 values 4 index bytes then a u32 of 4 × 7 sign bits and a
/// 4-bit scale): groups `2j`, `2j + 1`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_iq2_xxs(b: &[u8; 66], _: &(), j: usize) -> [Group; 2] {
    [group_iq2_xxs(b, 2 * j), group_iq2_xxs(b, 2 * j + 1)]
}

/// IQ2_XXS group `ib`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn group_iq2_xxs(b: &[u8; 66], ib: usize) -> Group {
    let at = 2 + 8 * ib;
    let aux = u32_at(b, at + 4);
    Group {
        g: grid8(std::array::from_fn(|l| G2XXS[b[at + l] as usize])),
        s: signs_7bit(aux),
        sc: one_scale(aux >> 28),
    }
}

/// IQ2_XS (74 bytes: f16 d, 32 u16 of 9-bit index + 7 sign bits, 8 scale bytes): groups `2j`,
/// `2j + 1`. The eighth sign bit of each u16 (the parity of its seven) comes from a 16-entry
/// table of 4-bit parities, indexed by the seven bits folded to four.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_iq2_xs(b: &[u8; 74], scales: &__m128i, j: usize) -> [Group; 2] {
    // SAFETY: 16 bytes at 2 + 16j ≤ 50 of the block's 74.
    let q = unsafe { _mm_loadu_si128(b.as_ptr().add(2 + 16 * j).cast()) };
    let seven = _mm_srli_epi16(q, 9);
    let folded = _mm_xor_si128(seven, _mm_srli_epi16(q, 13));
    let odd = _mm_setr_epi8(
        0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0,
    );
    // Low byte of each u16: the 8 sign bits; high byte 0 (index 0 of `odd`).
    let full = _mm256_broadcastsi128_si256(_mm_or_si128(seven, _mm_shuffle_epi8(odd, folded)));
    let mut idx = [0u16; 8];
    // SAFETY: 16 writable bytes.
    unsafe {
        _mm_storeu_si128(
            idx.as_mut_ptr().cast(),
            _mm_and_si128(q, _mm_set1_epi16(511)),
        )
    };
    [
        group_iq2_xs(&idx, full, *scales, 2 * j),
        group_iq2_xs(&idx, full, *scales, 2 * j + 1),
    ]
}

/// IQ2_XS group `ib` of its pair, whose 16 sign bytes (at even byte positions) `full` holds in
/// both 128-bit lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn group_iq2_xs(idx: &[u16; 8], full: __m256i, scales: __m128i, ib: usize) -> Group {
    // Sign byte 8 (ib % 2) + 2l for values 8l..8l + 8 (lanes hold 16 values each).
    let base = _mm256_set1_epi8(8 * (ib % 2) as i8);
    let spread = _mm256_add_epi8(
        base,
        _mm256_set_epi64x(
            0x0606_0606_0606_0606,
            0x0404_0404_0404_0404,
            0x0202_0202_0202_0202,
            0,
        ),
    );
    Group {
        // 9-bit indices: within the 512 entries.
        g: grid8(std::array::from_fn(|l| {
            G2XS[idx[4 * (ib % 2) + l] as usize & 511]
        })),
        s: pm_one(bit_masks(_mm256_shuffle_epi8(full, spread))),
        sc: group_scales(scales, ib),
    }
}

/// IQ2_S (82 bytes: f16 d, 32 index low bytes, 32 sign bytes, 8 high-bit bytes, 8 scale
/// bytes): groups `2j`, `2j + 1`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_iq2_s(b: &[u8; 82], scales: &__m128i, j: usize) -> [Group; 2] {
    [
        group_iq2_s(b, *scales, 2 * j),
        group_iq2_s(b, *scales, 2 * j + 1),
    ]
}

/// IQ2_S group `ib`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn group_iq2_s(b: &[u8; 82], scales: __m128i, ib: usize) -> Group {
    let qh = b[66 + ib] as usize;
    Group {
        g: grid8(std::array::from_fn(|l| {
            G2S[b[2 + 4 * ib + l] as usize | (qh << (8 - 2 * l)) & 0x300]
        })),
        s: signs32(u32_at(b, 34 + 4 * ib)),
        sc: group_scales(scales, ib),
    }
}

/// IQ3_XXS (98 bytes: f16 d, 64 index bytes, then per 32 values a u32 of 4 × 7 sign bits and a
/// 4-bit scale): groups `2j`, `2j + 1`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_iq3_xxs(b: &[u8; 98], _: &(), j: usize) -> [Group; 2] {
    [group_iq3_xxs(b, 2 * j), group_iq3_xxs(b, 2 * j + 1)]
}

/// IQ3_XXS group `ib`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn group_iq3_xxs(b: &[u8; 98], ib: usize) -> Group {
    let aux = u32_at(b, 66 + 4 * ib);
    Group {
        g: grid4(std::array::from_fn(|k| G3XXS[b[2 + 8 * ib + k] as usize])),
        s: signs_7bit(aux),
        sc: one_scale(aux >> 28),
    }
}

/// IQ3_S (110 bytes: f16 d, 64 index low bytes, 8 ninth-bit bytes, 32 sign bytes, 4 scale
/// bytes): groups `2j`, `2j + 1`. The 16 9-bit indices are put together in vectors (entry `k`
/// of a group: index byte `k`, ninth bit bit `k` of the group's `qh` byte) and read back from
/// memory for the table loads.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_iq3_s(b: &[u8; 110], _: &(), j: usize) -> [Group; 2] {
    // SAFETY: 16 bytes at 2 + 16j ≤ 50 of the block's 110.
    let lo = _mm256_cvtepu8_epi16(unsafe { _mm_loadu_si128(b.as_ptr().add(2 + 16 * j).cast()) });
    let shift = _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1);
    let mut idx = [[0u32; 8]; 2];
    let halves = [
        _mm256_castsi256_si128(lo),
        _mm256_extracti128_si256::<1>(lo),
    ];
    for (h, out) in idx.iter_mut().enumerate() {
        let qh = _mm256_set1_epi32(i32::from(b[66 + 2 * j + h]));
        let ninth = _mm256_and_si256(_mm256_sllv_epi32(qh, shift), _mm256_set1_epi32(256));
        let v = _mm256_or_si256(_mm256_cvtepi16_epi32(halves[h]), ninth);
        // SAFETY: 32 writable bytes.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) };
    }
    let scales = b[106 + j];
    [
        group_iq3_s(b, &idx[0], u32::from(scales & 0xf), 2 * j),
        group_iq3_s(b, &idx[1], u32::from(scales >> 4), 2 * j + 1),
    ]
}

/// IQ3_S group `ib` from its 8 grid indices and 4-bit scale.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn group_iq3_s(b: &[u8; 110], idx: &[u32; 8], ls: u32, ib: usize) -> Group {
    Group {
        // 9-bit indices: within the 512 entries.
        g: grid4(std::array::from_fn(|k| G3S[idx[k] as usize & 511])),
        s: signs32(u32_at(b, 74 + 4 * ib)),
        sc: one_scale(ls),
    }
}

/// A grid type's tile: `out[r · n_act + t]` = weight row `r` · activation row `t`, blocks of
/// `BYTES` bytes with the f16 `d` first; per block `d · y.d · isum` summed in f32, then times
/// `scale` (`qdot::iq::dot_grid`'s order). `prep` reads what a block shares (its scales),
/// `pair(block, prep, j)` decodes groups `2j` and `2j + 1`. One activation row decodes each
/// pair as it goes; more decode each block once for all of them.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_grid<const BYTES: usize, P>(
    w: &[u8],
    y: &[BlockQ8K],
    n_act: usize,
    out: &mut [f32],
    scale: f32,
    prep: impl Fn(&[u8; BYTES]) -> P,
    pair: impl Fn(&[u8; BYTES], &P, usize) -> [Group; 2],
) {
    let Some(nb) = y.len().checked_div(n_act).filter(|&nb| nb > 0) else {
        return;
    };
    let n_w = out.len() / n_act;
    for (r, row) in w.chunks_exact(nb * BYTES).take(n_w).enumerate() {
        let acc = &mut out[r * n_act..(r + 1) * n_act];
        let blocks = row
            .chunks_exact(BYTES)
            .filter_map(|b| <&[u8; BYTES]>::try_from(b).ok());
        if n_act == 1 {
            let mut a = 0f32;
            for (blk, yb) in blocks.zip(y) {
                let d = fp16(u16_at(blk, 0));
                let p = prep(blk);
                let q8 = yb.qs.as_ptr();
                let (mut l0, mut l1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                macro_rules! step {
                    ($j:literal) => {
                        let [x0, x1] = pair(blk, &p, $j);
                        // SAFETY: groups 2j and 2j + 1's quants, within the q8_K block's 256.
                        unsafe {
                            l0 = _mm256_add_epi32(l0, group_dot(x0, q8.add(64 * $j)));
                            l1 = _mm256_add_epi32(l1, group_dot(x1, q8.add(64 * $j + 32)));
                        }
                    };
                }
                const _: () = assert!(PAIRS == 4);
                step!(0);
                step!(1);
                step!(2);
                step!(3);
                let s = hsum(_mm256_add_epi32(l0, l1));
                a += d * yb.d * s as f32;
            }
            acc[0] = a * scale;
        } else {
            acc.fill(0.0);
            let z = _mm256_setzero_si256();
            let mut x = [[Group { g: z, s: z, sc: z }; 2]; PAIRS];
            for (i, blk) in blocks.enumerate() {
                let d = fp16(u16_at(blk, 0));
                let p = prep(blk);
                for (j, xj) in x.iter_mut().enumerate() {
                    *xj = pair(blk, &p, j);
                }
                for (t, a) in acc.iter_mut().enumerate() {
                    let yb = &y[t * nb + i];
                    let q8 = yb.qs.as_ptr();
                    let mut lanes = [_mm256_setzero_si256(); 2];
                    for (j, [x0, x1]) in x.iter().enumerate() {
                        // SAFETY: as above.
                        unsafe {
                            lanes[0] = _mm256_add_epi32(lanes[0], group_dot(*x0, q8.add(64 * j)));
                            lanes[1] =
                                _mm256_add_epi32(lanes[1], group_dot(*x1, q8.add(64 * j + 32)));
                        }
                    }
                    let s = hsum(_mm256_add_epi32(lanes[0], lanes[1]));
                    *a += d * yb.d * s as f32;
                }
            }
            for a in acc.iter_mut() {
                *a *= scale;
            }
        }
    }
}

macro_rules! grid_kernels {
    ($($field:ident: $bytes:expr, $scale:expr, $prep:expr, $pair:ident;)*) => {
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
                        unsafe {
                            tile_grid::<$bytes, _>(w, y, n_act, out, $scale, $prep, |b, p, j| {
                                $pair(b, p, j)
                            })
                        }
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
    iq2_xxs: 66, 0.125, |_: &[u8; 66]| (), pair_iq2_xxs;
    iq2_xs: 74, 0.125, |b: &[u8; 74]| nibble_scales(u64_at(b, 66)), pair_iq2_xs;
    iq2_s: 82, 0.125, |b: &[u8; 82]| nibble_scales(u64_at(b, 74)), pair_iq2_s;
    iq3_xxs: 98, 0.25, |_: &[u8; 98]| (), pair_iq3_xxs;
    iq3_s: 110, 1.0, |_: &[u8; 110]| (), pair_iq3_s;
}

#[inline(always)]
fn u64_at<const N: usize>(b: &[u8; N], at: usize) -> u64 {
    u64::from_le_bytes(std::array::from_fn(|k| b[at + k]))
}
