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
