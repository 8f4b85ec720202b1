//! Quantization to IQ1_S as `llama-quantize` does it (ggml's `quantize_row_iq1_s_impl`): per 32
//! values, the exact weighted least-squares split of the sorted values into the three levels
//! `-1, 0, 1` (shifted by ±`IQ1S_DELTA`), each group of 8 snapped to the 2048-point grid (or
//! its best neighbour), a 3-bit scale and the shift's sign per 32 values. Needs importance
//! weights, as in ggml. The sort is stable, as glibc's `qsort` (merge sort) is for these sizes.

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

/// `src` as raw IQ1_S blocks into `out` with importance weights `qw` (one per value of a row,
/// `src` a whole number of such rows).
pub(crate) fn quantize_bytes(
    ty: GgmlType,
    src: &[f32],
    out: &mut [u8],
    qw: &[f32],
) -> Result<(), QuantError> {
    check_bytes(ty, QuantOp::Quantize, src.len(), out.len())?;
    if ty != GgmlType::IQ1S || qw.len() < QK_K {
        return Err(QuantError::Unsupported {
            ty,
            op: QuantOp::Quantize,
        });
    }
    let size = ty.type_size();
    for (i, (x, o)) in src
        .chunks_exact(QK_K)
        .zip(out.chunks_exact_mut(size))
        .enumerate()
    {
        let at = (i * QK_K) % qw.len();
        let w = qw.get(at..at + QK_K).ok_or(QuantError::Unsupported {
            ty,
            op: QuantOp::Quantize,
        })?;
        block(x, w, o);
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
        quantize_bytes(GgmlType::IQ1S, &x, &mut q, &qw).unwrap();
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
    }
}
