//! `GrammarMatcher`: a pushdown automaton over Unicode code points, as llama.cpp's grammar
//! (`llama_grammar_advance_stack` / `llama_grammar_accept`): the state is a set of stacks of
//! grammar positions, each topped by a character class. Stacks are hash-consed (a stack is an
//! id for a (position, rest-of-stack) pair) and sets of stacks are interned, so a state is one
//! integer, transitions are memoized, and the trie walk that computes the token mask costs a
//! table lookup per trie edge. Tokens may end inside a UTF-8 character: the partial character
//! is kept, as llama.cpp's `llama_partial_utf8`.

use std::sync::Arc;

use super::completion::INF;
use super::token_trie::{TokenMask, TokenTrie};
use super::Grammar;
use crate::error::SamplingError;

mod engine;
use engine::*;

/// A cached mask for one matcher state.
#[derive(Debug)]
struct CachedMask {
    key: (u32, Partial),
    bits: Vec<u64>,
    used: u64,
}

const MASK_CACHE: usize = 32;

/// UTF-8 continuation bytes, to finish a character a token left open.
const CONTINUATION_BYTES: [u8; 64] = {
    let mut out = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        out[i] = 0x80 + i as u8;
        i += 1;
    }
    out
};

/// Matches generated text against a [`Grammar`], one token at a time.
///
/// ```
/// use kestrel_sampling::{Grammar, GrammarMatcher, TokenMask, TokenTrie};
/// let g = Grammar::from_gbnf(r#"root ::= "{" [0-9]+ "}""#).unwrap();
/// let vocab: Vec<Vec<u8>> = ["{", "}", "1", "23", "{4", "x", ""].iter().map(|s| s.as_bytes().to_vec()).collect();
/// let trie = TokenTrie::new(&vocab, &[6]);
/// let mut mask = TokenMask::new(vocab.len());
/// let mut m = GrammarMatcher::new(&g);
/// m.fill_mask(&trie, &mut mask);
/// assert_eq!(mask.allowed().collect::<Vec<_>>(), vec![0, 4]); // "{" and "{4"
/// m.accept_token(&trie, 4).unwrap();
/// m.fill_mask(&trie, &mut mask);
/// assert_eq!(mask.allowed().collect::<Vec<_>>(), vec![1, 2, 3]);
/// m.accept_token(&trie, 1).unwrap();
/// assert!(m.is_complete());
/// m.fill_mask(&trie, &mut mask);
/// assert_eq!(mask.allowed().collect::<Vec<_>>(), vec![6]); // only end of generation
/// ```
#[derive(Debug)]
pub struct GrammarMatcher {
    engine: Engine,
    initial: u32,
    set: u32,
    partial: Partial,
    walk: Vec<(u32, u32, Partial)>,
    cache: Vec<CachedMask>,
    cache_trie: u64,
    clock: u64,
}

impl GrammarMatcher {
    /// A matcher at the start of the grammar.
    pub fn new(grammar: &Grammar) -> Self {
        let mut engine = Engine::new(Arc::clone(&grammar.inner));
        let initial = engine.initial();
        Self {
            engine,
            initial,
            set: initial,
            partial: Partial::default(),
            walk: Vec::new(),
            cache: Vec::new(),
            cache_trie: 0,
            clock: 0,
        }
    }

    /// Back to the start of the grammar (memoized transitions are kept).
    pub fn reset(&mut self) {
        self.set = self.initial;
        self.partial = Partial::default();
    }

    /// True when the text so far is a complete match (generation may end here).
    pub fn is_complete(&self) -> bool {
        self.partial.remain == 0 && self.engine.set_complete[self.set as usize]
    }

    /// True when the text so far can be continued by at least one character.
    pub fn can_continue(&self) -> bool {
        self.engine.members(self.set).iter().any(|&s| s != NIL)
    }

    fn run(&mut self, bytes: &[u8]) -> Option<(u32, Partial)> {
        let (mut set, mut p) = (self.set, self.partial);
        for &b in bytes {
            (set, p) = self.engine.step(set, p, b)?;
        }
        Some((set, p))
    }

