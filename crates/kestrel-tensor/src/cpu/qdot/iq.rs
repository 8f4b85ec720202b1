//! Dot products of the IQ grid types and the ternary types with q8_K activations (ggml's
//! `vec_dot_type` for all of them), as ggml's generic C computes them: the ternary types and the
//! IQ2/IQ3 grid types as exact integer sums per block (`ggml_vec_dot_<type>_q8_K_generic`), one
//! f32 term per block, then the type's constant factor. These are the scalar twins the SIMD
//! kernels (`x86_64/iq_grid.rs`, `aarch64/iq_grid.rs`) equal bit for bit. IQ1_S and IQ1_M (no SIMD kernel yet)
//! dequantize each weight block with the scalar reference (bit for bit ggml's) and sum its
//! products with the activations' integers in f32: ggml's value up to f32 rounding.

use kestrel_gguf::quant::iq_grids::{
    IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
};
use kestrel_gguf::quant::{
    iq1, tq, BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS,
    BlockQ8K, BlockTQ1_0, BlockTQ2_0, QK_K,
};

use super::common::{for_each_block, h};

/// `ggml_vec_dot_tq1_0_q8_K_generic`: the block's trits (in dequantization order, which is the
/// order of the q8_K values they meet) times the activations, in integers, then one scale.
pub(crate) fn dot_tq1_0(w: &[u8], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &BlockTQ1_0| {
        let yb = &y[i];
        let mut sum = 0i32;
        tq::tq1_0_values(x, |j, v| sum += v * yb.qs[j] as i32);
        sumf += sum as f32 * (h(x.d) * yb.d);
    });
    sumf
}

/// `ggml_vec_dot_tq2_0_q8_K_generic`.
pub(crate) fn dot_tq2_0(w: &[u8], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &BlockTQ2_0| {
        let yb = &y[i];
        let mut sumi = 0i32;
        for j in (0..QK_K / 4).step_by(32) {
            for l in 0..4 {
                for k in 0..32 {
                    let q = ((x.qs[j + k] >> (l * 2)) & 3) as i32 - 1;
                    sumi += yb.qs[j * 4 + l * 32 + k] as i32 * q;
                }
            }
        }
        sumf += sumi as f32 * (yb.d * h(x.d));
    });
    sumf
}

/// A grid type's row dotted with q8_K activations through its dequantized blocks.
fn dot_dequantized<B: bytemuck::Pod>(
    w: &[u8],
    y: &[BlockQ8K],
    dequant: fn(&B, &mut [f32; QK_K]),
) -> f32 {
    let mut sumf = 0f32;
    let mut buf = [0f32; QK_K];
    for_each_block(w, |i, x: &B| {
        let yb = &y[i];
        dequant(x, &mut buf);
        let mut s = [0f32; 8];
        for (wv, q) in buf.chunks_exact(8).zip(yb.qs.chunks_exact(8)) {
            for j in 0..8 {
                s[j] += wv[j] * q[j] as f32;
            }
        }
        sumf += s.iter().sum::<f32>() * yb.d;
    });
    sumf
}

macro_rules! grid_dot {
    ($name:ident, $block:ty, $f:path) => {
        pub(crate) fn $name(w: &[u8], y: &[BlockQ8K]) -> f32 {
            dot_dequantized::<$block>(w, y, $f)
        }
    };
}

grid_dot!(dot_iq1_s, BlockIQ1S, iq1::dequantize_block_iq1_s);
grid_dot!(dot_iq1_m, BlockIQ1M, iq1::dequantize_block_iq1_m);

/// The integer dot of 8 grid magnitudes (`grid`'s little-endian bytes) under a sign byte with 8
/// activation quants.
#[inline(always)]
fn signed8(grid: [u8; 8], signs: u8, q8: &[i8]) -> i32 {
    let mut s = 0i32;
    for j in 0..8 {
        let p = grid[j] as i32 * q8[j] as i32;
        s += if signs & (1 << j) != 0 { -p } else { p };
    }
    s
}

