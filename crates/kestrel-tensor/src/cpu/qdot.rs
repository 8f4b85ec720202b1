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

// The kernels index as ggml's C does, so they can be read side by side with it.
#![allow(clippy::needless_range_loop)]

use super::qdot_k_x86::{dot_q2_k_x86, dot_q3_k_x86, dot_q4_k_8x8_gemv, dot_q6_k_x86};
use bytemuck::{Pod, Zeroable};
use half::f16;
use kestrel_gguf::quant::{
    self, BlockIQ4NL, BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K,
    BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, QK_K,
};

use super::q8::{self, BlockQ8_1, QK8};
use super::qdot_iq::*;
use super::qdot_table_x86::{dot_iq4_nl_x86, dot_iq4_xs_x86, dot_mxfp4_x86};

const KVALUES: [i8; 16] = quant::iq4_nl::KVALUES_IQ4NL;

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

/// Calls `f(i, &block)` for each block of `row`, in place when `row` is aligned for `B`, else
/// through a copy of each block.
#[inline(always)]
pub(crate) fn for_each_block<B: Pod>(row: &[u8], mut f: impl FnMut(usize, &B)) {
    match bytemuck::try_cast_slice::<u8, B>(row) {
        Ok(blocks) => {
            for (i, b) in blocks.iter().enumerate() {
                f(i, b);
            }
        }
        Err(_) => {
            for (i, c) in row.chunks_exact(std::mem::size_of::<B>()).enumerate() {
                let b: B = bytemuck::pod_read_unaligned(c);
                f(i, &b);
            }
        }
    }
}

#[inline(always)]
pub(crate) fn h(x: f16) -> f32 {
    x.to_f32()
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

/// `ggml_vec_dot_q4_0_q8_0_generic`.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn dot_q4_0(w: &[u8], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &BlockQ4_0| {
        let yb = &y[i];
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..QK8 / 2 {
            let v0 = (x.qs[j] & 0x0f) as i32 - 8;
            let v1 = (x.qs[j] >> 4) as i32 - 8;
            s0 += v0 * yb.qs[j] as i32;
            s1 += v1 * yb.qs[j + QK8 / 2] as i32;
        }
        let sumi = s0 + s1;
        sumf += sumi as f32 * h(x.d) * h(yb.d);
    });
    sumf
}

/// `ggml_vec_dot_q4_1_q8_1_generic` (the twin [`dot_q4_1_x86`] is tested against; matmul uses
/// the x86 order).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn dot_q4_1(w: &[u8], y: &[BlockQ8_1]) -> f32 {
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &BlockQ4_1| {
        let yb = &y[i];
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..QK8 / 2 {
            let v0 = (x.qs[j] & 0x0f) as i32;
            let v1 = (x.qs[j] >> 4) as i32;
            s0 += v0 * yb.qs[j] as i32;
            s1 += v1 * yb.qs[j + QK8 / 2] as i32;
        }
        let sumi = s0 + s1;
        sumf += (h(x.d) * h(yb.d)) * sumi as f32 + h(x.m) * h(yb.s);
    });
    sumf
}

/// `hsum_float_8` of ggml's x86 kernels: lanes `i + 4` and `i` added, then `(0 + 2) + (1 + 3)`.
#[inline(always)]
pub(crate) fn hsum_float_8(acc: &[f32; 8]) -> f32 {
    let r: [f32; 4] = std::array::from_fn(|i| acc[i + 4] + acc[i]);
    (r[0] + r[2]) + (r[1] + r[3])
}

/// The 8-lane step shared by ggml's AVX2 q8_0-family kernels (`mul_sum_i8_pairs_float`, VNNI
/// `vpdpbusd` in AVX512 builds): lane `l` sums the exact products of bytes `4l..4l+4` of the
/// block, then `acc[l] = fma(d, lane, acc[l])`.
#[inline(always)]
fn lanes_fma(acc: &mut [f32; 8], d: f32, x: &[i32; QK8], y: &[i8; QK8]) {
    for (l, a) in acc.iter_mut().enumerate() {
        let mut sum = 0i32;
        for b in 4 * l..4 * l + 4 {
            sum += x[b] * y[b] as i32;
        }
        *a = d.mul_add(sum as f32, *a);
    }
}

/// `ggml_vec_dot_q4_0_q8_0` as x86 AVX2/AVX512 builds run it (see [`lanes_fma`]).
pub(crate) fn dot_q4_0_x86(w: &[u8], y: &[BlockQ8_0]) -> f32 {
    let mut acc = [0f32; 8];
    for_each_block(w, |i, x: &BlockQ4_0| {
        let v: [i32; QK8] = std::array::from_fn(|b| {
            let q = if b < 16 {
                x.qs[b] & 0x0f
            } else {
                x.qs[b - 16] >> 4
            };
            q as i32 - 8
        });
        lanes_fma(&mut acc, h(x.d) * h(y[i].d), &v, &y[i].qs);
    });
    hsum_float_8(&acc)
}

/// `ggml_vec_dot_q5_0_q8_0` as x86 AVX2/AVX512 builds run it.
pub(crate) fn dot_q5_0_x86(w: &[u8], y: &[BlockQ8_0]) -> f32 {
    let mut acc = [0f32; 8];
    for_each_block(w, |i, x: &BlockQ5_0| {
        let qh = u32::from_le_bytes(x.qh);
        let v: [i32; QK8] = std::array::from_fn(|b| {
            let q = if b < 16 {
                x.qs[b] & 0x0f
            } else {
                x.qs[b - 16] >> 4
            };
            (q as i32 | (((qh >> b) & 1) << 4) as i32) - 16
        });
        lanes_fma(&mut acc, h(x.d) * h(y[i].d), &v, &y[i].qs);
    });
    hsum_float_8(&acc)
}

