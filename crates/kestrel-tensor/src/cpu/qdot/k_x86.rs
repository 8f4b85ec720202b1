//! Scalar twins of the K-quant dots as llama.cpp's x86 build runs them: ggml's AVX2 kernels
//! `ggml_vec_dot_{q2,q3,q4,q5,q6}_K_q8_K` in `ggml-cpu/arch/x86/quants.c`. Those functions
//! have no AVX-512 path (an AVX512 + VNNI `-march=native` build compiles the `__AVX2__`
//! branch), so these twins are also what the reference build computes. They were checked
//! against the reference build itself (llama.cpp b11434's `libggml-cpu.so`, the
//! `tests/fixtures/ggml_dot.bin` oracle): its disassembly for the float steps and Q6_K's
//! offset handling, the fixture for the bits.
//!
//! What the AVX2 kernels fix, and these twins reproduce:
//!
//! - **Integer lanes.** Each 32-value chunk goes through `vpmaddubsw` (pairs) and `vpmaddwd`
//!   against a vector of i16 scales (pairs of pairs), so i32 lane `l` (0..8) of the
//!   super-block's `sumi` holds `Σ scale · q · q8` over bytes `4l..4l+4` of every chunk. Q4_K
//!   and Q5_K have one scale per chunk; Q2_K, Q3_K and Q6_K one per 16 values, so lanes 0..4
//!   take the chunk's first scale and lanes 4..8 its second. Q6_K then subtracts its `-32`
//!   offset per lane from `bsums` (see [`dot_q6_k_x86`]). Integer sums are exact, so only
//!   which lane each product lands in matters.
//! - **Float steps**, per super-block: `acc[l] = fma(d_y·d_x, sumi[l], acc[l])` (`d` rounded
//!   once, `vfmadd231ps`). Mins: Q4_K keeps a 4-lane `acc_m[m] = fma(-d_y·dmin, prod[m],
//!   acc_m[m])` with `prod[m]` the `vpmaddwd` of mins `2m, 2m+1` with the pair sums of `bsums`
//!   (`vphaddw`); Q5_K sums `prod` to one integer and does `summs += -d_y·dmin · isum` in
//!   scalar code, which the build contracts to one `vfmadd231ss`; Q2_K puts
//!   `fma(-d_y·dmin, prod[l], acc[l])` with 8-lane `prod` into the same `acc`, before the
//!   scale term.
//! - **Result**: `hsum_float_8(acc)` (lanes `i + 4` and `i`, then `(0 + 2) + (1 + 3)`), plus for
//!   Q4_K `acc_m` reduced the same way (`(0 + 2) + (1 + 3)`), for Q5_K `summs`.
//!
//! [`super::x86_64::avx2_kquants`] holds the AVX2 kernels, bit-identical to these.

// The twins index as ggml's kernels do, so they can be read side by side with them.
#![allow(clippy::needless_range_loop)]
// Q2_K, Q3_K, Q5_K and the plain Q4_K twin are not wired into matmul yet: only the tests call
// them.
#![cfg_attr(not(test), allow(dead_code))]

use kestrel_gguf::quant::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K};

use super::common::{for_each_block, h, hsum_float_8};
use super::kquants::k4_scales;

/// Adds one 32-value chunk into the 8 lanes: lane `l` gets `Σ q(b) · q8[b]` over
/// `b = 4l..4l+4`, times `s_lo` for lanes 0..4 (values 0..16) or `s_hi` for lanes 4..8.
#[inline(always)]
fn chunk(sumi: &mut [i32; 8], q: impl Fn(usize) -> i32, q8: &[i8], s_lo: i32, s_hi: i32) {
    for (l, s) in sumi.iter_mut().enumerate() {
        let mut p = 0i32;
        for b in 4 * l..4 * l + 4 {
            p += q(b) * q8[b] as i32;
        }
        *s += if l < 4 { s_lo } else { s_hi } * p;
    }
}

/// `acc[l] = fma(d, sumi[l], acc[l])` (`_mm256_fmadd_ps`).
#[inline(always)]
fn fma8(acc: &mut [f32; 8], d: f32, sumi: &[i32; 8]) {
    for l in 0..8 {
        acc[l] = d.mul_add(sumi[l] as f32, acc[l]);
    }
}