/// Two 4-value grid entries as the 8 magnitudes they give.
#[inline(always)]
fn pair4(g1: u32, g2: u32) -> [u8; 8] {
    let (a, b) = (g1.to_le_bytes(), g2.to_le_bytes());
    [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
}

/// A grid type's row: per block `d(x) · y.d · isum(x, y.qs)`, summed in f32, times `scale`
/// (ggml's generic order).
#[inline(always)]
pub(crate) fn dot_grid<B: bytemuck::Pod>(
    w: &[u8],
    y: &[BlockQ8K],
    scale: f32,
    d: impl Fn(&B) -> f32,
    isum: impl Fn(&B, &[i8; QK_K]) -> i32,
) -> f32 {
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &B| {
        let yb = &y[i];
        sumf += d(x) * yb.d * isum(x, &yb.qs) as f32;
    });
    scale * sumf
}

/// The exact integer sum of one IQ2_XXS block with its q8_K quants (`bsum` of
/// `ggml_vec_dot_iq2_xxs_q8_K_generic`).
pub(crate) fn isum_iq2_xxs(x: &BlockIQ2XXS, q8: &[i8; QK_K]) -> i32 {
    let mut bsum = 0i32;
    for ib32 in 0..QK_K / 32 {
        let q = &x.qs[4 * ib32..4 * ib32 + 4];
        let aux0 = q[0] as u32 | (q[1] as u32) << 16;
        let aux1 = q[2] as u32 | (q[3] as u32) << 16;
        let ls = 2 * (aux1 >> 28) as i32 + 1;
        let mut sumi = 0i32;
        for (l, idx) in aux0.to_le_bytes().into_iter().enumerate() {
            let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize];
            let at = 32 * ib32 + 8 * l;
            sumi += signed8(
                IQ2XXS_GRID[idx as usize].to_le_bytes(),
                signs,
                &q8[at..at + 8],
            );
        }
        bsum += sumi * ls;
    }
    bsum
}

/// IQ2_XS (`ggml_vec_dot_iq2_xs_q8_K_generic`'s `bsum`): a scale per 16 values.
pub(crate) fn isum_iq2_xs(x: &BlockIQ2XS, q8: &[i8; QK_K]) -> i32 {
    let mut bsum = 0i32;
    for ib32 in 0..QK_K / 32 {
        let sc = x.scales[ib32];
        let ls = [2 * (sc & 0xf) as i32 + 1, 2 * (sc >> 4) as i32 + 1];
        for (half, ls) in ls.into_iter().enumerate() {
            let mut sumi = 0i32;
            for l in 2 * half..2 * half + 2 {
                let q = x.qs[4 * ib32 + l];
                let at = 32 * ib32 + 8 * l;
                sumi += signed8(
                    IQ2XS_GRID[(q & 511) as usize].to_le_bytes(),
                    KSIGNS_IQ2XS[(q >> 9) as usize],
                    &q8[at..at + 8],
                );
            }
            bsum += sumi * ls;
        }
    }
    bsum
}

/// IQ2_S (`ggml_vec_dot_iq2_s_q8_K_generic`'s `bsum`): 10-bit indices, explicit sign bytes.
pub(crate) fn isum_iq2_s(x: &BlockIQ2S, q8: &[i8; QK_K]) -> i32 {
    let (qs, signs) = x.qs.split_at(QK_K / 8);
    let mut bsum = 0i32;
    for ib32 in 0..QK_K / 32 {
        let sc = x.scales[ib32];
        let ls = [2 * (sc & 0xf) as i32 + 1, 2 * (sc >> 4) as i32 + 1];
        let qh = x.qh[ib32] as usize;
        for (half, ls) in ls.into_iter().enumerate() {
            let mut sumi = 0i32;
            for l in 2 * half..2 * half + 2 {
                let idx = qs[4 * ib32 + l] as usize | (qh << (8 - 2 * l)) & 0x300;
                let at = 32 * ib32 + 8 * l;
                sumi += signed8(
                    IQ2S_GRID[idx].to_le_bytes(),
                    signs[4 * ib32 + l],
                    &q8[at..at + 8],
                );
            }
            bsum += ls * sumi;
        }
    }
    bsum
}

