//! IQ4_NL: blocks of 32 values stored as one f16 scale and 4-bit indices into a fixed
//! non-linear table, `value = d * KVALUES_IQ4NL[q]` (ggml's `block_iq4_nl`,
//! `dequantize_row_iq4_nl`). Dequantization only.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, QuantBlock};
use super::QuantError;
use crate::GgmlType;

/// Values per IQ4_NL block (ggml's `QK4_NL`).
pub const QK4_NL: usize = 32;

/// The 16 levels of IQ4_NL and IQ4_XS (ggml's `kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// One IQ4_NL block: ggml's `block_iq4_nl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockIQ4NL {
    /// Scale.
    pub d: f16,
    /// Table indices: byte `j` holds value `j` (low nibble) and value `j + 16` (high nibble).
    pub qs: [u8; QK4_NL / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIQ4NL>() == 18);

impl QuantBlock for BlockIQ4NL {
    const TYPE: GgmlType = GgmlType::IQ4NL;
    const BLOCK_SIZE: usize = QK4_NL;
}

/// Dequantizes one block (ggml's `dequantize_row_iq4_nl` body).
pub fn dequantize_block(b: &BlockIQ4NL, y: &mut [f32; QK4_NL]) {
    let d = b.d.to_f32();
    for j in 0..QK4_NL / 2 {
        y[j] = d * KVALUES_IQ4NL[(b.qs[j] & 0xf) as usize] as f32;
        y[j + QK4_NL / 2] = d * KVALUES_IQ4NL[(b.qs[j] >> 4) as usize] as f32;
    }
}

/// Dequantizes `blocks` into `out`, which must hold exactly `32 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockIQ4NL], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}
