//! Quantization to IQ4_NL and IQ4_XS as `llama-quantize` does it (ggml's
//! `quantize_row_iq4_nl_impl` through `quantize_iq4_nl` / `quantize_iq4_xs`, 7 scale trials per
//! block, optional importance weights), float operation for float operation, so the blocks are
//! ggml's.

use half::f16;

use super::common::{check_bytes, nearest_int};
use super::iq4_nl::{BlockIQ4NL, KVALUES_IQ4NL, QK4_NL};
use super::iq4_xs::BlockIQ4XS;
use super::{QuantError, QuantOp};
use crate::GgmlType;

const QK_K: usize = 256;
const GROUP_MAX_EPS: f32 = 1e-15;
/// Scale trials each side of the first guess (`ntry` of ggml's callers).
const NTRY: i32 = 7;

/// ggml's `best_index_int8` over the 16 IQ4 levels: the nearest level's index (ties to the
/// upper one, as ggml compares).
#[inline]
fn best_index(x: f32) -> usize {
    let val = &KVALUES_IQ4NL;
    if x <= val[0] as f32 {
        return 0;
    }
    if x >= val[15] as f32 {
        return 15;
    }
    let (mut ml, mut mu) = (0usize, 15usize);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (val[mu - 1] as f32) < (val[mu] as f32) - x {
        mu - 1
    } else {
        mu
    }
}

/// What one super-block quantizes to: its f16 scale, the indices, and (IQ4_XS) the packed
/// 6-bit group scales.
struct Iq4 {
    d: f16,
    l: [u8; QK_K],
    scales_h: u16,
    scales_l: [u8; QK_K / 64],
}

