//! Q8_K: super-blocks of 256 values stored as an f32 scale, signed 8-bit quants and the sums of
//! each 16 quants, `value = d * q` (ggml's `block_q8_K`, `dequantize_row_q8_K`,
//! `quantize_row_q8_K_ref`). It is the activation format dotted with K-quant weights.

use bytemuck::{Pod, Zeroable};

use super::common::{self, nearest_int, QuantBlock, QK_K};
use super::QuantError;
use crate::GgmlType;

/// One Q8_K super-block: ggml's `block_q8_K`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8K {
    /// Scale.
    pub d: f32,
    /// Quants, one per value.
    pub qs: [i8; QK_K],
    /// Sum of each group of 16 quants.
    pub bsums: [i16; QK_K / 16],
}

const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);

impl QuantBlock for BlockQ8K {
    const TYPE: GgmlType = GgmlType::Q8K;
    const BLOCK_SIZE: usize = QK_K;
}

/// Dequantizes one super-block (ggml's `dequantize_row_q8_K` body); `bsums` is not read.
pub fn dequantize_block(b: &BlockQ8K, y: &mut [f32; QK_K]) {
    for (y, &q) in y.iter_mut().zip(&b.qs) {
        *y = b.d * q as f32;
    }
}

/// Quantizes one super-block (ggml's `quantize_row_q8_K_ref` body): the value of largest
/// magnitude maps to -127, quants are rounded half to even. An all-zero block gets `d = 0`
/// and zero quants and sums.
pub fn quantize_block(x: &[f32; QK_K]) -> BlockQ8K {
    let mut out = BlockQ8K::zeroed();
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax == 0.0 {
        return out;
    }
    let iscale = -127.0 / max;
    for (q, &v) in out.qs.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).min(127) as i8;
    }
    for (s, group) in out.bsums.iter_mut().zip(out.qs.chunks_exact(16)) {
        *s = group.iter().map(|&q| q as i16).sum();
    }
    out.d = 1.0 / iscale;
    out
}

/// Dequantizes `blocks` into `out`, which must hold exactly `256 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockQ8K], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

/// Quantizes `src` into `out`, which must hold exactly `src.len() / 256` blocks.
pub fn quantize_row(src: &[f32], out: &mut [BlockQ8K]) -> Result<(), QuantError> {
    common::quantize_blocks(src, out, quantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}

pub(crate) fn quantize_bytes(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block)
}
