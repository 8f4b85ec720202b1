//! Special and user-defined tokens matched in the text before the model runs, exactly as
//! llama.cpp's `tokenizer_st_partition`: tokens are tried longest text first, each one splitting
//! every remaining raw fragment at all its occurrences (with optional whitespace stripping).

use aho_corasick::{AhoCorasick, MatchKind};

use crate::vocab::{TokenAttrs, Vocab};

/// A piece of the input: raw text for the model, or a token found in the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fragment {
    /// Byte range of raw text.
    Text(usize, usize),
    /// A token matched by its text at a byte range.
    Token(u32, usize, usize),
}

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    let first = needle[0];
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        match hay[i..=hay.len() - needle.len()]
            .iter()
            .position(|&b| b == first)
        {
            None => return None,
            Some(p) => {
                let at = i + p;
                if &hay[at..at + needle.len()] == needle {
                    return Some(at);
                }
                i = at + 1;
            }
        }
    }
    None
}

/// Finds which matchable tokens occur in a text at all, so the per-token passes below only run
/// for those (a pass for an absent token changes nothing).
#[derive(Debug)]
pub struct SpecialFinder {
    ac: Option<AhoCorasick>,
    /// `special_cache` index of each pattern.
    order: Vec<usize>,
}

impl SpecialFinder {
    /// Build the automaton over the vocabulary's matchable tokens.
    pub fn new(vocab: &Vocab) -> SpecialFinder {
        let pats: Vec<&[u8]> = vocab
            .special_cache
            .iter()
            .map(|&id| vocab.tokens[id as usize].as_slice())
            .collect();
        let ac = if pats.is_empty() {
            None
        } else {
            AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .build(&pats)
                .ok()
        };
        SpecialFinder {
            ac,
            order: (0..pats.len()).collect(),
        }
    }

    /// `special_cache` indices of the tokens present in `text`, in `special_cache` order;
    /// `None` when every token must be tried.
    fn present(&self, text: &[u8]) -> Option<Vec<usize>> {
        let ac = self.ac.as_ref()?;
        let mut seen = vec![false; self.order.len()];
        for m in ac.find_overlapping_iter(text) {
            seen[m.pattern().as_usize()] = true;
        }
        Some((0..seen.len()).filter(|&i| seen[i]).collect())
    }
}

/// Split `text` into fragments. With `parse_special` false, control and unknown tokens are
/// left as text; user-defined tokens are always matched.
pub fn partition(
    vocab: &Vocab,
    finder: &SpecialFinder,
    text: &str,
    parse_special: bool,
) -> Vec<Fragment> {
    let bytes = text.as_bytes();
    let mut frags = if bytes.is_empty() {
        Vec::new()
    } else {
        vec![Fragment::Text(0, bytes.len())]
    };
    let candidates: Vec<u32> = match finder.present(bytes) {
        Some(idx) => idx.into_iter().map(|i| vocab.special_cache[i]).collect(),
        None => vocab.special_cache.clone(),
    };
    for id in candidates {
        let attr = vocab.attrs[id as usize];
        if !parse_special && attr.has(TokenAttrs::CONTROL | TokenAttrs::UNKNOWN) {
            continue;
        }
        let needle = &vocab.tokens[id as usize];
        // quick reject: no raw fragment contains the token
        if !frags.iter().any(|f| match *f {
            Fragment::Text(a, b) => b - a >= needle.len(),
            Fragment::Token(..) => false,
        }) {
            continue;
        }
        let mut out = Vec::with_capacity(frags.len());
        for f in frags {
            let Fragment::Text(mut start, end) = f else {
                out.push(f);
                continue;
            };
            loop {
                let Some(p) = find(&bytes[start..end], needle) else {
                    if end > start {
                        out.push(Fragment::Text(start, end));
                    }
                    break;
                };
                let m = start + p;
                if m > start {
                    let mut left_end = m;
                    if attr.has(TokenAttrs::LSTRIP) {
                        while left_end > start && is_c_space(bytes[left_end - 1]) {
                            left_end -= 1;
                        }
                    }
                    if left_end > start {
                        out.push(Fragment::Text(start, left_end));
                    }
                }
                out.push(Fragment::Token(id, m, m + needle.len()));
                let mut right = m + needle.len();
                if right >= end {
                    break;
                }
                if attr.has(TokenAttrs::RSTRIP) {
                    while right < end && is_c_space(bytes[right]) {
                        right += 1;
                    }
                }
                start = right;
            }
        }
        frags = out;
    }
    frags
}
