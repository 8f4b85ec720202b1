//! Qwen 1's tiktoken vocabulary (`qwen.tiktoken`: one `base64(token) rank` per line) as
//! llama.cpp's `_set_vocab_qwen` writes it: every rank a GPT-2 byte-level token, the merge
//! that makes each token found by running BPE on its bytes up to its own rank, the special
//! tokens Qwen's tokenizer code numbers after the ranks, `[PAD{i}]` up to `vocab_size`, and the
//! pre-tokenizer named, as for `tokenizer.json`, by hashing the ids the vocabulary gives the
//! check text (a tokenizer built here from the ranks and Qwen's split pattern).

use std::collections::HashMap;
use std::path::Path;

use base64::Engine;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use super::bpe::pre_tokenizer;
use super::{Vocab, CONTROL, NORMAL, UNUSED};
use crate::convert::ConvertError;

/// The vocabulary file Qwen 1 checkpoints ship.
pub(crate) const QWEN_FILE: &str = "qwen.tiktoken";

/// Qwen's split pattern (`PAT_STR` of its `tokenization_qwen.py`).
const QWEN_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The id of Qwen's first special token, `<|endoftext|>` (`SPECIAL_START_ID`): its code
/// numbers them from here whatever the ranks are.
pub(crate) const QWEN_SPECIAL_START: u32 = 151_643;

/// The largest vocabulary file read (Qwen's is 2.5 MB).
const MAX_FILE: u64 = 64 << 20;

/// Qwen's special tokens in id order: end of text, the chat markers, 205 extras.
fn qwen_specials() -> Vec<String> {
    let mut s: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .map(String::from)
        .to_vec();
    s.extend((0..205).map(|i| format!("<|extra_{i}|>")));
    s
}

/// Reads `dir/qwen.tiktoken` as llama.cpp's `_set_vocab_qwen` does; `vocab_size` is the
/// config's.
pub(crate) fn load_qwen(dir: &Path, vocab_size: Option<usize>) -> Result<Vocab, ConvertError> {
    let path = dir.join(QWEN_FILE);
    let bad = |reason: String| ConvertError::Input {
        path: path.clone(),
        reason,
    };
    let len = std::fs::metadata(&path)
        .map_err(|e| {
            bad(format!(
                "cannot read ({e}): Qwen 1 checkpoints keep their vocabulary in {QWEN_FILE}"
            ))
        })?
        .len();
    if len > MAX_FILE {
        return Err(bad(format!("{len} bytes is too large for a vocabulary")));
    }
    let text = std::fs::read(&path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let ranks = parse(&text).map_err(&bad)?;
    let specials = qwen_specials();
    let n_ids = QWEN_SPECIAL_START as usize + specials.len();
    let n = vocab_size.unwrap_or(n_ids);
    if n < n_ids {
        return Err(bad(format!(
            "vocab_size {n} is smaller than the tokenizer's {n_ids} ids"
        )));
    }
    if n > 16 << 20 {
        return Err(bad(format!("vocab_size {n} is implausibly large")));
    }
    let table = kestrel_tokenizer::unicode::byte_to_char_table();
    let text_of = |b: &[u8]| -> String { b.iter().map(|&c| table[c as usize]).collect() };
    let by_bytes: HashMap<&[u8], u32> = ranks.iter().map(|(t, r)| (t.as_slice(), *r)).collect();
    let mut merges = Vec::with_capacity(ranks.len());
    let mut pairs = Vec::with_capacity(ranks.len());
    for (token, rank) in &ranks {
        if token.len() == 1 {
            continue;
        }
        let Some((a, b)) = split_in_two(&by_bytes, token, *rank) else {
            return Err(bad(format!(
                "token {:?} (rank {rank}) is not one merge of two lower-ranked tokens",
                text_of(token)
            )));
        };
        let (a, b) = (text_of(a), text_of(b));
        merges.push(format!("{a} {b}"));
        pairs.push((a, b));
    }
    let mut reverse: Vec<Option<String>> = vec![None; n];
    for (token, rank) in &ranks {
        reverse[*rank as usize] = Some(text_of(token));
    }
    let mut tokens = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    for (i, r) in reverse.iter().enumerate() {
        let special = (i as u32)
            .checked_sub(QWEN_SPECIAL_START)
            .and_then(|k| specials.get(k as usize));
        if let Some(s) = special {
            tokens.push(s.clone());
            types.push(CONTROL);
        } else if let Some(t) = r {
            tokens.push(t.clone());
            types.push(NORMAL);
        } else {
            tokens.push(format!("[PAD{i}]"));
            types.push(UNUSED);
        }
    }
    let tok = tokenizer(&ranks, &text_of, pairs, &specials).map_err(&bad)?;
    let pre = pre_tokenizer(&tok).map_err(&bad)?;
    Ok(Vocab {
        model: "gpt2",
        pre: pre.to_string(),
        tokens,
        types,
        scores: None,
        merges,
    })
}

/// The `(token, rank)` lines in rank order; ranks must be distinct and below the special ids.
fn parse(text: &[u8]) -> Result<Vec<(Vec<u8>, u32)>, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, line) in text.split(|&c| c == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let at = |what: &str| format!("line {}: {what}", i + 1);
        let mut parts = line.split(|&c| c == b' ').filter(|p| !p.is_empty());
        let (Some(tok), Some(rank), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(at("not `base64-token rank`"));
        };
        let token = b64
            .decode(tok)
            .map_err(|e| at(&format!("bad base64 ({e})")))?;
        let rank: u32 = std::str::from_utf8(rank)
            .ok()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| at("the rank is not a number"))?;
        if token.is_empty() {
            return Err(at("an empty token"));
        }
        if rank >= QWEN_SPECIAL_START {
            return Err(at(&format!(
                "rank {rank} collides with Qwen's special tokens (from {QWEN_SPECIAL_START})"
            )));
        }
        if !seen.insert(rank) {
            return Err(at(&format!("rank {rank} appears twice")));
        }
        out.push((token, rank));
    }
    out.sort_by_key(|(_, r)| *r);
    if out.is_empty() {
        return Err("no tokens".into());
    }
    Ok(out)
}

