//! F32, F16 and BF16: the unquantized element types, converted to and from `f32` as ggml does
//! (`ggml_fp16_to_fp32`, `ggml_compute_bf16_to_fp32`, `ggml_compute_fp32_to_bf16`). Byte
//! buffers are little-endian and may sit at any alignment.

use half::{bf16, f16};

use super::common::check_bytes;
use super::error::{QuantError, QuantOp};
use crate::GgmlType;

/// Checks that two typed buffers have the same length.
fn check_same(ty: GgmlType, op: QuantOp, blocks: usize, values: usize) -> Result<(), QuantError> {
    if blocks != values {
        return Err(QuantError::BlockCount {
            ty,
            op,
            blocks,
            block_values: blocks,
            values,
        });
    }
    Ok(())
}

/// Converts one bf16 to f32 exactly (ggml's `ggml_compute_bf16_to_fp32`: the bits shifted up).
#[inline]
pub fn bf16_to_f32(h: bf16) -> f32 {
    f32::from_bits((h.to_bits() as u32) << 16)
}

/// Converts one f32 to bf16 as ggml's `ggml_compute_fp32_to_bf16` does: round to nearest even,
/// NaN kept NaN with the quiet bit set.
#[inline]
pub fn f32_to_bf16(x: f32) -> bf16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return bf16::from_bits(((u >> 16) | 64) as u16);
    }
    bf16::from_bits((u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16)
}

/// Widens f16 values to f32 (exact). `out` must be as long as `src`.
pub fn dequantize_f16(src: &[f16], out: &mut [f32]) -> Result<(), QuantError> {
    check_same(GgmlType::F16, QuantOp::Dequantize, src.len(), out.len())?;
    for (y, &h) in out.iter_mut().zip(src) {
        *y = h.to_f32();
    }
    Ok(())
}

/// Widens bf16 values to f32 (exact). `out` must be as long as `src`.
pub fn dequantize_bf16(src: &[bf16], out: &mut [f32]) -> Result<(), QuantError> {
    check_same(GgmlType::BF16, QuantOp::Dequantize, src.len(), out.len())?;
    for (y, &h) in out.iter_mut().zip(src) {
        *y = bf16_to_f32(h);
    }
    Ok(())
}

/// Rounds f32 values to f16 (nearest, ties to even). `out` must be as long as `src`.
pub fn quantize_f16(src: &[f32], out: &mut [f16]) -> Result<(), QuantError> {
    check_same(GgmlType::F16, QuantOp::Quantize, out.len(), src.len())?;
    for (h, &x) in out.iter_mut().zip(src) {
        *h = f16::from_f32(x);
    }
    Ok(())
}

/// Rounds f32 values to bf16 with [`f32_to_bf16`]. `out` must be as long as `src`.
pub fn quantize_bf16(src: &[f32], out: &mut [bf16]) -> Result<(), QuantError> {
    check_same(GgmlType::BF16, QuantOp::Quantize, out.len(), src.len())?;
    for (h, &x) in out.iter_mut().zip(src) {
        *h = f32_to_bf16(x);
    }
    Ok(())
}

pub(crate) fn dequantize_bytes(
    ty: GgmlType,
    data: &[u8],
    out: &mut [f32],
) -> Result<(), QuantError> {
    check_bytes(ty, QuantOp::Dequantize, out.len(), data.len())?;
    match ty {
        GgmlType::F32 => {
            for (y, b) in out.iter_mut().zip(data.chunks_exact(4)) {
                *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => {
            for (y, b) in out.iter_mut().zip(data.chunks_exact(2)) {
                *y = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (y, b) in out.iter_mut().zip(data.chunks_exact(2)) {
                *y = bf16_to_f32(bf16::from_bits(u16::from_le_bytes([b[0], b[1]])));
            }
        }
        _ => {
            return Err(QuantError::Unsupported {
                ty,
                op: QuantOp::Dequantize,
            })
        }
    }
    Ok(())
}

pub(crate) fn quantize_bytes(ty: GgmlType, src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    check_bytes(ty, QuantOp::Quantize, src.len(), out.len())?;
    match ty {
        GgmlType::F32 => {
            for (b, &x) in out.chunks_exact_mut(4).zip(src) {
                b.copy_from_slice(&x.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (b, &x) in out.chunks_exact_mut(2).zip(src) {
                b.copy_from_slice(&f16::from_f32(x).to_bits().to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for (b, &x) in out.chunks_exact_mut(2).zip(src) {
                b.copy_from_slice(&f32_to_bf16(x).to_bits().to_le_bytes());
            }
        }
        _ => {
            return Err(QuantError::Unsupported {
                ty,
                op: QuantOp::Quantize,
            })
        }
    }
    Ok(())
}
