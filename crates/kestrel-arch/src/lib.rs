//! Architectures for kestrel: read a GGUF file's metadata into a typed [`DecoderConfig`] and
//! build one step of the model as a `kestrel-graph` graph ([`build_decoder`]).
//!
//! A registry keyed by `general.architecture` ([`list_architectures`], [`ArchKind::detect`])
//! says what each family does differently — RoPE style, norms, activation, biases, sliding
//! window — reading only the metadata keys llama.cpp reads for that family. An architecture not
//! in the registry is an [`ArchError::Unsupported`] listing what is supported: kestrel never runs
//! a file as a family it has not been checked against (the `llama_archs` test of
//! kestrel-generate compares every family with llama.cpp's logits). Encoder-only models (BERT)
//! have their own [`EncoderConfig`] and [`build_encoder`].

mod archs;
mod builder;
mod config;
mod encoder;
mod error;
pub mod lora;
mod lora_export;
mod registry;
pub mod synth;
pub mod synthetic;
mod weights;

pub use builder::{build_decoder, rope_params, Logits};
pub use config::{
    Activation, BlockLayout, DecoderConfig, FfnKind, MlaConfig, MoeConfig, NormKind, QkNorm,
    RopeConfig, RopeScaling, SsmConfig, SsmKind,
};
pub use encoder::{build_encoder, EncoderConfig, PoolingType};
pub use error::ArchError;
pub use lora::{adapted_weight, apply_adapters, LoraAdapter, LoraError};
pub use lora_export::{export_merged, ExportReport};
pub use registry::{list_architectures, ArchKind};
pub use weights::{decode_matmul_weights, decode_weight_bytes, weight_tensor};
