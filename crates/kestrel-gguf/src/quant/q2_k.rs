//! Q2_K: super-blocks of 256 values in 16 groups of 16, each group with a 4-bit scale and a
//! 4-bit min scaled by the f16 `d` and `dmin`, and 2-bit quants, `value = d*sc*q - dmin*m`
//! (ggml's `block_q2_K`, `dequantize_row_q2_K`, `quantize_row_q2_K_ref`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, make_qkx2_quants, nearest_int, pack_2bit, Qkx2Params, QuantBlock, QK_K};
use super::QuantError;
use crate::GgmlType;

/// One Q2_K super-block: ggml's `block_q2_K`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ2K {
    /// Per group of 16: scale in the low nibble, min in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// 2-bit quants: byte `32*h + l` holds values `128*h + l + 32*k` in bits `2k..2k+2`.
    pub qs: [u8; QK_K / 4],
    /// Super-block scale of the group scales.
    pub d: f16,
    /// Super-block scale of the group mins.
    pub dmin: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

impl QuantBlock for BlockQ2K {
    const TYPE: GgmlType = GgmlType::Q2K;
    const BLOCK_SIZE: usize = QK_K;
}

/// Dequantizes one super-block (ggml's `dequantize_row_q2_K` body).
pub fn dequantize_block(b: &BlockQ2K, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    let min = b.dmin.to_f32();
    let mut is = 0;
    let mut yi = 0;
    for half in 0..2 {
        let q = &b.qs[32 * half..32 * half + 32];
        let mut shift = 0;
        for _ in 0..4 {
            for part in 0..2 {
                let sc = b.scales[is];
                is += 1;
                let dl = d * (sc & 0xf) as f32;
                let ml = min * (sc >> 4) as f32;
                for &qb in &q[16 * part..16 * part + 16] {
                    y[yi] = dl * ((qb >> shift) & 3) as f32 - ml;
                    yi += 1;
                }
            }
            shift += 2;
        }
    }
}

/// Quantizes one super-block (ggml's `quantize_row_q2_K_ref` body).
pub fn quantize_block(x: &[f32; QK_K]) -> BlockQ2K {
    const Q4SCALE: f32 = 15.0;
    let params = Qkx2Params {
        nmax: 3,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    let mut l = [0u8; QK_K];
    let mut l_aux = [0u8; 16];
    let mut weights = [0f32; 16];
    let mut mins = [0f32; QK_K / 16];
    let mut scales = [0f32; QK_K / 16];

    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..QK_K / 16 {
        let xs = &x[16 * j..16 * j + 16];
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = v.abs();
        }
        let (scale, min) = make_qkx2_quants(
            &params,
            xs,
            &weights,
            &mut l[16 * j..16 * j + 16],
            &mut l_aux,
        );
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }

    let mut out = BlockQ2K::zeroed();
    if max_scale > 0.0 {
        let iscale = Q4SCALE / max_scale;
        for (s, &sc) in out.scales.iter_mut().zip(&scales) {
            *s = nearest_int(iscale * sc) as u8;
        }
        out.d = f16::from_f32(max_scale / Q4SCALE);
    } else {
        out.d = f16::from_f32(0.0);
    }
    if max_min > 0.0 {
        let iscale = Q4SCALE / max_min;
        for (s, &m) in out.scales.iter_mut().zip(&mins) {
            *s = (*s as i32 | (nearest_int(iscale * m) << 4)) as u8;
        }
        out.dmin = f16::from_f32(max_min / Q4SCALE);
    } else {
        out.dmin = f16::from_f32(0.0);
    }

    let dd = out.d.to_f32();
    let dmin = out.dmin.to_f32();
    for j in 0..QK_K / 16 {
        let d = dd * (out.scales[j] & 0xf) as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin * (out.scales[j] >> 4) as f32;
        for ii in 0..16 {
            let q = nearest_int((x[16 * j + ii] + dm) / d).clamp(0, 3);
            l[16 * j + ii] = q as u8;
        }
    }
    out.qs = pack_2bit(&l);
    out
}

/// Dequantizes `blocks` into `out`, which must hold exactly `256 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockQ2K], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

/// Quantizes `src` into `out`, which must hold exactly `src.len() / 256` blocks.
pub fn quantize_row(src: &[f32], out: &mut [BlockQ2K]) -> Result<(), QuantError> {
    common::quantize_blocks(src, out, quantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}

pub(crate) fn quantize_bytes(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block)
}