/// `ggml_vec_dot_q5_1_q8_1` as x86 AVX2/AVX512 builds run it (`Σ m·s` beside, one FMA per
/// block as GCC builds it).
pub(crate) fn dot_q5_1_x86(w: &[u8], y: &[BlockQ8_1]) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for_each_block(w, |i, x: &BlockQ5_1| {
        let yb = &y[i];
        summs = h(x.m).mul_add(h(yb.s), summs);
        let qh = u32::from_le_bytes(x.qh);
        let v: [i32; QK8] = std::array::from_fn(|b| {
            let q = if b < 16 {
                x.qs[b] & 0x0f
            } else {
                x.qs[b - 16] >> 4
            };
            q as i32 | (((qh >> b) & 1) << 4) as i32
        });
        lanes_fma(&mut acc, h(x.d) * h(yb.d), &v, &yb.qs);
    });
    hsum_float_8(&acc) + summs
}

/// `ggml_vec_dot_q8_0_q8_0` as x86 AVX2/AVX512 builds run it.
pub(crate) fn dot_q8_0_x86(w: &[u8], y: &[BlockQ8_0]) -> f32 {
    let mut acc = [0f32; 8];
    for_each_block(w, |i, x: &BlockQ8_0| {
        let v: [i32; QK8] = std::array::from_fn(|b| x.qs[b] as i32);
        lanes_fma(&mut acc, h(x.d) * h(y[i].d), &v, &y[i].qs);
    });
    hsum_float_8(&acc)
}

/// `ggml_vec_dot_q4_1_q8_1` as x86 builds run it (the AVX2 kernel, VNNI `vpdpbusd` in
/// AVX512 builds), the kernel llama.cpp uses for Q4_1 weights (no repacked or llamafile path
/// takes Q4_1): per block, 8 lanes each sum 4 consecutive products exactly (integers), and
/// `acc[lane] = fma(d_x·d_y, lane_sum, acc[lane])`; `Σ m·s` runs beside it (an FMA per block in
/// GCC's build); the result is `hsum(acc) + Σ m·s` with `hsum` adding lanes `i` and `i + 4`,
/// then `(0 + 2) + (1 + 3)`. Bit-identical to libggml-cpu's (tests/fixtures/ggml_dot.bin), where
/// [`dot_q4_1`] (the generic order) is up to ~14 ulp away; those ulps matter because SmolLM2's
/// next layers can turn them into different q8 roundings.
pub(crate) fn dot_q4_1_x86(w: &[u8], y: &[BlockQ8_1]) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for_each_block(w, |i, x: &BlockQ4_1| {
        let yb = &y[i];
        summs = h(x.m).mul_add(h(yb.s), summs);
        // The unpacked row: low nibbles first, then the high ones.
        let v: [i32; QK8] = std::array::from_fn(|b| {
            (if b < 16 {
                x.qs[b] & 0x0f
            } else {
                x.qs[b - 16] >> 4
            }) as i32
        });
        lanes_fma(&mut acc, h(x.d) * h(yb.d), &v, &yb.qs);
    });
    hsum_float_8(&acc) + summs
}

/// `ggml_vec_dot_q5_0_q8_0_generic`.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn dot_q5_0(w: &[u8], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &BlockQ5_0| {
        let yb = &y[i];
        let qh = u32::from_le_bytes(x.qh);
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..QK8 / 2 {
            let xh0 = (((qh >> j) & 1) << 4) as u8;
            let xh1 = (((qh >> (j + 16)) & 1) << 4) as u8;
            let x0 = ((x.qs[j] & 0x0f) | xh0) as i32 - 16;
            let x1 = ((x.qs[j] >> 4) | xh1) as i32 - 16;
            s0 += x0 * yb.qs[j] as i32;
            s1 += x1 * yb.qs[j + QK8 / 2] as i32;
        }
        let sumi = s0 + s1;
        sumf += (h(x.d) * h(yb.d)) * sumi as f32;
    });
    sumf
}

/// `ggml_vec_dot_q5_1_q8_1_generic`.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn dot_q5_1(w: &[u8], y: &[BlockQ8_1]) -> f32 {
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &BlockQ5_1| {
        let yb = &y[i];
        let qh = u32::from_le_bytes(x.qh);
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..QK8 / 2 {
            let xh0 = (((qh >> j) << 4) & 0x10) as u8;
            let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
            let x0 = ((x.qs[j] & 0x0f) | xh0) as i32;
            let x1 = ((x.qs[j] >> 4) | xh1) as i32;
            s0 += x0 * yb.qs[j] as i32;
            s1 += x1 * yb.qs[j + QK8 / 2] as i32;
        }
        let sumi = s0 + s1;
        sumf += (h(x.d) * h(yb.d)) * sumi as f32 + h(x.m) * h(yb.s);
    });
    sumf
}

/// `ggml_vec_dot_q8_0_q8_0_generic`.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn dot_q8_0(w: &[u8], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &BlockQ8_0| {
        let yb = &y[i];
        let mut sumi = 0i32;
        for j in 0..QK8 {
            sumi += x.qs[j] as i32 * yb.qs[j] as i32;
        }
        sumf += sumi as f32 * (h(x.d) * h(yb.d));
    });
    sumf
}

