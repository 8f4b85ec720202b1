//! The 4-bit table types (IQ4_NL, MXFP4 against q8_0; IQ4_XS against q8_K) in the order ggml's
//! x86 builds sum them (`ggml_vec_dot_iq4_nl_q8_0`, `_mxfp4_q8_0`, `_iq4_xs_q8_K` under
//! `__AVX2__`, which AVX-512 builds also run): 8 f32 lanes, lane `l` taking the exact integer
//! sum of values `4l..4l+4` of each 32 (times the group scale for IQ4_XS) through one FMA per
//! block, the lanes added by `hsum_float_8` at the end. No horizontal sum per block, so the
//! SIMD kernels (`x86_64/iq4.rs`) are as fast as ggml's; these scalar twins define the bits.
//!
//! IQ4_NL and MXFP4 take blocks in pairs into two accumulators and the odd last block in
//! scalar, added as GCC builds `sumf += d * sumi` (one FMA).

use bytemuck::Pod;
use kestrel_gguf::quant::iq4_nl::KVALUES_IQ4NL;
use kestrel_gguf::quant::mxfp4::{e8m0_to_f32_half, KVALUES_MXFP4};
use kestrel_gguf::quant::{BlockIQ4NL, BlockIQ4XS, BlockMXFP4, BlockQ8K, BlockQ8_0, QK_K};

use super::common::{for_each_block, h, hsum_float_8};
use crate::cpu::q8_block::QK8;

/// The 32 table values of 16 code bytes (byte `j`: value `j` low nibble, `j + 16` high).
#[inline(always)]
fn values(table: &[i8; 16], qs: &[u8; 16]) -> [i32; QK8] {
    std::array::from_fn(|b| {
        let q = if b < 16 { qs[b] & 0xf } else { qs[b - 16] >> 4 };
        table[q as usize] as i32
    })
}

/// Lane `l`: the exact sum of products `4l..4l+4` of 32 values with 32 quants.
#[inline(always)]
fn lanes(v: &[i32], q: &[i8]) -> [i32; 8] {
    std::array::from_fn(|l| (4 * l..4 * l + 4).map(|b| v[b] * q[b] as i32).sum())
}

/// The pairs-then-tail order of ggml's AVX2 IQ4_NL and MXFP4 dots; `d(x)` is the block's
/// scale, `qs(x)` its codes.
#[inline(always)]
fn dot_pairs<B: Pod>(
    w: &[u8],
    y: &[BlockQ8_0],
    table: &[i8; 16],
    d: impl Fn(&B) -> f32,
    qs: impl Fn(&B) -> &[u8; 16],
) -> f32 {
    let nb = w.len() / std::mem::size_of::<B>();
    let mut acc = [[0f32; 8]; 2];
    let mut tail = None;
    for_each_block(w, |i, x: &B| {
        let yb = &y[i];
        let scale = h(yb.d) * d(x);
        let v = values(table, qs(x));
        if i + 1 == nb && nb % 2 == 1 {
            tail = Some((scale, lanes(&v, &yb.qs).iter().sum::<i32>()));
            return;
        }
        let a = &mut acc[i % 2];
        for (al, s) in a.iter_mut().zip(lanes(&v, &yb.qs)) {
            *al = scale.mul_add(s as f32, *al);
        }
    });
    let sum: [f32; 8] = std::array::from_fn(|l| acc[0][l] + acc[1][l]);
    let sumf = hsum_float_8(&sum);
    match tail {
        Some((scale, s)) => scale.mul_add(s as f32, sumf),
        None => sumf,
    }
}

/// `ggml_vec_dot_iq4_nl_q8_0` as x86 AVX2/AVX-512 builds run it.
pub(crate) fn dot_iq4_nl_x86(w: &[u8], y: &[BlockQ8_0]) -> f32 {
    dot_pairs(
        w,
        y,
        &KVALUES_IQ4NL,
        |x: &BlockIQ4NL| h(x.d),
        |x: &BlockIQ4NL| &x.qs,
    )
}

/// `ggml_vec_dot_mxfp4_q8_0` as x86 AVX2/AVX-512 builds run it.
pub(crate) fn dot_mxfp4_x86(w: &[u8], y: &[BlockQ8_0]) -> f32 {
    dot_pairs(
        w,
        y,
        &KVALUES_MXFP4,
        |x: &BlockMXFP4| e8m0_to_f32_half(x.e),
        |x: &BlockMXFP4| &x.qs,
    )
}

/// The 6-bit scale of group `g` of an IQ4_XS block, less 32.
#[inline(always)]
pub(crate) fn iq4_xs_scale(x: &BlockIQ4XS, g: usize) -> i32 {
    let l = (x.scales_l[g / 2] >> (4 * (g % 2))) & 0xf;
    let hb = ((x.scales_h >> (2 * g)) & 3) as u8;
    (l | (hb << 4)) as i32 - 32
}

/// `ggml_vec_dot_iq4_xs_q8_K` as x86 AVX2/AVX-512 builds run it: per block the lanes' exact
/// integer sums over all 8 groups (each times its scale), one FMA per block.
pub(crate) fn dot_iq4_xs_x86(w: &[u8], y: &[BlockQ8K]) -> f32 {
    let mut acc = [0f32; 8];
    for_each_block(w, |ibl, x: &BlockIQ4XS| {
        let yb = &y[ibl];
        let mut sumi = [0i32; 8];
        for g in 0..QK_K / 32 {
            let qs: &[u8; 16] = x.qs[16 * g..16 * g + 16].try_into().expect("16 bytes");
            let v = values(&KVALUES_IQ4NL, qs);
            let ls = iq4_xs_scale(x, g);
            for (s, l) in sumi.iter_mut().zip(lanes(&v, &yb.qs[32 * g..32 * g + 32])) {
                *s += ls * l;
            }
        }
        let d = h(x.d) * yb.d;
        for (a, s) in acc.iter_mut().zip(sumi) {
            *a = d.mul_add(s as f32, *a);
        }
    });
    hsum_float_8(&acc)
}
