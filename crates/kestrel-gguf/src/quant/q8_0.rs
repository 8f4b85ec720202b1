//! Q8_0: blocks of 32 values stored as one f16 scale and signed 8-bit quants, `value = d * q`
//! (ggml's `block_q8_0`, `dequantize_row_q8_0`, `quantize_row_q8_0_ref`). Also the activation
//! format dotted with Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 weights.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, c_max, QuantBlock};
use super::QuantError;
use crate::GgmlType;

/// Values per Q8_0 block (ggml's `QK8_0`).
pub const QK8_0: usize = 32;

/// One Q8_0 block: ggml's `block_q8_0`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Quants, one per value.
    pub qs: [i8; QK8_0],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

impl QuantBlock for BlockQ8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
    const BLOCK_SIZE: usize = QK8_0;
}

/// Dequantizes one block (ggml's `dequantize_row_q8_0` body).
pub fn dequantize_block(b: &BlockQ8_0, y: &mut [f32; QK8_0]) {
    let d = b.d.to_f32();
    for (y, &q) in y.iter_mut().zip(&b.qs) {
        *y = q as f32 * d;
    }
}

/// Quantizes one block (ggml's `quantize_row_q8_0_ref` body): `d = amax / 127`, quants rounded
/// half away from zero.
pub fn quantize_block(x: &[f32; QK8_0]) -> BlockQ8_0 {
    let mut amax = 0.0f32;
    for &v in x {
        amax = c_max(amax, v.abs());
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; QK8_0];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    BlockQ8_0 {
        d: f16::from_f32(d),
        qs,
    }
}

/// Dequantizes `blocks` into `out`, which must hold exactly `32 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockQ8_0], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

/// Quantizes `src` into `out`, which must hold exactly `src.len() / 32` blocks.
pub fn quantize_row(src: &[f32], out: &mut [BlockQ8_0]) -> Result<(), QuantError> {
    common::quantize_blocks(src, out, quantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}

pub(crate) fn quantize_bytes(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block)
}
