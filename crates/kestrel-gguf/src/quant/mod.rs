//! Quant block layouts and scalar reference (de)quantization, bit-exact with ggml.
//!
//! Each submodule is one ggml quant family: a `#[repr(C)]` block struct mirroring ggml's
//! `block_*` (fields public, size checked at compile time), `dequantize_block` /
//! `dequantize_blocks` ported from ggml's `dequantize_row_*`, and where supported
//! `quantize_block` / `quantize_row` ported from `quantize_row_*_ref`. These are the scalar
//! references that SIMD and GPU kernels are tested against.
//!
//! [`dequantize`] and [`quantize`] dispatch on a [`GgmlType`] over raw little-endian bytes,
//! such as a tensor's slice of a memory-mapped GGUF file; the bytes may sit at any alignment.
//!
//! Floating-point results follow ggml's C expression by expression in `f32`, without fused
//! multiply-add (as ggml's portable build and the `gguf` Python package compute them).
//!
//! ```
//! use kestrel_gguf::quant::{dequantize, quantize};
//! use kestrel_gguf::GgmlType;
//!
//! let x: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) / 8.0).collect();
//! let mut q = vec![0u8; GgmlType::Q8_0.type_size() * 2];
//! quantize(GgmlType::Q8_0, &x, &mut q).unwrap();
//! let mut y = vec![0f32; 64];
//! dequantize(GgmlType::Q8_0, &q, &mut y).unwrap();
//! assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() < 0.02));
//! ```

mod common;
mod error;

pub mod float;
pub mod iq1;
mod iq1_quantize;
pub mod iq2;
mod iq2_quantize;
pub mod iq3;
mod iq3_quantize;
pub mod iq4_nl;
mod iq4_quantize;
pub mod iq4_xs;
mod iq_grid_search;
pub mod iq_grids;
pub mod mxfp4;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_k;
pub mod tq;
pub mod weighted;

#[cfg(test)]
mod tests;

pub use common::{get_scale_min_k4, QuantBlock, K_SCALE_SIZE, QK_K};
pub use error::{QuantError, QuantOp};
pub use iq1::{BlockIQ1M, BlockIQ1S};
pub use iq2::{BlockIQ2S, BlockIQ2XS, BlockIQ2XXS};
pub use iq3::{BlockIQ3S, BlockIQ3XXS};
pub use iq4_nl::BlockIQ4NL;
pub use iq4_quantize::{quantize_block_iq4_nl, quantize_block_iq4_xs};
pub use iq4_xs::BlockIQ4XS;
pub use mxfp4::BlockMXFP4;
pub use q2_k::BlockQ2K;
pub use q3_k::BlockQ3K;
pub use q4_0::BlockQ4_0;
pub use q4_1::BlockQ4_1;
pub use q4_k::BlockQ4K;
pub use q5_0::BlockQ5_0;
pub use q5_1::BlockQ5_1;
pub use q5_k::BlockQ5K;
pub use q6_k::BlockQ6K;
pub use q8_0::BlockQ8_0;
pub use q8_k::BlockQ8K;
pub use tq::{BlockTQ1_0, BlockTQ2_0};

use crate::GgmlType;

// The block structs are cast straight from file bytes, which GGUF stores little-endian.
const _: () = assert!(
    cfg!(target_endian = "little"),
    "kestrel_gguf::quant reads little-endian blocks in place"
);

/// True if [`dequantize`] supports `ty`.
pub fn can_dequantize(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q2K
            | GgmlType::Q3K
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
            | GgmlType::Q8K
            | GgmlType::IQ4NL
            | GgmlType::IQ4XS
            | GgmlType::MXFP4
            | GgmlType::TQ1_0
            | GgmlType::TQ2_0
            | GgmlType::IQ2XXS
            | GgmlType::IQ2XS
            | GgmlType::IQ2S
            | GgmlType::IQ3XXS
            | GgmlType::IQ3S
            | GgmlType::IQ1S
            | GgmlType::IQ1M
    )
}

/// True if [`quantize`] supports `ty`.
pub fn can_quantize(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q2K
            | GgmlType::Q3K
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
            | GgmlType::Q8K
            | GgmlType::MXFP4
            | GgmlType::TQ1_0
            | GgmlType::TQ2_0
    )
}

