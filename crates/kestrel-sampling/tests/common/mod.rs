//! Test support: a small synthetic vocabulary and a random constrained walk.

#![allow(dead_code)]

pub mod big_vocab;

use kestrel_sampling::{Grammar, GrammarMatcher, TokenMask, TokenTrie};

/// Every single byte except NUL, a few multi-byte strings (words, JSON and C pieces, UTF-8
/// characters whole and split), two empty control tokens and an empty EOG token (the last id).
pub fn synthetic_vocab() -> (Vec<Vec<u8>>, u32) {
    let mut v: Vec<Vec<u8>> = (1u8..=255).map(|b| vec![b]).collect();
    for s in [
        "true",
        "false",
        "null",
        "\": ",
        "{\"",
        "\"}",
        "\", \"",
        "[1",
        "],",
        "123",
        "0.5",
        "e+7",
        "  ",
        "\n",
        "\n  ",
        "name",
        "id",
        "\"name\"",
        "\"a\": ",
        "1. ",
        "e4 ",
        "Nf3",
        "O-O",
        "int ",
        "float ",
        "char ",
        "while",
        "for",
        "return ",
        "if",
        "else",
        "(x)",
        "= ",
        ";",
        "{",
        "}",
        "//",
        "/*",
        "*/",
        "x",
        "foo",
        "- ",
        "item",
        "ひらがな",
        "カタカナ",
        "漢字",
        "。",
        "、",
        "é",
        "ü",
        "🦀",
        "2024-01-15",
        "T12:30:00Z",
        "-",
        "ab",
        "abc",
        "Hello",
        " world",
        "a1b2",
        "\\n",
        "\\u00e9",
    ] {
        v.push(s.as_bytes().to_vec());
    }
    for s in ["ひ", "漢", "é", "🦀"] {
        let b = s.as_bytes();
        for cut in 1..b.len() {
            v.push(b[..cut].to_vec());
            v.push(b[cut..].to_vec());
        }
    }
    v.push(Vec::new()); // control token
    v.push(Vec::new()); // control token
    v.push(Vec::new()); // EOG
    let eog = (v.len() - 1) as u32;
    (v, eog)
}

/// xorshift64*: a tiny deterministic RNG for the walks.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Outcome of one walk: the bytes generated and whether the walk ended by the EOG token.
pub struct Walk {
    pub bytes: Vec<u8>,
    pub completed: bool,
}

/// Repeatedly picks a random allowed token (closing punctuation and EOG weighted up, so walks
/// end) until EOG or `max_steps`. At every step checks the mask against direct acceptance of
/// every token, and that at least one token is allowed while the grammar is incomplete.
pub fn random_walk(grammar: &Grammar, trie: &TokenTrie, seed: u64, max_steps: usize) -> Walk {
    let mut m = GrammarMatcher::new(grammar);
    let mut mask = TokenMask::new(trie.vocab_size());
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut bytes = Vec::new();
    let mut allowed = Vec::new();
    let mut weights = Vec::new();
    for _ in 0..max_steps {
        m.fill_mask(trie, &mut mask);
        allowed.clear();
        allowed.extend(mask.allowed());
        for t in 0..trie.vocab_size() as u32 {
            assert_eq!(
                mask.is_allowed(t),
                m.accepts_token(trie, t),
                "mask and direct acceptance disagree on token {t} ({:?}) after {:?}",
                String::from_utf8_lossy(trie.token_bytes(t).unwrap_or(&[])),
                String::from_utf8_lossy(&bytes)
            );
        }
        assert!(
            !allowed.is_empty(),
            "dead end after {:?}",
            String::from_utf8_lossy(&bytes)
        );
        weights.clear();
        let steps_done = bytes.len();
        for &t in &allowed {
            let b = trie.token_bytes(t).unwrap_or(&[]);
            let w = if trie.is_eog(t) {
                40 + steps_done as u64
            } else if b.iter().any(|c| b"\"}])\n;".contains(c)) {
                25 + steps_done as u64 / 4
            } else {
                1
            };
            weights.push(w);
        }
        let total: u64 = weights.iter().sum();
        let mut r = rng.next() % total;
        let mut pick = allowed[0];
        for (&t, &w) in allowed.iter().zip(&weights) {
            if r < w {
                pick = t;
                break;
            }
            r -= w;
        }
        m.accept_token(trie, pick)
            .expect("a token from the mask is accepted");
        if trie.is_eog(pick) {
            return Walk {
                bytes,
                completed: true,
            };
        }
        bytes.extend_from_slice(trie.token_bytes(pick).unwrap_or(&[]));
    }
    Walk {
        bytes,
        completed: false,
    }
}

/// True when a fresh matcher accepts the whole string and is complete.
pub fn accepts(grammar: &Grammar, text: &[u8]) -> bool {
    let mut m = GrammarMatcher::new(grammar);
    m.accept_bytes(text).is_ok() && m.is_complete()
}

/// True when a fresh matcher accepts the string as a prefix (complete or not).
pub fn accepts_prefix(grammar: &Grammar, text: &[u8]) -> bool {
    GrammarMatcher::new(grammar).accept_bytes(text).is_ok()
}
