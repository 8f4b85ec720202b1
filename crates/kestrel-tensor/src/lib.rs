//! Tensors, dtypes and compute engines for kestrel.
//!
//! Status: early. The quant block layouts and their scalar reference (de)quantization live in
//! `kestrel-gguf` (they are the file format's definition of what the bytes mean) and are
//! re-exported here as [`quant`], so engine code reads `kestrel_tensor::quant`. The `Tensor`
//! type, `DType`, the `Engine` trait, the rayon + SIMD `CpuEngine` and the CUDA engine come next.

pub use kestrel_gguf::quant;
pub use kestrel_gguf::GgmlType;
