//! MXFP4 (OCP microscaling, gpt-oss's experts): blocks of 32 values stored as one E8M0 scale byte
//! and 4-bit E2M1 codes, `value = kvalue[q] * 2^(e - 128)` where the table holds twice the E2M1
//! values (ggml's `block_mxfp4`, `kvalues_mxfp4`, `ggml_e8m0_to_fp32_half`,
//! `dequantize_row_mxfp4`), and ggml's reference quantizer (`quantize_row_mxfp4_ref`).

use bytemuck::{Pod, Zeroable};

use super::common::{self, QuantBlock};
use super::QuantError;
use crate::GgmlType;

/// Values per MXFP4 block (ggml's `QK_MXFP4`).
pub const QK_MXFP4: usize = 32;

/// The 16 E2M1 values, doubled (ggml's `kvalues_mxfp4`).
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// One MXFP4 block: ggml's `block_mxfp4`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockMXFP4 {
    /// E8M0 scale: `2^(e - 127)`.
    pub e: u8,
    /// Codes: byte `j` holds value `j` (low nibble) and value `j + 16` (high nibble).
    pub qs: [u8; QK_MXFP4 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockMXFP4>() == 17);

impl QuantBlock for BlockMXFP4 {
    const TYPE: GgmlType = GgmlType::MXFP4;
    const BLOCK_SIZE: usize = QK_MXFP4;
}

/// Half the E8M0 scale, `2^(e - 128)`, bit for bit as ggml's `ggml_e8m0_to_fp32_half` (the
/// subnormal patterns for `e < 2`).
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

/// Dequantizes one block (ggml's `dequantize_row_mxfp4` body).
pub fn dequantize_block(b: &BlockMXFP4, y: &mut [f32; QK_MXFP4]) {
    let d = e8m0_to_f32_half(b.e);
    for j in 0..QK_MXFP4 / 2 {
        y[j] = KVALUES_MXFP4[(b.qs[j] & 0xf) as usize] as f32 * d;
        y[j + QK_MXFP4 / 2] = KVALUES_MXFP4[(b.qs[j] >> 4) as usize] as f32 * d;
    }
}

/// Dequantizes `blocks` into `out`, which must hold exactly `32 * blocks.len()` values.
pub fn dequantize_blocks(blocks: &[BlockMXFP4], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_blocks(blocks, out, dequantize_block)
}

pub(crate) fn dequantize_bytes(data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    common::dequantize_bytes(data, out, dequantize_block)
}

/// The code nearest `x` at half-scale `d`, the first of equals (ggml's `best_index_mxfp4`).
fn best_index(x: f32, d: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (KVALUES_MXFP4[0] as f32 * d - x).abs();
    for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (k as f32 * d - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

/// Quantizes one block (ggml's `quantize_row_mxfp4_ref` body): the exponent
/// `floor(log2(amax)) - 2 + 127` (0 for an all-zero block), each value to its nearest code.
pub fn quantize_block(x: &[f32; QK_MXFP4]) -> BlockMXFP4 {
    let amax = x
        .iter()
        .fold(0f32, |m, &v| if m < v.abs() { v.abs() } else { m });
    // Out-of-range exponents saturate (ggml's cast is undefined there).
    let e = if amax > 0.0 {
        (amax.log2().floor() - 2.0 + 127.0) as u8
    } else {
        0
    };
    let d = e8m0_to_f32_half(e);
    let mut qs = [0u8; QK_MXFP4 / 2];
    for (j, q) in qs.iter_mut().enumerate() {
        *q = best_index(x[j], d) | (best_index(x[j + QK_MXFP4 / 2], d) << 4);
    }
    BlockMXFP4 { e, qs }
}

pub(crate) fn quantize_bytes(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    common::quantize_bytes(src, out, quantize_block)
}