/// ggml's `quantize_row_iq4_nl_impl` for a super-block of `x.len()` values (32: IQ4_NL, 256:
/// IQ4_XS) in groups of 32, with `ntry` = 7.
fn quantize_impl(x: &[f32], qw: Option<&[f32]>) -> Iq4 {
    let sbs = x.len();
    let values = &KVALUES_IQ4NL;
    let v0 = values[0] as f32;
    let mut sigma2 = 0.0f32;
    for &v in x {
        sigma2 += v * v;
    }
    sigma2 *= 2.0 / sbs as f32;
    let mut out = Iq4 {
        d: f16::from_f32(0.0),
        l: [0u8; QK_K],
        scales_h: 0,
        scales_l: [0u8; QK_K / 64],
    };
    let nb = sbs / 32;
    let mut scales = [0f32; QK_K / 32];
    let mut weight = [0f32; 32];
    let (mut max_scale, mut amax_scale) = (0.0f32, 0.0f32);
    for ib in 0..nb {
        let xb = &x[32 * ib..32 * ib + 32];
        let lb = &mut out.l[32 * ib..32 * ib + 32];
        match qw {
            Some(qw) => {
                for j in 0..32 {
                    weight[j] = qw[32 * ib + j] * (sigma2 + xb[j] * xb[j]).sqrt();
                }
            }
            None => {
                for j in 0..32 {
                    weight[j] = xb[j] * xb[j];
                }
            }
        }
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in xb {
            let ax = v.abs();
            if ax > amax {
                amax = ax;
                max = v;
            }
        }
        if amax < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        let mut d = -max / v0;
        let mut id = 1.0 / d;
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for j in 0..32 {
            let l = best_index(id * xb[j]);
            lb[j] = l as u8;
            let q = values[l] as f32;
            let w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -NTRY..=NTRY {
            id = (itry + values[0] as i32) as f32 / max;
            sumqx = 0.0;
            sumq2 = 0.0;
            for j in 0..32 {
                let q = values[best_index(id * xb[j])] as f32;
                let w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        let abs_d = d.abs();
        if abs_d > amax_scale {
            amax_scale = abs_d;
            max_scale = d;
        }
    }
    if nb > 1 {
        let d = -max_scale / 32.0;
        out.d = f16::from_f32(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for ib in 0..nb {
            let mut l = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * l as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for j in 0..32 {
                out.l[32 * ib + j] = best_index(idl * x[32 * ib + j]) as u8;
            }
            l += 32;
            let (l_l, l_h) = ((l & 0xf) as u8, (l >> 4) as u16);
            if ib % 2 == 0 {
                out.scales_l[ib / 2] = l_l;
            } else {
                out.scales_l[ib / 2] |= l_l << 4;
            }
            out.scales_h |= l_h << (2 * (ib % 8));
        }
    } else {
        out.d = f16::from_f32(scales[0]);
        let id = if scales[0] != 0.0 {
            1.0 / scales[0]
        } else {
            0.0
        };
        for (l, &v) in out.l.iter_mut().zip(x) {
            *l = best_index(id * v) as u8;
        }
    }
    out
}

fn pack(l: &[u8], qs: &mut [u8]) {
    for i in 0..l.len() / 32 {
        for j in 0..16 {
            qs[16 * i + j] = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
}

/// One IQ4_NL block as `llama-quantize` makes it (`qw`: the block's importance weights).
pub fn quantize_block_iq4_nl(x: &[f32; QK4_NL], qw: Option<&[f32]>) -> BlockIQ4NL {
    let q = quantize_impl(x, qw);
    let mut b = BlockIQ4NL {
        d: q.d,
        qs: [0; QK4_NL / 2],
    };
    pack(&q.l[..QK4_NL], &mut b.qs);
    b
}

/// One IQ4_XS super-block as `llama-quantize` makes it.
pub fn quantize_block_iq4_xs(x: &[f32; QK_K], qw: Option<&[f32]>) -> BlockIQ4XS {
    let q = quantize_impl(x, qw);
    let mut b = BlockIQ4XS {
        d: q.d,
        scales_h: q.scales_h,
        scales_l: q.scales_l,
        qs: [0; QK_K / 2],
    };
    pack(&q.l, &mut b.qs);
    b
}

/// `src` as raw IQ4_NL or IQ4_XS blocks into `out` (no importance weights).
pub(crate) fn quantize_bytes(ty: GgmlType, src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    check_bytes(ty, QuantOp::Quantize, src.len(), out.len())?;
    let (bs, size) = (ty.block_size(), ty.type_size());
    for (x, o) in src.chunks_exact(bs).zip(out.chunks_exact_mut(size)) {
        if let Ok(x) = <&[f32; QK4_NL]>::try_from(x) {
            o.copy_from_slice(bytemuck::bytes_of(&quantize_block_iq4_nl(x, None)));
        } else if let Ok(x) = <&[f32; QK_K]>::try_from(x) {
            o.copy_from_slice(bytemuck::bytes_of(&quantize_block_iq4_xs(x, None)));
        }
    }
    Ok(())
}

/// One row of IQ4_NL or IQ4_XS blocks with importance weights (one per column).
pub(crate) fn quantize_bytes_weighted(
    ty: GgmlType,
    src: &[f32],
    out: &mut [u8],
    qw: &[f32],
) -> Result<(), QuantError> {
    check_bytes(ty, QuantOp::Quantize, src.len(), out.len())?;
    let (bs, size) = (ty.block_size(), ty.type_size());
    for (i, (x, o)) in src
        .chunks_exact(bs)
        .zip(out.chunks_exact_mut(size))
        .enumerate()
    {
        let w = qw.get(i * bs..i * bs + bs);
        if let Ok(x) = <&[f32; QK4_NL]>::try_from(x) {
            o.copy_from_slice(bytemuck::bytes_of(&quantize_block_iq4_nl(x, w)));
        } else if let Ok(x) = <&[f32; QK_K]>::try_from(x) {
            o.copy_from_slice(bytemuck::bytes_of(&quantize_block_iq4_xs(x, w)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iq4_blocks_round_trip_close_and_pick_nearest_levels() {
        let mut seed = 9u64;
        let x: Vec<f32> = (0..512)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect();
        for ty in [GgmlType::IQ4NL, GgmlType::IQ4XS] {
            let mut q = vec![0u8; x.len() / ty.block_size() * ty.type_size()];
            quantize_bytes(ty, &x, &mut q).unwrap();
            let mut y = vec![0f32; x.len()];
            crate::quant::dequantize(ty, &q, &mut y).unwrap();
            let rmse = (x.iter().zip(&y).map(|(a, b)| (a - b).powi(2)).sum::<f32>()
                / x.len() as f32)
                .sqrt();
            assert!(rmse < 0.06, "{ty}: rmse {rmse}");
        }
        assert_eq!(best_index(-200.0), 0);
        assert_eq!(best_index(200.0), 15);
        assert_eq!(best_index(0.0), 8);
        // Halfway between -10 and 1 goes up (ggml compares `x - lo < hi - x`).
        assert_eq!(best_index(-4.5), 8);
        assert!(quantize_bytes(GgmlType::IQ4XS, &x[..100], &mut [0u8; 136]).is_err());
    }
}
