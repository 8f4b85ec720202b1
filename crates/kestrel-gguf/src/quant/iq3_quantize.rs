//! Quantization to IQ3_XXS and IQ3_S as `llama-quantize` does it (ggml's
//! `quantize_row_iq3_xxs_impl` and `quantize_row_iq3_s_impl`): each group of 4 values snaps to
//! the nearest point of the type's 256- or 512-point grid (a point off the grid goes to the best
//! of its precomputed neighbours), 31 (IQ3_XXS) or 19 (IQ3_S) scale trials per 32 values,
//! optional importance weights; float operation for float operation, so the blocks are ggml's
//! (down to IQ3_S's sub-blocks of zeros not advancing its index pointer, as in ggml).

// Index loops mirror ggml's C loop for loop, so each line can be checked against it.
#![allow(clippy::needless_range_loop)]

use std::sync::OnceLock;

use half::f16;

use super::common::{check_bytes, nearest_int};
use super::iq_grid_search::{odd_fit, odd_levels, Grid};
use super::{QuantError, QuantOp};
use crate::GgmlType;

const QK_K: usize = 256;
const GROUP_MAX_EPS_IQ3_XXS: f32 = 1e-8;
const K_MAX_Q: i32 = 8;

include!("iq3_kgrid.rs");

type Tables = Grid<4>;

fn tables(grid_size: usize) -> &'static Tables {
    static T256: OnceLock<Tables> = OnceLock::new();
    static T512: OnceLock<Tables> = OnceLock::new();
    if grid_size == 256 {
        T256.get_or_init(|| Grid::build(&KGRID_256, 3, 4096, 2))
    } else {
        T512.get_or_init(|| Grid::build(&KGRID_512, 3, 4096, 3))
    }
}

fn levels(id: f32, xval: &[f32], l: &mut [i8]) {
    odd_levels(id, &xval[..4], &mut l[..4], K_MAX_Q);
}

/// One 32-value group's search (shared by both types): returns its scale and sets `l`.
/// `trials`: scale trials each side; `refit_all`: IQ3_S re-snaps every group (ggml's commented
/// out `continue`), IQ3_XXS only those off the grid.
#[allow(clippy::too_many_arguments)]
fn search(
    t: &Tables,
    max: f32,
    xval: &[f32; 32],
    weight: &[f32; 32],
    waux: &[f32; 32],
    l: &mut [i8; 32],
    trials: i32,
    on_grid_start: bool,
    refit_all: bool,
) -> f32 {
    let mut laux = [0i8; 32];
    let mut best = 0.0f32;
    let mut scale = max / (2 * K_MAX_Q - 1) as f32;
    let mut is_on_grid = [on_grid_start; 8];
    let mut aux = [true; 8];
    for is in -trials..=trials {
        let id = ((2 * K_MAX_Q - 1) as f32 + is as f32 * 0.2) / max;
        let this_scale = 1.0 / id;
        for k in 0..8 {
            let g = 4 * k..4 * k + 4;
            levels(id, &xval[g.clone()], &mut laux[g.clone()]);
            let m = t.map[t.code(&laux[g.clone()])];
            aux[k] = true;
            if m < 0 {
                aux[k] = false;
                t.best_neighbour(
                    m,
                    &xval[g.clone()],
                    &waux[g.clone()],
                    this_scale,
                    &mut laux[g],
                );
            }
        }
        let (sumqx, sumq2) = odd_fit(weight, xval, &laux);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            *l = laux;
            is_on_grid = aux;
        }
    }
    let n_off = is_on_grid.iter().filter(|&&b| !b).count();
    if n_off > 0 && scale > 0.0 {
        let id = 1.0 / scale;
        for k in 0..8 {
            if is_on_grid[k] && !refit_all {
                continue;
            }
            let g = 4 * k..4 * k + 4;
            let mut lk = [0i8; 4];
            levels(id, &xval[g.clone()], &mut lk);
            let mut index = t.map[t.code(&lk)];
            if index < 0 {
                index = t.best_neighbour(
                    index,
                    &xval[g.clone()],
                    &waux[g.clone()],
                    scale,
                    &mut l[g.clone()],
                ) as i32;
            }
            t.levels_of(index as usize, &mut l[g]);
        }
        let (sumqx, sumq2) = odd_fit(weight, xval, l);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    scale
}

