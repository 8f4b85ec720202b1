//! Q5_1: blocks of 32 values stored as f16 scale and minimum, 4 low bits per value and a 32-bit
//! mask of fifth bits, `value = d * q + m` (ggml's `block_q5_1`, `dequantize_row_q5_1`,
//! `quantize_row_q5_1_ref`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, QuantBlock};
use super::QuantError;
use crate::GgmlType;

/// Values per Q5_1 block (ggml's `QK5_1`).
pub const QK5_1: usize = 32;

/// One Q5_1 block: ggml's `block_q5_1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ5_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (added to every value).
    pub m: f16,
    /// Fifth bits, a little-endian `u32`: bit `j` belongs to value `j`.
    pub qh: [u8; 4],
    /// Low 4 bits: byte `j` holds value `j` (low nibble) and value `j + 16` (high nibble).
    pub qs: [u8; QK5_1 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

impl QuantBlock for BlockQ5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;
    const BLOCK_SIZE: usize = QK5_1;
}

/// Dequantizes one block (ggml's `dequantize_row_q5_1` body).
pub fn dequantize_block(b: &BlockQ5_1, y: &mut [f32; QK5_1]) {
    let d = b.d.to_f32();
    let m = b.m.to_f32();
    let qh = u32::from_le_bytes(b.qh);
    for j in 0..QK5_1 / 2 {
        let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
        let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
        let x0 = ((b.qs[j] & 0x0f) | xh_0) as f32;
        let x1 = ((b.qs[j] >> 4) | xh_1) as f32;
        y[j] = x0 * d + m;
        y[j + QK5_1 / 2] = x1 * d + m;
    }
}

/// Quantizes one block (ggml's `quantize_row_q5_1_ref` body): min and max span the 32 levels.
pub fn quantize_block(x: &[f32; QK5_1]) -> BlockQ5_1 {
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
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0u8; QK5_1 / 2];
    let mut qh = 0u32;
    for j in 0..QK5_1 / 2 {
        let x0 = (x[j] - min) * id;
        let x1 = (x[j + QK5_1 / 2] - min) * id;
        let xi0 = (x0 + 0.5) as u8;
        let xi1 = (x1 + 0.5) as u8;
        qs[j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
        qh |= (((xi0 & 0x10) >> 4) as u32) << j;
        qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK5_1 / 2);
    }
    BlockQ5_1 {
        d: f16::from_f32(d),
        m: f16::from_f32(min),
        qh: qh.to_le_bytes(),
        qs,
    }
}

/// Dequantizes `blocks` into `out`, which must hold exactly `32 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockQ5_1], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

/// Quantizes `src` into `out`, which must hold exactly `src.len() / 32` blocks.
pub fn quantize_row(src: &[f32], out: &mut [BlockQ5_1]) -> Result<(), QuantError> {
    common::quantize_blocks(src, out, quantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}

pub(crate) fn quantize_bytes(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block)
}