/// llama.cpp's `QwenModel.bpe(ranks, token, max_rank=rank)`: merge the adjacent parts whose
/// join has the lowest rank below `max_rank` until none is left; the two parts of a token
/// that BPE builds in one last merge.
fn split_in_two<'a>(
    ranks: &HashMap<&[u8], u32>,
    token: &'a [u8],
    max_rank: u32,
) -> Option<(&'a [u8], &'a [u8])> {
    // Part i is token[cuts[i]..cuts[i + 1]].
    let mut cuts: Vec<usize> = (0..=token.len()).collect();
    loop {
        let mut best: Option<(usize, u32)> = None;
        for i in 0..cuts.len().saturating_sub(2) {
            if let Some(&r) = ranks.get(&token[cuts[i]..cuts[i + 2]]) {
                if best.is_none_or(|(_, b)| r < b) {
                    best = Some((i, r));
                }
            }
        }
        match best {
            Some((i, r)) if r < max_rank => {
                cuts.remove(i + 1);
            }
            _ => break,
        }
    }
    (cuts.len() == 3).then(|| (&token[..cuts[1]], &token[cuts[1]..]))
}

/// The ranks as a Hugging Face byte-level BPE tokenizer with Qwen's split pattern, which
/// encodes as tiktoken does (the merges are the ranks' order).
fn tokenizer(
    ranks: &[(Vec<u8>, u32)],
    text_of: &impl Fn(&[u8]) -> String,
    merges: Vec<(String, String)>,
    specials: &[String],
) -> Result<Tokenizer, String> {
    let vocab: tokenizers::models::bpe::Vocab =
        ranks.iter().map(|(t, r)| (text_of(t), *r)).collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| format!("cannot build the BPE model: {e}"))?;
    let split = Split::new(
        SplitPattern::Regex(QWEN_PATTERN.into()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(|e| format!("Qwen's split pattern: {e}"))?;
    let pre = Sequence::new(vec![
        split.into(),
        ByteLevel::new(false, false, false).into(),
    ]);
    let mut tok = Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(pre));
    let added: Vec<AddedToken> = specials
        .iter()
        .map(|s| AddedToken::from(s.clone(), true))
        .collect();
    tok.add_special_tokens(&added);
    Ok(tok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranks(list: &[(&[u8], u32)]) -> HashMap<&'static [u8], u32> {
        list.iter()
            .map(|(t, r)| (Vec::leak(t.to_vec()) as &[u8], *r))
            .collect()
    }

    #[test]
    fn a_token_splits_where_its_last_merge_joined_it() {
        let r = ranks(&[
            (b"a", 0),
            (b"b", 1),
            (b"c", 2),
            (b"ab", 3),
            (b"bc", 4),
            (b"abc", 5),
        ]);
        // "ab" (3) merges before "bc" (4): "ab" + "c".
        assert_eq!(split_in_two(&r, b"abc", 5), Some((&b"ab"[..], &b"c"[..])));
        assert_eq!(split_in_two(&r, b"ab", 3), Some((&b"a"[..], &b"b"[..])));
        // A single byte is no merge; an unreachable token neither.
        assert_eq!(split_in_two(&r, b"a", 0), None);
        let r = ranks(&[(b"a", 0), (b"b", 1), (b"c", 2), (b"abc", 3)]);
        assert_eq!(split_in_two(&r, b"abc", 3), None);
    }

    #[test]
    fn vocabulary_lines_are_checked() {
        let ok = b"YQ== 0\nYg== 1\r\nYWI= 2\n\n";
        let v = parse(ok).unwrap();
        assert_eq!(v[2], (b"ab".to_vec(), 2));
        for (text, what) in [
            (&b"YQ== 0\nYg== 0\n"[..], "twice"),
            (b"YQ==\n", "base64-token rank"),
            (b"!!!! 0\n", "base64"),
            (b"YQ== x\n", "not a number"),
            (b"YQ== 151643\n", "special"),
            (b"", "no tokens"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(what), "{e}");
        }
    }

    #[test]
    fn a_vocabulary_without_the_file_or_llama_cpps_hash_is_refused() {
        let dir = std::env::temp_dir().join(format!("kestrel-tiktoken-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = load_qwen(&dir, None).err().unwrap().to_string();
        assert!(e.contains(QWEN_FILE), "{e}");
        // Every byte and one merge: a tokenizer llama.cpp has no name for.
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut text = String::new();
        for b in 0..=255u8 {
            text += &format!("{} {b}\n", b64.encode([b]));
        }
        text += &format!("{} 256\n", b64.encode(b"ab"));
        std::fs::write(dir.join(QWEN_FILE), &text).unwrap();
        let e = load_qwen(&dir, Some(151_936)).err().unwrap().to_string();
        assert!(e.contains("refusing to guess"), "{e}");
        let e = load_qwen(&dir, Some(1000)).err().unwrap().to_string();
        assert!(e.contains("smaller than"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
