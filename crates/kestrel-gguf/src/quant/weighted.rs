//! Quantization with an importance matrix, as `llama-quantize --imatrix` does it (ggml's
//! `quantize_row_*_impl` for Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K; Q8_0 ignores the
//! weights), float operation for float operation so the blocks are ggml's. The weights are one
//! value per column of the row (llama.cpp's imatrix entry: mean squared activation).

// The loops index as ggml's C does, so each line can be checked against it.
#![allow(clippy::needless_range_loop)]

use half::f16;

use super::common::{check_bytes, make_qp_quants, make_qx_quants, nearest_int};
use super::q4_k::requantize;
use super::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, QuantError,
    QuantOp,
};
use crate::GgmlType;

const QK_K: usize = 256;

/// ggml's `make_qkx3_quants` (weights: `x²` when none): the scale and `-min` of an asymmetric
/// fit to levels `0..=nmax`.
#[allow(clippy::too_many_arguments)]
fn make_qkx3_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    l_aux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let n = x.len();
    let nmaxf = nmax as f32;
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max <= min {
        l_out.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_mad = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).min(nmax).max(0);
        l_out[i] = l as u8;
        let diff = scale * l_out[i] as f32 + min - x[i];
        best_mad += weights[i] * (diff * diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmaxf) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let v = iscale * (x[i] - min);
            let l = if v > 0.0 {
                nearest_int(if v < nmaxf { v } else { nmaxf })
            } else {
                0
            };
            l_aux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut mad = 0.0f32;
            for i in 0..n {
                let diff = this_scale * l_aux[i] as f32 + this_min - x[i];
                mad += weights[i] * (diff * diff);
            }
            if mad < best_mad {
                l_out[..n].copy_from_slice(&l_aux[..n]);
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// The scales, mins, their packed bytes and the levels of a Q4_K or Q5_K super-block
/// (`quantize_row_q4_K_impl` / `quantize_row_q5_K_impl`; `nmax` 15 or 31).
fn k_block(
    x: &[f32; QK_K],
    qw: &[f32],
    nmax: i32,
    clamp63: bool,
) -> (f16, f16, [u8; 12], [u8; QK_K]) {
    let mut sum_x2 = 0.0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    let sigma2 = 2.0 * sum_x2 / QK_K as f32;
    let mut l = [0u8; QK_K];
    let mut l_aux = [0u8; 32];
    let (mut scales, mut mins, mut sw) = ([0f32; 8], [0f32; 8], [0f32; 8]);
    let mut weights = [0f32; 32];
    for j in 0..QK_K / 32 {
        for k in 0..32 {
            let v = x[32 * j + k];
            weights[k] = qw[32 * j + k] * (sigma2 + v * v).sqrt();
        }
        let mut sumw = 0.0f32;
        for &w in &weights {
            sumw += w;
        }
        sw[j] = sumw;
        let (s, m) = make_qkx3_quants(
            nmax,
            &x[32 * j..32 * j + 32],
            &weights,
            &mut l[32 * j..32 * j + 32],
            &mut l_aux,
            -0.9,
            0.05,
            36,
        );
        scales[j] = s;
        mins[j] = m;
    }
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    let d_block = make_qp_quants(63, &scales, &mut ls, &sw);
    let m_block = make_qp_quants(63, &mins, &mut lm, &sw);
    let mut packed = [0u8; 12];
    for j in 0..8 {
        let (mut a, mut b) = (ls[j], lm[j]);
        if clamp63 {
            a = a.min(63);
            b = b.min(63);
        }
        if j < 4 {
            packed[j] = a;
            packed[j + 4] = b;
        } else {
            packed[j + 4] = (a & 0xf) | ((b & 0xf) << 4);
            packed[j - 4] |= (a >> 4) << 6;
            packed[j] |= (b >> 4) << 6;
        }
    }
    let (d, dmin) = (f16::from_f32(d_block), f16::from_f32(m_block));
    requantize(x, &packed, d, dmin, nmax, &mut l);
    (d, dmin, packed, l)
}

fn q4_k_block(x: &[f32; QK_K], qw: &[f32]) -> BlockQ4K {
    let (d, dmin, scales, l) = k_block(x, qw, 15, false);
    let mut qs = [0u8; QK_K / 2];
    for p in 0..QK_K / 64 {
        for i in 0..32 {
            qs[32 * p + i] = l[64 * p + i] | (l[64 * p + i + 32] << 4);
        }
    }
    BlockQ4K {
        d,
        dmin,
        scales,
        qs,
    }
}

fn q5_k_block(x: &[f32; QK_K], qw: &[f32]) -> BlockQ5K {
    let (d, dmin, scales, l) = k_block(x, qw, 31, true);
    let (qh, qs) = super::q5_k::pack(&l);
    BlockQ5K {
        d,
        dmin,
        scales,
        qh,
        qs,
    }
}

fn q2_k_block(x: &[f32; QK_K], qw: &[f32]) -> BlockQ2K {
    let mut sumx2 = 0.0f32;
    for &v in x {
        sumx2 += v * v;
    }
    let sigma2 = sumx2 / QK_K as f32;
    let mut l = [0u8; QK_K];
    let mut l_aux = [0u8; 16];
    let (mut scales, mut mins, mut sw) = ([0f32; 16], [0f32; 16], [0f32; 16]);
    for j in 0..QK_K / 16 {
        let mut weight = [0f32; 16];
        for k in 0..16 {
            let v = x[16 * j + k];
            weight[k] = qw[16 * j + k] * (sigma2 + v * v).sqrt();
        }
        for &w in &weight {
            sw[j] += w;
        }
        let (s, m) = make_qkx3_quants(
            3,
            &x[16 * j..16 * j + 16],
            &weight,
            &mut l[16 * j..16 * j + 16],
            &mut l_aux,
            -0.9,
            0.05,
            36,
        );
        scales[j] = s;
        mins[j] = m;
    }
    let (mut ls, mut lm) = ([0u8; 16], [0u8; 16]);
    let dm = make_qp_quants(15, &scales, &mut ls, &sw);
    let mm = make_qp_quants(15, &mins, &mut lm, &sw);
    let mut b = BlockQ2K {
        scales: [0; 16],
        qs: [0; QK_K / 4],
        d: f16::from_f32(dm),
        dmin: f16::from_f32(mm),
    };
    let (dm, mm) = (b.d.to_f32(), b.dmin.to_f32());
    for j in 0..16 {
        b.scales[j] = ls[j] | (lm[j] << 4);
    }
    for j in 0..16 {
        let d = dm * (b.scales[j] & 0xf) as f32;
        if d == 0.0 {
            continue;
        }
        let m = mm * (b.scales[j] >> 4) as f32;
        for ii in 0..16 {
            l[16 * j + ii] = nearest_int((x[16 * j + ii] + m) / d).clamp(0, 3) as u8;
        }
    }
    for j in (0..QK_K).step_by(128) {
        for k in 0..32 {
            b.qs[j / 4 + k] =
                l[j + k] | (l[j + k + 32] << 2) | (l[j + k + 64] << 4) | (l[j + k + 96] << 6);
        }
    }
    b
}

fn q3_k_block(x: &[f32; QK_K], qw: &[f32]) -> BlockQ3K {
    let mut sumx2 = 0.0f32;
    for &v in x {
        sumx2 += v * v;
    }
    let sigma2 = 2.0 * sumx2 / QK_K as f32;
    let mut l = [0i8; QK_K];
    let (mut scales, mut sw) = ([0f32; 16], [0f32; 16]);
    for j in 0..QK_K / 16 {
        let mut weight = [0f32; 16];
        for k in 0..16 {
            let v = x[16 * j + k];
            weight[k] = qw[16 * j + k] * (sigma2 + v * v).sqrt();
        }
        let mut sumw = 0.0f32;
        for &w in &weight {
            sumw += w;
        }
        sw[j] = sumw;
        scales[j] = make_qx_quants(
            4,
            &x[16 * j..16 * j + 16],
            &mut l[16 * j..16 * j + 16],
            1,
            Some(&weight),
        );
    }
    let mut ls = [0i8; 16];
    let d_block = make_qx_quants(32, &scales, &mut ls, 1, Some(&sw));
    let mut b = BlockQ3K {
        hmask: [0; QK_K / 8],
        qs: [0; QK_K / 4],
        scales: [0; 12],
        d: f16::from_f32(d_block),
    };
    for j in 0..16 {
        let mut v = ls[j] as i32;
        if j < 8 {
            b.scales[j] = (v & 0xf) as u8;
        } else {
            b.scales[j - 8] |= ((v & 0xf) << 4) as u8;
        }
        v >>= 4;
        b.scales[j % 4 + 8] |= (v << (2 * (j / 4))) as u8;
    }
    let dd = b.d.to_f32();
    for j in 0..16 {
        let low = if j < 8 {
            b.scales[j] & 0xf
        } else {
            b.scales[j - 8] >> 4
        };
        let sc = (low | (((b.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) as i32 - 32;
        let d = dd * sc as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-4, 3) + 4) as i8;
        }
    }
    let (mut m, mut hm) = (0usize, 1u8);
    let mut lu = [0u8; QK_K];
    for j in 0..QK_K {
        let mut v = l[j] as u8;
        if v > 3 {
            b.hmask[m] |= hm;
            v -= 4;
        }
        lu[j] = v;
        m += 1;
        if m == QK_K / 8 {
            m = 0;
            hm = hm.wrapping_shl(1);
        }
    }
    for j in (0..QK_K).step_by(128) {
        for k in 0..32 {
            b.qs[j / 4 + k] =
                lu[j + k] | (lu[j + k + 32] << 2) | (lu[j + k + 64] << 4) | (lu[j + k + 96] << 6);
        }
    }
    b
}

/// The 32-value block types' row form (`quantize_row_q{4,5}_{0,1}_impl`): the weights scale by
/// the row's mean square.
fn legacy_row(ty: GgmlType, x: &[f32], qw: &[f32], out: &mut [u8]) {
    let mut sum_x2 = 0.0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    let sigma2 = sum_x2 / x.len() as f32;
    let size = ty.type_size();
    for (ib, (xb, o)) in x
        .chunks_exact(32)
        .zip(out.chunks_exact_mut(size))
        .enumerate()
    {
        let mut w = [0f32; 32];
        for j in 0..32 {
            w[j] = qw[32 * ib + j] * (sigma2 + xb[j] * xb[j]).sqrt();
        }
        let mut l8 = [0i8; 32];
        let (mut lu, mut aux) = ([0u8; 32], [0u8; 32]);
        match ty {
            GgmlType::Q4_0 => {
                let d = make_qx_quants(8, xb, &mut l8, 1, Some(&w));
                let mut b = BlockQ4_0 {
                    d: f16::from_f32(d),
                    qs: [0; 16],
                };
                for j in 0..16 {
                    b.qs[j] = (l8[j] as u8) | ((l8[j + 16] as u8) << 4);
                }
                o.copy_from_slice(bytemuck::bytes_of(&b));
            }
            GgmlType::Q5_0 => {
                let d = make_qx_quants(16, xb, &mut l8, 1, Some(&w));
                let mut b = BlockQ5_0 {
                    d: f16::from_f32(d),
                    qh: [0; 4],
                    qs: [0; 16],
                };
                let mut qh = 0u32;
                for j in 0..16 {
                    let (a, c) = (l8[j] as u8, l8[j + 16] as u8);
                    b.qs[j] = (a & 0xf) | ((c & 0xf) << 4);
                    qh |= (((a & 0x10) >> 4) as u32) << j;
                    qh |= (((c & 0x10) >> 4) as u32) << (j + 16);
                }
                b.qh = qh.to_le_bytes();
                o.copy_from_slice(bytemuck::bytes_of(&b));
            }
            GgmlType::Q4_1 | GgmlType::Q5_1 => {
                let nmax = if ty == GgmlType::Q4_1 { 15 } else { 31 };
                let (d, min) = make_qkx3_quants(nmax, xb, &w, &mut lu, &mut aux, -0.9, 0.05, 36);
                let (d, m) = (f16::from_f32(d), f16::from_f32(-min));
                if ty == GgmlType::Q4_1 {
                    let mut b = BlockQ4_1 { d, m, qs: [0; 16] };
                    for j in 0..16 {
                        b.qs[j] = lu[j] | (lu[j + 16] << 4);
                    }
                    o.copy_from_slice(bytemuck::bytes_of(&b));
                } else {
                    let mut b = BlockQ5_1 {
                        d,
                        m,
                        qh: [0; 4],
                        qs: [0; 16],
                    };
                    let mut qh = 0u32;
                    for j in 0..16 {
                        let (a, c) = (lu[j], lu[j + 16]);
                        b.qs[j] = (a & 0xf) | ((c & 0xf) << 4);
                        qh |= (((a & 0x10) >> 4) as u32) << j;
                        qh |= (((c & 0x10) >> 4) as u32) << (j + 16);
                    }
                    b.qh = qh.to_le_bytes();
                    o.copy_from_slice(bytemuck::bytes_of(&b));
                }
            }
            _ => {}
        }
    }
}

/// Whether [`quantize_rows`] takes importance weights for `ty`.
pub fn supports_weights(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q2K
            | GgmlType::Q3K
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
            | GgmlType::IQ4NL
            | GgmlType::IQ4XS
            | GgmlType::IQ3XXS
            | GgmlType::IQ3S
            | GgmlType::IQ2XXS
            | GgmlType::IQ2XS
            | GgmlType::IQ2S
            | GgmlType::IQ1S
            | GgmlType::IQ1M
    )
}

