//! Integer dot products of one quantized weight row with one quantized activation row, as
//! ggml's scalar `ggml_vec_dot_<type>_q8_<x>_generic` compute them (ggml-cpu/quants.c): the same
//! integer sums per block, the same f32 expressions in the same order (no fused multiply-add),
//! so the result is what ggml's generic C gives when compiled without FP contraction.
//!
//! ggml's SIMD paths (AVX2/AVX512 `ggml_vec_dot_*`, llamafile's tinyBLAS, the repacked
//! `gemv_*_8x8` kernels) compute the same integer block sums and differ only in how the f32
//! block terms are added (8-lane accumulators with FMA, then a tree sum): a few ulp of the row's
//! magnitude. The activation quantization, which changes values by up to half a quant step, is
//! what must match exactly, and does (see [`super::q8`]).
//!
//! F16 and BF16 weights dot against f16/bf16 activations as ggml's portable
//! `ggml_vec_dot_f16` / `ggml_vec_dot_bf16`: each product is exact in f32 and the sum runs in
//! f64 (`ggml_float`), rounded to f32 at the end.
//!
//! One file per family: `legacy` (32-value blocks), `kquants` (K-quants, IQ4_XS), `float`
//! (F16, BF16), `iq` (the grid IQ types, ternary), `k_x86` and `table_x86` (the orders
//! llama.cpp's x86 builds sum in), all over `common`; this module names each weight type's
//! [`QDot`] (its activation block, converter and scalar twin).

// The kernels index as ggml's C does, so they can be read side by side with it.
#![allow(clippy::needless_range_loop)]

use bytemuck::{Pod, Zeroable};
use kestrel_gguf::quant::{BlockQ8K, BlockQ8_0, QK_K};

use super::q8;
use super::q8_block::{BlockQ8_1, QK8};

pub(crate) mod common;
mod float;
pub(crate) mod iq;
pub(crate) mod k_x86;
mod kquants;
mod legacy;
pub(crate) mod table_x86;
#[cfg(test)]
mod tests;

pub(crate) use float::*;
pub(crate) use iq::*;
pub(crate) use k_x86::{dot_q2_k_x86, dot_q3_k_x86, dot_q4_k_8x8_gemv, dot_q6_k_x86};
pub(crate) use kquants::*;
pub(crate) use legacy::*;
pub(crate) use table_x86::{dot_iq4_nl_x86, dot_iq4_xs_x86, dot_mxfp4_x86};

/// A weight type's quantized dot product: the activation block type (ggml's `vec_dot_type`),
/// the converter into it and the dot of one weight row with one converted activation row.
pub(crate) trait QDot {
    /// Activation block.
    type Act: Pod + Zeroable + Send + Sync;
    /// Activation values per `Act`.
    const ACT_N: usize;
    /// Converts `x` (exactly `ACT_N * y.len()` values).
    fn quantize(x: &[f32], y: &mut [Self::Act]);
    /// Dots one weight row (raw bytes, any alignment) with a converted activation row of the
    /// same length: the scalar twin.
    fn dot(w: &[u8], y: &[Self::Act]) -> f32;
}

macro_rules! qdot_type {
    ($name:ident, $act:ty, $n:expr, $quant:path, $dot:ident) => {
        pub(crate) struct $name;
        impl QDot for $name {
            type Act = $act;
            const ACT_N: usize = $n;
            #[inline]
            fn quantize(x: &[f32], y: &mut [$act]) {
                $quant(x, y)
            }
            #[inline]
            fn dot(w: &[u8], y: &[$act]) -> f32 {
                $dot(w, y)
            }
        }
    };
}

qdot_type!(DQ4_0, BlockQ8_0, QK8, q8::quantize_row_q8_0, dot_q4_0_x86);
qdot_type!(DQ4_1, BlockQ8_1, QK8, q8::quantize_row_q8_1, dot_q4_1_x86);
qdot_type!(DQ5_0, BlockQ8_0, QK8, q8::quantize_row_q8_0, dot_q5_0_x86);
qdot_type!(DQ5_1, BlockQ8_1, QK8, q8::quantize_row_q8_1, dot_q5_1_x86);
qdot_type!(DQ8_0, BlockQ8_0, QK8, q8::quantize_row_q8_0, dot_q8_0_x86);
qdot_type!(
    DIQ4NL,
    BlockQ8_0,
    QK8,
    q8::quantize_row_q8_0,
    dot_iq4_nl_x86
);
qdot_type!(DMXFP4, BlockQ8_0, QK8, q8::quantize_row_q8_0, dot_mxfp4_x86);
qdot_type!(DQ2K, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_q2_k_x86);
qdot_type!(DQ3K, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_q3_k_x86);
qdot_type!(
    DQ4K,
    BlockQ8K,
    QK_K,
    q8::quantize_row_q8_k,
    dot_q4_k_8x8_gemv
);
qdot_type!(DQ5K, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_q5_k);
qdot_type!(DQ6K, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_q6_k_x86);
qdot_type!(DQ8K, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_q8_k);
qdot_type!(
    DIQ4XS,
    BlockQ8K,
    QK_K,
    q8::quantize_row_q8_k,
    dot_iq4_xs_x86
);
qdot_type!(DTQ1_0, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_tq1_0);
qdot_type!(DTQ2_0, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_tq2_0);
qdot_type!(DIQ2XXS, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_iq2_xxs);
qdot_type!(DIQ2XS, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_iq2_xs);
qdot_type!(DIQ2S, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_iq2_s);
qdot_type!(DIQ3XXS, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_iq3_xxs);
qdot_type!(DIQ3S, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_iq3_s);
qdot_type!(DIQ1S, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_iq1_s);
qdot_type!(DIQ1M, BlockQ8K, QK_K, q8::quantize_row_q8_k, dot_iq1_m);
qdot_type!(DF16, u16, 1, q8::convert_row_f16, dot_f16);
qdot_type!(DBF16, u16, 1, q8::convert_row_bf16, dot_bf16);
