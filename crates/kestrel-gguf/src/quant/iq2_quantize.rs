//! Quantization to IQ2_XXS, IQ2_XS and IQ2_S as `llama-quantize` does it (ggml's
//! `quantize_row_iq2_{xxs,xs,s}_impl`): each group of 8 magnitudes snaps to the nearest point of
//! the type's 256-, 512- or 1024-point grid (off-grid codes go to their best precomputed
//! neighbour), signs kept separately (IQ2_XXS/XS flip the least important one to make the count
//! even), a scale search per 32 (XXS) or 16 values, importance weights as ggml weighs them.
//! IQ2_XXS and IQ2_XS need importance weights, as in ggml; IQ2_S works without.

// Index loops mirror ggml's C loop for loop, so each line can be checked against it.
#![allow(clippy::needless_range_loop)]

use std::sync::OnceLock;

use half::f16;

use super::common::make_qp_quants;
use super::common::{check_bytes, nearest_int, GROUP_MAX_EPS};
use super::iq_grid_search::{odd_fit, odd_levels, Grid};
use super::{QuantError, QuantOp};
use crate::GgmlType;

const QK_K: usize = 256;
const GROUP_MAX_EPS_IQ2_S: f32 = 1e-8;
const K_MAX_Q: i32 = 3;
/// Codes of 8 levels of 0..=2 (2 bits each) all lie below this.
const KMAP_SIZE: usize = 43692;

include!("iq2_kgrid.rs");

fn grid(ty: GgmlType) -> &'static Grid<8> {
    static XXS: OnceLock<Grid<8>> = OnceLock::new();
    static XS: OnceLock<Grid<8>> = OnceLock::new();
    static S: OnceLock<Grid<8>> = OnceLock::new();
    match ty {
        GgmlType::IQ2XXS => XXS.get_or_init(|| Grid::build(&KGRID_2BIT_256, 2, KMAP_SIZE, 2)),
        GgmlType::IQ2XS => XS.get_or_init(|| Grid::build(&KGRID_2BIT_512, 2, KMAP_SIZE, 2)),
        _ => S.get_or_init(|| Grid::build(&KGRID_2BIT_1024, 2, KMAP_SIZE, 1)),
    }
}

fn levels(id: f32, xval: &[f32], l: &mut [i8]) {
    odd_levels(id, &xval[..8], &mut l[..8], K_MAX_Q);
}

fn sumx2(xbl: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for &v in xbl {
        s += v * v;
    }
    s
}