/// IQ3_XXS (`ggml_vec_dot_iq3_xxs_q8_K_generic`'s `bsum`): two 4-value entries per 8 values.
pub(crate) fn isum_iq3_xxs(x: &BlockIQ3XXS, q8: &[i8; QK_K]) -> i32 {
    let (qs, gas) = x.qs.split_at(QK_K / 4);
    let mut bsum = 0i32;
    for ib32 in 0..QK_K / 32 {
        let g = &gas[4 * ib32..4 * ib32 + 4];
        let aux = u32::from_le_bytes([g[0], g[1], g[2], g[3]]);
        let ls = 2 * (aux >> 28) as i32 + 1;
        let mut sumi = 0i32;
        for l in 0..4 {
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            let q = &qs[8 * ib32 + 2 * l..8 * ib32 + 2 * l + 2];
            let at = 32 * ib32 + 8 * l;
            let grid = pair4(IQ3XXS_GRID[q[0] as usize], IQ3XXS_GRID[q[1] as usize]);
            sumi += signed8(grid, signs, &q8[at..at + 8]);
        }
        bsum += sumi * ls;
    }
    bsum
}

/// IQ3_S (`ggml_vec_dot_iq3_s_q8_K_generic`'s `bsum`): 9-bit indices, explicit sign bytes, a
/// scale `1 + 2s` per 32 values.
pub(crate) fn isum_iq3_s(x: &BlockIQ3S, q8: &[i8; QK_K]) -> i32 {
    let mut bsum = 0i32;
    for ib32 in 0..QK_K / 32 {
        let sc = x.scales[ib32 / 2] >> (4 * (ib32 % 2));
        let ls = 2 * (sc & 0xf) as i32 + 1;
        let qh = x.qh[ib32] as usize;
        let mut sumi = 0i32;
        for l in 0..4 {
            let q = &x.qs[8 * ib32 + 2 * l..8 * ib32 + 2 * l + 2];
            let i1 = q[0] as usize | ((qh << (8 - 2 * l)) & 256);
            let i2 = q[1] as usize | ((qh << (7 - 2 * l)) & 256);
            let at = 32 * ib32 + 8 * l;
            let grid = pair4(IQ3S_GRID[i1], IQ3S_GRID[i2]);
            sumi += signed8(grid, x.signs[4 * ib32 + l], &q8[at..at + 8]);
        }
        bsum += sumi * ls;
    }
    bsum
}

/// `ggml_vec_dot_iq2_xxs_q8_K_generic`.
pub(crate) fn dot_iq2_xxs(w: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_grid(w, y, 0.125, |x: &BlockIQ2XXS| h(x.d), isum_iq2_xxs)
}

/// `ggml_vec_dot_iq2_xs_q8_K_generic`.
pub(crate) fn dot_iq2_xs(w: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_grid(w, y, 0.125, |x: &BlockIQ2XS| h(x.d), isum_iq2_xs)
}

/// `ggml_vec_dot_iq2_s_q8_K_generic`.
pub(crate) fn dot_iq2_s(w: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_grid(w, y, 0.125, |x: &BlockIQ2S| h(x.d), isum_iq2_s)
}

/// `ggml_vec_dot_iq3_xxs_q8_K_generic`.
pub(crate) fn dot_iq3_xxs(w: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_grid(w, y, 0.25, |x: &BlockIQ3XXS| h(x.d), isum_iq3_xxs)
}

/// `ggml_vec_dot_iq3_s_q8_K_generic`.
pub(crate) fn dot_iq3_s(w: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_grid(w, y, 1.0, |x: &BlockIQ3S| h(x.d), isum_iq3_s)
}