/// The integer sum of one block of 4-bit table codes (byte `j`: value `j` low, `j + 16` high)
/// with its q8_0 activations, as ggml's generic IQ4_NL dot takes it.
#[cfg_attr(not(test), allow(dead_code))]
#[inline]
fn table_block_sum(table: &[i8; 16], qs: &[u8; QK8 / 2], yq: &[i8; QK8]) -> i32 {
    let (mut s1, mut s2) = (0i32, 0i32);
    for j in 0..QK8 / 2 {
        s1 += yq[j] as i32 * table[(qs[j] & 0xf) as usize] as i32;
        s2 += yq[j + QK8 / 2] as i32 * table[(qs[j] >> 4) as usize] as i32;
    }
    s1 + s2
}

/// `ggml_vec_dot_iq4_nl_q8_0_generic`.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn dot_iq4_nl(w: &[u8], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &BlockIQ4NL| {
        let yb = &y[i];
        sumf += h(yb.d) * h(x.d) * table_block_sum(&KVALUES, &x.qs, &yb.qs) as f32;
    });
    sumf
}

/// `ggml_vec_dot_q2_K_q8_K_generic` (the x86 twin is checked against it).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn dot_q2_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &BlockQ2K| {
        let yb = &y[i];
        let sc = &x.scales;
        let mut summs = 0i32;
        for j in 0..16 {
            summs += yb.bsums[j] as i32 * (sc[j] >> 4) as i32;
        }
        let dall = yb.d * h(x.d);
        let dmin = yb.d * h(x.dmin);
        let mut isum = 0i32;
        let mut is = 0;
        let mut q8 = 0;
        for k in 0..QK_K / 128 {
            let q2 = &x.qs[k * 32..k * 32 + 32];
            let mut shift = 0;
            for _ in 0..4 {
                let d = (sc[is] & 0xf) as i32;
                is += 1;
                let mut isuml = 0i32;
                for l in 0..16 {
                    isuml += yb.qs[q8 + l] as i32 * ((q2[l] >> shift) & 3) as i32;
                }
                isum += d * isuml;
                let d = (sc[is] & 0xf) as i32;
                is += 1;
                let mut isuml = 0i32;
                for l in 16..32 {
                    isuml += yb.qs[q8 + l] as i32 * ((q2[l] >> shift) & 3) as i32;
                }
                isum += d * isuml;
                shift += 2;
                q8 += 32;
            }
        }
        sumf += dall * isum as f32 - dmin * summs as f32;
    });
    sumf
}

/// The 8-lane integer accumulation the generic K-quant dots share: `aux32[l] += scale *
/// (q8[l] * a[l])` over groups of 8, `groups` groups per scale.
#[inline(always)]
fn acc_groups(aux32: &mut [i32; 8], q8: &[i8], a: &[i8], scale: i32) {
    for (q8, a) in q8.chunks_exact(8).zip(a.chunks_exact(8)) {
        for l in 0..8 {
            let aux16 = (q8[l] as i16).wrapping_mul(a[l] as i16);
            aux32[l] += scale * aux16 as i32;
        }
    }
}

/// `ggml_vec_dot_q3_K_q8_K_generic` (the x86 twin is checked against it).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn dot_q3_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let mut sums = [0f32; 8];
    for_each_block(w, |i, x: &BlockQ3K| {
        let yb = &y[i];
        let mut aux8 = [0i8; QK_K];
        let mut a = 0;
        let mut m = 1u8;
        for j in 0..QK_K / 128 {
            let q3 = &x.qs[j * 32..j * 32 + 32];
            for shift in [0, 2, 4, 6] {
                for l in 0..32 {
                    let v = ((q3[l] >> shift) & 3) as i8;
                    aux8[a + l] = v - if x.hmask[l] & m != 0 { 0 } else { 4 };
                }
                a += 32;
                m = m.wrapping_shl(1);
            }
        }
        let mut auxs = [0u32; 4];
        for (k, c) in x.scales.chunks_exact(4).enumerate() {
            auxs[k] = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        let tmp = auxs[2];
        auxs[2] = ((auxs[0] >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4);
        auxs[3] = ((auxs[1] >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4);
        auxs[0] = (auxs[0] & KMASK2) | ((tmp & KMASK1) << 4);
        auxs[1] = (auxs[1] & KMASK2) | (((tmp >> 2) & KMASK1) << 4);
        let mut scales = [0i8; 16];
        for (k, v) in auxs.iter().enumerate() {
            for (b, byte) in v.to_le_bytes().iter().enumerate() {
                scales[4 * k + b] = *byte as i8;
            }
        }
        let mut aux32 = [0i32; 8];
        for j in 0..QK_K / 16 {
            let r = j * 16..j * 16 + 16;
            acc_groups(
                &mut aux32,
                &yb.qs[r.clone()],
                &aux8[r],
                scales[j] as i32 - 32,
            );
        }
        let d = h(x.d) * yb.d;
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
    });
    let mut sumf = 0f32;
    for s in sums {
        sumf += s;
    }
    sumf
}

/// Unpacks Q4_K/Q5_K's 12 bytes of 6-bit scales and mins as the generic dots do (`utmp`).
#[inline(always)]
pub(crate) fn k4_scales(packed: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let mut u = [0u32; 4];
    for (k, c) in packed.chunks_exact(4).enumerate() {
        u[k] = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    u[3] = ((u[2] >> 4) & KMASK2) | (((u[1] >> 6) & KMASK3) << 4);
    let uaux = u[1] & KMASK1;
    u[1] = (u[2] & KMASK2) | (((u[0] >> 6) & KMASK3) << 4);
    u[2] = uaux;
    u[0] &= KMASK1;
    let mut scales = [0u8; 8];
    let mut mins = [0u8; 8];
    scales[..4].copy_from_slice(&u[0].to_le_bytes());
    scales[4..].copy_from_slice(&u[1].to_le_bytes());
    mins[..4].copy_from_slice(&u[2].to_le_bytes());
    mins[4..].copy_from_slice(&u[3].to_le_bytes());
    (scales, mins)
}

/// The shared tail of the Q4_K and Q5_K generic dots, given the unpacked quants `aux8`.
#[inline(always)]
fn k45_block(
    aux8: &[i8; QK_K],
    packed: &[u8; 12],
    d: f16,
    dmin: f16,
    yb: &BlockQ8K,
    sums: &mut [f32; 8],
    sumf: &mut f32,
) {
    let (scales, mins) = k4_scales(packed);
    let mut aux32 = [0i32; 8];
    for j in 0..QK_K / 32 {
        let r = j * 32..j * 32 + 32;
        acc_groups(&mut aux32, &yb.qs[r.clone()], &aux8[r], scales[j] as i32);
    }
    k45_finish(&aux32, &mins, d, dmin, yb, sums, sumf);
}

/// The float half of the generic Q4_K/Q5_K dots over one super-block, given its 8 integer lanes
/// (`aux32[l]`: `Σ scale · q8 · q` over the values whose index is `l` mod 8, exact).
#[inline(always)]
pub(crate) fn k45_finish(
    aux32: &[i32; 8],
    mins: &[u8; 8],
    d: f16,
    dmin: f16,
    yb: &BlockQ8K,
    sums: &mut [f32; 8],
    sumf: &mut f32,
) {
    let mut sumi = 0i32;
    for j in 0..QK_K / 16 {
        sumi += yb.bsums[j] as i32 * mins[j / 2] as i32;
    }
    let d = h(d) * yb.d;
    for l in 0..8 {
        sums[l] += d * aux32[l] as f32;
    }
    let dmin = h(dmin) * yb.d;
    *sumf -= dmin * sumi as f32;
}

/// `ggml_vec_dot_q4_K_q8_K_generic` (the x86 twins are checked against it).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn dot_q4_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    let mut sums = [0f32; 8];
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &BlockQ4K| {
        let mut aux8 = [0i8; QK_K];
        for j in 0..QK_K / 64 {
            let q4 = &x.qs[j * 32..j * 32 + 32];
            for l in 0..32 {
                aux8[j * 64 + l] = (q4[l] & 0xf) as i8;
                aux8[j * 64 + 32 + l] = (q4[l] >> 4) as i8;
            }
        }
        k45_block(&aux8, &x.scales, x.d, x.dmin, &y[i], &mut sums, &mut sumf);
    });
    for s in sums {
        sumf += s;
    }
    sumf
}

/// `ggml_vec_dot_q5_K_q8_K_generic`.
#[inline]
pub(crate) fn dot_q5_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_q5_k_with(w, y, q5k_lanes)
}

