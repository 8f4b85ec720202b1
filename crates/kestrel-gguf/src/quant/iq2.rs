//! The 2-bit IQ types: each group of 8 values is one entry of a fixed grid of magnitudes with 8
//! sign bits, times a per-32-value scale. IQ2_XXS (2.06 bits per value: 8-bit grid indices, 7
//! sign bits expanded through `ksigns_iq2xs`, a 4-bit scale per 32 values), IQ2_XS (2.31: 9-bit
//! indices, a 4-bit scale per 16 values) and IQ2_S (2.56: 10-bit indices, explicit sign bytes).
//! ggml's `block_iq2_xxs`, `block_iq2_xs`, `block_iq2_s` and their `dequantize_row_*`.
//! Dequantization only (ggml's quantizers need an importance matrix and a grid search).

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, QuantBlock, QK_K};
use super::iq_grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS};
use super::QuantError;
use crate::GgmlType;

/// One IQ2_XXS block: ggml's `block_iq2_xxs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockIQ2XXS {
    /// Scale.
    pub d: f16,
    /// Per 32 values, two u32: 4 grid indices (bytes), then 4 × 7 sign bits and a 4-bit scale.
    pub qs: [u16; QK_K / 8],
}

/// One IQ2_XS block: ggml's `block_iq2_xs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockIQ2XS {
    /// Scale.
    pub d: f16,
    /// Per 8 values: a 9-bit grid index and 7 sign bits.
    pub qs: [u16; QK_K / 8],
    /// Two 4-bit scales per 32 values.
    pub scales: [u8; QK_K / 32],
}

/// One IQ2_S block: ggml's `block_iq2_s`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockIQ2S {
    /// Scale.
    pub d: f16,
    /// Low 8 bits of the grid indices (first half), then the sign bytes (second half).
    pub qs: [u8; QK_K / 4],
    /// High 2 bits of the indices of each 32 values' 4 groups.
    pub qh: [u8; QK_K / 32],
    /// Two 4-bit scales per 32 values.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIQ2XXS>() == 66);
const _: () = assert!(std::mem::size_of::<BlockIQ2XS>() == 74);
const _: () = assert!(std::mem::size_of::<BlockIQ2S>() == 82);

impl QuantBlock for BlockIQ2XXS {
    const TYPE: GgmlType = GgmlType::IQ2XXS;
    const BLOCK_SIZE: usize = QK_K;
}

impl QuantBlock for BlockIQ2XS {
    const TYPE: GgmlType = GgmlType::IQ2XS;
    const BLOCK_SIZE: usize = QK_K;
}

impl QuantBlock for BlockIQ2S {
    const TYPE: GgmlType = GgmlType::IQ2S;
    const BLOCK_SIZE: usize = QK_K;
}

/// 8 values `db · grid[j] · ±1` of one grid entry under a sign byte.
#[inline]
fn put8(y: &mut [f32], db: f32, entry: u64, signs: u8) {
    for (j, (o, g)) in y.iter_mut().zip(entry.to_le_bytes()).enumerate() {
        *o = db
            * g as f32
            * if signs & KMASK_IQ2XS[j] != 0 {
                -1.0
            } else {
                1.0
            };
    }
}

/// Dequantizes one IQ2_XXS block (ggml's `dequantize_row_iq2_xxs` body).
pub fn dequantize_block_iq2_xxs(b: &BlockIQ2XXS, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    for ib32 in 0..QK_K / 32 {
        let q = &b.qs[4 * ib32..4 * ib32 + 4];
        let aux0 = q[0] as u32 | (q[1] as u32) << 16;
        let aux1 = q[2] as u32 | (q[3] as u32) << 16;
        let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
        for (l, idx) in aux0.to_le_bytes().into_iter().enumerate() {
            let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize];
            let at = 32 * ib32 + 8 * l;
            put8(&mut y[at..at + 8], db, IQ2XXS_GRID[idx as usize], signs);
        }
    }
}

/// Dequantizes one IQ2_XS block (ggml's `dequantize_row_iq2_xs` body).
pub fn dequantize_block_iq2_xs(b: &BlockIQ2XS, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    for ib32 in 0..QK_K / 32 {
        let sc = b.scales[ib32];
        let db = [
            d * (0.5 + (sc & 0xf) as f32) * 0.25,
            d * (0.5 + (sc >> 4) as f32) * 0.25,
        ];
        for l in 0..4 {
            let q = b.qs[4 * ib32 + l];
            let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
            let at = 32 * ib32 + 8 * l;
            put8(
                &mut y[at..at + 8],
                db[l / 2],
                IQ2XS_GRID[(q & 511) as usize],
                signs,
            );
        }
    }
}

/// Dequantizes one IQ2_S block (ggml's `dequantize_row_iq2_s` body).
pub fn dequantize_block_iq2_s(b: &BlockIQ2S, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    let (qs, signs) = b.qs.split_at(QK_K / 8);
    for ib32 in 0..QK_K / 32 {
        let sc = b.scales[ib32];
        let db = [
            d * (0.5 + (sc & 0xf) as f32) * 0.25,
            d * (0.5 + (sc >> 4) as f32) * 0.25,
        ];
        for l in 0..4 {
            let idx = qs[4 * ib32 + l] as usize | ((b.qh[ib32] as usize) << (8 - 2 * l)) & 0x300;
            let at = 32 * ib32 + 8 * l;
            put8(
                &mut y[at..at + 8],
                db[l / 2],
                IQ2S_GRID[idx],
                signs[4 * ib32 + l],
            );
        }
    }
}

/// Dequantizes IQ2_XXS `blocks` into `out` (exactly `256 * blocks.len()` values).
pub fn dequantize_blocks_iq2_xxs(
    blocks: &[BlockIQ2XXS],
    out: &mut [f32],
) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block_iq2_xxs)
}

pub(crate) fn dequantize_bytes_iq2_xxs(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block_iq2_xxs)
}

pub(crate) fn dequantize_bytes_iq2_xs(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block_iq2_xs)
}

pub(crate) fn dequantize_bytes_iq2_s(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block_iq2_s)
}
