//! Quantization to IQ1_S and IQ1_M as `llama-quantize` does it (ggml's
//! `quantize_row_iq1_{s,m}_impl`): per 32 (IQ1_S) or 16 (IQ1_M) values, the exact weighted
//! least-squares split of the sorted values into the three levels `-1, 0, 1` (shifted by ±0.125;
//! IQ1_M shifts each half of 8 on its own), each group of 8 snapped to the 2048-point grid (or
//! its best neighbour), a 3-bit scale per group. IQ1_S needs importance weights, as in ggml. The
//! sort is stable, as glibc's `qsort` (merge sort) is for these sizes.

// Index loops mirror ggml's C loop for loop, so each line can be checked against it.
#![allow(clippy::needless_range_loop)]

use std::sync::OnceLock;

use half::f16;

use super::common::{check_bytes, nearest_int};
use super::iq_grid_search::Grid;
use super::iq_grids::IQ1S_DELTA;
use super::{QuantError, QuantOp};
use crate::GgmlType;

const QK_K: usize = 256;
const BLOCK: usize = 32;
const GROUP_MAX_EPS_IQ1_S: f32 = 1e-12;

include!("iq1_kgrid.rs");

fn grid() -> &'static Grid<8> {
    static G: OnceLock<Grid<8>> = OnceLock::new();
    G.get_or_init(|| Grid::build(&KGRID_1BIT_2048, 2, 43692, 3))
}

/// ggml's `iq1_find_best_neighbour2`: the neighbour whose levels (read through `xg`) at
/// `scale` are nearest to `xval` under `weight`; its levels go to `l`.
fn best_neighbour2(
    g: &Grid<8>,
    m: i32,
    xval: &[f32],
    weight: &[f32],
    scale: f32,
    xg: &[f32; 3],
    l: &mut [i8],
) -> usize {
    let mut best = f32::MAX;
    let list = g.neighbours_of(m);
    let mut index = list[0] as usize;
    for &n in list {
        let pg = &g.points[n as usize];
        let mut d2 = 0.0f32;
        for i in 0..8 {
            let q = xg[((pg[i] - 1) / 2) as usize];
            let w = weight[i];
            let diff = scale * q - xval[i];
            d2 += w * diff * diff;
        }
        if d2 < best {
            best = d2;
            index = n as usize;
        }
    }
    g.levels_of(index, l);
    index
}