/// [`dot_q5_k`]'s float code over integer lanes from `lanes(x, yb, scales)` (a SIMD kernel's;
/// the lanes are exact, so the result is [`dot_q5_k`]'s bits).
#[inline(always)]
pub(crate) fn dot_q5_k_with(
    w: &[u8],
    y: &[BlockQ8K],
    lanes: impl Fn(&BlockQ5K, &BlockQ8K, &[u8; 8]) -> [i32; 8],
) -> f32 {
    let mut sums = [0f32; 8];
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &BlockQ5K| {
        let (scales, mins) = k4_scales(&x.scales);
        let aux32 = lanes(x, &y[i], &scales);
        k45_finish(&aux32, &mins, x.d, x.dmin, &y[i], &mut sums, &mut sumf);
    });
    for s in sums {
        sumf += s;
    }
    sumf
}

/// The generic Q5_K integer lanes of one super-block (`aux32` of
/// `ggml_vec_dot_q5_K_q8_K_generic`).
#[inline(always)]
fn q5k_lanes(x: &BlockQ5K, yb: &BlockQ8K, scales: &[u8; 8]) -> [i32; 8] {
    let mut aux8 = [0i8; QK_K];
    let mut m = 1u8;
    for j in 0..QK_K / 64 {
        let q4 = &x.qs[j * 32..j * 32 + 32];
        for l in 0..32 {
            let hi = if x.qh[l] & m != 0 { 16 } else { 0 };
            aux8[j * 64 + l] = (q4[l] & 0xf) as i8 + hi;
        }
        m = m.wrapping_shl(1);
        for l in 0..32 {
            let hi = if x.qh[l] & m != 0 { 16 } else { 0 };
            aux8[j * 64 + 32 + l] = (q4[l] >> 4) as i8 + hi;
        }
        m = m.wrapping_shl(1);
    }
    let mut aux32 = [0i32; 8];
    for j in 0..QK_K / 32 {
        let r = j * 32..j * 32 + 32;
        acc_groups(&mut aux32, &yb.qs[r.clone()], &aux8[r], scales[j] as i32);
    }
    aux32
}