    /// Accepts raw bytes (a token's text); on rejection the state is unchanged.
    pub fn accept_bytes(&mut self, bytes: &[u8]) -> Result<(), SamplingError> {
        match self.run(bytes) {
            Some((set, p)) => {
                self.set = set;
                self.partial = p;
                Ok(())
            }
            None => Err(SamplingError::GrammarRejected(format!(
                "{:?}",
                String::from_utf8_lossy(bytes)
            ))),
        }
    }

    /// Accepts a string.
    pub fn accept_str(&mut self, s: &str) -> Result<(), SamplingError> {
        self.accept_bytes(s.as_bytes())
    }

    /// True when the bytes could be accepted now (the state is not changed).
    pub fn accepts_bytes(&mut self, bytes: &[u8]) -> bool {
        self.run(bytes).is_some()
    }

    /// True when token `id` is allowed now: its bytes are accepted, or it is an
    /// end-of-generation token and the grammar is complete. Empty non-EOG tokens never are.
    pub fn accepts_token(&mut self, trie: &TokenTrie, id: u32) -> bool {
        if trie.is_eog(id) {
            return self.is_complete();
        }
        match trie.token_bytes(id) {
            Some(b) if !b.is_empty() => self.accepts_bytes(b),
            _ => false,
        }
    }

    /// Accepts token `id` (an end-of-generation token is accepted only when complete, and
    /// leaves the state unchanged).
    pub fn accept_token(&mut self, trie: &TokenTrie, id: u32) -> Result<(), SamplingError> {
        if trie.is_eog(id) {
            return if self.is_complete() {
                Ok(())
            } else {
                Err(SamplingError::GrammarRejected(format!(
                    "end-of-generation token {id} before the grammar is complete"
                )))
            };
        }
        match trie.token_bytes(id) {
            None => Err(SamplingError::TokenOutOfRange {
                id,
                vocab_size: trie.vocab_size(),
            }),
            Some([]) => Err(SamplingError::GrammarRejected(format!(
                "token {id} has no text (special token)"
            ))),
            Some(b) => self.accept_bytes(b),
        }
    }

    /// Fills `mask` with the tokens allowed now: tokens whose bytes the grammar accepts (a
    /// token may end inside a UTF-8 character if a completion is allowed), and the
    /// end-of-generation tokens when the grammar is complete.
    pub fn fill_mask(&mut self, trie: &TokenTrie, mask: &mut TokenMask) {
        if mask.len() != trie.vocab_size() {
            mask.resize(trie.vocab_size());
        }
        if self.cache_trie != trie.id() {
            self.cache.clear();
            self.cache_trie = trie.id();
        }
        self.clock += 1;
        let key = (self.set, self.partial);
        if let Some(c) = self.cache.iter_mut().find(|c| c.key == key) {
            c.used = self.clock;
            mask.bits.copy_from_slice(&c.bits);
            return;
        }
        mask.clear();
        if self.is_complete() {
            for &e in trie.eog_tokens() {
                mask.allow(e);
            }
        }
        self.walk_trie(trie, mask);
        // remember it, evicting the least recently used
        if self.cache.len() < MASK_CACHE {
            self.cache.push(CachedMask {
                key,
                bits: mask.bits.clone(),
                used: self.clock,
            });
        } else if let Some(old) = self.cache.iter_mut().min_by_key(|c| c.used) {
            old.key = key;
            old.bits.copy_from_slice(&mask.bits);
            old.used = self.clock;
        }
    }

    fn walk_trie(&mut self, trie: &TokenTrie, mask: &mut TokenMask) {
        let engine = &mut self.engine;
        let walk = &mut self.walk;
        walk.clear();
        walk.push((0, self.set, self.partial));
        while let Some((node, set, p)) = walk.pop() {
            let (a, b) = (
                trie.child_start[node as usize] as usize,
                trie.child_start[node as usize + 1] as usize,
            );
            for e in a..b {
                let Some((nset, np)) = engine.step(set, p, trie.edge_byte[e]) else {
                    continue;
                };
                let child = trie.edge_node[e] as usize;
                let end = trie.subtree_end[child] as usize;
                if np.remain == 0
                    && end > child + 1
                    && engine.subtree_allowed(
                        nset,
                        trie.subtree_groups[child],
                        trie.subtree_height[child],
                    )
                {
                    // every token at and below `child` loops on this state: all allowed
                    for &t in &trie.node_tokens
                        [trie.tok_start[child] as usize..trie.tok_start[end] as usize]
                    {
                        mask.allow(t);
                    }
                    continue;
                }
                for &t in &trie.node_tokens
                    [trie.tok_start[child] as usize..trie.tok_start[child + 1] as usize]
                {
                    mask.allow(t);
                }
                if end > child + 1 {
                    walk.push((child as u32, nset, np));
                }
            }
        }
    }

