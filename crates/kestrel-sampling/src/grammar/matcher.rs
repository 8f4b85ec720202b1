//! `GrammarMatcher`: a pushdown automaton over Unicode code points, as llama.cpp's grammar
//! (`llama_grammar_advance_stack` / `llama_grammar_accept`): the state is a set of stacks of
//! grammar positions, each topped by a character class. Stacks are hash-consed (a stack is an
//! id for a (position, rest-of-stack) pair) and sets of stacks are interned, so a state is one
//! integer, transitions are memoized, and the trie walk that computes the token mask costs a
//! table lookup per trie edge. Tokens may end inside a UTF-8 character: the partial character
//! is kept, as llama.cpp's `llama_partial_utf8`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use super::completion::{MinLengths, INF};
use super::token_trie::{byte_group, TokenMask, TokenTrie, GROUP_COUNT, INVALID_UTF8};
use super::{Compiled, Grammar, Sym};
use crate::error::SamplingError;

/// FxHash: fast hashing of small integer keys.
#[derive(Default, Clone, Copy)]
struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// The empty stack (the grammar has been fully matched along this path).
const NIL: u32 = u32::MAX;
/// The empty set of stacks: no continuation is possible.
const DEAD: u32 = 0;
const UNKNOWN: u32 = u32::MAX;

/// An incomplete UTF-8 character: the bits so far and how many continuation bytes remain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct Partial {
    value: u32,
    remain: u8,
}

/// Hash-consed stacks, interned stack sets and memoized transitions for one grammar.
#[derive(Debug)]
struct Engine {
    g: Arc<Compiled>,
    /// Stack node `id` = (position on top, id of the rest of the stack or NIL).
    nodes: Vec<(u32, u32)>,
    node_ids: FxMap<(u32, u32), u32>,
    /// Expansion of a stack to stacks topped by terminals (or NIL): ranges into `expand_pool`.
    expanded: FxMap<u32, (u32, u32)>,
    expand_pool: Vec<u32>,
    /// Interned sets of stacks: `sets[id]` is a range into `set_pool`; set 0 is DEAD (empty).
    sets: Vec<(u32, u32)>,
    set_pool: Vec<u32>,
    set_ids: FxMap<Box<[u32]>, u32>,
    /// Per set: does it contain the empty stack.
    set_complete: Vec<bool>,
    /// `ascii[set * 128 + c]`: the set after accepting ASCII `c` (UNKNOWN until computed).
    ascii: Vec<u32>,
    /// Transitions on non-ASCII code points.
    trans: FxMap<(u32, u32), u32>,
    /// Per set: byte groups whose every byte leads to one common next set, and that set
    /// (`INVALID_UTF8` in the groups = not computed yet).
    uniform: Vec<(u64, u32)>,
    scratch: Vec<u32>,
    todo: Vec<u32>,
    seen: FxMap<u32, ()>,
    /// Fewest bytes per rule and per position (shortest completions).
    min: MinLengths,
    /// Per stack node: fewest bytes that empty it (filled in node order: a parent comes first).
    node_cost: Vec<u32>,
    /// Per set: fewest bytes to a complete match (`UNKNOWN` until computed).
    set_cost: Vec<u32>,
}

impl Engine {
    fn new(g: Arc<Compiled>) -> Self {
        let min = MinLengths::new(&g);
        let mut e = Self {
            g,
            nodes: Vec::new(),
            node_ids: FxMap::default(),
            expanded: FxMap::default(),
            expand_pool: Vec::new(),
            sets: Vec::new(),
            set_pool: Vec::new(),
            set_ids: FxMap::default(),
            set_complete: Vec::new(),
            ascii: Vec::new(),
            trans: FxMap::default(),
            uniform: Vec::new(),
            scratch: Vec::new(),
            todo: Vec::new(),
            seen: FxMap::default(),
            min,
            node_cost: Vec::new(),
            set_cost: Vec::new(),
        };
        let dead = e.intern_set(&mut Vec::new());
        debug_assert_eq!(dead, DEAD);
        e
    }