/// One IQ1_S super-block (50 bytes: d, qs[32], qh[8] as u16) of 256 values with weights.
fn block(xbl: &[f32], qw: &[f32], out: &mut [u8]) {
    let g = grid();
    let x_p = [-1.0 + IQ1S_DELTA, IQ1S_DELTA, 1.0 + IQ1S_DELTA];
    let x_m = [-1.0 - IQ1S_DELTA, -IQ1S_DELTA, 1.0 - IQ1S_DELTA];
    out.fill(0);
    let mut qh = [0u16; QK_K / BLOCK];
    let mut scales = [0f32; QK_K / BLOCK];
    let mut shifts = [0i8; QK_K / BLOCK];
    let mut max_scale = 0.0f32;
    let mut sumx2 = 0.0f32;
    for &v in xbl {
        sumx2 += v * v;
    }
    let sigma2 = 2.0 * sumx2 / QK_K as f32;
    for ib in 0..QK_K / BLOCK {
        let xb = &xbl[BLOCK * ib..BLOCK * ib + BLOCK];
        let qwb = &qw[BLOCK * ib..BLOCK * ib + BLOCK];
        let mut weight = [0f32; BLOCK];
        for i in 0..BLOCK {
            weight[i] = qwb[i] * (sigma2 + xb[i] * xb[i]).sqrt();
        }
        let mut max = xb[0].abs();
        for &v in &xb[1..] {
            let a = v.abs();
            max = if max > a { max } else { a };
        }
        if max < GROUP_MAX_EPS_IQ1_S {
            scales[ib] = 0.0;
            shifts[ib] = 1;
            continue;
        }
        let mut idx: [usize; BLOCK] = std::array::from_fn(|j| j);
        idx.sort_by(|&a, &b| {
            xb[a]
                .partial_cmp(&xb[b])
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let mut sumx = [0f32; BLOCK + 1];
        let mut sumw = [0f32; BLOCK + 1];
        for j in 0..BLOCK {
            let i = idx[j];
            sumx[j + 1] = sumx[j] + weight[i] * xb[i];
            sumw[j + 1] = sumw[j] + weight[i];
        }
        let mut best_score = -f32::MAX;
        let mut scale = max;
        let (mut besti1, mut besti2, mut best_shift) = (-1i32, -1i32, 0i8);
        for i1 in 0..=BLOCK {
            for i2 in i1..=BLOCK {
                for (xs, shift) in [(&x_p, 1i8), (&x_m, -1i8)] {
                    let sumqx = (sumx[i1] - sumx[0]) * xs[0]
                        + (sumx[i2] - sumx[i1]) * xs[1]
                        + (sumx[BLOCK] - sumx[i2]) * xs[2];
                    let sumq2 = (sumw[i1] - sumw[0]) * xs[0] * xs[0]
                        + (sumw[i2] - sumw[i1]) * xs[1] * xs[1]
                        + (sumw[BLOCK] - sumw[i2]) * xs[2] * xs[2];
                    if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                        scale = sumqx / sumq2;
                        best_score = scale * sumqx;
                        besti1 = i1 as i32;
                        besti2 = i2 as i32;
                        best_shift = shift;
                    }
                }
            }
        }
        if besti1 < 0 || besti2 < 0 || best_shift == 0 {
            scales[ib] = 0.0;
            shifts[ib] = 1;
            continue;
        }
        let mut l = [0i8; BLOCK];
        for j in 0..BLOCK {
            l[idx[j]] = if (j as i32) < besti1 {
                0
            } else if (j as i32) < besti2 {
                1
            } else {
                2
            };
        }
        if scale < 0.0 {
            for v in &mut l {
                *v = 2 - *v;
            }
            scale = -scale;
            best_shift = -best_shift;
        }
        let xx = if best_shift == 1 { &x_p } else { &x_m };
        let mut all_on_grid = true;
        let mut index = [0usize; BLOCK / 8];
        for k in 0..BLOCK / 8 {
            let gr = 8 * k..8 * k + 8;
            let m = g.map[g.code(&l[gr.clone()])];
            index[k] = if m < 0 {
                all_on_grid = false;
                best_neighbour2(
                    g,
                    m,
                    &xb[gr.clone()],
                    &weight[gr.clone()],
                    scale,
                    xx,
                    &mut l[gr],
                )
            } else {
                m as usize
            };
        }
        if !all_on_grid {
            let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
            for k in 0..BLOCK / 8 {
                let pg = &g.points[index[k]];
                for j in 0..8 {
                    let w = weight[8 * k + j];
                    let q = xx[((pg[j] - 1) / 2) as usize];
                    sumqx += w * q * xb[8 * k + j];
                    sumq2 += w * q * q;
                }
            }
            if sumqx > 0.0 && sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        let mut h = 0u16;
        for k in 0..BLOCK / 8 {
            out[2 + (BLOCK / 8) * ib + k] = (index[k] & 255) as u8;
            h |= ((index[k] >> 8) << (3 * k)) as u16;
        }
        qh[ib] = h;
        scales[ib] = scale;
        shifts[ib] = best_shift;
        max_scale = if max_scale > scale { max_scale } else { scale };
    }
    if max_scale != 0.0 {
        let d = max_scale / 15.0;
        out[..2].copy_from_slice(&f16::from_f32(d * 1.125).to_bits().to_le_bytes());
        let id = 1.0 / d;
        for ib in 0..QK_K / BLOCK {
            let mut l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7) as u16;
            if shifts[ib] == -1 {
                l |= 8;
            }
            qh[ib] |= l << 12;
        }
    }
    for (ib, h) in qh.iter().enumerate() {
        out[2 + QK_K / 8 + 2 * ib..4 + QK_K / 8 + 2 * ib].copy_from_slice(&h.to_le_bytes());
    }
}

const BLOCK_M: usize = 16;
const GROUP_MAX_EPS_IQ1_M: f32 = 1e-7;
const X_P: [f32; 3] = [-1.0 + IQ1S_DELTA, IQ1S_DELTA, 1.0 + IQ1S_DELTA];
const X_M: [f32; 3] = [-1.0 - IQ1S_DELTA, -IQ1S_DELTA, 1.0 - IQ1S_DELTA];

/// The level values of IQ1_M group `k` (0 or 1) of a 16-value block with shift code `best_k`.
fn shift_of(best_k: usize, k: usize) -> &'static [f32; 3] {
    let plus = if k == 0 {
        best_k < 2
    } else {
        best_k.is_multiple_of(2)
    };
    if plus {
        &X_P
    } else {
        &X_M
    }
}