    /// Forgets the cached masks (the next [`GrammarMatcher::fill_mask`] walks the trie again).
    pub fn clear_mask_cache(&mut self) {
        self.cache.clear();
    }

    /// The shortest text that completes the grammar from here (empty when it is complete
    /// already), when it is at most `max_bytes` long; `None` when there is none, or none that
    /// short. Computed from the grammar's structure (each rule's fewest bytes), so its cost
    /// grows with the completion's length, not with the nesting depth or the alphabet. Classes
    /// are written as their first printable ASCII character (else newline, tab, other ASCII,
    /// the smallest non-ASCII character). The generator uses it (through
    /// [`shortest_completion_into`](Self::shortest_completion_into), which reuses a buffer) to
    /// close a constrained output (brackets, quotes, required fields) before the token budget
    /// runs out.
    ///
    /// ```
    /// use kestrel_sampling::{Grammar, GrammarMatcher};
    /// let g = Grammar::from_gbnf(r#"root ::= "[" [0-9]+ ("," [0-9]+)* "]""#).unwrap();
    /// let mut m = GrammarMatcher::new(&g);
    /// m.accept_str("[12,3").unwrap();
    /// assert_eq!(m.shortest_completion(16).as_deref(), Some(&b"]"[..]));
    /// m.accept_str(",").unwrap();
    /// assert_eq!(m.shortest_completion(16).as_deref(), Some(&b"0]"[..]));
    /// assert_eq!(m.completion_len(), Some(2));
    /// ```
    pub fn shortest_completion(&mut self, max_bytes: usize) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.shortest_completion_into(max_bytes, &mut out)
            .then_some(out)
    }

    /// [`shortest_completion`](Self::shortest_completion) into `out` (cleared first); false
    /// when none was found. A warm matcher allocates nothing here beyond `out`'s growth.
    pub fn shortest_completion_into(&mut self, max_bytes: usize, out: &mut Vec<u8>) -> bool {
        out.clear();
        let Some((set, cost)) = self.finish_char(Some(&mut *out)) else {
            out.clear();
            return false;
        };
        if cost >= INF || out.len() + cost as usize > max_bytes {
            out.clear();
            return false;
        }
        self.engine.emit_completion(set, out);
        true
    }

    /// The length of [`shortest_completion`](Self::shortest_completion) (unbounded), without
    /// writing it: cheap enough to ask after every token. `None` when the grammar cannot be
    /// completed from here.
    pub fn completion_len(&mut self) -> Option<usize> {
        let before = usize::from(self.partial.remain);
        let (_, cost) = self.finish_char(None)?;
        (cost < INF).then_some(before + cost as usize)
    }

    /// Finishes a character a token left open (the first continuation bytes that are
    /// accepted, the last one chosen for the cheapest completion after it), appending its
    /// bytes to `out`; the set reached and its completion cost.
    fn finish_char(&mut self, mut out: Option<&mut Vec<u8>>) -> Option<(u32, u32)> {
        let (mut set, mut p) = (self.set, self.partial);
        while p.remain > 0 {
            let mut best: Option<(u32, (u32, Partial), u8)> = None;
            for &b in &CONTINUATION_BYTES {
                let Some(next) = self.engine.step(set, p, b) else {
                    continue;
                };
                if next.1.remain > 0 {
                    best = Some((0, next, b));
                    break;
                }
                let c = self.engine.set_cost_memo(next.0);
                if best.is_none_or(|(bc, _, _)| c < bc) {
                    best = Some((c, next, b));
                }
            }
            let (_, next, b) = best?;
            if let Some(out) = out.as_deref_mut() {
                out.push(b);
            }
            (set, p) = next;
        }
        Some((set, self.engine.set_cost_memo(set)))
    }

    /// Drops every memoized transition and cached mask (memory grows with the number of
    /// distinct states visited; long-lived matchers may call this between generations).
    pub fn clear_caches(&mut self) {
        let g = Arc::clone(&self.engine.g);
        *self = Self::new(&Grammar { inner: g });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(src: &str) -> Grammar {
        Grammar::from_gbnf(src).unwrap()
    }

    fn accepts(src: &str, text: &str) -> bool {
        let mut m = GrammarMatcher::new(&g(src));
        m.accept_str(text).is_ok() && m.is_complete()
    }

    #[test]
    fn completion_of_deep_nesting_is_found_and_closes() {
        let src = r#"root ::= v
v ::= "[" ws (v ("," ws v)*)? "]" | "{" ws "\"" [a-z]* "\"" ws ":" ws v "}" | [0-9]+
ws ::= [ \t\n]*"#;
        let mut m = GrammarMatcher::new(&g(src));
        let mut text = String::new();
        for i in 0..300 {
            text.push_str(if i % 2 == 0 { "[ " } else { "{\"k\": " });
        }
        m.accept_str(&text).unwrap();
        // 150 "]" and, for each object, its value's closing: "0}" for the innermost object
        let need = m.completion_len().unwrap();
        assert_eq!(need, 301);
        assert!(m.shortest_completion(300).is_none());
        let tail = m.shortest_completion(need).unwrap();
        assert!(
            tail.starts_with(b"0}]"),
            "{}",
            String::from_utf8_lossy(&tail)
        );
        m.accept_bytes(&tail).unwrap();
        assert!(m.is_complete());
        assert_eq!(m.completion_len(), Some(0));
    }

    #[test]
    fn completion_finishes_an_open_character_first() {
        let mut m = GrammarMatcher::new(&g(r#"root ::= [ぁ-ゟ] "!""#));
        m.accept_bytes(&"ひ".as_bytes()[..1]).unwrap();
        assert_eq!(m.completion_len(), Some(3));
        let tail = m.shortest_completion(8).unwrap();
        m.accept_bytes(&tail).unwrap();
        assert!(m.is_complete());
        let mut empty = GrammarMatcher::new(&g(r#"root ::= "a" [^\x00-\U0010FFFF]"#));
        empty.accept_str("a").unwrap();
        assert_eq!(empty.completion_len(), None);
        assert!(empty.shortest_completion(64).is_none());
    }

    #[test]
    fn sequences_alternatives_repetitions() {
        let src = r#"root ::= "a" ("b" | "cd")* [0-9]{2,3} "!"?"#;
        for ok in ["a12", "ab12", "acdb123", "a999!", "abcdcd00!"] {
            assert!(accepts(src, ok), "{ok}");
        }
        for bad in ["", "a1", "a1234", "b12", "ac12", "a12!!"] {
            assert!(!accepts(src, bad), "{bad}");
        }
    }

    #[test]
    fn exact_and_open_repetition_counts() {
        assert!(accepts(r#"root ::= "x"{3}"#, "xxx"));
        assert!(!accepts(r#"root ::= "x"{3}"#, "xx"));
        assert!(!accepts(r#"root ::= "x"{3}"#, "xxxx"));
        assert!(accepts(r#"root ::= "x"{2,}"#, "xxxxxxx"));
        assert!(!accepts(r#"root ::= "x"{2,}"#, "x"));
        assert!(accepts(r#"root ::= "ab"{0,2}"#, ""));
        assert!(accepts(r#"root ::= "ab"{0,2}"#, "abab"));
        assert!(!accepts(r#"root ::= "ab"{0,2}"#, "ababab"));
    }

    #[test]
    fn negation_any_and_unicode() {
        assert!(accepts(r#"root ::= [^a-c]+ "." ."#, "xyz.é"));
        assert!(!accepts(r#"root ::= [^a-c]+"#, "xbz"));
        assert!(accepts("root ::= [ぁ-ゟ]+", "ひらがな"));
        assert!(!accepts("root ::= [ぁ-ゟ]+", "カ"));
    }

    #[test]
    fn partial_utf8_across_tokens() {
        let mut m = GrammarMatcher::new(&g("root ::= [ぁ-ゟ] \"!\""));
        let hi = "ひ".as_bytes();
        m.accept_bytes(&hi[..1]).unwrap();
        assert!(!m.is_complete());
        m.accept_bytes(&hi[1..2]).unwrap();
        m.accept_bytes(&hi[2..]).unwrap();
        m.accept_str("!").unwrap();
        assert!(m.is_complete());
        // a lead byte whose completions are all outside the class is rejected at once
        let mut m = GrammarMatcher::new(&g("root ::= [ぁ-ゟ]"));
        assert!(m.accept_bytes(&"é".as_bytes()[..1]).is_err());
        assert!(m.accept_bytes(&[0xFF]).is_err());
        assert!(m.accept_bytes(&[0x80]).is_err());
    }

    #[test]
    fn invalid_utf8_is_rejected() {
        let any = g("root ::= .*");
        for bad in [
            &[0xC0, 0x80][..],
            &[0xE0, 0x80, 0x80],
            &[0xED, 0xA0, 0x80],
            &[0xF0, 0x80, 0x80, 0x80],
            &[0xF4, 0x90, 0x80, 0x80],
            &[0xF8],
        ] {
            assert!(
                GrammarMatcher::new(&any).accept_bytes(bad).is_err(),
                "{bad:?}"
            );
        }
        for c in [
            '\u{7FF}',
            '\u{800}',
            '\u{D7FF}',
            '\u{E000}',
            '\u{10000}',
            '\u{10FFFF}',
        ] {
            let mut m = GrammarMatcher::new(&any);
            m.accept_str(&c.to_string()).unwrap();
            assert!(m.is_complete());
        }
    }

    #[test]
    fn rejection_leaves_state_unchanged() {
        let mut m = GrammarMatcher::new(&g(r#"root ::= "abc""#));
        m.accept_str("a").unwrap();
        assert!(m.accept_str("bx").is_err());
        m.accept_str("bc").unwrap();
        assert!(m.is_complete() && !m.can_continue());
        m.reset();
        assert!(!m.is_complete());
        m.accept_str("abc").unwrap();
    }

    #[test]
    fn mask_with_partial_tokens_and_eog() {
        let gr = g(r#"root ::= "é" | "ab""#);
        let e = "é".as_bytes();
        let vocab = vec![
            vec![e[0]],
            vec![e[1]],
            e.to_vec(),
            b"a".to_vec(),
            b"ab".to_vec(),
            b"b".to_vec(),
            vec![0xC3, 0xA8],
            Vec::new(),
            Vec::new(),
        ];
        let trie = TokenTrie::new(&vocab, &[7]);
        let mut mask = TokenMask::new(vocab.len());
        let mut m = GrammarMatcher::new(&gr);
        m.fill_mask(&trie, &mut mask);
        assert_eq!(mask.allowed().collect::<Vec<_>>(), vec![0, 2, 3, 4]);
        m.accept_token(&trie, 0).unwrap();
        m.fill_mask(&trie, &mut mask);
        assert_eq!(mask.allowed().collect::<Vec<_>>(), vec![1]);
        m.accept_token(&trie, 1).unwrap();
        m.fill_mask(&trie, &mut mask);
        assert_eq!(mask.allowed().collect::<Vec<_>>(), vec![7]);
        assert!(m.accept_token(&trie, 8).is_err());
        m.accept_token(&trie, 7).unwrap();
    }

    #[test]
    fn mask_cache_returns_the_same_mask() {
        let gr = g(r#"root ::= "\"" [a-z]* "\"""#);
        let vocab: Vec<Vec<u8>> = ["\"", "a", "bc", "\"x", "z\"", "Q"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let trie = TokenTrie::new(&vocab, &[]);
        let mut mask = TokenMask::new(vocab.len());
        let mut m = GrammarMatcher::new(&gr);
        m.accept_str("\"ab").unwrap();
        m.fill_mask(&trie, &mut mask);
        let first = mask.clone();
        m.accept_str("c").unwrap(); // same state: a string body loops
        m.fill_mask(&trie, &mut mask);
        assert_eq!(mask, first);
        assert_eq!(first.allowed().collect::<Vec<_>>(), vec![0, 1, 2, 4]);
    }
}
