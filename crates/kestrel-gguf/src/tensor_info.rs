//! `TensorInfo`: one tensor's name, type, shape and where its bytes lie.

use crate::GgmlType;

/// The most dimensions a ggml tensor has.
pub const MAX_DIMS: usize = 4;

/// A tensor described by the file header, already validated: its data lies inside the file,
/// is aligned, and does not overlap another tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub(crate) name: String,
    pub(crate) n_dims: usize,
    pub(crate) dims: [u64; MAX_DIMS],
    pub(crate) ggml_type: GgmlType,
    /// Offset from the start of the data section.
    pub(crate) offset: u64,
    /// Absolute offset in the file.
    pub(crate) start: u64,
    pub(crate) n_bytes: u64,
}

impl TensorInfo {
    /// The tensor's name (e.g. `blk.0.attn_q.weight`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The shape in ggml order: `dims()[0]` is the row length (fastest-varying).
    pub fn dims(&self) -> &[u64] {
        &self.dims[..self.n_dims]
    }

    /// The element type.
    pub fn ggml_type(&self) -> GgmlType {
        self.ggml_type
    }

    /// Offset of the data from the start of the data section (as stored in the file).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Absolute offset of the data in the file.
    pub fn file_offset(&self) -> u64 {
        self.start
    }

    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims().iter().product()
    }

    /// Bytes of data.
    pub fn n_bytes(&self) -> u64 {
        self.n_bytes
    }

    /// Number of rows (product of every dim but the first).
    pub fn n_rows(&self) -> u64 {
        self.dims().iter().skip(1).product()
    }
}

/// A tensor and its bytes, borrowed from the file (zero-copy when the file is memory-mapped).
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    /// The header's description.
    pub info: &'a TensorInfo,
    /// The quantized or plain data, `info.n_bytes()` long.
    pub data: &'a [u8],
}
