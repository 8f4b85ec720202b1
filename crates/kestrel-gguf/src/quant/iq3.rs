//! The 3-bit IQ types: each group of 4 values is one entry of a fixed grid of magnitudes, with
//! signs per 8 values, times a per-32-value scale. IQ3_XXS (3.06 bits per value: 8-bit grid
//! indices, 7 sign bits expanded through `ksigns_iq2xs`, a 4-bit scale per 32 values) and IQ3_S
//! (3.44: 9-bit indices, explicit sign bytes, a 4-bit scale per 32 values as `1 + 2s`). ggml's
//! `block_iq3_xxs`, `block_iq3_s` and their `dequantize_row_*`. Dequantization only.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, QuantBlock, QK_K};
use super::iq_grids::{IQ3S_GRID, IQ3XXS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS};
use super::QuantError;
use crate::GgmlType;

/// One IQ3_XXS block: ggml's `block_iq3_xxs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockIQ3XXS {
    /// Scale.
    pub d: f16,
    /// 64 grid indices (bytes), then per 32 values a u32 of 4 × 7 sign bits and a 4-bit scale.
    pub qs: [u8; 3 * QK_K / 8],
}

/// One IQ3_S block: ggml's `block_iq3_s`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockIQ3S {
    /// Scale.
    pub d: f16,
    /// Low 8 bits of the 64 grid indices.
    pub qs: [u8; QK_K / 4],
    /// The indices' ninth bits, 8 per byte.
    pub qh: [u8; QK_K / 32],
    /// One sign bit per value.
    pub signs: [u8; QK_K / 8],
    /// Two 4-bit scales per 64 values.
    pub scales: [u8; QK_K / 64],
}

const _: () = assert!(std::mem::size_of::<BlockIQ3XXS>() == 98);
const _: () = assert!(std::mem::size_of::<BlockIQ3S>() == 110);

impl QuantBlock for BlockIQ3XXS {
    const TYPE: GgmlType = GgmlType::IQ3XXS;
    const BLOCK_SIZE: usize = QK_K;
}

impl QuantBlock for BlockIQ3S {
    const TYPE: GgmlType = GgmlType::IQ3S;
    const BLOCK_SIZE: usize = QK_K;
}

/// 8 values from two 4-value grid entries under one sign byte.
#[inline]
fn put8(y: &mut [f32], db: f32, g1: u32, g2: u32, signs: u8) {
    let sign = |j: usize| {
        if signs & KMASK_IQ2XS[j] != 0 {
            -1.0
        } else {
            1.0
        }
    };
    for (j, (a, b)) in g1
        .to_le_bytes()
        .into_iter()
        .zip(g2.to_le_bytes())
        .enumerate()
    {
        y[j] = db * a as f32 * sign(j);
        y[j + 4] = db * b as f32 * sign(j + 4);
    }
}

/// Dequantizes one IQ3_XXS block (ggml's `dequantize_row_iq3_xxs` body).
pub fn dequantize_block_iq3_xxs(b: &BlockIQ3XXS, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    let (qs, scales_and_signs) = b.qs.split_at(QK_K / 4);
    for ib32 in 0..QK_K / 32 {
        let s = &scales_and_signs[4 * ib32..4 * ib32 + 4];
        let aux = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
        for l in 0..4 {
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            let q = &qs[8 * ib32 + 2 * l..8 * ib32 + 2 * l + 2];
            let at = 32 * ib32 + 8 * l;
            put8(
                &mut y[at..at + 8],
                db,
                IQ3XXS_GRID[q[0] as usize],
                IQ3XXS_GRID[q[1] as usize],
                signs,
            );
        }
    }
}

/// Dequantizes one IQ3_S block (ggml's `dequantize_row_iq3_s` body).
pub fn dequantize_block_iq3_s(b: &BlockIQ3S, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    for ib64 in 0..QK_K / 64 {
        let sc = b.scales[ib64];
        for (half, scale) in [(0usize, sc & 0xf), (1, sc >> 4)] {
            // Per 32 values: 8 index bytes, one high-bit byte, 4 sign bytes.
            let ib32 = 2 * ib64 + half;
            let db = d * (1 + 2 * scale as i32) as f32;
            let qh = b.qh[ib32] as usize;
            for l in 0..4 {
                let q = &b.qs[8 * ib32 + 2 * l..8 * ib32 + 2 * l + 2];
                let i1 = q[0] as usize | ((qh << (8 - 2 * l)) & 256);
                let i2 = q[1] as usize | ((qh << (7 - 2 * l)) & 256);
                let at = 32 * ib32 + 8 * l;
                put8(
                    &mut y[at..at + 8],
                    db,
                    IQ3S_GRID[i1],
                    IQ3S_GRID[i2],
                    b.signs[4 * ib32 + l],
                );
            }
        }
    }
}

/// Dequantizes IQ3_XXS `blocks` into `out` (exactly `256 * blocks.len()` values).
pub fn dequantize_blocks_iq3_xxs(
    blocks: &[BlockIQ3XXS],
    out: &mut [f32],
) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block_iq3_xxs)
}

pub(crate) fn dequantize_bytes_iq3_xxs(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block_iq3_xxs)
}

pub(crate) fn dequantize_bytes_iq3_s(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block_iq3_s)
}
