//! The architecture registry: `general.architecture` → what that family does differently.

use kestrel_gguf::GgufModel;

use crate::ArchError;

/// A supported decoder family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArchKind {
    /// Llama 1/2/3, Mistral, SmolLM, and the generic fallback.
    Llama,
    /// Gemma 3 (text).
    Gemma3,
    /// Qwen 2 / 2.5 (QKV biases).
    Qwen2,
    /// Qwen 3 (QK-norm).
    Qwen3,
    /// BERT-style encoders (sentence embeddings): see [`crate::EncoderConfig`].
    Bert,
}

/// (GGUF name, kind)
const REGISTRY: &[(&str, ArchKind)] = &[
    ("llama", ArchKind::Llama),
    ("mistral", ArchKind::Llama),
    ("gemma3", ArchKind::Gemma3),
    ("qwen2", ArchKind::Qwen2),
    ("qwen3", ArchKind::Qwen3),
    ("bert", ArchKind::Bert),
];

/// The `general.architecture` names kestrel runs natively.
pub fn list_architectures() -> Vec<&'static str> {
    REGISTRY.iter().map(|r| r.0).collect()
}

impl ArchKind {
    /// True for encoder-only families, which run through [`crate::build_encoder`].
    pub fn is_encoder(self) -> bool {
        matches!(self, ArchKind::Bert)
    }

    /// The family for `general.architecture`, if registered.
    pub fn from_name(name: &str) -> Option<ArchKind> {
        REGISTRY.iter().find(|r| r.0 == name).map(|r| r.1)
    }

    /// The family of a model: registered by name, else the generic llama-style decoder when its
    /// tensors have llama's names, else an error listing what is supported.
    pub fn detect(model: &GgufModel) -> Result<(ArchKind, bool), ArchError> {
        let arch = model.metadata().architecture()?;
        if let Some(kind) = ArchKind::from_name(arch) {
            return Ok((kind, false));
        }
        let llama_style = [
            "token_embd.weight",
            "blk.0.attn_q.weight",
            "blk.0.ffn_down.weight",
        ]
        .iter()
        .all(|n| model.tensor_info(n).is_some())
            && model.tensor_info("blk.0.attn_k.weight").is_some();
        if llama_style {
            Ok((ArchKind::Llama, true))
        } else {
            Err(ArchError::Unsupported {
                arch: arch.to_string(),
                supported: list_architectures().join(", "),
            })
        }
    }
}