/// The 4 i32 lanes of `vpmaddwd(mins, vphaddw(bsums[0..8], bsums[8..16]))` in the Q4_K and
/// Q5_K kernels: lane `m` is `mins[2m]·(bsums[4m] + bsums[4m+1]) + mins[2m+1]·(bsums[4m+2] +
/// bsums[4m+3])`, the pair sums wrapping in i16 as `vphaddw` does (they cannot for activations
/// from the q8_K quantizer: |bsum| <= 2048).
#[inline(always)]
fn mins_prod(yb: &BlockQ8K, mins: &[u8; 8]) -> [i32; 4] {
    let b = &yb.bsums;
    std::array::from_fn(|m| {
        let q0 = b[4 * m].wrapping_add(b[4 * m + 1]) as i32;
        let q1 = b[4 * m + 2].wrapping_add(b[4 * m + 3]) as i32;
        mins[2 * m] as i32 * q0 + mins[2 * m + 1] as i32 * q1
    })
}

/// Q3_K's 16 scales minus 32, as the AVX2 kernel builds `scales128` (same values as the generic
/// unpacking).
#[inline(always)]
pub(crate) fn q3_scales(packed: &[u8; 12]) -> [i8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let a = |k: usize| {
        u32::from_le_bytes([
            packed[4 * k],
            packed[4 * k + 1],
            packed[4 * k + 2],
            packed[4 * k + 3],
        ])
    };
    let (a0, a1, a2) = (a(0), a(1), a(2));
    let words = [
        (a0 & KMASK2) | ((a2 & KMASK1) << 4),
        (a1 & KMASK2) | (((a2 >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((a2 >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((a2 >> 6) & KMASK1) << 4),
    ];
    let mut out = [0i8; 16];
    for (k, w) in words.iter().enumerate() {
        for (b, byte) in w.to_le_bytes().iter().enumerate() {
            out[4 * k + b] = byte.wrapping_sub(32) as i8;
        }
    }
    out
}

/// `ggml_vec_dot_q4_K_q8_K` as x86 builds run it (the AVX2 kernel; see the module docs).
pub(crate) fn dot_q4_k_x86(w: &[u8], y: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), y.len() * std::mem::size_of::<BlockQ4K>());
    let mut acc = [0f32; 8];
    let mut acc_m = [0f32; 4];
    for_each_block(w, |i, x: &BlockQ4K| {
        let yb = &y[i];
        let d = yb.d * h(x.d);
        let dmin = -yb.d * h(x.dmin);
        let (scales, mins) = k4_scales(&x.scales);
        let prod = mins_prod(yb, &mins);
        for m in 0..4 {
            acc_m[m] = dmin.mul_add(prod[m] as f32, acc_m[m]);
        }
        let mut sumi = [0i32; 8];
        for c in 0..8 {
            // Chunk c: the low (even c) or high nibbles of bytes 32·(c/2)..+32.
            let q4 = &x.qs[32 * (c / 2)..32 * (c / 2) + 32];
            let shift = 4 * (c % 2);
            let s = scales[c] as i32;
            let q = |b: usize| ((q4[b] >> shift) & 0xf) as i32;
            chunk(&mut sumi, q, &yb.qs[32 * c..32 * c + 32], s, s);
        }
        fma8(&mut acc, d, &sumi);
    });
    hsum_float_8(&acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]))
}

/// The integer parts of one Q4_K super-block against one q8_K block, per pair of 32-value
/// sub-blocks `p` (0..4): `Σ scale · q · a` over sub-blocks `2p` and `2p + 1`, and
/// `Σ min · bsum` over the same two (exact integers).
#[inline(always)]
pub(crate) fn q4k_pairs(x: &BlockQ4K, yb: &BlockQ8K) -> ([i32; 4], [i32; 4]) {
    let (scales, mins) = k4_scales(&x.scales);
    let mut val = [0i32; 4];
    let mut min = [0i32; 4];
    for p in 0..QK_K / 64 {
        let q4 = &x.qs[p * 32..p * 32 + 32];
        let (a0, a1) = (
            &yb.qs[p * 64..p * 64 + 32],
            &yb.qs[p * 64 + 32..p * 64 + 64],
        );
        let (mut lo, mut hi) = (0i32, 0i32);
        for l in 0..32 {
            lo += i32::from(q4[l] & 0xf) * i32::from(a0[l]);
            hi += i32::from(q4[l] >> 4) * i32::from(a1[l]);
        }
        val[p] = i32::from(scales[2 * p]) * lo + i32::from(scales[2 * p + 1]) * hi;
        let bs = |j: usize| i32::from(yb.bsums[2 * j]) + i32::from(yb.bsums[2 * j + 1]);
        min[p] = bs(2 * p) * i32::from(mins[2 * p]) + bs(2 * p + 1) * i32::from(mins[2 * p + 1]);
    }
    (val, min)
}

