//! llama.cpp's BPE: per pre-token, start from bytes (GPT-2 byte alphabet) or UTF-8 characters
//! (`▁`-style vocabularies), repeatedly apply the lowest-ranked merge (ties: leftmost first),
//! then emit each symbol's token or fall back to per-byte tokens.
//!
//! Merges and tokens are interned once into symbol ids over raw bytes, so a merge lookup is a
//! hash of two integers rather than of two strings.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use crate::pre_tokenizers::PreTokenizerKind;
use crate::unicode::{byte_to_char_table, char_to_byte};
use crate::vocab::Vocab;

const NO_SYM: u32 = u32::MAX;

/// The byte-level BPE (`gpt2`) model.
#[derive(Debug)]
pub struct BpeModel {
    pub(crate) vocab: Arc<Vocab>,
    /// Raw-byte (or UTF-8) text of a symbol -> symbol id.
    sym_ids: HashMap<Vec<u8>, u32>,
    /// Token of each symbol id.
    sym_token: Vec<Option<u32>>,
    /// (left symbol, right symbol) -> (rank, merged symbol).
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// Symbol of each single byte (byte-level vocabularies).
    byte_sym: [u32; 256],
    /// Per-byte fallback tokens.
    byte_fallback: [Vec<u32>; 256],
    byte_encode: bool,
    ignore_merges: bool,
    newline_words: bool,
}

#[derive(Clone, Copy)]
struct Sym {
    prev: i32,
    next: i32,
    start: usize,
    n: usize,
    sym: u32,
}

struct Bigram {
    left: i32,
    right: i32,
    rank: u32,
    size: usize,
    merged: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    // max-heap: lowest rank first, then the leftmost pair
    fn cmp(&self, o: &Self) -> Ordering {
        o.rank.cmp(&self.rank).then(o.left.cmp(&self.left))
    }
}

/// Decode a byte-level token text to raw bytes; `None` if a character is outside the alphabet.
fn unbyte(text: &[u8]) -> Option<Vec<u8>> {
    let s = std::str::from_utf8(text).ok()?;
    s.chars().map(char_to_byte).collect()
}

