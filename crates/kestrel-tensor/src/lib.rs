//! Tensors, dtypes and compute engines for kestrel.
//!
//! - [`DType`]: F32, F16, BF16 and the GGUF quant block types.
//! - [`Shape`] (ggml order, up to 4 dims) and [`Tensor`]: dtype + shape + [`Storage`], which is
//!   either owned (64-byte aligned) or a range of bytes kept alive by an `Arc` (weights viewing
//!   the mmapped model file; quantized weights are never expanded).
//! - [`cpu`]: the CPU kernels over slices (matmul/matvec for every weight dtype, get_rows,
//!   rms/layer norm, rope incl. YaRN, softmax, flash-style attention, activations, argmax).
//! - [`cuda`]: the CUDA engine (feature `cuda`; a stub that says so without it), and
//!   [`Device`]/[`DeviceRequest`] (`cpu`, `cuda:N`, `auto`).
//! - [`Engine`]: the ops over tensors, object-safe; [`CpuEngine`] runs the CPU kernels in its own
//!   rayon pool.
//!
//! The quant block layouts and their scalar reference (de)quantization live in `kestrel-gguf`
//! (they are the file format's definition of what the bytes mean) and are re-exported here as
//! [`quant`].

pub mod cpu;
pub mod cuda;
mod device;
mod dtype;
mod engine;
mod error;
mod shape;
mod storage;
mod tensor;

pub use device::{Device, DeviceRequest, ParseDeviceError};
pub use dtype::DType;
pub use engine::{CpuEngine, Engine};
pub use error::{Result, TensorError};
pub use kestrel_gguf::quant;
pub use kestrel_gguf::GgmlType;
pub use shape::{Shape, MAX_DIMS};
pub use storage::{AlignedBuf, ByteOwner, Storage, ALIGN};
pub use tensor::Tensor;