/// Q4_K · q8_K in the float order of llama.cpp's x86 `ggml_gemv_q4_K_8x8_q8_K`: its path for
/// single activation rows (decode, and the last `n % 4` rows of a batch) once it has repacked
/// Q4_K weights at load, which it does by default on AVX2/AVX-512 CPUs: per super-block one exact integer for the
/// scaled products and one for `Σ min · bsum`, each added as `acc = fma(f32(int), d_w·d_x,
/// acc)` into its own accumulator; `acc - acc_min` at the end.
#[inline]
pub(crate) fn dot_q4_k_8x8_gemv(w: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_q4_k_8x8_gemv_with(w, y, q4k_pairs)
}

/// [`dot_q4_k_8x8_gemv`]'s float steps over the integer parts `pairs` computes (the twin's
/// [`q4k_pairs`], or a SIMD kernel's: exact integers, so the results are the same bits).
#[inline(always)]
pub(crate) fn dot_q4_k_8x8_gemv_with(
    w: &[u8],
    y: &[BlockQ8K],
    pairs: impl Fn(&BlockQ4K, &BlockQ8K) -> ([i32; 4], [i32; 4]),
) -> f32 {
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for_each_block(w, |i, x: &BlockQ4K| {
        let yb = &y[i];
        let (val, min) = pairs(x, yb);
        let (v, m) = (val.iter().sum::<i32>(), min.iter().sum::<i32>());
        acc = (v as f32).mul_add(h(x.d) * yb.d, acc);
        acc_min = (m as f32).mul_add(h(x.dmin) * yb.d, acc_min);
    });
    acc - acc_min
}

/// Q4_K · q8_K in the float order of llama.cpp's x86 `ggml_gemm_q4_K_8x8_q8_K` (its path for
/// groups of 4 activation rows): as [`dot_q4_k_8x8_gemv`] but one `fma` per pair of sub-blocks.
#[inline]
pub(crate) fn dot_q4_k_8x8_gemm(w: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_q4_k_8x8_gemm_with(w, y, q4k_pairs)
}

/// [`dot_q4_k_8x8_gemm`]'s float steps over the integer parts `pairs` computes.
#[inline(always)]
pub(crate) fn dot_q4_k_8x8_gemm_with(
    w: &[u8],
    y: &[BlockQ8K],
    pairs: impl Fn(&BlockQ4K, &BlockQ8K) -> ([i32; 4], [i32; 4]),
) -> f32 {
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for_each_block(w, |i, x: &BlockQ4K| {
        let yb = &y[i];
        let (val, min) = pairs(x, yb);
        let (d, dmin) = (h(x.d) * yb.d, h(x.dmin) * yb.d);
        for p in 0..QK_K / 64 {
            acc = (val[p] as f32).mul_add(d, acc);
            acc_min = (min[p] as f32).mul_add(dmin, acc_min);
        }
    });
    acc - acc_min
}

/// `ggml_vec_dot_q5_K_q8_K` as x86 builds run it (the AVX2 kernel; the mins go to a scalar
/// `summs`, one FMA per super-block).
pub(crate) fn dot_q5_k_x86(w: &[u8], y: &[BlockQ8K]) -> f32 {
    debug_assert_eq!(w.len(), y.len() * std::mem::size_of::<BlockQ5K>());
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for_each_block(w, |i, x: &BlockQ5K| {
        let yb = &y[i];
        let d = yb.d * h(x.d);
        let dmin = -yb.d * h(x.dmin);
        let (scales, mins) = k4_scales(&x.scales);
        let isum = mins_prod(yb, &mins)
            .iter()
            .fold(0i32, |a, &p| a.wrapping_add(p));
        summs = dmin.mul_add(isum as f32, summs);
        let mut sumi = [0i32; 8];
        for c in 0..8 {
            let q4 = &x.qs[32 * (c / 2)..32 * (c / 2) + 32];
            let shift = 4 * (c % 2);
            let s = scales[c] as i32;
            // The fifth bit of chunk c is bit c of qh[b].
            let q = |b: usize| (((q4[b] >> shift) & 0xf) | (((x.qh[b] >> c) & 1) << 4)) as i32;
            chunk(&mut sumi, q, &yb.qs[32 * c..32 * c + 32], s, s);
        }
        fma8(&mut acc, d, &sumi);
    });
    hsum_float_8(&acc) + summs
}