fn weights_m(xb: &[f32], qw: Option<&[f32]>, sigma2: f32) -> [f32; BLOCK_M] {
    std::array::from_fn(|i| match qw {
        Some(q) => q[i] * (sigma2 + xb[i] * xb[i]).sqrt(),
        None => xb[i] * xb[i],
    })
}

/// The best split of an IQ1_M block (sorted as `idx`): `(scale, i1, i2, shift code)`.
fn split_m(
    xb: &[f32],
    weight: &[f32; BLOCK_M],
    idx: &[usize; BLOCK_M],
    max: f32,
) -> Option<(f32, usize, usize, usize)> {
    let mut best_score = -f32::MAX;
    let mut scale = max;
    let mut best = None;
    let mut px = [[0f32; BLOCK_M + 1]; 2];
    let mut pw = [[0f32; BLOCK_M + 1]; 2];
    for j in 0..BLOCK_M {
        let i = idx[j];
        let h = usize::from(i >= BLOCK_M / 2);
        px[h][j + 1] = px[h][j] + weight[i] * xb[i];
        px[1 - h][j + 1] = px[1 - h][j];
        pw[h][j + 1] = pw[h][j] + weight[i];
        pw[1 - h][j + 1] = pw[1 - h][j];
    }
    let txs = [px[0][BLOCK_M], px[1][BLOCK_M]];
    let tws = [pw[0][BLOCK_M], pw[1][BLOCK_M]];
    let (p2, m2) = (X_P[2], X_M[2]);
    let cp1 = X_P[0] * X_P[0] - X_P[1] * X_P[1];
    let cp2 = X_P[1] * X_P[1] - X_P[2] * X_P[2];
    let cm1 = X_M[0] * X_M[0] - X_M[1] * X_M[1];
    let cm2 = X_M[1] * X_M[1] - X_M[2] * X_M[2];
    for i1 in 0..=BLOCK_M {
        for i2 in i1..=BLOCK_M {
            let mut qx_p = [0f32; 2];
            let mut qx_m = [0f32; 2];
            let mut q2_p = [0f32; 2];
            let mut q2_m = [0f32; 2];
            for h in 0..2 {
                let sx = px[h][i1] + px[h][i2];
                qx_p[h] = txs[h] * p2 - sx;
                qx_m[h] = txs[h] * m2 - sx;
                q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
            }
            let sumqx = [
                qx_p[0] + qx_p[1],
                qx_p[0] + qx_m[1],
                qx_m[0] + qx_p[1],
                qx_m[0] + qx_m[1],
            ];
            let sumq2 = [
                q2_p[0] + q2_p[1],
                q2_p[0] + q2_m[1],
                q2_m[0] + q2_p[1],
                q2_m[0] + q2_m[1],
            ];
            for k in 0..4 {
                if sumq2[k] > 0.0 && sumqx[k] * sumqx[k] > best_score * sumq2[k] {
                    scale = sumqx[k] / sumq2[k];
                    best_score = scale * sumqx[k];
                    best = Some((i1, i2, k));
                }
            }
        }
    }
    best.map(|(i1, i2, k)| (scale, i1, i2, k))
}