/// Rows of `n_per_row` values of `src` into `out` as `ty` with the importance weights `qw`
/// (`n_per_row` values), as `ggml_quantize_chunk` does with an importance matrix.
///
/// # Errors
/// `Unsupported` for a type [`supports_weights`] refuses; length errors as [`super::quantize`].
pub fn quantize_rows(
    ty: GgmlType,
    src: &[f32],
    out: &mut [u8],
    n_per_row: usize,
    qw: &[f32],
) -> Result<(), QuantError> {
    check_bytes(ty, QuantOp::Quantize, src.len(), out.len())?;
    if !supports_weights(ty) {
        return Err(QuantError::Unsupported {
            ty,
            op: QuantOp::Quantize,
        });
    }
    let bad = || QuantError::PartialBlock {
        ty,
        op: QuantOp::Quantize,
        values: qw.len(),
        block_size: n_per_row,
    };
    if n_per_row == 0 || qw.len() != n_per_row || !src.len().is_multiple_of(n_per_row) {
        return Err(bad());
    }
    if !n_per_row.is_multiple_of(ty.block_size()) {
        return Err(bad());
    }
    let row_bytes = n_per_row / ty.block_size() * ty.type_size();
    for (x, o) in src
        .chunks_exact(n_per_row)
        .zip(out.chunks_exact_mut(row_bytes))
    {
        match ty {
            GgmlType::Q8_0 => super::quantize(ty, x, o)?,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 => {
                legacy_row(ty, x, qw, o)
            }
            GgmlType::IQ4NL | GgmlType::IQ4XS => {
                super::iq4_quantize::quantize_bytes_weighted(ty, x, o, qw)?
            }
            GgmlType::IQ3XXS | GgmlType::IQ3S => {
                super::iq3_quantize::quantize_bytes(ty, x, o, Some(qw))?
            }
            GgmlType::IQ2XXS | GgmlType::IQ2XS | GgmlType::IQ2S => {
                super::iq2_quantize::quantize_bytes(ty, x, o, Some(qw))?
            }
            GgmlType::IQ1S | GgmlType::IQ1M => {
                super::iq1_quantize::quantize_bytes(ty, x, o, Some(qw))?
            }
            _ => {
                let size = ty.type_size();
                for (ib, (xb, ob)) in x
                    .chunks_exact(QK_K)
                    .zip(o.chunks_exact_mut(size))
                    .enumerate()
                {
                    let xb: &[f32; QK_K] = xb.try_into().map_err(|_| bad())?;
                    let w = &qw[QK_K * ib..QK_K * ib + QK_K];
                    match ty {
                        GgmlType::Q4K => ob.copy_from_slice(bytemuck::bytes_of(&q4_k_block(xb, w))),
                        GgmlType::Q5K => ob.copy_from_slice(bytemuck::bytes_of(&q5_k_block(xb, w))),
                        GgmlType::Q2K => ob.copy_from_slice(bytemuck::bytes_of(&q2_k_block(xb, w))),
                        GgmlType::Q3K => ob.copy_from_slice(bytemuck::bytes_of(&q3_k_block(xb, w))),
                        _ => ob.copy_from_slice(bytemuck::bytes_of(
                            &super::q6_k::quantize_block_weighted(xb, Some(w)),
                        )),
                    }
                }
            }
        }
    }
    Ok(())
}