/// `ggml_vec_dot_q6_K_q8_K` as the reference build (b11434) runs it: the AVX2 kernel with the
/// quants' `-32` offset taken out of the chunk products and subtracted per super-block as
/// `32 · vpmaddwd(scales, bsums)`, whose lane `l` holds groups `2l, 2l + 1` (values
/// `32l..32l + 32`), not bytes `4l..4l+4` of each chunk. Older ggml sources subtract `32·q8`
/// inside each chunk instead, which spreads the offset over the lanes differently (1 ulp
/// apart on the fixture).
#[inline]
pub(crate) fn dot_q6_k_x86(w: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_q6_k_x86_with(w, y, q6k_lanes)
}

/// The 8 integer lanes of one Q6_K super-block in [`dot_q6_k_x86`]'s arrangement, the `-32`
/// offset subtracted per lane (exact).
#[inline(always)]
pub(crate) fn q6k_lanes(x: &BlockQ6K, yb: &BlockQ8K) -> [i32; 8] {
    let sc = &x.scales;
    let mut sumi = [0i32; 8];
    for c in 0..8 {
        // Half j = c/4 of the block, chunk k = c%4 in it: low bits from ql bytes
        // 64j + 32·(k%2).. (nibble k/2), high bits 2k..2k+2 of qh bytes 32j...
        let (j, k) = (c / 4, c % 4);
        let ql = &x.ql[64 * j + 32 * (k % 2)..64 * j + 32 * (k % 2) + 32];
        let qh = &x.qh[32 * j..32 * j + 32];
        let q = |b: usize| {
            let lo = (ql[b] >> (4 * (k / 2))) & 0xf;
            let hi = (qh[b] >> (2 * k)) & 3;
            (lo | (hi << 4)) as i32
        };
        let (s_lo, s_hi) = (sc[2 * c] as i32, sc[2 * c + 1] as i32);
        chunk(&mut sumi, q, &yb.qs[32 * c..32 * c + 32], s_lo, s_hi);
    }
    q6k_offset(&mut sumi, x, yb);
    sumi
}

/// Subtracts Q6_K's `-32` offset from `sumi` per lane: `32 · (sc[2l]·bsums[2l] +
/// sc[2l+1]·bsums[2l+1])` from lane `l`.
#[inline(always)]
pub(crate) fn q6k_offset(sumi: &mut [i32; 8], x: &BlockQ6K, yb: &BlockQ8K) {
    let sc = &x.scales;
    for l in 0..8 {
        let off = sc[2 * l] as i32 * yb.bsums[2 * l] as i32
            + sc[2 * l + 1] as i32 * yb.bsums[2 * l + 1] as i32;
        sumi[l] -= 32 * off;
    }
}

/// [`dot_q6_k_x86`]'s float steps over the integer lanes `lanes` computes.
#[inline(always)]
pub(crate) fn dot_q6_k_x86_with(
    w: &[u8],
    y: &[BlockQ8K],
    lanes: impl Fn(&BlockQ6K, &BlockQ8K) -> [i32; 8],
) -> f32 {
    debug_assert_eq!(w.len(), y.len() * std::mem::size_of::<BlockQ6K>());
    let mut acc = [0f32; 8];
    for_each_block(w, |i, x: &BlockQ6K| {
        let yb = &y[i];
        let d = yb.d * h(x.d);
        fma8(&mut acc, d, &lanes(x, yb));
    });
    hsum_float_8(&acc)
}

