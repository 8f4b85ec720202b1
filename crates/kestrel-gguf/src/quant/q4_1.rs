//! Q4_1: blocks of 32 values stored as f16 scale and minimum plus 4-bit quants,
//! `value = d * q + m` (ggml's `block_q4_1`, `dequantize_row_q4_1`, `quantize_row_q4_1_ref`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, QuantBlock};
use super::QuantError;
use crate::GgmlType;

/// Values per Q4_1 block (ggml's `QK4_1`).
pub const QK4_1: usize = 32;

/// One Q4_1 block: ggml's `block_q4_1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ4_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (added to every value).
    pub m: f16,
    /// Quants: byte `j` holds value `j` in its low nibble and value `j + 16` in its high nibble.
    pub qs: [u8; QK4_1 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

impl QuantBlock for BlockQ4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;
    const BLOCK_SIZE: usize = QK4_1;
}

/// Dequantizes one block (ggml's `dequantize_row_q4_1` body).
pub fn dequantize_block(b: &BlockQ4_1, y: &mut [f32; QK4_1]) {
    let d = b.d.to_f32();
    let m = b.m.to_f32();
    for j in 0..QK4_1 / 2 {
        let x0 = (b.qs[j] & 0x0f) as f32;
        let x1 = (b.qs[j] >> 4) as f32;
        y[j] = x0 * d + m;
        y[j + QK4_1 / 2] = x1 * d + m;
    }
}

/// Quantizes one block (ggml's `quantize_row_q4_1_ref` body): min and max span the 16 levels.
pub fn quantize_block(x: &[f32; QK4_1]) -> BlockQ4_1 {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0u8; QK4_1 / 2];
    for j in 0..QK4_1 / 2 {
        let x0 = (x[j] - min) * id;
        let x1 = (x[j + QK4_1 / 2] - min) * id;
        let xi0 = ((x0 + 0.5) as i8).min(15) as u8;
        let xi1 = ((x1 + 0.5) as i8).min(15) as u8;
        qs[j] = xi0 | (xi1 << 4);
    }
    BlockQ4_1 {
        d: f16::from_f32(d),
        m: f16::from_f32(min),
        qs,
    }
}

/// Dequantizes `blocks` into `out`, which must hold exactly `32 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockQ4_1], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

/// Quantizes `src` into `out`, which must hold exactly `src.len() / 32` blocks.
pub fn quantize_row(src: &[f32], out: &mut [BlockQ4_1]) -> Result<(), QuantError> {
    common::quantize_blocks(src, out, quantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}

pub(crate) fn quantize_bytes(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block)
}