    fn push(&mut self, pos: u32, parent: u32) -> u32 {
        let next = self.nodes.len() as u32;
        let id = *self.node_ids.entry((pos, parent)).or_insert(next);
        if id == next {
            self.nodes.push((pos, parent));
        }
        id
    }

    /// The stack for "continue at `pos`, then `parent`": pops when `pos` is the end of an alternative.
    fn cont(&mut self, pos: u32, parent: u32) -> u32 {
        if self.g.syms[pos as usize] == Sym::End {
            parent
        } else {
            self.push(pos, parent)
        }
    }

    /// Expands rule references on top of `stack` until every stack is topped by a terminal.
    fn expand(&mut self, stack: u32) -> (u32, u32) {
        if let Some(&r) = self.expanded.get(&stack) {
            return r;
        }
        let mut out = Vec::new();
        let mut todo = std::mem::take(&mut self.todo);
        let mut seen = std::mem::take(&mut self.seen);
        todo.clear();
        seen.clear();
        todo.push(stack);
        while let Some(s) = todo.pop() {
            if seen.insert(s, ()).is_some() {
                continue;
            }
            if s == NIL {
                out.push(NIL);
                continue;
            }
            let (pos, parent) = self.nodes[s as usize];
            match self.g.syms[pos as usize] {
                Sym::Term(_) => out.push(s),
                Sym::Rule(r) => {
                    let after = self.cont(pos + 1, parent);
                    let g = Arc::clone(&self.g);
                    for &start in &g.alts[r as usize] {
                        let ns = self.cont(start, after);
                        todo.push(ns);
                    }
                }
                Sym::End => {} // never on a stack
            }
        }
        self.todo = todo;
        self.seen = seen;
        out.sort_unstable();
        out.dedup();
        let range = (self.expand_pool.len() as u32, out.len() as u32);
        self.expand_pool.extend_from_slice(&out);
        self.expanded.insert(stack, range);
        range
    }

    fn intern_set(&mut self, stacks: &mut Vec<u32>) -> u32 {
        stacks.sort_unstable();
        stacks.dedup();
        if let Some(&id) = self.set_ids.get(stacks.as_slice()) {
            return id;
        }
        let id = self.sets.len() as u32;
        self.sets
            .push((self.set_pool.len() as u32, stacks.len() as u32));
        self.set_pool.extend_from_slice(stacks);
        self.set_complete.push(stacks.contains(&NIL));
        self.set_ids.insert(stacks.clone().into_boxed_slice(), id);
        self.ascii.resize(self.sets.len() * 128, UNKNOWN);
        self.uniform.push((INVALID_UTF8, DEAD));
        self.set_cost.push(UNKNOWN);
        id
    }

    /// Fewest bytes that take stack `s` to the empty stack.
    fn stack_cost(&mut self, s: u32) -> u32 {
        if s == NIL {
            return 0;
        }
        // a node's parent was pushed before it, so costs fill in order
        while self.node_cost.len() <= s as usize {
            let (pos, parent) = self.nodes[self.node_cost.len()];
            let below = if parent == NIL {
                0
            } else {
                self.node_cost[parent as usize]
            };
            self.node_cost
                .push(self.min.rest(pos).saturating_add(below).min(INF));
        }
        self.node_cost[s as usize]
    }

    /// Fewest bytes from `set` to a complete match ([`INF`] when there is none), and the
    /// stack that gives them.
    fn set_cost(&mut self, set: u32) -> (u32, u32) {
        let (start, len) = self.sets[set as usize];
        let mut best = (INF, NIL);
        for i in start..start + len {
            let s = self.set_pool[i as usize];
            let c = self.stack_cost(s);
            if c < best.0 {
                best = (c, s);
            }
        }
        self.set_cost[set as usize] = best.0;
        best
    }