/// `ggml_vec_dot_q6_K_q8_K_generic` (the x86 twins are checked against it).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn dot_q6_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    let mut sums = [0f32; 8];
    for_each_block(w, |i, x: &BlockQ6K| {
        let yb = &y[i];
        let mut aux8 = [0i8; QK_K];
        for j in 0..QK_K / 128 {
            let q4 = &x.ql[j * 64..j * 64 + 64];
            let qh = &x.qh[j * 32..j * 32 + 32];
            let a = &mut aux8[j * 128..j * 128 + 128];
            for l in 0..32 {
                a[l] = ((q4[l] & 0xf) | ((qh[l] & 3) << 4)) as i8 - 32;
                a[l + 32] = ((q4[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                a[l + 64] = ((q4[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                a[l + 96] = ((q4[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        let mut aux32 = [0i32; 8];
        for j in 0..QK_K / 16 {
            let r = j * 16..j * 16 + 16;
            acc_groups(&mut aux32, &yb.qs[r.clone()], &aux8[r], x.scales[j] as i32);
        }
        let d = h(x.d) * yb.d;
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
    });
    let mut sumf = 0f32;
    for s in sums {
        sumf += s;
    }
    sumf
}

/// Q8_K weights (ggml has no Q8_K weight dot on the CPU; activations of a Q8_K matmul would
/// be q8_K too): per block `d_w * d_y * Σ q_w q_y`, accumulated in f32.
pub(crate) fn dot_q8_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for_each_block(w, |i, x: &BlockQ8K| {
        let yb = &y[i];
        let mut sumi = 0i32;
        for j in 0..QK_K {
            sumi += x.qs[j] as i32 * yb.qs[j] as i32;
        }
        sumf += sumi as f32 * (x.d * yb.d);
    });
    sumf
}

/// `ggml_vec_dot_iq4_xs_q8_K_generic`.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn dot_iq4_xs(w: &[u8], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for_each_block(w, |ibl, x: &BlockIQ4XS| {
        let yb = &y[ibl];
        let d4d8 = h(x.d) * yb.d;
        let mut hbits = x.scales_h;
        let mut qs = 0;
        let mut q8 = 0;
        for ib in (0..QK_K / 32).step_by(2) {
            let ls1 = (x.scales_l[ib / 2] & 0xf) | ((hbits << 4) & 0x30) as u8;
            let ls2 = (x.scales_l[ib / 2] >> 4) | ((hbits << 2) & 0x30) as u8;
            hbits >>= 4;
            for ls in [ls1, ls2] {
                let dl = d4d8 * (ls as i32 - 32) as f32;
                let (mut s1, mut s2) = (0i32, 0i32);
                for j in 0..16 {
                    s1 += yb.qs[q8 + j] as i32 * KVALUES[(x.qs[qs + j] & 0xf) as usize] as i32;
                    s2 += yb.qs[q8 + j + 16] as i32 * KVALUES[(x.qs[qs + j] >> 4) as usize] as i32;
                }
                sumf += dl * (s1 + s2) as f32;
                qs += 16;
                q8 += 32;
            }
        }
    });
    sumf
}

/// `ggml_vec_dot_f16` without SIMD: exact f32 products summed in f64.
pub(crate) fn dot_f16(w: &[u8], y: &[u16]) -> f32 {
    let mut sum = 0f64;
    for (b, &yv) in w.chunks_exact(2).zip(y) {
        let wv = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
        sum += (wv * f16::from_bits(yv).to_f32()) as f64;
    }
    sum as f32
}

/// `ggml_vec_dot_bf16` without SIMD: exact f32 products summed in f64.
pub(crate) fn dot_bf16(w: &[u8], y: &[u16]) -> f32 {
    let mut sum = 0f64;
    for (b, &yv) in w.chunks_exact(2).zip(y) {
        let wv = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
        sum += (wv * f32::from_bits((yv as u32) << 16)) as f64;
    }
    sum as f32
}

/// `ggml_vec_dot_f16` as the x86 AVX512 build computes it (`GGML_F16_STEP` 64, 4 accumulators
/// of 16 lanes): each f16×f16 product is exact in f32, so only the order of the f32 additions
/// matters. Lane `l` of accumulator `j` sums elements `i ≡ 16j + l (mod 64)` in order; then
/// `acc0 += acc2`, `acc1 += acc3`, `acc0 += acc1`, and `_mm512_reduce_add_ps` adds halves
/// (lanes `l + 8`, then `l + 4`, then `(0 + 2) + (1 + 3)`); the tail past a multiple of 64 is
/// added in f64. Bit-identical to the installed libggml-cpu on random vectors (n = 64..256).
/// llama.cpp's CPU flash attention dots f16 keys with the f16-rounded query this way.
pub(crate) fn dot_f16_ggml_x86(a: &[f16], b: &[f16]) -> f32 {
    let n = a.len().min(b.len());
    let np = n & !63;
    let mut acc = [[0f32; 16]; 4];
    for i in (0..np).step_by(64) {
        for (j, accj) in acc.iter_mut().enumerate() {
            for (l, s) in accj.iter_mut().enumerate() {
                let idx = i + 16 * j + l;
                *s += a[idx].to_f32() * b[idx].to_f32();
            }
        }
    }
    let [mut a0, mut a1, a2, a3] = acc;
    for l in 0..16 {
        a0[l] += a2[l];
        a1[l] += a3[l];
    }
    for l in 0..16 {
        a0[l] += a1[l];
    }
    let mut t8 = [0f32; 8];
    for l in 0..8 {
        t8[l] = a0[l + 8] + a0[l];
    }
    let mut t4 = [0f32; 4];
    for l in 0..4 {
        t4[l] = t8[l + 4] + t8[l];
    }
    let mut sum = ((t4[0] + t4[2]) + (t4[1] + t4[3])) as f64;
    for i in np..n {
        sum += (a[i].to_f32() * b[i].to_f32()) as f64;
    }
    sum as f32
}

/// Dequantizes a converted activation row (test reference).
#[cfg(test)]
pub(crate) trait ActDequant: Sized {
    /// Values of `y` as f32, and per value the largest error the conversion may have made.
    fn values(y: &[Self], x: &[f32]) -> (Vec<f32>, Vec<f32>);
}

#[cfg(test)]
impl ActDequant for BlockQ8_0 {
    fn values(y: &[Self], _x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let mut v = Vec::new();
        let mut e = Vec::new();
        for b in y {
            let d = h(b.d);
            for &q in &b.qs {
                v.push(d * q as f32);
                // Half a step, plus the f16 rounding of d over up to 127 steps.
                e.push(d * (0.5 + 127.0 / 1024.0) * 1.001);
            }
        }
        (v, e)
    }
}

#[cfg(test)]
impl ActDequant for BlockQ8_1 {
    fn values(y: &[Self], _x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let mut v = Vec::new();
        let mut e = Vec::new();
        for b in y {
            let d = h(b.d);
            for &q in &b.qs {
                v.push(d * q as f32);
                e.push(d * (0.5 + 127.0 / 1024.0) * 1.001);
            }
        }
        (v, e)
    }
}

#[cfg(test)]
impl ActDequant for BlockQ8K {
    fn values(y: &[Self], _x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let mut v = Vec::new();
        let mut e = Vec::new();
        for b in y {
            for &q in &b.qs {
                v.push(b.d * q as f32);
                e.push(b.d.abs() * 0.501);
            }
        }
        (v, e)
    }
}

#[cfg(test)]
impl ActDequant for u16 {
    fn values(y: &[Self], x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        // f16 and bf16 are both u16 here: tell them apart by which one reproduces `x`'s bits.
        let f16v: Vec<f32> = y.iter().map(|&b| f16::from_bits(b).to_f32()).collect();
        let is_f16 = y
            .iter()
            .zip(x)
            .all(|(&b, &xv)| f16::from_f32(xv).to_bits() == b);
        if is_f16 {
            let e = x.iter().map(|v| v.abs() / 2048.0 + 6e-8).collect();
            (f16v, e)
        } else {
            let v = y
                .iter()
                .map(|&b| f32::from_bits((b as u32) << 16))
                .collect();
            let e = x.iter().map(|v| v.abs() / 256.0).collect();
            (v, e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{quantized_row, Rng};
    use crate::DType;
    use proptest::prelude::*;

    /// For weight type `D` over `dtype`: the integer dot against (a) f64 over the dequantized
    /// weights and the dequantized activations (tight: only f32 rounding, plus q8_1's f16 `s`),
    /// (b) f64 over the dequantized weights and the original f32 activations (the activation
    /// quantization error).
    fn check<D: QDot>(dtype: DType, k: usize, seed: u64, scale: f32)
    where
        D::Act: ActDequant,
    {
        let mut rng = Rng::new(seed);
        let (w, wf) = quantized_row(&mut rng, dtype, k);
        let x = rng.vec(k, scale);
        let mut y = vec![D::Act::zeroed(); k / D::ACT_N];
        D::quantize(&x, &mut y);
        let got = D::dot(&w, &y) as f64;
        let (a, aerr) = <D::Act as ActDequant>::values(&y, &x);
        let mut want_q = 0f64;
        let mut want_x = 0f64;
        let mut mag = 0f64;
        let mut qerr = 0f64;
        for j in 0..k {
            want_q += wf[j] as f64 * a[j] as f64;
            want_x += wf[j] as f64 * x[j] as f64;
            mag += (wf[j] as f64 * a[j] as f64).abs();
            qerr += (wf[j] as f64).abs() * aerr[j] as f64;
        }
        // q8_1 weights add `m * s`, with `s = f16(d * Σq)` rounded to f16 (2^-11 relative) where
        // the dequantized activations give `m * f16(d) * Σq` (f16(d) also 2^-11 off).
        let mut s_err = 0f64;
        if matches!(dtype, DType::Q4_1 | DType::Q5_1) {
            let bb = dtype.block_bytes();
            let y1: &[BlockQ8_1] = bytemuck::cast_slice(bytemuck::cast_slice::<_, u8>(&y));
            for (blk, yb) in w.chunks_exact(bb).zip(y1) {
                let m = f16::from_bits(u16::from_le_bytes([blk[2], blk[3]])).to_f32() as f64;
                let sq: i32 = yb.qs.iter().map(|&q| q as i32).sum();
                s_err += m.abs() * (h(yb.d) as f64 * sq.abs() as f64) * 2.0 / 1024.0;
            }
        }
        let tol_q = 2e-6 * mag + s_err + 1e-6;
        assert!(
            (got - want_q).abs() <= tol_q,
            "{dtype} k={k}: {got} vs {want_q} over the quantized activations (tol {tol_q})"
        );
        let tol_x = qerr + 2e-6 * mag + s_err + 1e-6;
        assert!(
            (got - want_x).abs() <= tol_x,
            "{dtype} k={k}: {got} vs {want_x} over the f32 activations (tol {tol_x})"
        );
    }

    fn check_dtype(dtype: DType, k: usize, seed: u64, scale: f32) {
        match dtype {
            DType::F16 => check::<DF16>(dtype, k, seed, scale),
            DType::BF16 => check::<DBF16>(dtype, k, seed, scale),
            DType::Q4_0 => check::<DQ4_0>(dtype, k, seed, scale),
            DType::Q4_1 => check::<DQ4_1>(dtype, k, seed, scale),
            DType::Q5_0 => check::<DQ5_0>(dtype, k, seed, scale),
            DType::Q5_1 => check::<DQ5_1>(dtype, k, seed, scale),
            DType::Q8_0 => check::<DQ8_0>(dtype, k, seed, scale),
            DType::Q2K => check::<DQ2K>(dtype, k, seed, scale),
            DType::Q3K => check::<DQ3K>(dtype, k, seed, scale),
            DType::Q4K => check::<DQ4K>(dtype, k, seed, scale),
            DType::Q5K => check::<DQ5K>(dtype, k, seed, scale),
            DType::Q6K => check::<DQ6K>(dtype, k, seed, scale),
            DType::Q8K => check::<DQ8K>(dtype, k, seed, scale),
            DType::IQ4NL => check::<DIQ4NL>(dtype, k, seed, scale),
            DType::IQ4XS => check::<DIQ4XS>(dtype, k, seed, scale),
            DType::MXFP4 => check::<DMXFP4>(dtype, k, seed, scale),
            DType::TQ1_0 => check::<DTQ1_0>(dtype, k, seed, scale),
            DType::TQ2_0 => check::<DTQ2_0>(dtype, k, seed, scale),
            DType::IQ2XXS => check::<DIQ2XXS>(dtype, k, seed, scale),
            DType::IQ2XS => check::<DIQ2XS>(dtype, k, seed, scale),
            DType::IQ2S => check::<DIQ2S>(dtype, k, seed, scale),
            DType::IQ3XXS => check::<DIQ3XXS>(dtype, k, seed, scale),
            DType::IQ3S => check::<DIQ3S>(dtype, k, seed, scale),
            DType::IQ1S => check::<DIQ1S>(dtype, k, seed, scale),
            DType::IQ1M => check::<DIQ1M>(dtype, k, seed, scale),
            DType::F32 => {}
        }
    }

    #[test]
    fn every_dtype_at_fixed_seeds() {
        for dtype in DType::ALL {
            for (seed, k) in [(1u64, 256usize), (2, 512), (3, 1024)] {
                check_dtype(dtype, k, seed, 1.0);
            }
        }
    }

    #[test]
    fn float_weights_take_any_row_length() {
        for k in [1usize, 31, 45, 100] {
            check::<DF16>(DType::F16, k, k as u64, 2.0);
            check::<DBF16>(DType::BF16, k, k as u64, 2.0);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn random_blocks_match_the_dequantized_reference(
            seed in any::<u64>(),
            blocks in 1usize..4,
            scale in prop_oneof![Just(1.0f32), 1e-3f32..1e3],
        ) {
            for dtype in DType::ALL {
                check_dtype(dtype, blocks * 256, seed, scale);
            }
        }
    }

    #[test]
    fn unaligned_weight_rows_give_the_same_bits() {
        let mut rng = Rng::new(5);
        let k = 512;
        let x = rng.vec(k, 1.0);
        for dtype in [
            DType::Q4_1,
            DType::Q4K,
            DType::Q6K,
            DType::IQ4XS,
            DType::F16,
        ] {
            let (w, _) = quantized_row(&mut rng, dtype, k);
            let mut shifted = vec![0u8; w.len() + 1];
            shifted[1..].copy_from_slice(&w);
            let (a, b) = match dtype {
                DType::Q4_1 => {
                    let mut y = vec![BlockQ8_1::zeroed(); k / 32];
                    DQ4_1::quantize(&x, &mut y);
                    (DQ4_1::dot(&w, &y), DQ4_1::dot(&shifted[1..], &y))
                }
                DType::Q4K | DType::Q6K | DType::IQ4XS => {
                    let mut y = vec![BlockQ8K::zeroed(); k / 256];
                    DQ4K::quantize(&x, &mut y);
                    let f = match dtype {
                        DType::Q4K => dot_q4_k,
                        DType::Q6K => dot_q6_k,
                        _ => dot_iq4_xs,
                    };
                    (f(&w, &y), f(&shifted[1..], &y))
                }
                _ => {
                    let mut y = vec![0u16; k];
                    DF16::quantize(&x, &mut y);
                    (DF16::dot(&w, &y), DF16::dot(&shifted[1..], &y))
                }
            };
            assert_eq!(a.to_bits(), b.to_bits(), "{dtype}");
        }
    }

    use crate::cpu::testutil::{parse_ggml_dot, GgmlCase};

    fn ggml_cases() -> Vec<GgmlCase> {
        parse_ggml_dot(include_bytes!("../../tests/fixtures/ggml_dot.bin"))
    }

    /// Converts the case's activations with `D` (must equal ggml's bytes) and dots each row.
    fn run_case<D: QDot>(c: &GgmlCase) -> (Vec<u8>, Vec<f32>) {
        let mut y = vec![D::Act::zeroed(); c.k / D::ACT_N];
        D::quantize(&c.x, &mut y);
        let rb = c.dtype.row_bytes(c.k).unwrap();
        let dots = c.w.chunks_exact(rb).map(|wr| D::dot(wr, &y)).collect();
        (bytemuck::cast_slice(&y).to_vec(), dots)
    }

    /// Bit-exact activation conversion against the installed ggml (x86 AVX512 build), and the
    /// dots within a few f32 ulps of its generic and SIMD kernels (which contract `a*b + c` to
    /// FMA and sum in other orders). ggml's generic Q5_0 in that build returns garbage
    /// (-397.2 where the dequantized f64 reference and its AVX kernel give 1.4876), so Q5_0 is
    /// compared with the SIMD kernel only.
    #[test]
    fn matches_ggml_fixture() {
        let cases = ggml_cases();
        assert_eq!(cases.len(), 14);
        for c in &cases {
            let (act, dots) = match c.dtype {
                DType::F16 => run_case::<DF16>(c),
                DType::BF16 => run_case::<DBF16>(c),
                DType::Q4_0 => run_case::<DQ4_0>(c),
                DType::Q4_1 => run_case::<DQ4_1>(c),
                DType::Q5_0 => run_case::<DQ5_0>(c),
                DType::Q5_1 => run_case::<DQ5_1>(c),
                DType::Q8_0 => run_case::<DQ8_0>(c),
                DType::Q2K => run_case::<DQ2K>(c),
                DType::Q3K => run_case::<DQ3K>(c),
                DType::Q4K => run_case::<DQ4K>(c),
                DType::Q5K => run_case::<DQ5K>(c),
                DType::Q6K => run_case::<DQ6K>(c),
                DType::IQ4NL => run_case::<DIQ4NL>(c),
                DType::IQ4XS => run_case::<DIQ4XS>(c),
                other => panic!("unexpected {other}"),
            };
            assert_eq!(
                act, c.act,
                "{}: activation bytes differ from ggml's",
                c.dtype
            );
            // The x86-order kernels matmul uses: bit-identical to ggml's SIMD kernels.
            let rb = c.dtype.row_bytes(c.k).unwrap();
            let x86: Option<Vec<f32>> = match c.dtype {
                DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => {
                    let mut y = vec![BlockQ8_0::zeroed(); c.k / QK8];
                    q8::quantize_row_q8_0(&c.x, &mut y);
                    type Dot = fn(&[u8], &[BlockQ8_0]) -> f32;
                    let (f, g): (Dot, Dot) = match c.dtype {
                        DType::Q4_0 => (dot_q4_0_x86, dot_q4_0),
                        DType::Q5_0 => (dot_q5_0_x86, dot_q5_0),
                        _ => (dot_q8_0_x86, dot_q8_0),
                    };
                    if c.dtype != DType::Q5_0 {
                        // The generic twins: bit-identical to ggml's generic kernels.
                        for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                            assert_eq!(g(wr, &y).to_bits(), c.generic[r].to_bits(), "{}", c.dtype);
                        }
                    }
                    Some(c.w.chunks_exact(rb).map(|wr| f(wr, &y)).collect())
                }
                DType::Q4_1 | DType::Q5_1 => {
                    let mut y = vec![BlockQ8_1::zeroed(); c.k / QK8];
                    q8::quantize_row_q8_1(&c.x, &mut y);
                    let f = if c.dtype == DType::Q4_1 {
                        for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                            assert_eq!(dot_q4_1(wr, &y).to_bits(), c.generic[r].to_bits());
                        }
                        dot_q4_1_x86
                    } else {
                        // ggml's generic Q5_1 is contracted to FMAs by GCC: within 1 ulp.
                        for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                            let (a, b) = (dot_q5_1(wr, &y).to_bits(), c.generic[r].to_bits());
                            assert!(a.abs_diff(b) <= 1, "Q5_1 generic row {r}");
                        }
                        dot_q5_1_x86
                    };
                    Some(c.w.chunks_exact(rb).map(|wr| f(wr, &y)).collect())
                }
                DType::IQ4NL => {
                    let mut y = vec![BlockQ8_0::zeroed(); c.k / QK8];
                    q8::quantize_row_q8_0(&c.x, &mut y);
                    for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                        let (a, b) = (dot_iq4_nl(wr, &y).to_bits(), c.generic[r].to_bits());
                        assert!(a.abs_diff(b) <= 1, "IQ4_NL generic row {r}");
                    }
                    Some(
                        c.w.chunks_exact(rb)
                            .map(|wr| dot_iq4_nl_x86(wr, &y))
                            .collect(),
                    )
                }
                DType::IQ4XS => {
                    let mut y = vec![BlockQ8K::zeroed(); c.k / QK_K];
                    q8::quantize_row_q8_k(&c.x, &mut y);
                    for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                        let (a, b) = (dot_iq4_xs(wr, &y).to_bits(), c.generic[r].to_bits());
                        assert!(a.abs_diff(b) <= 1, "IQ4_XS generic row {r}");
                    }
                    Some(
                        c.w.chunks_exact(rb)
                            .map(|wr| dot_iq4_xs_x86(wr, &y))
                            .collect(),
                    )
                }
                _ => None,
            };
            if let Some(x86) = x86 {
                for (r, v) in x86.iter().enumerate() {
                    assert_eq!(
                        v.to_bits(),
                        c.simd[r].to_bits(),
                        "{} row {r} x86 order",
                        c.dtype
                    );
                }
            }
            if c.dtype == DType::F16 {
                // The AVX512 emulation used by attention: bit-identical to ggml_vec_dot_f16.
                let a: Vec<f16> = c
                    .act
                    .chunks_exact(2)
                    .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                    .collect();
                let rb = c.dtype.row_bytes(c.k).unwrap();
                for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                    let w: Vec<f16> = wr
                        .chunks_exact(2)
                        .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                        .collect();
                    assert_eq!(dot_f16_ggml_x86(&w, &a).to_bits(), c.simd[r].to_bits());
                }
            }
            let ulps = |a: f32, b: f32| (a.to_bits() as i64 - b.to_bits() as i64).abs();
            let gen_ulps = dots.iter().zip(&c.generic).map(|(&a, &b)| ulps(a, b)).max();
            let simd_ulps = dots.iter().zip(&c.simd).map(|(&a, &b)| ulps(a, b)).max();
            eprintln!(
                "{}: max ulps vs ggml generic {gen_ulps:?}, vs SIMD {simd_ulps:?}",
                c.dtype
            );
            for (r, &got) in dots.iter().enumerate() {
                let close = |want: f32| (got - want).abs() <= 1e-5 * want.abs().max(1.0);
                if c.dtype != DType::Q5_0 && c.generic[r].is_finite() {
                    assert!(
                        close(c.generic[r]),
                        "{} row {r}: {got} vs ggml generic {}",
                        c.dtype,
                        c.generic[r]
                    );
                }
                assert!(
                    close(c.simd[r]),
                    "{} row {r}: {got} vs ggml simd {}",
                    c.dtype,
                    c.simd[r]
                );
            }
        }
    }
}