/// Dequantizes `data`, raw little-endian blocks of type `ty`, into `out`.
///
/// `out.len()` must be a whole number of `ty.block_size()` blocks and `data` exactly
/// `out.len() / ty.block_size() * ty.type_size()` bytes. `data` may sit at any alignment.
/// Results are bit-identical to ggml's `dequantize_row_*` (see the module docs).
///
/// # Errors
/// [`QuantError::Unsupported`] if [`can_dequantize`] is false, [`QuantError::PartialBlock`] or
/// [`QuantError::ByteLength`] for mismatched lengths; `out` is untouched then.
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => float::dequantize_bytes(ty, data, out),
        GgmlType::Q4_0 => q4_0::dequantize_bytes(data, out),
        GgmlType::Q4_1 => q4_1::dequantize_bytes(data, out),
        GgmlType::Q5_0 => q5_0::dequantize_bytes(data, out),
        GgmlType::Q5_1 => q5_1::dequantize_bytes(data, out),
        GgmlType::Q8_0 => q8_0::dequantize_bytes(data, out),
        GgmlType::Q2K => q2_k::dequantize_bytes(data, out),
        GgmlType::Q3K => q3_k::dequantize_bytes(data, out),
        GgmlType::Q4K => q4_k::dequantize_bytes(data, out),
        GgmlType::Q5K => q5_k::dequantize_bytes(data, out),
        GgmlType::Q6K => q6_k::dequantize_bytes(data, out),
        GgmlType::Q8K => q8_k::dequantize_bytes(data, out),
        GgmlType::IQ4NL => iq4_nl::dequantize_bytes(data, out),
        GgmlType::IQ4XS => iq4_xs::dequantize_bytes(data, out),
        GgmlType::MXFP4 => mxfp4::dequantize_bytes(data, out),
        GgmlType::TQ1_0 => tq::dequantize_bytes_tq1_0(data, out),
        GgmlType::TQ2_0 => tq::dequantize_bytes_tq2_0(data, out),
        GgmlType::IQ2XXS => iq2::dequantize_bytes_iq2_xxs(data, out),
        GgmlType::IQ2XS => iq2::dequantize_bytes_iq2_xs(data, out),
        GgmlType::IQ2S => iq2::dequantize_bytes_iq2_s(data, out),
        GgmlType::IQ3XXS => iq3::dequantize_bytes_iq3_xxs(data, out),
        GgmlType::IQ3S => iq3::dequantize_bytes_iq3_s(data, out),
        GgmlType::IQ1S => iq1::dequantize_bytes_iq1_s(data, out),
        GgmlType::IQ1M => iq1::dequantize_bytes_iq1_m(data, out),
        _ => Err(QuantError::Unsupported {
            ty,
            op: QuantOp::Dequantize,
        }),
    }
}

/// Whether [`quantize_chunk`] can write `ty`.
pub fn can_quantize_chunk(ty: GgmlType) -> bool {
    can_quantize(ty)
        || matches!(
            ty,
            GgmlType::IQ4NL
                | GgmlType::IQ4XS
                | GgmlType::IQ3XXS
                | GgmlType::IQ3S
                | GgmlType::IQ2S
                | GgmlType::IQ1M
        )
}

/// Quantizes `src` into `out` as `llama-quantize` does (ggml's `ggml_quantize_chunk` without
/// an importance matrix): the reference algorithm of [`quantize`] for the types that have one
/// in that path, IQ4_NL and IQ4_XS with ggml's 7 scale trials per block, and IQ3_XXS and
/// IQ3_S with their grid searches.
///
/// # Errors
/// As [`quantize`].
pub fn quantize_chunk(ty: GgmlType, src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    match ty {
        GgmlType::IQ4NL | GgmlType::IQ4XS => iq4_quantize::quantize_bytes(ty, src, out),
        GgmlType::IQ3XXS | GgmlType::IQ3S => iq3_quantize::quantize_bytes(ty, src, out, None),
        GgmlType::IQ2S => iq2_quantize::quantize_bytes(ty, src, out, None),
        GgmlType::IQ1M => iq1_quantize::quantize_bytes(ty, src, out, None),
        _ => quantize(ty, src, out),
    }
}

/// Quantizes `src` into `out` as raw little-endian blocks of type `ty`, with ggml's reference
/// (`quantize_row_*_ref`) algorithm: no importance matrix.
///
/// `src.len()` must be a whole number of `ty.block_size()` blocks and `out` exactly
/// `src.len() / ty.block_size() * ty.type_size()` bytes. `out` may sit at any alignment.
/// Non-finite input gives unspecified (but memory-safe) blocks, as in ggml.
///
/// # Errors
/// [`QuantError::Unsupported`] if [`can_quantize`] is false, [`QuantError::PartialBlock`] or
/// [`QuantError::ByteLength`] for mismatched lengths; `out` is untouched then.
pub fn quantize(ty: GgmlType, src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => float::quantize_bytes(ty, src, out),
        GgmlType::Q4_0 => q4_0::quantize_bytes(src, out),
        GgmlType::Q4_1 => q4_1::quantize_bytes(src, out),
        GgmlType::Q5_0 => q5_0::quantize_bytes(src, out),
        GgmlType::Q5_1 => q5_1::quantize_bytes(src, out),
        GgmlType::Q8_0 => q8_0::quantize_bytes(src, out),
        GgmlType::Q2K => q2_k::quantize_bytes(src, out),
        GgmlType::Q3K => q3_k::quantize_bytes(src, out),
        GgmlType::Q4K => q4_k::quantize_bytes(src, out),
        GgmlType::Q5K => q5_k::quantize_bytes(src, out),
        GgmlType::Q6K => q6_k::quantize_bytes(src, out),
        GgmlType::Q8K => q8_k::quantize_bytes(src, out),
        GgmlType::MXFP4 => mxfp4::quantize_bytes(src, out),
        GgmlType::TQ1_0 => tq::quantize_bytes_tq1_0(src, out),
        GgmlType::TQ2_0 => tq::quantize_bytes_tq2_0(src, out),
        _ => Err(QuantError::Unsupported {
            ty,
            op: QuantOp::Quantize,
        }),
    }
}
