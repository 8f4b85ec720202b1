//! The token models, as `tokenizers` [`Model`]s: SentencePiece merges by score ([`spm`]),
//! byte-level BPE by rank ([`bpe`]) and WordPiece ([`wpm`]), each reproducing llama.cpp's
//! algorithm (heap order, tie-breaks and byte fallback included).

pub mod bpe;
pub mod spm;
pub mod wpm;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokenizers::{AddedToken, Model, Result as TkResult, Token, Trainer};

use crate::vocab::Vocab;

/// One of kestrel's models, so a single `TokenizerImpl` type serves every vocabulary.
#[derive(Debug)]
pub enum KestrelModel {
    /// `llama` vocabularies.
    Spm(Box<spm::SpmModel>),
    /// `gpt2` vocabularies.
    Bpe(Box<bpe::BpeModel>),
    /// `bert` vocabularies.
    Wpm(wpm::WpmModel),
}

impl KestrelModel {
    fn vocab(&self) -> &Arc<Vocab> {
        match self {
            KestrelModel::Spm(m) => &m.vocab,
            KestrelModel::Bpe(m) => &m.vocab,
            KestrelModel::Wpm(m) => &m.vocab,
        }
    }

    /// Tokenize one pre-token into ids, appending to `out` (the allocation-free path).
    pub fn tokenize_ids(&self, text: &str, out: &mut Vec<u32>) -> crate::Result<()> {
        match self {
            KestrelModel::Spm(m) => m.tokenize_ids(text, out),
            KestrelModel::Bpe(m) => {
                m.tokenize_ids(text, out);
                Ok(())
            }
            KestrelModel::Wpm(m) => {
                m.tokenize_ids(text, out);
                Ok(())
            }
        }
    }
}

/// GGUF vocabularies are not trained; this trainer only satisfies the trait.
#[derive(Debug, Default)]
pub struct NoTrainer;

impl Trainer for NoTrainer {
    type Model = KestrelModel;
    fn should_show_progress(&self) -> bool {
        false
    }
    fn train(&self, _model: &mut KestrelModel) -> TkResult<Vec<AddedToken>> {
        Err("kestrel tokenizers come from GGUF metadata and cannot be trained".into())
    }
    fn feed<I, S, F>(&mut self, _iterator: I, _process: F) -> TkResult<()>
    where
        I: Iterator<Item = S> + Send,
        S: AsRef<str> + Send,
        F: Fn(&str) -> TkResult<Vec<String>> + Sync,
    {
        Ok(())
    }
}

fn to_tokens(vocab: &Vocab, ids: &[u32], spans: &[(usize, usize)]) -> Vec<Token> {
    ids.iter()
        .zip(spans)
        .map(|(&id, &off)| {
            let text = vocab
                .tokens
                .get(id as usize)
                .map(|t| String::from_utf8_lossy(t).into_owned())
                .unwrap_or_default();
            Token::new(id, text, off)
        })
        .collect()
}

impl Model for KestrelModel {
    type Trainer = NoTrainer;

    fn tokenize(&self, sequence: &str) -> TkResult<Vec<Token>> {
        let mut ids = Vec::new();
        let mut spans = Vec::new();
        match self {
            KestrelModel::Spm(m) => m.tokenize_spans(sequence, &mut ids, &mut spans)?,
            KestrelModel::Bpe(m) => m.tokenize_spans(sequence, &mut ids, &mut spans),
            KestrelModel::Wpm(m) => m.tokenize_spans(sequence, &mut ids, &mut spans),
        }
        Ok(to_tokens(self.vocab(), &ids, &spans))
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.vocab().lookup(token.as_bytes())
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        self.vocab()
            .tokens
            .get(id as usize)
            .map(|t| String::from_utf8_lossy(t).into_owned())
    }

    fn get_vocab(&self) -> HashMap<String, u32> {
        self.vocab()
            .token_to_id
            .iter()
            .map(|(k, &v)| (String::from_utf8_lossy(k).into_owned(), v))
            .collect()
    }

    fn get_vocab_size(&self) -> usize {
        self.vocab().len()
    }

    fn save(&self, _folder: &Path, _prefix: Option<&str>) -> TkResult<Vec<PathBuf>> {
        Err("kestrel tokenizers live in the GGUF file; there is nothing to save".into())
    }

    fn get_trainer(&self) -> NoTrainer {
        NoTrainer
    }
}
