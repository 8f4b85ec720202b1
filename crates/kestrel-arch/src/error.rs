//! `ArchError`: why a model's architecture could not be read.

/// An error reading an architecture's configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchError {
    /// The GGUF layer refused a key (missing, wrong type).
    #[error(transparent)]
    Gguf(#[from] kestrel_gguf::GgufError),
    /// An architecture kestrel cannot run.
    #[error("unsupported architecture {arch:?}; supported: {supported}")]
    Unsupported {
        /// `general.architecture`.
        arch: String,
        /// The supported names, comma-separated.
        supported: String,
    },
    /// A supported family whose file uses a feature kestrel does not run yet.
    #[error("{arch}: this file uses {feature}, which kestrel does not run yet")]
    UnsupportedFeature {
        /// The architecture.
        arch: String,
        /// What the file needs.
        feature: String,
    },
    /// An encoder-only model (BERT) asked to run as a decoder.
    #[error("{arch} is an encoder-only model: it makes embeddings, not text (load it as an EncoderModel)")]
    Encoder {
        /// `general.architecture`.
        arch: String,
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
