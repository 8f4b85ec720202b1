//! The K-quants (Q2_K to Q6_K, Q8_K) and IQ4_XS against q8_K activations: ggml's generic dots
//! (the x86 orders are in `k_x86`).

// The kernels index as ggml's C does, so they can be read side by side with it.
#![allow(clippy::needless_range_loop)]

use half::f16;
use kestrel_gguf::quant::{
    self, BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K,
};

use super::common::{for_each_block, h};

const KVALUES: [i8; 16] = quant::iq4_nl::KVALUES_IQ4NL;

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
