//! kestrel: a Rust inference engine for GGUF language models.
//!
//! Status: early. Today this facade re-exports the GGUF layer; `Model::load`, `generate`,
//! `chat`, streaming, batching and the rest arrive as the layers below them land.

pub use kestrel_gguf as gguf;
pub use kestrel_tensor as tensor;
