//! Detokenization as llama.cpp does it: each token's piece (`▁` back to space, `<0xNN>` to its
//! byte, byte-level characters back to bytes, control tokens only on request), the SentencePiece
//! leading space stripped from the first piece, and the optional `clean_up_tokenization_spaces`
//! pass; plus the streaming [`Decoder`](crate::Decoder) state that emits only complete UTF-8.

use std::sync::Arc;

use tokenizers::{Decoder as TkDecoder, Result as TkResult};

use crate::unicode::char_to_byte;
use crate::vocab::{TokenAttrs, Vocab, VocabKind};

/// Each token's piece with control tokens rendered (llama.cpp's token-to-piece cache).
pub(crate) fn build_pieces(vocab: &Vocab) -> Vec<Vec<u8>> {
    let special = TokenAttrs::UNKNOWN | TokenAttrs::CONTROL;
    (0..vocab.len())
        .map(|i| {
            let text = &vocab.tokens[i];
            let attr = vocab.attrs[i];
            if attr.has(special | TokenAttrs::USER_DEFINED) {
                return text.clone();
            }
            if attr.has(TokenAttrs::NORMAL) {
                let unescape = vocab.kind != VocabKind::Bpe || vocab.escape_whitespaces;
                return if unescape {
                    replace_all(text, "\u{2581}".as_bytes(), b" ")
                } else {
                    byte_level_decode(text)
                };
            }
            if attr.has(TokenAttrs::BYTE) {
                return token_byte(text).map(|b| vec![b]).unwrap_or_default();
            }
            Vec::new()
        })
        .collect()
}

/// `<0xNN>` -> the byte.
fn token_byte(text: &[u8]) -> Option<u8> {
    let hex = text.get(3..5)?;
    u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

fn replace_all(text: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    out
}

/// Byte-level token text to bytes; characters outside the alphabet are written as llama.cpp
/// does (`[UNK_BYTE_0x..]`).
fn byte_level_decode(text: &[u8]) -> Vec<u8> {
    let s = String::from_utf8_lossy(text);
    let mut out = Vec::with_capacity(text.len());
    for c in s.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(s.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// llama.cpp's `clean_up_tokenization_spaces`: drop the space before `?!.,`, around a lone
/// apostrophe, and before `'s 'm 're 've`.
pub(crate) fn clean_spaces(text: &mut Vec<u8>) {
    // pass 1: " ?", " !", " .", " ,"
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
    // pass 2: " ' "
    let n = text.len();
    let mut total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = text[i];
        if x == b'\'' && i + 1 < n && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);
    // pass 3: " 's", " 'm", " 're", " 've"
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = text[i + 1];
            if x1 == b's' || x1 == b'm' {
                total -= 1;
            } else if i + 2 < n {
                let x2 = text[i + 2];
                if (x1 == b'r' || x1 == b'v') && x2 == b'e' {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

/// The piece of `id` as detokenization uses it: control and unknown tokens are empty unless
/// `special`; up to `lstrip` leading spaces removed.
pub(crate) fn piece<'p>(
    vocab: &Vocab,
    pieces: &'p [Vec<u8>],
    id: u32,
    special: bool,
    lstrip: bool,
) -> &'p [u8] {
    let i = id as usize;
    if !special && vocab.attrs[i].has(TokenAttrs::UNKNOWN | TokenAttrs::CONTROL) {
        return &[];
    }
    let p = &pieces[i];
    if lstrip && p.first() == Some(&b' ') {
        &p[1..]
    } else {
        p
    }
}

/// The `tokenizers` decoder of a kestrel tokenizer: the tokens' texts are looked up and
/// detokenized with llama.cpp's rules (control tokens rendered), returning one string.
#[derive(Debug)]
pub struct LlamaDecoder {
    pub(crate) vocab: Arc<Vocab>,
    pub(crate) pieces: Arc<Vec<Vec<u8>>>,
}

impl TkDecoder for LlamaDecoder {
    fn decode_chain(&self, tokens: Vec<String>) -> TkResult<Vec<String>> {
        let mut bytes = Vec::new();
        let mut remove_space = self.vocab.add_space_prefix;
        for t in tokens {
            let id = self
                .vocab
                .lookup(t.as_bytes())
                .ok_or_else(|| format!("`{t}` is not in the vocabulary"))?;
            bytes.extend_from_slice(piece(&self.vocab, &self.pieces, id, true, remove_space));
            remove_space = false;
        }
        if self.vocab.clean_spaces {
            clean_spaces(&mut bytes);
        }
        Ok(vec![String::from_utf8_lossy(&bytes).into_owned()])
    }
}

#[cfg(test)]
mod tests {
    use super::clean_spaces;

    fn clean(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        clean_spaces(&mut v);
        String::from_utf8(v).expect("utf8")
    }

    #[test]
    fn clean_up_spaces() {
        assert_eq!(clean("a , b ."), "a, b.");
        assert_eq!(clean("it 's a ' b"), "it's a'b");
        assert_eq!(clean("we 're  'll 't"), "we're  'll 't");
        assert_eq!(clean(" ,"), ",");
    }
}
