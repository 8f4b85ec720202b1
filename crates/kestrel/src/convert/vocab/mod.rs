//! The tokenizer of a checkpoint as GGUF `tokenizer.*` metadata: BPE from `tokenizer.json`
//! ([`bpe`]), SentencePiece from `tokenizer.model` ([`spm`]) or from a SentencePiece-style
//! `tokenizer.json` ([`llama_hf`]), tiktoken ranks ([`tiktoken`]), and the special tokens, flags,
//! merges and chat template around either ([`special`]).

pub(crate) mod bpe;
pub(crate) mod llama_hf;
mod pre_hashes;
pub(crate) mod special;
pub(crate) mod spm;
pub(crate) mod tiktoken;

use super::meta::Meta;

/// llama.cpp's token types.
pub(crate) const NORMAL: i32 = 1;
pub(crate) const BYTE: i32 = 6;
pub(crate) const CONTROL: i32 = 3;
pub(crate) const USER_DEFINED: i32 = 4;
pub(crate) const UNUSED: i32 = 5;

/// A vocabulary ready to write.
#[derive(Clone, Debug)]
pub(crate) struct Vocab {
    /// `tokenizer.ggml.model`.
    pub model: &'static str,
    /// `tokenizer.ggml.pre`.
    pub pre: String,
    pub tokens: Vec<String>,
    pub types: Vec<i32>,
    pub scores: Option<Vec<f32>>,
    /// Merges the vocabulary derives itself (tiktoken's ranks); empty where `SpecialVocab`
    /// reads them from the tokenizer's files.
    pub merges: Vec<String>,
}

impl Vocab {
    /// Write model, pre-tokenizer, tokens, scores and types (in llama.cpp's order).
    pub(crate) fn write(&self, meta: &mut Meta) {
        meta.str("tokenizer.ggml.model", self.model);
        meta.str("tokenizer.ggml.pre", self.pre.clone());
        meta.strings("tokenizer.ggml.tokens", self.tokens.clone());
        if let Some(s) = &self.scores {
            meta.f32s("tokenizer.ggml.scores", s);
        }
        meta.i32s("tokenizer.ggml.token_type", &self.types);
    }
}

/// llama.cpp's `does_token_look_special`: added tokens that should be CONTROL even when the
/// tokenizer does not mark them special.
pub(crate) fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<\u{ff5c}") && t.ends_with("\u{ff5c}>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}
