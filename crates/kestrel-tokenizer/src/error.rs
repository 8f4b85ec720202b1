//! Typed errors of the tokenizer and the chat templates.

use thiserror::Error;

/// Everything that can go wrong building a tokenizer, encoding, decoding or rendering a template.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// Reading the GGUF metadata failed (missing key, wrong type, bad file).
    #[error("GGUF metadata: {0}")]
    Gguf(#[from] kestrel_gguf::GgufError),
    /// `tokenizer.ggml.model` names a tokenizer kestrel does not implement.
    #[error("unsupported tokenizer model `{0}` (supported: llama, gpt2, bert)")]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer kestrel does not know. Set
    /// [`TokenizerOptions::allow_unknown_pre`](crate::TokenizerOptions::allow_unknown_pre)
    /// to fall back to the default pre-tokenizer (as llama.cpp's converter warns, quality degrades).
    #[error(
        "unknown pre-tokenizer `{0}` (tokenizer.ggml.pre); pass allow_unknown_pre to use the default one"
    )]
    UnknownPreTokenizer(String),
    /// A metadata array is malformed or inconsistent (wrong element type, too short).
    #[error("bad tokenizer metadata `{key}`: {reason}")]
    BadMetadata {
        /// The metadata key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A token id outside the vocabulary was given to decode.
    #[error("token id {id} is out of range (vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange {
        /// The offending id.
        id: u32,
        /// The vocabulary size.
        n_vocab: usize,
    },
    /// The vocabulary lacks a token the algorithm needs (a byte-fallback token, BOS, ...).
    #[error("the vocabulary has no token for {0}")]
    MissingToken(String),
    /// A regular expression of a pre-tokenizer failed to compile or run.
    #[error("pre-tokenizer regex `{pattern}`: {reason}")]
    Regex {
        /// The pattern.
        pattern: String,
        /// The regex engine's message.
        reason: String,
    },
    /// The `tokenizers` pipeline reported an error.
    #[error("tokenizer pipeline: {0}")]
    Pipeline(String),
    /// A chat template failed to parse or render.
    #[error(transparent)]
    Template(#[from] TemplateError),
}

/// A chat template error, with the template's name and line where minijinja knows them.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The file has no template and none was named, or a named one does not exist.
    #[error("no chat template `{0}` (the file has none under that name and it is not a built-in)")]
    NotFound(String),
    /// The template failed to compile.
    #[error("chat template `{name}` does not compile{}: {message}", line_suffix(*line))]
    Syntax {
        /// Template name.
        name: String,
        /// 1-based line, when known.
        line: Option<usize>,
        /// The engine's message.
        message: String,
    },
    /// Rendering failed, including `raise_exception(...)` called by the template.
    #[error("chat template `{name}` failed{}: {message}", line_suffix(*line))]
    Render {
        /// Template name.
        name: String,
        /// 1-based line, when known.
        line: Option<usize>,
        /// The engine's message (for `raise_exception`, the template's own message).
        message: String,
    },
    /// The messages are not what a chat needs (unknown role, bad JSON).
    #[error("bad chat messages: {0}")]
    BadMessages(String),
}

fn line_suffix(line: Option<usize>) -> String {
    match line {
        Some(l) => format!(" at line {l}"),
        None => String::new(),
    }
}

/// Result alias for this crate.
pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;
