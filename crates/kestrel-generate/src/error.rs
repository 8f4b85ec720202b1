//! `GenerateError`: what can stop a generation, from any layer below.

/// An error while loading a model for generation or generating.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// Reading the file.
    #[error(transparent)]
    Gguf(#[from] kestrel_gguf::GgufError),
    /// Reading the architecture.
    #[error(transparent)]
    Arch(#[from] kestrel_arch::ArchError),
    /// Compiling or running a plan.
    #[error(transparent)]
    Graph(#[from] kestrel_graph::GraphError),
    /// A LoRA adapter that could not be read, or does not fit the model.
    #[error(transparent)]
    Lora(Box<kestrel_arch::LoraError>),
    /// The KV cache.
    #[error(transparent)]
    Kv(#[from] kestrel_kv::KvError),
    /// The compute engine.
    #[error(transparent)]
    Tensor(#[from] kestrel_tensor::TensorError),
    /// A prompt and generation that cannot fit the context.
    #[error("the prompt has {prompt} tokens; with {max_new} new tokens it needs {needed}, the context holds {ctx}")]
    ContextTooSmall {
        /// Prompt tokens.
        prompt: usize,
        /// Tokens asked for.
        max_new: usize,
        /// Positions needed.
        needed: usize,
        /// Context length.
        ctx: usize,
    },
    /// An empty prompt (there is nothing to predict from).
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// An option out of range.
    #[error("invalid option {name}: {reason}")]
    InvalidOption {
        /// The option.
        name: &'static str,
        /// Why.
        reason: String,
    },
    /// The tokenizer.
    #[error(transparent)]
    Tokenizer(#[from] kestrel_tokenizer::TokenizerError),
    /// The sampler or the grammar.
    #[error(transparent)]
    Sampling(#[from] kestrel_sampling::SamplingError),
    /// A feature that needs text was asked of a model without a vocabulary.
    #[error("{0} need the model's tokenizer, and this model has none")]
    NoTokenizer(&'static str),
    /// Reading or writing a file.
    #[error("{what}: {source}")]
    Io {
        /// The file.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A log-probability file (llama-perplexity's `--kl-divergence-base`) that is not one, or
    /// not one for this model.
    #[error("log-probability file: {0}")]
    LogProbFile(String),
    /// A path the chosen device does not run yet.
    #[error("{what} does not run on {device} yet; load the model with --device cpu")]
    NotOnDevice {
        /// The path asked for.
        what: &'static str,
        /// The device the model was loaded on.
        device: String,
    },
    /// The token callback asked to stop with an error.
    #[error("stopped by the caller: {0}")]
    Callback(String),
}

impl From<kestrel_arch::LoraError> for GenerateError {
    fn from(e: kestrel_arch::LoraError) -> Self {
        GenerateError::Lora(Box::new(e))
    }
}
