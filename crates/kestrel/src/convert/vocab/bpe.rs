//! GPT-2-style BPE vocabularies from `tokenizer.json` (llama.cpp's `_set_vocab_gpt2`): the
//! token list with added tokens typed CONTROL or USER_DEFINED, padding ids `[PAD{i}]`, and the
//! pre-tokenizer name llama.cpp gives the tokenizer, found by hashing the ids it produces for
//! [`CHECK_TEXT`]. A tokenizer whose hash llama.cpp does not know is refused, not guessed.

use std::path::Path;

use sha2::{Digest, Sha256};
use tokenizers::Tokenizer;

use super::pre_hashes::{CHECK_TEXT, PRE_TOKENIZERS};
use super::{looks_special, Vocab, BYTE, CONTROL, NORMAL, UNUSED, USER_DEFINED};
use crate::convert::ConvertError;

/// The SHA-256 (hex) of the ids for [`CHECK_TEXT`], printed as a Python list.
fn check_hash(tok: &Tokenizer) -> Result<String, String> {
    let enc = tok
        .encode(CHECK_TEXT, true)
        .map_err(|e| format!("cannot encode the check text: {e}"))?;
    let list = enc
        .get_ids()
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let digest = Sha256::digest(format!("[{list}]").as_bytes());
    Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
}

/// The `tokenizer.ggml.pre` name for a check hash.
fn pre_name(hash: &str) -> Option<&'static str> {
    PRE_TOKENIZERS
        .iter()
        .find(|(h, _, _)| *h == hash)
        .map(|(_, n, _)| *n)
}

/// The `tokenizer.ggml.pre` name llama.cpp gives `tok`, found by its check hash; an unknown
/// hash is refused, not guessed.
pub(crate) fn pre_tokenizer(tok: &Tokenizer) -> Result<&'static str, String> {
    let hash = check_hash(tok)?;
    pre_name(&hash).ok_or_else(|| {
        format!(
            "llama.cpp does not know this BPE pre-tokenizer (check hash {hash}); \
             refusing to guess how it splits text"
        )
    })
}

/// `dir`'s `tokenizer.json` (at most 256 MiB), with an error maker for it.
fn open_tokenizer(
    dir: &Path,
) -> Result<(Tokenizer, impl Fn(String) -> ConvertError), ConvertError> {
    let path = dir.join("tokenizer.json");
    let bad = move |reason: String| ConvertError::Input {
        path: path.clone(),
        reason,
    };
    let len = std::fs::metadata(dir.join("tokenizer.json"))
        .map_err(|e| bad(format!("cannot read: {e}")))?
        .len();
    if len > 256 << 20 {
        return Err(bad(format!("{len} bytes is too large for a tokenizer")));
    }
    let tok = Tokenizer::from_file(dir.join("tokenizer.json"))
        .map_err(|e| bad(format!("not a tokenizer: {e}")))?;
    Ok((tok, bad))
}

/// Read `dir/tokenizer.json` as llama.cpp's `get_vocab_base` does.
pub(crate) fn load(dir: &Path, vocab_size: Option<usize>) -> Result<Vocab, ConvertError> {
    let (tok, bad) = open_tokenizer(dir)?;
    let vocab = tok.get_vocab(true);
    let n = vocab_size.unwrap_or(vocab.len());
    if let Some(max) = vocab.values().max() {
        if *max as usize >= n {
            return Err(bad(format!(
                "token id {max} is outside the model's vocab_size {n}"
            )));
        }
    }
    let pre = pre_tokenizer(&tok).map_err(&bad)?;
    let mut reverse: Vec<Option<&str>> = vec![None; n];
    for (t, &id) in &vocab {
        reverse[id as usize] = Some(t.as_str());
    }
    let decoder = tok.get_added_tokens_decoder();
    let added_by_content: std::collections::HashMap<&str, u32> = decoder
        .iter()
        .map(|(id, a)| (a.content.as_str(), *id))
        .collect();
    let mut tokens = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    for (i, r) in reverse.iter().enumerate() {
        let Some(t) = r else {
            tokens.push(format!("[PAD{i}]"));
            types.push(UNUSED);
            continue;
        };
        let mut token = t.to_string();
        if added_by_content.contains_key(t) {
            let entry = decoder.get(&(i as u32));
            if entry.is_some_and(|a| !a.normalized) {
                let ids = tok
                    .encode(token.as_str(), false)
                    .map_err(|e| bad(format!("cannot encode added token {token:?}: {e}")))?;
                token = tok
                    .decode(ids.get_ids(), false)
                    .map_err(|e| bad(format!("cannot decode added token {token:?}: {e}")))?;
            }
            if entry.is_some_and(|a| a.special) || looks_special(&token) {
                types.push(CONTROL);
            } else {
                token = token.replace('\u{2581}', " ");
                types.push(USER_DEFINED);
            }
        } else {
            types.push(NORMAL);
        }
        tokens.push(token);
    }
    Ok(Vocab {
        model: "gpt2",
        pre: pre.to_string(),
        tokens,
        types,
        scores: None,
        merges: Vec::new(),
    })
}

/// XVERSE's vocabulary as llama.cpp's `XverseModel.set_vocab` reads it: `tokenizer.json`'s
/// tokens (with the added ones) by id up to `vocab_size`, written as a SentencePiece
/// (`llama`) vocabulary without scores; `<0xNN>` pieces and a `\0` one (written `<b'\x00'>`,
/// Python's text of the byte string) are bytes, added tokens control (special) or
/// user-defined. Every id below `vocab_size` must have a token.
pub(crate) fn load_xverse(dir: &Path, vocab_size: Option<usize>) -> Result<Vocab, ConvertError> {
    let (tok, bad) = open_tokenizer(dir)?;
    let vocab = tok.get_vocab(true);
    let n = vocab_size.unwrap_or(vocab.len());
    if n > 16 << 20 {
        return Err(bad(format!("vocab_size {n} is implausibly large")));
    }
    if vocab.values().any(|&id| id as usize >= n) {
        return Err(bad(format!(
            "a token id is outside the model's vocab_size {n}"
        )));
    }
    let mut reverse: Vec<Option<&str>> = vec![None; n];
    for (t, &id) in &vocab {
        reverse[id as usize] = Some(t.as_str());
    }
    let decoder = tok.get_added_tokens_decoder();
    let is_byte = |t: &str| {
        let b = t.as_bytes();
        b.len() == 6
            && t.starts_with("<0x")
            && t.ends_with('>')
            && b[3..5].iter().all(u8::is_ascii_hexdigit)
    };
    let mut tokens = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    for (i, r) in reverse.iter().enumerate() {
        let t = r.ok_or_else(|| bad(format!("no token has id {i} (of vocab_size {n})")))?;
        let (token, ty) = if t == "\0" {
            ("<b'\\x00'>".to_string(), BYTE)
        } else if is_byte(t) {
            (t.to_string(), BYTE)
        } else if let Some(a) = decoder.get(&(i as u32)).filter(|a| a.content == t) {
            (
                t.to_string(),
                if a.special { CONTROL } else { USER_DEFINED },
            )
        } else {
            (t.to_string(), NORMAL)
        };
        tokens.push(token);
        types.push(ty);
    }
    Ok(Vocab {
        model: "llama",
        pre: "default".into(),
        tokens,
        types,
        scores: None,
        merges: Vec::new(),
    })
}
