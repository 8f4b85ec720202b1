//! Q4_0: blocks of 32 values stored as one f16 scale and 4-bit quants, `value = d * (q - 8)`
//! (ggml's `block_q4_0`, `dequantize_row_q4_0`, `quantize_row_q4_0_ref`).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, QuantBlock};
use super::QuantError;
use crate::GgmlType;

/// Values per Q4_0 block (ggml's `QK4_0`).
pub const QK4_0: usize = 32;

/// One Q4_0 block: ggml's `block_q4_0`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// Quants: byte `j` holds value `j` in its low nibble and value `j + 16` in its high nibble.
    pub qs: [u8; QK4_0 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

impl QuantBlock for BlockQ4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;
    const BLOCK_SIZE: usize = QK4_0;
}

/// Dequantizes one block (ggml's `dequantize_row_q4_0` body).
pub fn dequantize_block(b: &BlockQ4_0, y: &mut [f32; QK4_0]) {
    let d = b.d.to_f32();
    for j in 0..QK4_0 / 2 {
        let x0 = (b.qs[j] & 0x0f) as i32 - 8;
        let x1 = (b.qs[j] >> 4) as i32 - 8;
        y[j] = x0 as f32 * d;
        y[j + QK4_0 / 2] = x1 as f32 * d;
    }
}

/// Quantizes one block (ggml's `quantize_row_q4_0_ref` body): the value of largest magnitude
/// maps to -8.
pub fn quantize_block(x: &[f32; QK4_0]) -> BlockQ4_0 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0u8; QK4_0 / 2];
    for j in 0..QK4_0 / 2 {
        let x0 = x[j] * id;
        let x1 = x[j + QK4_0 / 2] * id;
        let xi0 = ((x0 + 8.5) as i8).min(15) as u8;
        let xi1 = ((x1 + 8.5) as i8).min(15) as u8;
        qs[j] = xi0 | (xi1 << 4);
    }
    BlockQ4_0 {
        d: f16::from_f32(d),
        qs,
    }
}

/// Dequantizes `blocks` into `out`, which must hold exactly `32 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockQ4_0], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

/// Quantizes `src` into `out`, which must hold exactly `src.len() / 32` blocks.
pub fn quantize_row(src: &[f32], out: &mut [BlockQ4_0]) -> Result<(), QuantError> {
    common::quantize_blocks(src, out, quantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}

pub(crate) fn quantize_bytes(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block)
}
