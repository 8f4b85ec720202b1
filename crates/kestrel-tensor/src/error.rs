//! `TensorError`: why a tensor operation was refused, naming the op and the sizes involved.
//!
//! Every check on caller-controlled input (shapes, lengths, ids, dtypes, parameters) returns one
//! of these instead of panicking.

use kestrel_gguf::quant::QuantError;
use kestrel_gguf::GgmlType;

use crate::{DType, Shape};

/// Result alias for this crate.
pub type Result<T, E = TensorError> = std::result::Result<T, E>;

/// An error from a tensor constructor or an op.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TensorError {
    /// Two tensors (or a tensor and what the op needs) disagree in shape.
    #[error("{op}: {what} has shape {actual}, expected {expected}")]
    ShapeMismatch {
        /// The op that checked.
        op: &'static str,
        /// Which operand.
        what: &'static str,
        /// The shape the op needs.
        expected: Shape,
        /// The shape given.
        actual: Shape,
    },
    /// A buffer has the wrong number of elements (slice-level kernels).
    #[error("{op}: {what} has {actual} elements, expected {expected}")]
    LengthMismatch {
        /// The op that checked.
        op: &'static str,
        /// Which operand.
        what: &'static str,
        /// Elements needed.
        expected: usize,
        /// Elements given.
        actual: usize,
    },
    /// The op has no kernel for this dtype.
    #[error("{op}: dtype {dtype} is not supported here")]
    UnsupportedDType {
        /// The op.
        op: &'static str,
        /// The dtype given.
        dtype: DType,
    },
    /// A GGUF tensor type kestrel cannot compute with.
    #[error("GGUF tensor type {0} has no kestrel dtype")]
    UnsupportedGgmlType(GgmlType),
    /// A row id (token id) is outside the table.
    #[error("{op}: id {id} at index {index} is out of range for {rows} rows")]
    IdOutOfRange {
        /// The op.
        op: &'static str,
        /// Position of the bad id in the id list.
        index: usize,
        /// The id.
        id: i64,
        /// Rows in the table.
        rows: usize,
    },
    /// A shape with too many dims, a zero-size block split, or an element count that overflows.
    #[error("invalid shape {dims:?}: {why}")]
    InvalidShape {
        /// The dims given (ggml order).
        dims: Vec<usize>,
        /// What is wrong.
        why: &'static str,
    },
    /// A row length is not a whole number of the dtype's blocks.
    #[error("{dtype}: row length {row_len} is not a multiple of the {block_size}-element block")]
    PartialBlock {
        /// The dtype.
        dtype: DType,
        /// Elements per row.
        row_len: usize,
        /// Elements per block.
        block_size: usize,
    },
    /// Shared storage does not hold the bytes the dtype and shape need.
    #[error(
        "storage range {start}..{end} of a {owner_len}-byte buffer cannot hold {needed} bytes"
    )]
    BadRange {
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
        /// Bytes in the owning buffer.
        owner_len: usize,
        /// Bytes the dtype and shape need.
        needed: usize,
    },
    /// Typed access to bytes that are not aligned for the element type.
    #[error("{op}: {dtype} data is not aligned for typed access")]
    Misaligned {
        /// The op.
        op: &'static str,
        /// The dtype.
        dtype: DType,
    },
    /// Mutable access to storage that borrows someone else's bytes (e.g. the mmapped file).
    #[error("{op}: the tensor borrows read-only shared storage")]
    ReadOnly {
        /// The op.
        op: &'static str,
    },
    /// An op parameter is out of its domain.
    #[error("{op}: invalid parameter: {why}")]
    InvalidParam {
        /// The op.
        op: &'static str,
        /// What is wrong.
        why: &'static str,
    },
    /// The rayon thread pool could not be built.
    #[error("cannot build the CPU thread pool: {0}")]
    ThreadPool(#[from] rayon::ThreadPoolBuildError),
    /// A scalar (de)quantization call failed.
    #[error(transparent)]
    Quant(#[from] QuantError),
    /// The CUDA engine failed (or is not built, or finds no GPU).
    #[error(transparent)]
    Cuda(#[from] crate::cuda::CudaError),
}