    /// Fewest bytes from `set` to a complete match, memoized.
    fn set_cost_memo(&mut self, set: u32) -> u32 {
        match self.set_cost[set as usize] {
            UNKNOWN => self.set_cost(set).0,
            c => c,
        }
    }

    /// Appends the cheapest completion of `set` (which must have a finite cost).
    fn emit_completion(&mut self, set: u32, out: &mut Vec<u8>) {
        let (_, mut s) = self.set_cost(set);
        let mut work = std::mem::take(&mut self.todo);
        while s != NIL {
            let (pos, parent) = self.nodes[s as usize];
            self.min.emit_rest(&self.g, pos, out, &mut work);
            s = parent;
        }
        self.todo = work;
    }

    fn members(&self, set: u32) -> &[u32] {
        let (start, len) = self.sets[set as usize];
        &self.set_pool[start as usize..(start + len) as usize]
    }

    fn initial(&mut self) -> u32 {
        let root = self.g.root;
        let mut stacks = Vec::new();
        let g = Arc::clone(&self.g);
        for &start in &g.alts[root as usize] {
            let s = self.cont(start, NIL);
            let (a, n) = self.expand(s);
            stacks.extend_from_slice(&self.expand_pool[a as usize..(a + n) as usize]);
        }
        self.intern_set(&mut stacks)
    }

    /// The set after accepting code point `c`, memoized.
    #[inline]
    fn advance(&mut self, set: u32, c: u32) -> u32 {
        if c < 128 {
            let slot = set as usize * 128 + c as usize;
            let hit = self.ascii[slot];
            if hit != UNKNOWN {
                return hit;
            }
            let next = self.compute(set, c);
            self.ascii[slot] = next;
            next
        } else {
            if let Some(&n) = self.trans.get(&(set, c)) {
                return n;
            }
            let next = self.compute(set, c);
            self.trans.insert((set, c), next);
            next
        }
    }

    fn compute(&mut self, set: u32, c: u32) -> u32 {
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let (start, len) = self.sets[set as usize];
        for i in start..start + len {
            let s = self.set_pool[i as usize];
            if s == NIL {
                continue;
            }
            let (pos, parent) = self.nodes[s as usize];
            let Sym::Term(cls) = self.g.syms[pos as usize] else {
                continue;
            };
            if self.g.classes[cls as usize].matches(c) {
                let next = self.cont(pos + 1, parent);
                let (a, n) = self.expand(next);
                out.extend_from_slice(&self.expand_pool[a as usize..(a + n) as usize]);
            }
        }
        let id = self.intern_set(&mut out);
        self.scratch = out;
        id
    }

    /// The byte groups ([`byte_group`]) all of whose bytes lead from `set` to one common,
    /// live set, and that set. Non-ASCII bytes count when every stack top treats all non-ASCII
    /// code points alike and one of them leads there. A trie subtree of height `h` whose
    /// tokens are valid UTF-8 and only use groups that stay uniform along `h` such steps is
    /// allowed whole, without walking it (a string body loops on itself; a length-bounded one
    /// counts down).
    fn uniform(&mut self, set: u32) -> (u64, u32) {
        let known = self.uniform[set as usize];
        if known.0 & INVALID_UTF8 == 0 {
            return known;
        }
        let mut next = [DEAD; 128];
        for b in 0..128u8 {
            next[b as usize] = self.advance(set, u32::from(b));
        }
        // the common target: the one most bytes lead to (ties: the smaller set id)
        let mut counts: Vec<(u32, u32)> = Vec::new();
        for &n in next.iter().filter(|&&n| n != DEAD) {
            match counts.iter_mut().find(|(s, _)| *s == n) {
                Some(c) => c.1 += 1,
                None => counts.push((n, 1)),
            }
        }
        let target = counts
            .iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
            .map_or(DEAD, |c| c.0);
        let mut groups = 0u64;
        if target != DEAD {
            let mut broken = 0u64;
            for b in 0..128u8 {
                if next[b as usize] != target {
                    broken |= 1 << byte_group(b);
                }
            }
            let uniform = self.members(set).iter().all(|&s| {
                s == NIL
                    || match self.g.syms[self.nodes[s as usize].0 as usize] {
                        Sym::Term(cls) => {
                            self.g.classes[cls as usize].non_ascii_uniform().is_some()
                        }
                        _ => false,
                    }
            });
            if !(uniform && self.advance(set, 0x4E00) == target) {
                broken |= 1 << byte_group(0x80);
            }
            groups = ((1u64 << GROUP_COUNT) - 1) & !broken;
        }
        self.uniform[set as usize] = (groups, target);
        (groups, target)
    }