/// Q6_K × q8_K as llama.cpp b11434's tiled K-quant matmul sums it (`ggml-cpu/tiled`, which
/// takes every K-quant matmul of 8 or more activation rows whose weights are not repacked):
/// each super-block's integer dot `Σ scale · (q - 32) · a` exactly, then per super-block, in
/// order, `acc = fma(f32(isum) · d_w, d_a, acc)` (its VNNI microtile's epilogue
/// `acc + (cvt(s1) * d0) * d1`, which GCC contracts to one FMA; bit-identical to libggml-cpu
/// on the `ggml_matmul.bin` fixture, and not without the FMA).
#[inline]
pub(crate) fn dot_q6_k_tiled(w: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_q6_k_tiled_with(w, y, q6k_isum)
}

/// One Q6_K super-block's exact integer dot `Σ scale · (q - 32) · a` (the tiled order's).
#[inline(always)]
fn q6k_isum(x: &BlockQ6K, yb: &BlockQ8K) -> i32 {
    let mut isum = 0i32;
    for c in 0..8 {
        let (j, k) = (c / 4, c % 4);
        let ql = &x.ql[64 * j + 32 * (k % 2)..64 * j + 32 * (k % 2) + 32];
        let qh = &x.qh[32 * j..32 * j + 32];
        for half in 0..2 {
            let mut sub = 0i32;
            for b in 16 * half..16 * half + 16 {
                let lo = (ql[b] >> (4 * (k / 2))) & 0xf;
                let hi = (qh[b] >> (2 * k)) & 3;
                let q = (lo | (hi << 4)) as i32 - 32;
                sub += q * yb.qs[32 * c + b] as i32;
            }
            isum += x.scales[2 * c + half] as i32 * sub;
        }
    }
    isum
}

/// [`dot_q6_k_tiled`]'s float steps over the per-super-block integers `isum` computes.
#[inline(always)]
pub(crate) fn dot_q6_k_tiled_with(
    w: &[u8],
    y: &[BlockQ8K],
    isum: impl Fn(&BlockQ6K, &BlockQ8K) -> i32,
) -> f32 {
    debug_assert_eq!(w.len(), y.len() * std::mem::size_of::<BlockQ6K>());
    let mut acc = 0f32;
    for_each_block(w, |i, x: &BlockQ6K| {
        let yb = &y[i];
        let isum = isum(x, yb);
        acc = (isum as f32 * h(x.d)).mul_add(yb.d, acc);
    });
    acc
}

/// `ggml_vec_dot_q2_K_q8_K` as x86 builds run it (the AVX2 kernel: the mins term is an 8-lane
/// FMA into the same accumulator, before the scale term).
#[inline]
pub(crate) fn dot_q2_k_x86(w: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_q2_k_x86_with(w, y, q2k_lanes)
}

/// [`dot_q2_k_x86`]'s float code over the 8 integer lanes `lanes(x, yb)` gives (exact, so any
/// kernel computing them gives the twin's bits).
#[inline(always)]
pub(crate) fn dot_q2_k_x86_with(
    w: &[u8],
    y: &[BlockQ8K],
    lanes: impl Fn(&BlockQ2K, &BlockQ8K) -> [i32; 8],
) -> f32 {
    debug_assert_eq!(w.len(), y.len() * std::mem::size_of::<BlockQ2K>());
    let mut acc = [0f32; 8];
    for_each_block(w, |i, x: &BlockQ2K| {
        let yb = &y[i];
        let d = yb.d * h(x.d);
        let dmin = -yb.d * h(x.dmin);
        let sc = &x.scales;
        for l in 0..8 {
            let prod = (sc[2 * l] >> 4) as i32 * yb.bsums[2 * l] as i32
                + (sc[2 * l + 1] >> 4) as i32 * yb.bsums[2 * l + 1] as i32;
            acc[l] = dmin.mul_add(prod as f32, acc[l]);
        }
        fma8(&mut acc, d, &lanes(x, yb));
    });
    hsum_float_8(&acc)
}

/// Q2_K's 8 integer lanes in the x86 arrangement: chunk `c` (32 values) adds bytes `4l..4l+4`
/// into lane `l`, times the scale of its first 16 values (lanes 0-3) or its last 16 (4-7).
#[inline(always)]
pub(crate) fn q2k_lanes(x: &BlockQ2K, yb: &BlockQ8K) -> [i32; 8] {
    let sc = &x.scales;
    let mut sumi = [0i32; 8];
    for c in 0..8 {
        let (j, k) = (c / 4, c % 4);
        let q2 = &x.qs[32 * j..32 * j + 32];
        let q = |b: usize| ((q2[b] >> (2 * k)) & 3) as i32;
        let (s_lo, s_hi) = ((sc[2 * c] & 0xf) as i32, (sc[2 * c + 1] & 0xf) as i32);
        chunk(&mut sumi, q, &yb.qs[32 * c..32 * c + 32], s_lo, s_hi);
    }
    sumi
}

