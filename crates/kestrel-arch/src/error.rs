//! `ArchError`: why a model's architecture could not be read.

/// An error reading an architecture's configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchError {
    /// The GGUF layer refused a key (missing, wrong type).
    #[error(transparent)]
    Gguf(#[from] kestrel_gguf::GgufError),
    /// An architecture kestrel cannot run.
    #[error("unsupported architecture {arch:?}: its tensors are not llama-style; supported: {supported}")]
    Unsupported {
        /// `general.architecture`.
        arch: String,
        /// The supported names, comma-separated.
        supported: String,
    },
    /// Metadata that contradicts itself.
    #[error("invalid {arch} config: {reason}")]
    Invalid {
        /// The architecture.
        arch: String,
        /// What is wrong.
        reason: String,
    },
}
