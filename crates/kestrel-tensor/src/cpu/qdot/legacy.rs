//! The 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) against q8_0/q8_1
//! activations: ggml's generic dots and the x86 order llama.cpp's AVX2/AVX512 builds sum in.

// The kernels index as ggml's C does, so they can be read side by side with it.
#![allow(clippy::needless_range_loop)]

use kestrel_gguf::quant::{
    self, BlockIQ4NL, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0,
};

use super::common::{for_each_block, h, hsum_float_8};
use crate::cpu::q8_block::{BlockQ8_1, QK8};

const KVALUES: [i8; 16] = quant::iq4_nl::KVALUES_IQ4NL;

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
