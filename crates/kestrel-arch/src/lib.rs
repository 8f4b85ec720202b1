//! Architectures for kestrel: read a GGUF file's metadata into a typed [`DecoderConfig`] and
//! build one step of the model as a `kestrel-graph` graph ([`build_decoder`]).
//!
//! A registry keyed by `general.architecture` ([`list_architectures`], [`ArchKind::detect`])
//! says what each family does differently — RoPE style, norms, activation, biases, sliding
//! window. An unknown architecture whose tensors are llama-style runs as a generic decoder; any
//! other is an [`ArchError::Unsupported`] listing what is supported. Encoder-only models (BERT)
//! have their own [`EncoderConfig`] and [`build_encoder`].

mod archs;
mod builder;
mod config;
mod encoder;
mod error;
mod registry;
pub mod synthetic;
mod weights;

pub use builder::{build_decoder, rope_params, Logits};
pub use config::{Activation, DecoderConfig, RopeConfig, RopeScaling};
pub use encoder::{build_encoder, EncoderConfig, PoolingType};
pub use error::ArchError;
pub use registry::{list_architectures, ArchKind};
pub use weights::weight_tensor;
