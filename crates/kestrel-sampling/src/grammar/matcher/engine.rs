//! The matcher's engine: hash-consed stacks of grammar positions, interned sets of stacks,
//! memoized transitions (ASCII in a table, other code points in a map), shortest completions
//! and the partial UTF-8 character a token may leave open.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use super::super::completion::{MinLengths, INF};
use super::super::token_trie::{byte_group, GROUP_COUNT, INVALID_UTF8};
use super::super::{Compiled, Sym};

/// FxHash: fast hashing of small integer keys.
#[derive(Default, Clone, Copy)]
pub(super) struct Fx(u64);

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

pub(super) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// The empty stack (the grammar has been fully matched along this path).
pub(super) const NIL: u32 = u32::MAX;
/// The empty set of stacks: no continuation is possible.
pub(super) const DEAD: u32 = 0;
pub(super) const UNKNOWN: u32 = u32::MAX;

/// An incomplete UTF-8 character: the bits so far and how many continuation bytes remain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(super) struct Partial {
    pub(super) value: u32,
    pub(super) remain: u8,
}

/// Hash-consed stacks, interned stack sets and memoized transitions for one grammar.
#[derive(Debug)]
pub(super) struct Engine {
    pub(super) g: Arc<Compiled>,
    /// Stack node `id` = (position on top, id of the rest of the stack or NIL).
    pub(super) nodes: Vec<(u32, u32)>,
    pub(super) node_ids: FxMap<(u32, u32), u32>,
    /// Expansion of a stack to stacks topped by terminals (or NIL): ranges into `expand_pool`.
    pub(super) expanded: FxMap<u32, (u32, u32)>,
    pub(super) expand_pool: Vec<u32>,
    /// Interned sets of stacks: `sets[id]` is a range into `set_pool`; set 0 is DEAD (empty).
    pub(super) sets: Vec<(u32, u32)>,
    pub(super) set_pool: Vec<u32>,
    pub(super) set_ids: FxMap<Box<[u32]>, u32>,
    /// Per set: does it contain the empty stack.
    pub(super) set_complete: Vec<bool>,
    /// `ascii[set * 128 + c]`: the set after accepting ASCII `c` (UNKNOWN until computed).
    pub(super) ascii: Vec<u32>,
    /// Transitions on non-ASCII code points.
    pub(super) trans: FxMap<(u32, u32), u32>,
    /// Per set: byte groups whose every byte leads to one common next set, and that set
    /// (`INVALID_UTF8` in the groups = not computed yet).
    pub(super) uniform: Vec<(u64, u32)>,
    pub(super) scratch: Vec<u32>,
    pub(super) todo: Vec<u32>,
    pub(super) seen: FxMap<u32, ()>,
    /// Fewest bytes per rule and per position (shortest completions).
    pub(super) min: MinLengths,
    /// Per stack node: fewest bytes that empty it (filled in node order: a parent comes first).
    pub(super) node_cost: Vec<u32>,
    /// Per set: fewest bytes to a complete match (`UNKNOWN` until computed).
    pub(super) set_cost: Vec<u32>,
}

impl Engine {
    pub(super) fn new(g: Arc<Compiled>) -> Self {
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

    pub(super) fn push(&mut self, pos: u32, parent: u32) -> u32 {
        let next = self.nodes.len() as u32;
        let id = *self.node_ids.entry((pos, parent)).or_insert(next);
        if id == next {
            self.nodes.push((pos, parent));
        }
        id
    }

    /// The stack for "continue at `pos`, then `parent`": pops when `pos` is the end of an alternative.
    pub(super) fn cont(&mut self, pos: u32, parent: u32) -> u32 {
        if self.g.syms[pos as usize] == Sym::End {
            parent
        } else {
            self.push(pos, parent)
        }
    }

    /// Expands rule references on top of `stack` until every stack is topped by a terminal.
    pub(super) fn expand(&mut self, stack: u32) -> (u32, u32) {
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

    pub(super) fn intern_set(&mut self, stacks: &mut Vec<u32>) -> u32 {
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
    pub(super) fn stack_cost(&mut self, s: u32) -> u32 {
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
    pub(super) fn set_cost(&mut self, set: u32) -> (u32, u32) {
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
    pub(super) fn set_cost_memo(&mut self, set: u32) -> u32 {
        match self.set_cost[set as usize] {
            UNKNOWN => self.set_cost(set).0,
            c => c,
        }
    }

    /// Appends the cheapest completion of `set` (which must have a finite cost).
    pub(super) fn emit_completion(&mut self, set: u32, out: &mut Vec<u8>) {
        let (_, mut s) = self.set_cost(set);
        let mut work = std::mem::take(&mut self.todo);
        while s != NIL {
            let (pos, parent) = self.nodes[s as usize];
            self.min.emit_rest(&self.g, pos, out, &mut work);
            s = parent;
        }
        self.todo = work;
    }

    pub(super) fn members(&self, set: u32) -> &[u32] {
        let (start, len) = self.sets[set as usize];
        &self.set_pool[start as usize..(start + len) as usize]
    }

    pub(super) fn initial(&mut self) -> u32 {
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
    pub(super) fn advance(&mut self, set: u32, c: u32) -> u32 {
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

    pub(super) fn compute(&mut self, set: u32, c: u32) -> u32 {
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
    pub(super) fn uniform(&mut self, set: u32) -> (u64, u32) {
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
    pub(super) fn subtree_allowed(&mut self, mut set: u32, groups: u64, height: u8) -> bool {
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
    pub(super) fn partial_possible(&self, set: u32, p: Partial) -> bool {
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
    pub(super) fn step(&mut self, set: u32, p: Partial, b: u8) -> Option<(u32, Partial)> {
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
