//! Dot products of the IQ grid types and the ternary types with q8_K activations (ggml's
//! `vec_dot_type` for all of them). The ternary ones follow ggml's generic integer sums; the grid
//! types dequantize each weight block with the scalar reference (bit for bit ggml's) and sum its
//! products with the activations' integers in f32, then scale by the activations' `d` — the
//! same value as ggml's integer sums up to f32 rounding (~1e-6 relative), without SIMD yet.

use kestrel_gguf::quant::{
    iq1, iq2, iq3, tq, BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S,
    BlockIQ3XXS, BlockQ8K, BlockTQ1_0, BlockTQ2_0, QK_K,
};

use super::qdot::{for_each_block, h};

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

grid_dot!(dot_iq2_xxs, BlockIQ2XXS, iq2::dequantize_block_iq2_xxs);
grid_dot!(dot_iq2_xs, BlockIQ2XS, iq2::dequantize_block_iq2_xs);
grid_dot!(dot_iq2_s, BlockIQ2S, iq2::dequantize_block_iq2_s);
grid_dot!(dot_iq3_xxs, BlockIQ3XXS, iq3::dequantize_block_iq3_xxs);
grid_dot!(dot_iq3_s, BlockIQ3S, iq3::dequantize_block_iq3_s);
grid_dot!(dot_iq1_s, BlockIQ1S, iq1::dequantize_block_iq1_s);
grid_dot!(dot_iq1_m, BlockIQ1M, iq1::dequantize_block_iq1_m);
