//! The 1-bit IQ types: each group of 8 values is one entry of a fixed grid of -1/0/1 values,
//! shifted by ±1/8, times a 3-bit per-group scale. IQ1_S (1.56 bits per value: an f16 scale, 11-bit
//! grid indices, a scale and shift sign per 32 values) and IQ1_M (1.75: the f16 scale spread over
//! the top nibbles of four u16 scale words, a scale per 16 values and a shift sign per 8).
//! ggml's `block_iq1_s`, `block_iq1_m` and their `dequantize_row_*`. Dequantization only.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::common::{self, QuantBlock, QK_K};
use super::iq_grids::{IQ1S_DELTA, IQ1S_GRID};
use super::QuantError;
use crate::GgmlType;

/// One IQ1_S block: ggml's `block_iq1_s`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockIQ1S {
    /// Scale.
    pub d: f16,
    /// Low 8 bits of the 32 grid indices.
    pub qs: [u8; QK_K / 8],
    /// Per 32 values: 4 × 3 high index bits, a 3-bit scale, the shift's sign (bit 15).
    pub qh: [u16; QK_K / 32],
}

/// One IQ1_M block: ggml's `block_iq1_m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockIQ1M {
    /// Low 8 bits of the 32 grid indices.
    pub qs: [u8; QK_K / 8],
    /// Per 8 values: 3 high index bits and the shift's sign (a nibble).
    pub qh: [u8; QK_K / 16],
    /// Four little-endian u16: 3-bit scales per 16 values, the f16 scale in their top nibbles.
    pub scales: [u8; QK_K / 32],
}

const _: () = assert!(std::mem::size_of::<BlockIQ1S>() == 50);
const _: () = assert!(std::mem::size_of::<BlockIQ1M>() == 56);

impl QuantBlock for BlockIQ1S {
    const TYPE: GgmlType = GgmlType::IQ1S;
    const BLOCK_SIZE: usize = QK_K;
}

impl QuantBlock for BlockIQ1M {
    const TYPE: GgmlType = GgmlType::IQ1M;
    const BLOCK_SIZE: usize = QK_K;
}

/// 8 values `dl · (grid[j] + delta)` of grid entry `idx`.
#[inline]
fn put8(y: &mut [f32], dl: f32, idx: usize, delta: f32) {
    for (o, g) in y.iter_mut().zip(IQ1S_GRID[idx].to_le_bytes()) {
        *o = dl * (g as i8 as f32 + delta);
    }
}

/// Dequantizes one IQ1_S block (ggml's `dequantize_row_iq1_s` body).
pub fn dequantize_block_iq1_s(b: &BlockIQ1S, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    for ib in 0..QK_K / 32 {
        let qh = b.qh[ib] as usize;
        let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
        let delta = if qh & 0x8000 != 0 {
            -IQ1S_DELTA
        } else {
            IQ1S_DELTA
        };
        for l in 0..4 {
            let idx = b.qs[4 * ib + l] as usize | (((qh >> (3 * l)) & 7) << 8);
            let at = 32 * ib + 8 * l;
            put8(&mut y[at..at + 8], dl, idx, delta);
        }
    }
}

/// The f16 scale of an IQ1_M block, from the top nibbles of its four scale words.
pub fn iq1_m_scale(b: &BlockIQ1M) -> f32 {
    let sc = |i: usize| u16::from_le_bytes([b.scales[2 * i], b.scales[2 * i + 1]]);
    let bits = (sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000);
    f16::from_bits(bits).to_f32()
}

/// Dequantizes one IQ1_M block (ggml's `dequantize_row_iq1_m` body).
pub fn dequantize_block_iq1_m(b: &BlockIQ1M, y: &mut [f32; QK_K]) {
    let d = iq1_m_scale(b);
    let sc = |i: usize| u16::from_le_bytes([b.scales[2 * i], b.scales[2 * i + 1]]) as usize;
    for ib in 0..QK_K / 32 {
        let s = sc(ib / 2);
        let dl1 = d * (2 * ((s >> (6 * (ib % 2))) & 0x7) + 1) as f32;
        let dl2 = d * (2 * ((s >> (6 * (ib % 2) + 3)) & 0x7) + 1) as f32;
        let qs = &b.qs[4 * ib..4 * ib + 4];
        let (h0, h1) = (b.qh[2 * ib] as usize, b.qh[2 * ib + 1] as usize);
        let idx = [
            qs[0] as usize | ((h0 << 8) & 0x700),
            qs[1] as usize | ((h0 << 4) & 0x700),
            qs[2] as usize | ((h1 << 8) & 0x700),
            qs[3] as usize | ((h1 << 4) & 0x700),
        ];
        let shift = |h: usize, bit: usize| {
            if h & bit != 0 {
                -IQ1S_DELTA
            } else {
                IQ1S_DELTA
            }
        };
        let delta = [
            shift(h0, 0x08),
            shift(h0, 0x80),
            shift(h1, 0x08),
            shift(h1, 0x80),
        ];
        for l in 0..4 {
            let dl = if l < 2 { dl1 } else { dl2 };
            let at = 32 * ib + 8 * l;
            put8(&mut y[at..at + 8], dl, idx[l], delta[l]);
        }
    }
}

/// Dequantizes IQ1_S `blocks` into `out` (exactly `256 * blocks.len()` values).
pub fn dequantize_blocks_iq1_s(blocks: &[BlockIQ1S], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block_iq1_s)
}

pub(crate) fn dequantize_bytes_iq1_s(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block_iq1_s)
}

pub(crate) fn dequantize_bytes_iq1_m(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block_iq1_m)
}