/// `ggml_vec_dot_q3_K_q8_K` as x86 builds run it (the AVX2 kernel).
#[inline]
pub(crate) fn dot_q3_k_x86(w: &[u8], y: &[BlockQ8K]) -> f32 {
    dot_q3_k_x86_with(w, y, q3k_lanes)
}

/// [`dot_q3_k_x86`]'s float code over the 8 integer lanes `lanes(x, yb, scales)` gives
/// (`scales`: [`q3_scales`] of the block).
#[inline(always)]
pub(crate) fn dot_q3_k_x86_with(
    w: &[u8],
    y: &[BlockQ8K],
    lanes: impl Fn(&BlockQ3K, &BlockQ8K, &[i8; 16]) -> [i32; 8],
) -> f32 {
    debug_assert_eq!(w.len(), y.len() * std::mem::size_of::<BlockQ3K>());
    let mut acc = [0f32; 8];
    for_each_block(w, |i, x: &BlockQ3K| {
        let yb = &y[i];
        let d = yb.d * h(x.d);
        let scales = q3_scales(&x.scales);
        fma8(&mut acc, d, &lanes(x, yb, &scales));
    });
    hsum_float_8(&acc)
}

/// Q3_K's 8 integer lanes in the x86 arrangement (as [`q2k_lanes`]; quants `q - 4` where bit
/// `c` of `hmask[b]` is clear).
#[inline(always)]
pub(crate) fn q3k_lanes(x: &BlockQ3K, yb: &BlockQ8K, scales: &[i8; 16]) -> [i32; 8] {
    let mut sumi = [0i32; 8];
    for c in 0..8 {
        let (j, k) = (c / 4, c % 4);
        let q3 = &x.qs[32 * j..32 * j + 32];
        // Bit c of hmask[b] set: no -4.
        let q = |b: usize| {
            let lo = ((q3[b] >> (2 * k)) & 3) as i32;
            lo - if (x.hmask[b] >> c) & 1 != 0 { 0 } else { 4 }
        };
        let (s_lo, s_hi) = (scales[2 * c] as i32, scales[2 * c + 1] as i32);
        chunk(&mut sumi, q, &yb.qs[32 * c..32 * c + 32], s_lo, s_hi);
    }
    sumi
}

/// Test support shared with the AVX2 tests.
#[cfg(test)]
pub(crate) mod testing {
    use half::f16;
    use kestrel_gguf::quant::BlockQ8K;

    use crate::cpu::q8;
    use crate::cpu::testutil::Rng;
    use crate::DType;

    /// The K-quant weight types with an x86-order twin.
    pub(crate) const TYPES: [DType; 5] =
        [DType::Q2K, DType::Q3K, DType::Q4K, DType::Q5K, DType::Q6K];

