//! `Error`: the facade's one error type.

/// An error from loading a model or generating.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading the GGUF file.
    #[error(transparent)]
    Gguf(#[from] kestrel_gguf::GgufError),
    /// Building the tokenizer or rendering a template.
    #[error(transparent)]
    Tokenizer(#[from] kestrel_tokenizer::TokenizerError),
    /// A chat template that fails to compile or render.
    #[error(transparent)]
    Template(#[from] kestrel_tokenizer::TemplateError),
    /// A bad sampling option, grammar or JSON Schema.
    #[error(transparent)]
    Sampling(#[from] kestrel_sampling::SamplingError),
    /// Loading for generation, or generating (boxed: it carries every lower layer's errors).
    #[error(transparent)]
    Generate(Box<kestrel_generate::GenerateError>),
    /// A model name that is not a file, not cached, and (offline) not downloadable.
    #[error("model {name:?} not found: {looked}")]
    NotFound {
        /// The name asked for.
        name: String,
        /// Where it was looked for, and what to do.
        looked: String,
    },
    /// Downloading a model from the hub.
    #[error(transparent)]
    Download(#[from] crate::hub::DownloadError),
    /// An option out of range.
    #[error("invalid option {name}: {reason}")]
    InvalidOption {
        /// The option.
        name: &'static str,
        /// Why.
        reason: String,
    },
}

impl From<kestrel_generate::GenerateError> for Error {
    fn from(e: kestrel_generate::GenerateError) -> Self {
        Error::Generate(Box::new(e))
    }
}
