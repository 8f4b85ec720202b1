//! `QuantError`: why a (de)quantization call was refused, naming the type, the side and the sizes.

use crate::GgmlType;

/// Which direction a (de)quantization call runs, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuantOp {
    /// Quantized blocks to `f32`.
    Dequantize,
    /// `f32` to quantized blocks.
    Quantize,
}

impl std::fmt::Display for QuantOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuantOp::Dequantize => "dequantize",
            QuantOp::Quantize => "quantize",
        })
    }
}

/// An error from [`dequantize`](super::dequantize), [`quantize`](super::quantize) or a per-type
/// block function. Nothing is written to the output when one is returned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantError {
    /// kestrel has no scalar implementation of this operation for the type.
    #[error("{op} {ty}: not supported for this tensor type")]
    Unsupported {
        /// The tensor type asked for.
        ty: GgmlType,
        /// The operation asked for.
        op: QuantOp,
    },
    /// The `f32` side does not hold a whole number of blocks.
    #[error(
        "{op} {ty}: the f32 buffer has {values} values, not a multiple of the {block_size}-value block"
    )]
    PartialBlock {
        /// The tensor type.
        ty: GgmlType,
        /// The operation.
        op: QuantOp,
        /// Values in the `f32` buffer.
        values: usize,
        /// Values per block of `ty`.
        block_size: usize,
    },
    /// The quantized byte buffer is not exactly the size the `f32` side needs.
    #[error(
        "{op} {ty}: the quantized buffer has {actual} bytes, but {values} values take exactly \
         {expected} bytes ({blocks} blocks of {type_size} bytes)"
    )]
    ByteLength {
        /// The tensor type.
        ty: GgmlType,
        /// The operation.
        op: QuantOp,
        /// Values in the `f32` buffer.
        values: usize,
        /// Blocks those values make.
        blocks: usize,
        /// Bytes per block of `ty`.
        type_size: usize,
        /// Bytes required (`blocks * type_size`; `usize::MAX` if that overflows).
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A typed block slice does not match the `f32` buffer.
    #[error(
        "{op} {ty}: {blocks} blocks hold {block_values} values, but the f32 buffer has {values}"
    )]
    BlockCount {
        /// The tensor type.
        ty: GgmlType,
        /// The operation.
        op: QuantOp,
        /// Blocks given.
        blocks: usize,
        /// Values those blocks hold (`usize::MAX` if that overflows).
        block_values: usize,
        /// Values in the `f32` buffer.
        values: usize,
    },
}