/// Magnitudes and sign bits of groups of 8; with `fix_parity`, a group with an odd number of
/// negative values gets its least important (by `weight·x²`) value's sign flipped.
fn signs(xb: &[f32], weight: &[f32], xval: &mut [f32], out: &mut [u8], fix_parity: bool) {
    for k in 0..xb.len() / 8 {
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
        if fix_parity && nflip % 2 == 1 {
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
        out[k] = if fix_parity { s & 127 } else { s };
    }
}

fn max_of(v: &[f32]) -> f32 {
    let mut max = v[0];
    for &x in &v[1..] {
        max = if max > x { max } else { x };
    }
    max
}

/// One IQ2_XXS super-block (66 bytes) of 256 values with weights `qw`.
fn block_xxs(xbl: &[f32], qw: &[f32], out: &mut [u8]) {
    let t = grid(GgmlType::IQ2XXS);
    let mut q2 = [0u32; 2 * (QK_K / 32)];
    let mut scales = [0f32; QK_K / 32];
    let mut max_scale = 0.0f32;
    let sigma2 = sumx2(xbl) / QK_K as f32;
    for ib in 0..QK_K / 32 {
        let xb = &xbl[32 * ib..32 * ib + 32];
        let qwb = &qw[32 * ib..32 * ib + 32];
        let mut weight = [0f32; 32];
        for i in 0..32 {
            weight[i] = qwb[i] * (sigma2 + xb[i] * xb[i]).sqrt();
        }
        let waux = weight.map(f32::sqrt);
        let mut xval = [0f32; 32];
        let mut block_signs = [0u8; 4];
        signs(xb, &weight, &mut xval, &mut block_signs, true);
        let max = max_of(&xval);
        let mut l = [0i8; 32];
        if max < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        let mut lu = [0u8; 32];
        let mut scale = make_qp_quants(K_MAX_Q + 1, &xval, &mut lu, &weight);
        let eff_max = scale * K_MAX_Q as f32;
        if eff_max <= 0.0 {
            scales[ib] = 0.0;
            continue;
        }
        let mut best = 0.0f32;
        let mut laux = [0i8; 32];
        for is in -6..=6 {
            let id = ((2 * K_MAX_Q - 1) as f32 + is as f32 * 0.1) / eff_max;
            let this_scale = 1.0 / id;
            for k in 0..4 {
                let g = 8 * k..8 * k + 8;
                levels(id, &xval[g.clone()], &mut laux[g.clone()]);
                let m = t.map[t.code(&laux[g.clone()])];
                if m < 0 {
                    t.best_neighbour(
                        m,
                        &xval[g.clone()],
                        &waux[g.clone()],
                        this_scale,
                        &mut laux[g],
                    );
                }
            }
            let (sumqx, sumq2) = odd_fit(&weight, &xval, &laux);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                l = laux;
            }
        }
        if scale > 0.0 {
            let id = 1.0 / scale;
            for k in 0..4 {
                let g = 8 * k..8 * k + 8;
                let mut lk = [0i8; 8];
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
            let (sumqx, sumq2) = odd_fit(&weight, &xval, &l);
            if sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        if scale < 0.0 {
            scale = -scale;
            for s in &mut block_signs {
                *s = !*s & 127;
            }
        }
        for k in 0..4 {
            let index = t.map[t.code(&l[8 * k..8 * k + 8])].max(0) as u32;
            q2[2 * ib] |= index << (8 * k);
            q2[2 * ib + 1] |= (block_signs[k] as u32) << (7 * k);
        }
        scales[ib] = scale;
        max_scale = if max_scale > scale { max_scale } else { scale };
    }
    out.fill(0);
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    out[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
    let id = 1.0 / d;
    for ib in 0..QK_K / 32 {
        let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 15);
        q2[2 * ib + 1] |= (l as u32) << 28;
    }
    for (i, v) in q2.iter().enumerate() {
        out[2 + 4 * i..6 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
}

/// IQ2_XS (74 bytes) or IQ2_S (82 bytes) super-block: groups of 16, two grid points each.
fn block_xs_s(ty: GgmlType, xbl: &[f32], qw: Option<&[f32]>, out: &mut [u8]) {
    let t = grid(ty);
    let is_s = ty == GgmlType::IQ2S;
    out.fill(0);
    let mut q2 = [0u16; 2 * (QK_K / 16)];
    let mut scales = [0f32; QK_K / 16];
    let mut max_scale = 0.0f32;
    let sigma2 = if is_s {
        2.0 * sumx2(xbl) / QK_K as f32
    } else {
        sumx2(xbl) / QK_K as f32
    };
    let eps = if is_s {
        GROUP_MAX_EPS_IQ2_S
    } else {
        GROUP_MAX_EPS
    };
    for ib in 0..QK_K / 16 {
        let xb = &xbl[16 * ib..16 * ib + 16];
        let mut weight = [0f32; 16];
        for i in 0..16 {
            weight[i] = match qw {
                Some(q) => q[16 * ib + i] * (sigma2 + xb[i] * xb[i]).sqrt(),
                None => 0.25 * sigma2 + xb[i] * xb[i],
            };
        }
        let waux = weight.map(f32::sqrt);
        let mut xval = [0f32; 16];
        let mut block_signs = [0u8; 2];
        signs(xb, &weight, &mut xval, &mut block_signs, !is_s);
        let max = max_of(&xval);
        let mut l = [0i8; 16];
        if max < eps {
            scales[ib] = 0.0;
            continue;
        }
        let mut best = 0.0f32;
        let mut scale = max / (2 * K_MAX_Q - 1) as f32;
        let mut is_on_grid = [true; 2];
        let mut aux = [true; 2];
        let mut laux = [0i8; 16];
        for is in -9..=9 {
            let id = ((2 * K_MAX_Q - 1) as f32 + is as f32 * 0.1) / max;
            let this_scale = 1.0 / id;
            for k in 0..2 {
                let g = 8 * k..8 * k + 8;
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
            let (sumqx, sumq2) = odd_fit(&weight, &xval, &laux);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                l = laux;
                is_on_grid = aux;
            }
        }
        let n_off = is_on_grid.iter().filter(|&&b| !b).count();
        if n_off > 0 && scale > 0.0 {
            let id = 1.0 / scale;
            for k in 0..2 {
                if is_on_grid[k] {
                    continue;
                }
                let g = 8 * k..8 * k + 8;
                levels(id, &xval[g.clone()], &mut l[g.clone()]);
                let m = t.map[t.code(&l[g.clone()])];
                if m < 0 {
                    t.best_neighbour(m, &xval[g.clone()], &waux[g.clone()], scale, &mut l[g]);
                }
            }
            let (sumqx, sumq2) = odd_fit(&weight, &xval, &l);
            if sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        if scale < 0.0 {
            scale = -scale;
            for s in &mut block_signs {
                *s = if is_s { !*s } else { !*s & 127 };
            }
        }
        for k in 0..2 {
            let index = t.map[t.code(&l[8 * k..8 * k + 8])].max(0) as usize;
            if is_s {
                let i8 = 2 * ib + k;
                out[2 + i8] = (index & 255) as u8;
                out[2 + 64 + i8 / 4] |= ((index >> 8) << (2 * (i8 % 4))) as u8;
                out[2 + QK_K / 8 + i8] = block_signs[k];
            } else {
                q2[2 * ib + k] = index as u16 | (block_signs[k] as u16) << 9;
            }
        }
        scales[ib] = scale;
        max_scale = if max_scale > scale { max_scale } else { scale };
    }
    if max_scale == 0.0 {
        if is_s {
            return;
        }
        out.fill(0);
        return;
    }
    let d = max_scale / 31.0;
    let dd = if is_s { d * 0.9875 } else { d };
    out[..2].copy_from_slice(&f16::from_f32(dd).to_bits().to_le_bytes());
    let id = 1.0 / d;
    let sc_at = if is_s { 2 + 64 + 8 } else { 2 + 64 };
    for ib in 0..QK_K / 16 {
        let l = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 15) as u8;
        if ib % 2 == 0 {
            out[sc_at + ib / 2] = l;
        } else {
            out[sc_at + ib / 2] |= l << 4;
        }
    }
    if !is_s {
        for (i, v) in q2.iter().enumerate() {
            out[2 + 2 * i..4 + 2 * i].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// `src` as raw IQ2_XXS, IQ2_XS or IQ2_S blocks into `out`, with importance weights `qw` (one
/// per value of a row, `src` a whole number of such rows); IQ2_XXS and IQ2_XS require them.
pub(crate) fn quantize_bytes(
    ty: GgmlType,
    src: &[f32],
    out: &mut [u8],
    qw: Option<&[f32]>,
) -> Result<(), QuantError> {
    check_bytes(ty, QuantOp::Quantize, src.len(), out.len())?;
    if !matches!(ty, GgmlType::IQ2XXS | GgmlType::IQ2XS | GgmlType::IQ2S)
        || (qw.is_none() && ty != GgmlType::IQ2S)
    {
        return Err(QuantError::Unsupported {
            ty,
            op: QuantOp::Quantize,
        });
    }
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
        match (ty, w) {
            (GgmlType::IQ2XXS, Some(w)) => block_xxs(x, w, o),
            (GgmlType::IQ2XXS, None) => {
                return Err(QuantError::Unsupported {
                    ty,
                    op: QuantOp::Quantize,
                })
            }
            _ => block_xs_s(ty, x, w, o),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_list_neighbours_for_every_code_off_them() {
        for (ty, size) in [
            (GgmlType::IQ2XXS, 256),
            (GgmlType::IQ2XS, 512),
            (GgmlType::IQ2S, 1024),
        ] {
            let t = grid(ty);
            assert_eq!(t.points.len(), size);
            let (off, most) = t.neighbour_stats();
            assert_eq!(off, KMAP_SIZE - size);
            assert!(most < size);
        }
    }

    #[test]
    fn blocks_round_trip_close_and_need_weights_where_ggml_does() {
        let mut seed = 11u64;
        let x: Vec<f32> = (0..512)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0
            })
            .collect();
        let qw = vec![1.0f32; 512];
        for ty in [GgmlType::IQ2XXS, GgmlType::IQ2XS, GgmlType::IQ2S] {
            let mut q = vec![0u8; 2 * ty.type_size()];
            quantize_bytes(ty, &x, &mut q, Some(&qw)).unwrap();
            let mut y = vec![0f32; 512];
            super::super::dequantize(ty, &q, &mut y).unwrap();
            let err: f32 = x
                .iter()
                .zip(&y)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f32>();
            let norm: f32 = x.iter().map(|a| a * a).sum();
            assert!(err / norm < 0.2, "{ty}: relative error {}", err / norm);
            let plain = quantize_bytes(ty, &x, &mut q, None);
            assert_eq!(plain.is_ok(), ty == GgmlType::IQ2S, "{ty}");
        }
    }
}
