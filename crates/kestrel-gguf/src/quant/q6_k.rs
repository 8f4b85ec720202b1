//! Q6_K: super-blocks of 256 values in 16 groups of 16, each group with a signed 8-bit scale
//! (scaled by the f16 `d`), 4 low bits per value in `ql` and 2 high bits in `qh`,
//! `value = d * sc * (q - 32)` (ggml's `block_q6_K`, `dequantize_row_q6_K`,
//! `quantize_row_q6_K_ref`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, make_qx_quants, nearest_int, QuantBlock, GROUP_MAX_EPS, QK_K};
use super::QuantError;
use crate::GgmlType;

/// One Q6_K super-block: ggml's `block_q6_K`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ6K {
    /// Low 4 bits: in each half of 128 values, byte `l` holds values `l` and `l + 64`
    /// (low / high nibble), byte `32 + l` values `l + 32` and `l + 96`.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits: in each half, byte `l` holds values `l + 32*k` in bits `2k..2k+2`.
    pub qh: [u8; QK_K / 4],
    /// Scale of each group of 16.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale.
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

impl QuantBlock for BlockQ6K {
    const TYPE: GgmlType = GgmlType::Q6K;
    const BLOCK_SIZE: usize = QK_K;
}

/// Dequantizes one super-block (ggml's `dequantize_row_q6_K` body).
pub fn dequantize_block(b: &BlockQ6K, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    for half in 0..2 {
        let ql = &b.ql[64 * half..64 * half + 64];
        let qh = &b.qh[32 * half..32 * half + 32];
        let sc = &b.scales[8 * half..8 * half + 8];
        let y = &mut y[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * sc[is] as f32 * q1 as f32;
            y[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
            y[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
            y[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
        }
    }
}

/// Quantizes one super-block (ggml's `quantize_row_q6_K_ref` body).
pub fn quantize_block(x: &[f32; QK_K]) -> BlockQ6K {
    quantize_block_weighted(x, None)
}

/// Quantizes one super-block with importance weights `qw` (256 values) when given (ggml's
/// `quantize_row_q6_K_impl`: the reference with the weights in each group's fit).
pub fn quantize_block_weighted(x: &[f32; QK_K], qw: Option<&[f32]>) -> BlockQ6K {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; QK_K / 16];
    let mut max_scale = 0.0f32;
    let mut max_abs_scale = 0.0f32;
    for ib in 0..QK_K / 16 {
        let scale = make_qx_quants(
            32,
            &x[16 * ib..16 * ib + 16],
            &mut l[16 * ib..16 * ib + 16],
            1,
            qw.and_then(|w| w.get(16 * ib..16 * ib + 16)),
        );
        scales[ib] = scale;
        let abs_scale = scale.abs();
        if abs_scale > max_abs_scale {
            max_abs_scale = abs_scale;
            max_scale = scale;
        }
    }

    let mut out = BlockQ6K::zeroed();
    if max_abs_scale < GROUP_MAX_EPS {
        return out;
    }

    let iscale = -128.0 / max_scale;
    out.d = f16::from_f32(1.0 / iscale);
    for (s, &sc) in out.scales.iter_mut().zip(&scales) {
        *s = nearest_int(iscale * sc).min(127) as i8;
    }

    let dd = out.d.to_f32();
    for j in 0..QK_K / 16 {
        let d = dd * out.scales[j] as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let q = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
            l[16 * j + ii] = (q + 32) as i8;
        }
    }

    for half in 0..2 {
        let lh = &l[128 * half..128 * half + 128];
        for i in 0..32 {
            let v = |k: usize| lh[i + 32 * k] as u8;
            out.ql[64 * half + i] = (v(0) & 0xf) | ((v(2) & 0xf) << 4);
            out.ql[64 * half + i + 32] = (v(1) & 0xf) | ((v(3) & 0xf) << 4);
            out.qh[32 * half + i] = ((v(0) >> 4) & 3)
                | (((v(1) >> 4) & 3) << 2)
                | (((v(2) >> 4) & 3) << 4)
                | (((v(3) >> 4) & 3) << 6);
        }
    }
    out
}

/// Dequantizes `blocks` into `out`, which must hold exactly `256 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockQ6K], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

/// Quantizes `src` into `out`, which must hold exactly `src.len() / 256` blocks.
pub fn quantize_row(src: &[f32], out: &mut [BlockQ6K]) -> Result<(), QuantError> {
    common::quantize_blocks(src, out, quantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}

pub(crate) fn quantize_bytes(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block)
}