impl BpeModel {
    /// Build the model from the vocabulary and `tokenizer.ggml.merges` (as strings).
    pub fn new<'m>(vocab: Arc<Vocab>, merges: impl Iterator<Item = &'m [u8]>) -> BpeModel {
        let byte_encode = !vocab.escape_whitespaces;
        let to_domain = |t: &[u8]| -> Option<Vec<u8>> {
            if byte_encode {
                unbyte(t)
            } else {
                Some(t.to_vec())
            }
        };
        let mut sym_ids: HashMap<Vec<u8>, u32> = HashMap::new();
        let mut sym_token: Vec<Option<u32>> = Vec::new();
        let intern = |s: Vec<u8>, ids: &mut HashMap<Vec<u8>, u32>, tok: &mut Vec<Option<u32>>| {
            let next = tok.len() as u32;
            *ids.entry(s).or_insert_with(|| {
                tok.push(None);
                next
            })
        };
        for (id, t) in vocab.tokens.iter().enumerate() {
            if let Some(d) = to_domain(t) {
                let s = intern(d, &mut sym_ids, &mut sym_token);
                sym_token[s as usize] = Some(id as u32); // later duplicates win, as in llama.cpp
            }
        }
        let mut byte_sym = [NO_SYM; 256];
        if byte_encode {
            for (b, slot) in byte_sym.iter_mut().enumerate() {
                *slot = intern(vec![b as u8], &mut sym_ids, &mut sym_token);
            }
        }
        let mut merge_map: HashMap<(u32, u32), (u32, u32)> = HashMap::new();
        for (rank, m) in merges.enumerate() {
            let (first, second) = match m.iter().skip(1).position(|&c| c == b' ') {
                Some(p) => (&m[..p + 1], &m[p + 2..]),
                None => (&m[..0], &m[..0]),
            };
            let (Some(a), Some(b)) = (to_domain(first), to_domain(second)) else {
                continue; // never applicable
            };
            let mut ab = a.clone();
            ab.extend_from_slice(&b);
            let (sa, sb) = (
                intern(a, &mut sym_ids, &mut sym_token),
                intern(b, &mut sym_ids, &mut sym_token),
            );
            let sab = intern(ab, &mut sym_ids, &mut sym_token);
            merge_map.entry((sa, sb)).or_insert((rank as u32, sab));
        }
        let table = byte_to_char_table();
        let byte_fallback: [Vec<u32>; 256] = std::array::from_fn(|b| {
            if byte_encode {
                // llama.cpp looks up each byte of the encoded character on its own
                let mut buf = [0u8; 4];
                let enc = table[b].encode_utf8(&mut buf);
                enc.bytes().filter_map(|e| vocab.lookup(&[e])).collect()
            } else {
                let hex = format!("<0x{b:02X}>");
                vocab.lookup(hex.as_bytes()).into_iter().collect()
            }
        });
        let ignore_merges = vocab.ignore_merges;
        let newline_words = vocab.pre.kind == PreTokenizerKind::Gemma4;
        BpeModel {
            vocab,
            sym_ids,
            sym_token,
            merges: merge_map,
            byte_sym,
            byte_fallback,
            byte_encode,
            ignore_merges,
            newline_words,
        }
    }

    pub(crate) fn tokenize_ids(&self, word: &str, out: &mut Vec<u32>) {
        self.run(word, &mut |id, _, _| out.push(id));
    }

    pub(crate) fn tokenize_spans(
        &self,
        word: &str,
        ids: &mut Vec<u32>,
        spans: &mut Vec<(usize, usize)>,
    ) {
        self.run(word, &mut |id, a, b| {
            ids.push(id);
            spans.push((a, b));
        });
    }

    fn token_of(&self, text: &[u8]) -> Option<u32> {
        self.sym_ids
            .get(text)
            .and_then(|&s| self.sym_token[s as usize])
    }

    fn run(&self, word: &str, emit: &mut impl FnMut(u32, usize, usize)) {
        let bytes = word.as_bytes();
        if bytes.is_empty() {
            return;
        }
        let whole = (self.ignore_merges
            || (self.newline_words && bytes.iter().all(|&b| b == b'\n')))
        .then(|| self.token_of(bytes))
        .flatten();
        if let Some(id) = whole {
            emit(id, 0, bytes.len());
            return;
        }
        let mut syms: Vec<Sym> = Vec::with_capacity(bytes.len());
        if self.byte_encode {
            for (i, &b) in bytes.iter().enumerate() {
                syms.push(Sym {
                    prev: i as i32 - 1,
                    next: if i + 1 == bytes.len() {
                        -1
                    } else {
                        i as i32 + 1
                    },
                    start: i,
                    n: 1,
                    sym: self.byte_sym[b as usize],
                });
            }
        } else {
            let count = word.chars().count();
            for (i, (off, c)) in word.char_indices().enumerate() {
                let n = c.len_utf8();
                syms.push(Sym {
                    prev: i as i32 - 1,
                    next: if i + 1 == count { -1 } else { i as i32 + 1 },
                    start: off,
                    n,
                    sym: self
                        .sym_ids
                        .get(&bytes[off..off + n])
                        .copied()
                        .unwrap_or(NO_SYM),
                });
            }
        }
        let mut heap = BinaryHeap::new();
        let add = |syms: &[Sym], heap: &mut BinaryHeap<Bigram>, l: i32, r: i32| {
            if l < 0 || r < 0 {
                return;
            }
            let (ls, rs) = (syms[l as usize], syms[r as usize]);
            if ls.sym == NO_SYM || rs.sym == NO_SYM {
                return;
            }
            if let Some(&(rank, merged)) = self.merges.get(&(ls.sym, rs.sym)) {
                heap.push(Bigram {
                    left: l,
                    right: r,
                    rank,
                    size: ls.n + rs.n,
                    merged,
                });
            }
        };
        for i in 1..syms.len() as i32 {
            add(&syms, &mut heap, i - 1, i);
        }
        while let Some(bg) = heap.pop() {
            let (l, r) = (bg.left as usize, bg.right as usize);
            if syms[l].n == 0 || syms[r].n == 0 || syms[l].n + syms[r].n != bg.size {
                continue;
            }
            syms[l].n += syms[r].n;
            syms[l].sym = bg.merged;
            syms[r].n = 0;
            syms[l].next = syms[r].next;
            let rn = syms[r].next;
            if rn >= 0 {
                syms[rn as usize].prev = bg.left;
            }
            let (p, nx) = (syms[l].prev, syms[l].next);
            add(&syms, &mut heap, p, bg.left);
            add(&syms, &mut heap, bg.left, nx);
        }
        let mut i = 0i32;
        while i != -1 {
            let s = syms[i as usize];
            let tok = if s.sym == NO_SYM {
                None
            } else {
                self.sym_token[s.sym as usize]
            };
            match tok {
                Some(id) => emit(id, s.start, s.start + s.n),
                None => {
                    for &b in &bytes[s.start..s.start + s.n] {
                        for &id in &self.byte_fallback[b as usize] {
                            emit(id, s.start, s.start + s.n);
                        }
                    }
                }
            }
            i = s.next;
        }
    }
}
