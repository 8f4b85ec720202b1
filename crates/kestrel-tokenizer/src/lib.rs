//! Tokenizers built from GGUF metadata, incremental detokenization and chat templates.
//!
//! [`Tokenizer`] assembles a `tokenizers::TokenizerImpl` from `tokenizer.ggml.*` (no
//! tokenizer.json needed) and reproduces llama.cpp token for token:
//!
//! - `llama` (SentencePiece): merges by score, byte fallback `<0xNN>`, `add_space_prefix`, `▁`;
//! - `gpt2` (byte-level BPE): ranked merges after the pre-tokenizer chosen by
//!   `tokenizer.ggml.pre` (an unknown one is an error unless
//!   [`TokenizerOptions::allow_unknown_pre`] is set);
//! - `bert` (WordPiece).
//!
//! Control, user-defined and unknown tokens are matched in the text before the model, longest
//! first, as llama.cpp does; [`EncodeOptions::parse_special`] decides whether control-token text
//! in the input becomes those tokens. [`Tokenizer::decode`] and the streaming [`Decoder`]
//! follow llama.cpp's detokenizer. [`ChatTemplate`] renders `tokenizer.chat_template` with
//! minijinja, or a built-in template when the file has none.
//!
//! ```no_run
//! use kestrel_tokenizer::{DecodeOptions, EncodeOptions, Tokenizer};
//! let tok = Tokenizer::from_file("model.gguf")?;
//! let ids = tok.encode("Hello world", EncodeOptions::default())?;
//! let text = tok.decode(&ids, DecodeOptions::default())?;
//! # Ok::<(), kestrel_tokenizer::TokenizerError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod chat;
pub mod decoders;
mod error;
pub mod models;
pub mod normalizers;
pub mod partition;
pub mod pre_tokenizers;
mod tokenizer;
pub mod unicode;
mod vocab;

pub use chat::{ChatMessage, ChatTemplate, RenderOptions, BUILTIN_TEMPLATES};
pub use error::{Result, TemplateError, TokenizerError};
pub use pre_tokenizers::{PreSpec, PreTokenizerKind};
pub use tokenizer::{DecodeOptions, Decoder, EncodeOptions, Pipeline, Tokenizer, TokenizerOptions};
pub use vocab::{SpecialTokens, TokenAttrs, TokenType, Vocab, VocabKind};