/// The group's importance weights and their square roots.
fn weights(xb: &[f32], qw: Option<&[f32]>, sigma2: f32) -> ([f32; 32], [f32; 32]) {
    let mut w = [0f32; 32];
    for i in 0..32 {
        w[i] = match qw {
            Some(q) => q[i] * (sigma2 + xb[i] * xb[i]).sqrt(),
            None => xb[i] * xb[i],
        };
    }
    let waux = w.map(f32::sqrt);
    (w, waux)
}

fn sigma2_of(xbl: &[f32]) -> f32 {
    let mut sumx2 = 0.0f32;
    for &v in xbl {
        sumx2 += v * v;
    }
    2.0 * sumx2 / QK_K as f32
}

/// One IQ3_XXS super-block (98 bytes) of 256 values.
fn block_xxs(xbl: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    let t = tables(256);
    let mut q3 = [0u8; 3 * QK_K / 8];
    let mut sas = [0u32; QK_K / 32];
    let mut scales = [0f32; QK_K / 32];
    let mut max_scale = 0.0f32;
    let sigma2 = sigma2_of(xbl);
    for ib in 0..QK_K / 32 {
        let xb = &xbl[32 * ib..32 * ib + 32];
        let (weight, waux) = weights(xb, qw.map(|q| &q[32 * ib..32 * ib + 32]), sigma2);
        let mut xval = [0f32; 32];
        let mut block_signs = [0u8; 4];
        for k in 0..4 {
            let (mut nflip, mut s) = (0, 0u8);
            for i in 0..8 {
                let v = xb[8 * k + i];
                if v >= 0.0 {
                    xval[8 * k + i] = v;
                } else {
                    xval[8 * k + i] = -v;
                    nflip += 1;
                    s |= 1 << i;
                }
            }
            if nflip % 2 == 1 {
                let mut imin = 0;
                let mut min = weight[8 * k] * xb[8 * k] * xb[8 * k];
                for i in 1..8 {
                    let ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                    if ax < min {
                        min = ax;
                        imin = i;
                    }
                }
                xval[8 * k + imin] = -xval[8 * k + imin];
                s ^= 1 << imin;
            }
            block_signs[k] = s & 127;
        }
        let mut max = xval[0];
        for &v in &xval[1..] {
            max = if max > v { max } else { v };
        }
        let mut l = [0i8; 32];
        if max < GROUP_MAX_EPS_IQ3_XXS {
            scales[ib] = 0.0;
            continue;
        }
        let mut scale = search(t, max, &xval, &weight, &waux, &mut l, 15, true, false);
        if scale < 0.0 {
            scale = -scale;
            for s in &mut block_signs {
                *s = !*s & 127;
            }
        }
        for k in 0..8 {
            q3[8 * ib + k] = t.map[t.code(&l[4 * k..4 * k + 4])].max(0) as u8;
        }
        sas[ib] = block_signs[0] as u32
            | (block_signs[1] as u32) << 7
            | (block_signs[2] as u32) << 14
            | (block_signs[3] as u32) << 21;
        scales[ib] = scale;
        max_scale = if max_scale > scale { max_scale } else { scale };
    }
    out.fill(0);
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    out[..2].copy_from_slice(&f16::from_f32(d * 1.0125).to_bits().to_le_bytes());
    let id = 1.0 / d;
    for ib in 0..QK_K / 32 {
        let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 15);
        sas[ib] |= (l as u32) << 28;
    }
    for (ib, s) in sas.iter().enumerate() {
        q3[QK_K / 4 + 4 * ib..QK_K / 4 + 4 * ib + 4].copy_from_slice(&s.to_le_bytes());
    }
    out[2..].copy_from_slice(&q3);
}

