//! GGUF for kestrel: a memory-mapped, zero-copy, validating reader; a writer; split models;
//! and the quant block layouts with scalar reference (de)quantization.
//!
//! - [`GgufFile`] opens one file, checks every length and offset in its header against the
//!   file, and hands out typed [`Metadata`] and [`TensorView`]s borrowing the mapping.
//! - [`GgufModel`] opens a model split over several files as one.
//! - [`GgufWriter`] writes files (tests, synthetic models, the quantizer).
//! - [`quant`] holds the `#[repr(C)]` block structs and scalar `dequantize`/`quantize`; the SIMD
//!   kernels in `kestrel-tensor` are tested against them.
//!
//! Hostile input gives a [`GgufError`] that names the offset, key or tensor; it never panics and
//! never allocates more than the file's size.

mod cursor;
pub mod error;
mod file;
mod ggml_type;
mod metadata;
pub mod models;
mod parse;
pub mod quant;
pub mod quantize;
mod split;
mod stream_writer;
mod tensor_info;
mod value;
mod writer;

pub use error::{GgufError, Result};
pub use file::{GgufFile, OpenOptions};
pub use ggml_type::GgmlType;
pub use metadata::Metadata;
pub use parse::{DEFAULT_ALIGNMENT, MAX_ARRAY_NESTING};
pub use split::{
    parse_split_path, split_path, GgufModel, KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT,
};
pub use stream_writer::{GgufStreamWriter, TensorSpec};
pub use tensor_info::{TensorInfo, TensorView, MAX_DIMS};
pub use value::{ArrayIter, ArrayView, MetadataValue, Value, ValueType};
pub use writer::GgufWriter;