    /// Byte offsets of the f16 super-block scales in one block of `dtype`.
    pub(crate) fn f16_offsets(dtype: DType) -> &'static [usize] {
        match dtype {
            DType::Q2K => &[80, 82],
            DType::Q3K => &[108],
            DType::Q4K | DType::Q5K => &[0, 2],
            DType::Q6K => &[208],
            other => panic!("not a K-quant: {other}"),
        }
    }

    /// `blocks` blocks of random bytes whose f16 scales are finite: magnitudes 2^-16..2^0,
    /// random signs (so `dmin` and `d` take both signs).
    pub(crate) fn random_blocks(rng: &mut Rng, dtype: DType, blocks: usize) -> Vec<u8> {
        let bb = dtype.block_bytes();
        let mut w: Vec<u8> = (0..blocks * bb).map(|_| rng.next_u64() as u8).collect();
        for blk in w.chunks_exact_mut(bb) {
            for &o in f16_offsets(dtype) {
                let e = (rng.next_u64() % 17) as i32;
                let v = rng.f32() * (-e as f32).exp2();
                blk[o..o + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
            }
        }
        w
    }

    /// A q8_K activation row of `blocks` blocks from random f32 values of magnitude `scale`.
    pub(crate) fn activations(rng: &mut Rng, blocks: usize, scale: f32) -> Vec<BlockQ8K> {
        let x = rng.vec(blocks * 256, scale);
        let mut y = vec![bytemuck::Zeroable::zeroed(); blocks];
        q8::quantize_row_q8_k(&x, &mut y);
        y
    }

    /// `w` copied to 1 byte past a 64-byte boundary (odd alignment for every field).
    pub(crate) fn misaligned(w: &[u8]) -> (Vec<u8>, usize) {
        let mut buf = vec![0u8; w.len() + 128];
        let off = (64 - buf.as_ptr() as usize % 64) % 64 + 1;
        buf[off..off + w.len()].copy_from_slice(w);
        (buf, off)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use crate::cpu::qdot;
    use crate::cpu::testutil::{quantized_rows, Rng};
    use crate::DType;
    use kestrel_gguf::quant;
    use proptest::prelude::*;

    type Dot = fn(&[u8], &[BlockQ8K]) -> f32;

    /// (x86 twin, generic twin) for a K-quant type.
    fn twins(dtype: DType) -> (Dot, Dot) {
        match dtype {
            DType::Q2K => (dot_q2_k_x86, qdot::dot_q2_k),
            DType::Q3K => (dot_q3_k_x86, qdot::dot_q3_k),
            DType::Q4K => (dot_q4_k_x86, qdot::dot_q4_k),
            DType::Q5K => (dot_q5_k_x86, qdot::dot_q5_k),
            DType::Q6K => (dot_q6_k_x86, qdot::dot_q6_k),
            other => panic!("{other}"),
        }
    }

    /// `Σ |term|` over everything the dots add: per value `(|d·scale·q| + |dmin·min|) · |a|`,
    /// from two dequantizations of `w`, one with `dmin` zeroed and one with `d` zeroed
    /// (types without `dmin` need only the first).
    fn magnitude(dtype: DType, w: &[u8], y: &[BlockQ8K]) -> f64 {
        let ty = dtype.ggml_type();
        let n = y.len() * 256;
        let offs = f16_offsets(dtype);
        let deq_with = |keep: usize| {
            let mut v = w.to_vec();
            for blk in v.chunks_exact_mut(dtype.block_bytes()) {
                for (k, &o) in offs.iter().enumerate() {
                    if k != keep {
                        blk[o..o + 2].fill(0);
                    }
                }
            }
            let mut out = vec![0f32; n];
            quant::dequantize(ty, &v, &mut out).unwrap();
            out
        };
        let parts: Vec<Vec<f32>> = (0..offs.len()).map(deq_with).collect();
        let mut mag = 0f64;
        for (bi, yb) in y.iter().enumerate() {
            for (j, &q) in yb.qs.iter().enumerate() {
                let a = (yb.d as f64 * q as f64).abs();
                for p in &parts {
                    mag += (p[bi * 256 + j] as f64).abs() * a;
                }
            }
        }
        mag
    }

    /// The x86 twin against the generic one: only the f32 order differs, so they agree within
    /// a few ulps of the sum of the terms' magnitudes.
    fn close_to_generic(dtype: DType, w: &[u8], y: &[BlockQ8K]) {
        let (x86, generic) = twins(dtype);
        let (a, b) = (x86(w, y), generic(w, y));
        let mag = magnitude(dtype, w, y);
        let tol = 1e-5 * mag + 1e-30;
        assert!(
            ((a as f64) - (b as f64)).abs() <= tol,
            "{dtype} blocks={}: x86 {a} vs generic {b} (tol {tol})",
            y.len()
        );
    }

    #[test]
    fn x86_twins_match_generic_on_quantized_rows() {
        let mut rng = Rng::new(11);
        for dtype in TYPES {
            for blocks in [1usize, 2, 5, 8] {
                let (w, _) = quantized_rows(&mut rng, dtype, 1, blocks * 256);
                let y = activations(&mut rng, blocks, 1.0);
                close_to_generic(dtype, &w, &y);
            }
        }
    }

    #[test]
    fn x86_twins_read_unaligned_rows() {
        let mut rng = Rng::new(12);
        for dtype in TYPES {
            let w = random_blocks(&mut rng, dtype, 3);
            let y = activations(&mut rng, 3, 2.0);
            let (buf, off) = misaligned(&w);
            let (f, _) = twins(dtype);
            assert_eq!(
                f(&w, &y).to_bits(),
                f(&buf[off..off + w.len()], &y).to_bits()
            );
        }
    }

    /// The Q3_K scale unpacking agrees with the dequantizer's: with `d = 1`, every low pair 1
    /// and every high bit set (no -4), each value of group `g` dequantizes to `scale_g - 32`.
    #[test]
    fn q3_scales_match_the_dequantizer() {
        let mut rng = Rng::new(13);
        for _ in 0..50 {
            let mut blk = random_blocks(&mut rng, DType::Q3K, 1);
            blk[..32].fill(0xff); // every high bit set: no -4
            blk[32..96].fill(0x55); // every low pair 1
            blk[108..110].copy_from_slice(&half::f16::ONE.to_bits().to_le_bytes());
            let mut out = vec![0f32; 256];
            quant::dequantize(DType::Q3K.ggml_type(), &blk, &mut out).unwrap();
            let packed: [u8; 12] = blk[96..108].try_into().unwrap();
            let s = q3_scales(&packed);
            for g in 0..16 {
                assert_eq!(out[16 * g], s[g] as f32, "group {g}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn x86_twins_match_generic_on_random_blocks(
            seed in any::<u64>(),
            blocks in 1usize..=8,
            scale in prop_oneof![Just(1.0f32), 1e-3f32..1e3],
        ) {
            let mut rng = Rng::new(seed);
            for dtype in TYPES {
                let w = random_blocks(&mut rng, dtype, blocks);
                let y = activations(&mut rng, blocks, scale);
                close_to_generic(dtype, &w, &y);
            }
        }
    }

    use crate::cpu::testutil::{parse_ggml_dot, GgmlCase as Case};

    /// The K-quant cases of a `ggml_dot.bin`-format file.
    fn parse_cases(bytes: &[u8]) -> Vec<Case> {
        parse_ggml_dot(bytes)
            .into_iter()
            .filter(|c| TYPES.contains(&c.dtype))
            .collect()
    }

    /// Each case's activations through our q8_K quantizer (must give ggml's bytes), then every
    /// row's x86 twin against ggml's SIMD dot, bit for bit.
    fn check_cases(cases: &[Case]) {
        for c in cases {
            let mut y = vec![bytemuck::Zeroable::zeroed(); c.k / 256];
            crate::cpu::q8::quantize_row_q8_k(&c.x, &mut y);
            assert_eq!(
                bytemuck::cast_slice::<BlockQ8K, u8>(&y),
                &c.act[..],
                "{} act",
                c.dtype
            );
            let (f, _) = twins(c.dtype);
            let rb = c.dtype.row_bytes(c.k).unwrap();
            for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                let got = f(wr, &y);
                assert_eq!(
                    got.to_bits(),
                    c.simd[r].to_bits(),
                    "{} k={} row {r}: {got} vs ggml {}",
                    c.dtype,
                    c.k,
                    c.simd[r]
                );
            }
        }
    }

    /// Bit-identical to libggml-cpu's `ggml_vec_dot_q*_K_q8_K` (llama.cpp b11434, x86 AVX512
    /// build, which runs the AVX2 branch). The fixture has one super-block per row, so it checks
    /// the lanes, the products and the final sums, not the accumulation across super-blocks;
    /// [`matches_ggml_file_from_env`] covers that.
    #[test]
    fn matches_ggml_simd_fixture() {
        let cases = parse_cases(include_bytes!("../../../tests/fixtures/ggml_dot.bin"));
        assert_eq!(cases.len(), 5);
        check_cases(&cases);
    }

    /// The same check on a file named by `KESTREL_GGML_KQ_FILE`, in `ggml_dot.bin`'s format,
    /// made from the reference libggml-cpu with longer rows (several super-blocks per row).
    /// Checked on 2026-11-22 with rows of k = 512, 2048 and 4096 (6 rows per type and length,
    /// all five types): bit-identical.
    #[test]
    #[ignore]
    fn matches_ggml_file_from_env() {
        let Ok(path) = std::env::var("KESTREL_GGML_KQ_FILE") else {
            eprintln!("skipped: KESTREL_GGML_KQ_FILE is not set");
            return;
        };
        let cases = parse_cases(&std::fs::read(path).unwrap());
        assert!(!cases.is_empty());
        check_cases(&cases);
        eprintln!("{} cases bit-identical", cases.len());
    }
}