/// One IQ3_S super-block (110 bytes: d, qs[64], qh[8], signs[32], scales[4]) of 256 values.
fn block_s(xbl: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    let t = tables(512);
    out.fill(0);
    let (mut qs_at, mut signs_at) = (2usize, 2 + 64 + 8);
    let qh_at = 2 + 64;
    let mut scales = [0f32; QK_K / 32];
    let mut max_scale = 0.0f32;
    let sigma2 = sigma2_of(xbl);
    for ib in 0..QK_K / 32 {
        let xb = &xbl[32 * ib..32 * ib + 32];
        let (weight, waux) = weights(xb, qw.map(|q| &q[32 * ib..32 * ib + 32]), sigma2);
        let mut xval = [0f32; 32];
        let mut block_signs = [0u8; 4];
        for k in 0..4 {
            let mut s = 0u8;
            for i in 0..8 {
                let v = xb[8 * k + i];
                if v >= 0.0 {
                    xval[8 * k + i] = v;
                } else {
                    xval[8 * k + i] = -v;
                    s |= 1 << i;
                }
            }
            block_signs[k] = s;
        }
        let mut max = xval[0];
        for &v in &xval[1..] {
            max = if max > v { max } else { v };
        }
        let mut l = [0i8; 32];
        if max == 0.0 {
            scales[ib] = 0.0;
            continue;
        }
        let mut scale = search(t, max, &xval, &weight, &waux, &mut l, 9, false, true);
        if scale < 0.0 {
            scale = -scale;
            for s in &mut block_signs {
                *s = !*s;
            }
        }
        for k in 0..8 {
            let index = t.map[t.code(&l[4 * k..4 * k + 4])].max(0) as usize;
            out[qs_at + k] = (index & 255) as u8;
            let bit = ib * 8 + k;
            out[qh_at + bit / 8] |= ((index >> 8) << (bit % 8)) as u8;
        }
        qs_at += 8;
        out[signs_at..signs_at + 4].copy_from_slice(&block_signs);
        signs_at += 4;
        scales[ib] = scale;
        max_scale = if max_scale > scale { max_scale } else { scale };
    }
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    out[..2].copy_from_slice(&f16::from_f32(d * 1.033).to_bits().to_le_bytes());
    let id = 1.0 / d;
    for ib in (0..QK_K / 32).step_by(2) {
        let l1 = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 15);
        let l2 = nearest_int(0.5 * (id * scales[ib + 1] - 1.0)).clamp(0, 15);
        out[2 + 64 + 8 + 32 + ib / 2] = (l1 | (l2 << 4)) as u8;
    }
}

/// `src` as raw IQ3_XXS or IQ3_S blocks into `out`, with importance weights `qw` (one per
/// value of a row, `src` a whole number of such rows) or none.
pub(crate) fn quantize_bytes(
    ty: GgmlType,
    src: &[f32],
    out: &mut [u8],
    qw: Option<&[f32]>,
) -> Result<(), QuantError> {
    check_bytes(ty, QuantOp::Quantize, src.len(), out.len())?;
    let size = ty.type_size();
    let per_row = qw.map_or(QK_K, |q| q.len().max(QK_K));
    for (i, (x, o)) in src
        .chunks_exact(QK_K)
        .zip(out.chunks_exact_mut(size))
        .enumerate()
    {
        let w = qw.and_then(|q| {
            let at = (i * QK_K) % per_row;
            q.get(at..at + QK_K)
        });
        match ty {
            GgmlType::IQ3XXS => block_xxs(x, w, o),
            GgmlType::IQ3S => block_s(x, w, o),
            _ => {
                return Err(QuantError::Unsupported {
                    ty,
                    op: QuantOp::Quantize,
                })
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_and_neighbours_cover_every_code() {
        for size in [256, 512] {
            let t = tables(size);
            assert_eq!(t.points.len(), size);
            assert_eq!(t.map.iter().filter(|&&m| m >= 0).count(), size);
            let (off, most) = t.neighbour_stats();
            assert_eq!(off, 4096 - size);
            assert!(most < size);
        }
    }

    #[test]
    fn blocks_round_trip_close() {
        let mut seed = 5u64;
        let x: Vec<f32> = (0..512)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0
            })
            .collect();
        for ty in [GgmlType::IQ3XXS, GgmlType::IQ3S] {
            let mut q = vec![0u8; 2 * ty.type_size()];
            quantize_bytes(ty, &x, &mut q, None).unwrap();
            let mut y = vec![0f32; 512];
            super::super::dequantize(ty, &q, &mut y).unwrap();
            let err: f32 = x
                .iter()
                .zip(&y)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f32>();
            let norm: f32 = x.iter().map(|a| a * a).sum();
            assert!(err / norm < 0.05, "{ty}: relative error {}", err / norm);
        }
    }
}
