//! llama.cpp's WordPiece: split into words (whitespace, punctuation, CJK characters), optional
//! lower-casing and accent stripping, then greedy longest match of `▁word` against the
//! vocabulary; a word that cannot be covered becomes the unknown token.

use std::sync::Arc;

use tokenizers::NormalizedString;

use crate::unicode::{class, is_whitespace};
use crate::vocab::Vocab;

/// The WordPiece (`bert`) model.
#[derive(Debug)]
pub struct WpmModel {
    pub(crate) vocab: Arc<Vocab>,
}

fn is_chinese_char(c: u32) -> bool {
    (0x4E00..=0x9FFF).contains(&c)
        || (0x3400..=0x4DBF).contains(&c)
        || (0x20000..=0x2A6DF).contains(&c)
        || (0x2A700..=0x2B73F).contains(&c)
        || (0x2B740..=0x2B81F).contains(&c)
        || (0x2B920..=0x2CEAF).contains(&c)
        || (0xF900..=0xFAFF).contains(&c)
        || (0x2F800..=0x2FA1F).contains(&c)
}

/// First code point of the canonical decomposition (what llama.cpp's NFD table keeps).
fn nfd_first(c: char) -> char {
    if c.is_ascii() {
        return c;
    }
    let mut n = NormalizedString::from(c.to_string());
    n.nfd();
    n.get().chars().next().unwrap_or(c)
}

impl WpmModel {
    /// Build the model over a vocabulary.
    pub fn new(vocab: Arc<Vocab>) -> WpmModel {
        WpmModel { vocab }
    }

    /// Words with their byte span in the input.
    fn words(&self, text: &str) -> Vec<(String, usize, usize)> {
        let (lower, strip) = (self.vocab.lowercase, self.vocab.strip_accents);
        let mut words: Vec<(String, usize, usize)> = vec![(String::new(), 0, 0)];
        for (off, c0) in text.char_indices() {
            let end = off + c0.len_utf8();
            let c = if strip { nfd_first(c0) } else { c0 };
            let k = class(c);
            if is_whitespace(c) {
                if !words.last().is_some_and(|w| w.0.is_empty()) {
                    words.push((String::new(), end, end));
                }
                continue;
            }
            if c == '\0' || c == '\u{FFFD}' || k.is_control() {
                continue;
            }
            if strip && k.is_mark() {
                continue;
            }
            let c = if lower {
                c.to_lowercase().next().unwrap_or(c)
            } else {
                c
            };
            let last = words.len() - 1;
            if k.is_punctuation()
                || ((c as u32) < 0x7f && k.is_symbol())
                || is_chinese_char(c as u32)
            {
                if !words[last].0.is_empty() {
                    words.push((String::new(), off, off));
                }
                let w = words.len() - 1;
                words[w] = (c.to_string(), off, end);
                words.push((String::new(), end, end));
            } else {
                let w = &mut words[last];
                if w.0.is_empty() {
                    w.1 = off;
                }
                w.0.push(c);
                w.2 = end;
            }
        }
        words.retain(|w| !w.0.is_empty());
        words
    }

    fn run(&self, text: &str, emit: &mut impl FnMut(u32, usize, usize)) {
        let unk = self.vocab.special.unk;
        let max_len = self.vocab.max_token_len;
        let mut out: Vec<(u32, usize, usize)> = Vec::new();
        for (word, a, b) in self.words(text) {
            let w1 = format!("\u{2581}{word}");
            let w = w1.as_bytes();
            let n = w.len();
            let start = out.len();
            let mut i = 0;
            while i < n {
                let mut matched = false;
                let mut j = n.min(i + max_len + 1);
                while j > i {
                    if let Some(id) = self.vocab.lookup(&w[i..j]) {
                        out.push((id, a, b));
                        matched = true;
                        i = j - 1;
                        break;
                    }
                    j -= 1;
                }
                if !matched {
                    out.truncate(start);
                    break;
                }
                i += 1;
            }
            if out.len() == start {
                if let Some(u) = unk {
                    out.push((u, a, b));
                }
            }
        }
        for (id, a, b) in out {
            emit(id, a, b);
        }
    }

    pub(crate) fn tokenize_ids(&self, text: &str, out: &mut Vec<u32>) {
        self.run(text, &mut |id, _, _| out.push(id));
    }

    pub(crate) fn tokenize_spans(
        &self,
        text: &str,
        ids: &mut Vec<u32>,
        spans: &mut Vec<(usize, usize)>,
    ) {
        self.run(text, &mut |id, a, b| {
            ids.push(id);
            spans.push((a, b));
        });
    }
}
