//! IQ4_XS: super-blocks of 256 values in 8 groups of 32, each group with a 6-bit scale (offset
//! by 32, scaled by the f16 `d`) and 4-bit indices into the IQ4_NL table,
//! `value = d * (ls - 32) * KVALUES_IQ4NL[q]` (ggml's `block_iq4_xs`, `dequantize_row_iq4_xs`).
//! Dequantization only.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, QuantBlock, QK_K};
use super::iq4_nl::KVALUES_IQ4NL;
use super::QuantError;
use crate::GgmlType;

/// One IQ4_XS super-block: ggml's `block_iq4_xs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockIQ4XS {
    /// Super-block scale.
    pub d: f16,
    /// High 2 bits of the 8 group scales: bits `2*ib..2*ib+2` for group `ib`.
    pub scales_h: u16,
    /// Low 4 bits of the 8 group scales: group `ib` in nibble `ib % 2` of byte `ib / 2`.
    pub scales_l: [u8; QK_K / 64],
    /// Table indices: in group `ib`, byte `16*ib + j` holds values `32*ib + j` (low nibble)
    /// and `32*ib + 16 + j`.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIQ4XS>() == 136);

impl QuantBlock for BlockIQ4XS {
    const TYPE: GgmlType = GgmlType::IQ4XS;
    const BLOCK_SIZE: usize = QK_K;
}

/// Dequantizes one super-block (ggml's `dequantize_row_iq4_xs` body).
pub fn dequantize_block(b: &BlockIQ4XS, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    for ib in 0..QK_K / 32 {
        let ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) as i32
            | (((b.scales_h >> (2 * ib)) & 3) << 4) as i32;
        let dl = d * (ls - 32) as f32;
        let qs = &b.qs[16 * ib..16 * ib + 16];
        let y = &mut y[32 * ib..32 * ib + 32];
        for j in 0..16 {
            y[j] = dl * KVALUES_IQ4NL[(qs[j] & 0xf) as usize] as f32;
            y[j + 16] = dl * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
        }
    }
}

/// Dequantizes `blocks` into `out`, which must hold exactly `256 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockIQ4XS], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}
