//! Tokenizers built from GGUF metadata, incremental detokenization and chat templates for kestrel.
//!
//! Status: placeholder. It will build a `tokenizers::Tokenizer` from `tokenizer.ggml.*` metadata (SPM, BPE with pre-tokenizers, WordPiece), handle special tokens and BOS/EOS rules, and render chat templates with minijinja.
#![forbid(unsafe_code)]