/// One IQ1_M super-block (56 bytes: qs[32], qh[16], scales[8]) of 256 values.
fn block_m(xbl: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    let g = grid();
    const MASKS: [u8; 4] = [0x00, 0x80, 0x08, 0x88];
    out.fill(0);
    let (qh_at, sc_at) = (QK_K / 8, QK_K / 8 + QK_K / 16);
    let mut scales = [0f32; QK_K / BLOCK_M];
    let mut shifts = [0usize; QK_K / BLOCK_M];
    let mut max_scale = 0.0f32;
    let mut sumx2 = 0.0f32;
    for &v in xbl {
        sumx2 += v * v;
    }
    let sigma2 = 2.0 * sumx2 / QK_K as f32;
    let wq = |ib: usize| qw.map(|q| &q[BLOCK_M * ib..BLOCK_M * ib + BLOCK_M]);
    for ib in 0..QK_K / BLOCK_M {
        let xb = &xbl[BLOCK_M * ib..BLOCK_M * ib + BLOCK_M];
        let weight = weights_m(xb, wq(ib), sigma2);
        let mut max = xb[0].abs();
        for &v in &xb[1..] {
            let a = v.abs();
            max = if max > a { max } else { a };
        }
        if max < GROUP_MAX_EPS_IQ1_M {
            scales[ib] = 0.0;
            shifts[ib] = 0;
            continue;
        }
        let mut idx: [usize; BLOCK_M] = std::array::from_fn(|j| j);
        idx.sort_by(|&a, &b| {
            xb[a]
                .partial_cmp(&xb[b])
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let Some((mut scale, besti1, besti2, best_k)) = split_m(xb, &weight, &idx, max) else {
            scales[ib] = 0.0;
            shifts[ib] = 0;
            continue;
        };
        let mut l = [0i8; BLOCK_M];
        for j in 0..BLOCK_M {
            l[idx[j]] = if j < besti1 {
                0
            } else if j < besti2 {
                1
            } else {
                2
            };
        }
        let mut best_k = best_k;
        if scale < 0.0 {
            for v in &mut l {
                *v = 2 - *v;
            }
            scale = -scale;
            best_k = 3 - best_k;
        }
        let mut all_on_grid = true;
        let mut index = [0usize; 2];
        for k in 0..2 {
            let xx = shift_of(best_k, k);
            let gr = 8 * k..8 * k + 8;
            let m = g.map[g.code(&l[gr.clone()])];
            index[k] = if m < 0 {
                all_on_grid = false;
                best_neighbour2(
                    g,
                    m,
                    &xb[gr.clone()],
                    &weight[gr.clone()],
                    scale,
                    xx,
                    &mut l[gr],
                )
            } else {
                m as usize
            };
        }
        if !all_on_grid {
            let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
            for k in 0..2 {
                let xx = shift_of(best_k, k);
                let pg = &g.points[index[k]];
                for j in 0..8 {
                    let w = weight[8 * k + j];
                    let q = xx[((pg[j] - 1) / 2) as usize];
                    sumqx += w * q * xb[8 * k + j];
                    sumq2 += w * q * q;
                }
            }
            if sumqx > 0.0 && sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        out[2 * ib] = (index[0] & 255) as u8;
        out[2 * ib + 1] = (index[1] & 255) as u8;
        out[qh_at + ib] = ((index[0] >> 8) | ((index[1] >> 8) << 4)) as u8;
        scales[ib] = scale;
        shifts[ib] = best_k;
        max_scale = if max_scale > scale { max_scale } else { scale };
    }
    if max_scale == 0.0 {
        return;
    }
    let mut sc = [0u16; 4];
    let mut d = max_scale / 15.0;
    let id = 1.0 / d;
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for ib in 0..QK_K / BLOCK_M {
        let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7);
        sc[ib / 4] |= (l as u16) << (3 * (ib % 4));
        out[qh_at + ib] |= MASKS[shifts[ib]];
        let xb = &xbl[BLOCK_M * ib..BLOCK_M * ib + BLOCK_M];
        let weight = weights_m(xb, wq(ib), sigma2);
        for k in 0..2 {
            let xx = shift_of(shifts[ib], k);
            let qh = out[qh_at + ib] as usize;
            let gi = out[2 * ib + k] as usize + ((qh << (8 - 4 * k)) & 0x700);
            let pg = &g.points[gi];
            for j in 0..8 {
                let w = weight[8 * k + j];
                let q = xx[((pg[j] - 1) / 2) as usize] * (2 * l + 1) as f32;
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
    }
    if sumq2 > 0.0 {
        d = sumqx / sumq2;
    }
    let s = f16::from_f32(d * 1.1125).to_bits();
    sc[0] |= (s & 0x000f) << 12;
    sc[1] |= (s & 0x00f0) << 8;
    sc[2] |= (s & 0x0f00) << 4;
    sc[3] |= s & 0xf000;
    for (i, v) in sc.iter().enumerate() {
        out[sc_at + 2 * i..sc_at + 2 * i + 2].copy_from_slice(&v.to_le_bytes());
    }
}

/// `src` as raw IQ1_S or IQ1_M blocks into `out` with importance weights `qw` (one per value of
/// a row, `src` a whole number of such rows); IQ1_S requires them.
pub(crate) fn quantize_bytes(
    ty: GgmlType,
    src: &[f32],
    out: &mut [u8],
    qw: Option<&[f32]>,
) -> Result<(), QuantError> {
    check_bytes(ty, QuantOp::Quantize, src.len(), out.len())?;
    let unsupported = || QuantError::Unsupported {
        ty,
        op: QuantOp::Quantize,
    };
    if !matches!(ty, GgmlType::IQ1S | GgmlType::IQ1M)
        || (ty == GgmlType::IQ1S && qw.is_none())
        || qw.is_some_and(|q| q.len() < QK_K)
    {
        return Err(unsupported());
    }
    let size = ty.type_size();
    for (i, (x, o)) in src
        .chunks_exact(QK_K)
        .zip(out.chunks_exact_mut(size))
        .enumerate()
    {
        let w = match qw {
            Some(q) => {
                let at = (i * QK_K) % q.len();
                Some(q.get(at..at + QK_K).ok_or_else(unsupported)?)
            }
            None => None,
        };
        match (ty, w) {
            (GgmlType::IQ1S, Some(w)) => block(x, w, o),
            _ => block_m(x, w, o),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iq1_s_round_trips_roughly() {
        let mut seed = 3u64;
        let x: Vec<f32> = (0..512)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0
            })
            .collect();
        let qw = vec![1.0f32; 512];
        let mut q = vec![0u8; 2 * GgmlType::IQ1S.type_size()];
        quantize_bytes(GgmlType::IQ1S, &x, &mut q, Some(&qw)).unwrap();
        let mut y = vec![0f32; 512];
        super::super::dequantize(GgmlType::IQ1S, &q, &mut y).unwrap();
        let err: f32 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f32>();
        let norm: f32 = x.iter().map(|a| a * a).sum();
        assert!(err / norm < 0.6, "relative error {}", err / norm);
        assert!(grid().neighbour_stats().0 == 43692 - 2048);
        let mut q = vec![0u8; 2 * GgmlType::IQ1M.type_size()];
        quantize_bytes(GgmlType::IQ1M, &x, &mut q, Some(&qw)).unwrap();
        super::super::dequantize(GgmlType::IQ1M, &q, &mut y).unwrap();
        let err: f32 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f32>();
        assert!(err / norm < 0.6, "IQ1_M relative error {}", err / norm);
    }
}
