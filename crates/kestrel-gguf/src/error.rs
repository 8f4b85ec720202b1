//! `GgufError`: everything that can go wrong opening or reading a GGUF file, with the offset or key.

use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T, E = GgufError> = std::result::Result<T, E>;

/// An error from reading, validating or writing a GGUF file.
///
/// Every variant names where the problem is: a byte offset, a metadata key or a tensor name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The file could not be opened, read or mapped.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Writing a GGUF file failed.
    #[error("writing GGUF: {0}")]
    Write(#[source] std::io::Error),
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: magic at offset 0 is {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The bytes found.
        found: Vec<u8>,
    },
    /// The file was written big-endian.
    #[error(
        "big-endian GGUF files are not supported (version field at offset 4 reads {raw:#010x})"
    )]
    BigEndian {
        /// The raw little-endian reading of the version field.
        raw: u32,
    },
    /// A GGUF version other than 2 or 3.
    #[error("GGUF version {version} is not supported (only versions 2 and 3 are){hint}")]
    UnsupportedVersion {
        /// The version in the header.
        version: u32,
        /// Extra advice.
        hint: &'static str,
    },
    /// The file ends before a field that the header says is there.
    #[error(
        "file truncated: reading {what} at offset {offset} needs {need} bytes, only {left} left"
    )]
    Truncated {
        /// What was being read.
        what: String,
        /// Where.
        offset: u64,
        /// Bytes needed.
        need: u64,
        /// Bytes left in the file.
        left: u64,
    },
    /// A count in the header is larger than the rest of the file could hold.
    #[error("{what} at offset {offset} is {count}, more than the {left} remaining bytes can hold")]
    CountTooLarge {
        /// What was counted.
        what: String,
        /// Where the count was read.
        offset: u64,
        /// The count.
        count: u64,
        /// Bytes left after the count.
        left: u64,
    },
    /// A metadata value type id outside the GGUF spec.
    #[error("unknown metadata value type {type_id} at offset {offset} (key {key:?})")]
    UnknownValueType {
        /// The type id read.
        type_id: u32,
        /// Where.
        offset: u64,
        /// The key being read.
        key: String,
    },
    /// Arrays nested deeper than the reader allows.
    #[error("metadata key {key:?}: arrays nested deeper than {max} levels at offset {offset}")]
    NestingTooDeep {
        /// The key.
        key: String,
        /// Where.
        offset: u64,
        /// The limit.
        max: usize,
    },
    /// A key or tensor name that is not UTF-8.
    #[error("{what} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// What the string is.
        what: String,
        /// Where.
        offset: u64,
    },
    /// The same metadata key twice.
    #[error("duplicate metadata key {key:?} at offset {offset}")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Where the second one starts.
        offset: u64,
    },
    /// The same tensor name twice.
    #[error("duplicate tensor name {name:?} at offset {offset}")]
    DuplicateTensor {
        /// The name.
        name: String,
        /// Where the second one starts.
        offset: u64,
    },
    /// A tensor type id ggml does not define.
    #[error("tensor {name:?}: unknown ggml type id {type_id} at offset {offset}")]
    UnknownTensorType {
        /// The tensor.
        name: String,
        /// The type id.
        type_id: u32,
        /// Where.
        offset: u64,
    },
    /// A tensor shape the format does not allow.
    #[error("tensor {name:?}: {reason}")]
    BadShape {
        /// The tensor.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// `general.alignment` is zero or not a power of two.
    #[error("general.alignment is {0}, it must be a non-zero power of two")]
    BadAlignment(u64),
    /// A tensor's offset is not a multiple of the alignment.
    #[error(
        "tensor {name:?}: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        /// The tensor.
        name: String,
        /// Its offset from the start of the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor's data lies outside the file.
    #[error("tensor {name:?}: data [{start}, {end}) lies outside the file ({file_len} bytes; data section starts at {data_start})")]
    TensorOutOfBounds {
        /// The tensor.
        name: String,
        /// Absolute start offset.
        start: u64,
        /// Absolute end offset.
        end: u64,
        /// Where the data section starts.
        data_start: u64,
        /// File length.
        file_len: u64,
    },
    /// Two tensors share bytes.
    #[error("tensors {first:?} and {second:?} overlap at offset {offset}")]
    TensorOverlap {
        /// The earlier tensor.
        first: String,
        /// The later tensor.
        second: String,
        /// Absolute offset where the second starts.
        offset: u64,
    },
    /// A metadata key that was asked for is not there.
    #[error("metadata key {key:?} is missing")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A metadata key holds another type than asked for.
    #[error("metadata key {key:?} holds {found}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// What the caller asked for.
        expected: &'static str,
        /// What the file holds.
        found: String,
    },
    /// A tensor that was asked for is not there.
    #[error("tensor {name:?} not found")]
    MissingTensor {
        /// The tensor.
        name: String,
    },
    /// A split model whose shards do not fit together.
    #[error("split model {path}: {reason}")]
    Split {
        /// The shard path involved.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Something a writer was asked to write that GGUF cannot hold.
    #[error("cannot write GGUF: {0}")]
    InvalidWrite(String),
}
