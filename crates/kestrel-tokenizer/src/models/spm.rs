//! llama.cpp's SentencePiece tokenizer: start from UTF-8 characters, repeatedly merge the
//! adjacent pair whose concatenation is a token with the highest score (ties: leftmost first),
//! then emit each symbol's token, or its bytes as `<0xNN>` tokens when it has none.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::error::{Result, TokenizerError};
use crate::vocab::Vocab;

/// The SentencePiece (`llama`) model.
#[derive(Debug)]
pub struct SpmModel {
    pub(crate) vocab: Arc<Vocab>,
    /// Byte-fallback token of each byte (`<0xNN>`, else the byte itself as a token).
    byte_tokens: [Option<u32>; 256],
}

#[derive(Clone, Copy)]
struct Sym {
    prev: i32,
    next: i32,
    start: usize,
    n: usize,
}

struct Bigram {
    left: i32,
    right: i32,
    score: f32,
    size: usize,
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
    // max-heap: higher score first, then the leftmost pair
    fn cmp(&self, o: &Self) -> Ordering {
        match self.score.partial_cmp(&o.score) {
            Some(Ordering::Equal) | None => o.left.cmp(&self.left),
            Some(ord) => ord,
        }
    }
}

impl SpmModel {
    /// Build the model over a vocabulary.
    pub fn new(vocab: Arc<Vocab>) -> SpmModel {
        let mut byte_tokens = [None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            let hex = format!("<0x{b:02X}>");
            *slot = vocab
                .lookup(hex.as_bytes())
                .or_else(|| vocab.lookup(&[b as u8]));
        }
        SpmModel { vocab, byte_tokens }
    }

    pub(crate) fn tokenize_ids(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        self.run(text, &mut |id, _, _| out.push(id))
    }

    pub(crate) fn tokenize_spans(
        &self,
        text: &str,
        ids: &mut Vec<u32>,
        spans: &mut Vec<(usize, usize)>,
    ) -> Result<()> {
        self.run(text, &mut |id, a, b| {
            ids.push(id);
            spans.push((a, b));
        })
    }

    fn run(&self, text: &str, emit: &mut impl FnMut(u32, usize, usize)) -> Result<()> {
        let bytes = text.as_bytes();
        let mut syms: Vec<Sym> = Vec::with_capacity(bytes.len());
        for (i, (off, c)) in text.char_indices().enumerate() {
            let n = c.len_utf8();
            syms.push(Sym {
                prev: i as i32 - 1,
                next: if off + n == bytes.len() {
                    -1
                } else {
                    i as i32 + 1
                },
                start: off,
                n,
            });
        }
        if syms.is_empty() {
            return Ok(());
        }
        let mut heap = BinaryHeap::with_capacity(syms.len());
        let vocab = &*self.vocab;
        let try_add = |syms: &[Sym], heap: &mut BinaryHeap<Bigram>, l: i32, r: i32| {
            if l < 0 || r < 0 {
                return;
            }
            let (ls, rs) = (syms[l as usize], syms[r as usize]);
            let piece = &bytes[ls.start..ls.start + ls.n + rs.n];
            if let Some(id) = vocab.lookup(piece) {
                heap.push(Bigram {
                    left: l,
                    right: r,
                    score: vocab.scores.get(id as usize).copied().unwrap_or(0.0),
                    size: piece.len(),
                });
            }
        };
        for i in 1..syms.len() as i32 {
            try_add(&syms, &mut heap, i - 1, i);
        }
        while let Some(bg) = heap.pop() {
            let (l, r) = (bg.left as usize, bg.right as usize);
            if syms[l].n == 0 || syms[r].n == 0 || syms[l].n + syms[r].n != bg.size {
                continue;
            }
            syms[l].n += syms[r].n;
            syms[r].n = 0;
            syms[l].next = syms[r].next;
            let rn = syms[r].next;
            if rn >= 0 {
                syms[rn as usize].prev = bg.left;
            }
            let (p, nx) = (syms[l].prev, syms[l].next);
            try_add(&syms, &mut heap, p, bg.left);
            try_add(&syms, &mut heap, bg.left, nx);
        }
        let mut i = 0i32;
        while i != -1 {
            let s = syms[i as usize];
            let piece = &bytes[s.start..s.start + s.n];
            match vocab.lookup(piece) {
                Some(id) => emit(id, s.start, s.start + s.n),
                None => {
                    for &b in piece {
                        let id = self.byte_tokens[b as usize].ok_or_else(|| {
                            TokenizerError::MissingToken(format!("byte fallback <0x{b:02X}>"))
                        })?;
                        emit(id, s.start, s.start + s.n);
                    }
                }
            }
            i = s.next;
        }
        Ok(())
    }
}