    /// True when every token below a trie node (byte groups `groups`, height `height`) is
    /// accepted from `set` by uniform steps alone.
    fn subtree_allowed(&mut self, mut set: u32, groups: u64, height: u8) -> bool {
        if groups & INVALID_UTF8 != 0 {
            return false;
        }
        for _ in 0..height {
            let (ok, next) = self.uniform(set);
            if groups & !ok != 0 {
                return false;
            }
            if next == set {
                return true; // a loop: every further step is the same
            }
            set = next;
        }
        true
    }

    /// True when some completion of the partial character is accepted by some stack
    /// (llama.cpp's `llama_grammar_match_partial_char`, exact for negated classes).
    fn partial_possible(&self, set: u32, p: Partial) -> bool {
        if p.remain == 1 && p.value < 2 {
            return false; // overlong 2-byte encoding of a 7-bit char
        }
        let shift = 6 * u32::from(p.remain);
        let mut lo = p.value << shift;
        let hi = (lo | ((1 << shift) - 1)).min(0x10FFFF);
        if lo == 0 {
            lo = match p.remain {
                2 => 1 << 11,
                3 => 1 << 16,
                _ => lo,
            };
        }
        self.members(set).iter().any(|&s| {
            s != NIL
                && matches!(self.g.syms[self.nodes[s as usize].0 as usize],
                    Sym::Term(cls) if self.g.classes[cls as usize].matches_any_in(lo, hi))
        })
    }

    /// Consumes one byte; `None` when it cannot be accepted. UTF-8 is decoded strictly (no
    /// overlong forms, surrogates or code points past U+10FFFF), so every partial character
    /// that is kept has a valid completion.
    #[inline]
    fn step(&mut self, set: u32, p: Partial, b: u8) -> Option<(u32, Partial)> {
        if p.remain == 0 {
            if b < 0x80 {
                let n = self.advance(set, u32::from(b));
                return (n != DEAD).then_some((n, Partial::default()));
            }
            let (value, remain) = match b {
                0xC2..=0xDF => (u32::from(b & 0x1F), 1),
                0xE0..=0xEF => (u32::from(b & 0x0F), 2),
                0xF0..=0xF4 => (u32::from(b & 0x07), 3),
                _ => return None,
            };
            let np = Partial { value, remain };
            return self.partial_possible(set, np).then_some((set, np));
        }
        if b & 0xC0 != 0x80 {
            return None;
        }
        let value = (p.value << 6) | u32::from(b & 0x3F);
        // second byte of a 3- or 4-byte sequence: rule out overlongs, surrogates, > U+10FFFF
        let ok = match (p.remain, p.value) {
            (2, 0x0) => value >= 0x20, // E0: A0..BF
            (2, 0xD) => value < 0x360, // ED: 80..9F
            (3, 0x0) => value >= 0x10, // F0: 90..BF
            (3, 0x4) => value < 0x110, // F4: 80..8F
            _ => true,
        };
        if !ok {
            return None;
        }
        if p.remain == 1 {
            let n = self.advance(set, value);
            return (n != DEAD).then_some((n, Partial::default()));
        }
        let np = Partial {
            value,
            remain: p.remain - 1,
        };
        self.partial_possible(set, np).then_some((set, np))
    }
}

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
