//! `TokenTrie`: a prefix trie of the vocabulary's token byte strings, built once per vocabulary,
//! and `TokenMask`, the reusable allowed-token bitmask the grammar matcher fills by walking the
//! trie together with its stacks (so a prefix shared by many tokens is checked once).

use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Group bit for "a token in this subtree is not valid UTF-8".
pub(crate) const INVALID_UTF8: u64 = 1 << 63;

/// Bytes are grouped so that a grammar state's self-loops can be checked against a whole
/// subtree at once: each ASCII punctuation character and the control characters that matter
/// (`\n`, `\t`, `\r`) have their own bit; digits, lowercase, uppercase, other controls,
/// DEL and non-ASCII bytes share one bit per group.
pub(crate) fn byte_group(b: u8) -> u32 {
    match b {
        b'\n' => 0,
        b'\t' => 1,
        b'\r' => 2,
        0..=0x1F => 3,
        b' ' => 4,
        b'0'..=b'9' => 5,
        b'a'..=b'z' => 6,
        b'A'..=b'Z' => 7,
        0x7F => 8,
        0x80..=0xFF => 9,
        // the 32 ASCII punctuation characters: ! to /, : to @, [ to `, { to ~
        b'!'..=b'/' => 10 + u32::from(b - b'!'),
        b':'..=b'@' => 25 + u32::from(b - b':'),
        b'['..=b'`' => 32 + u32::from(b - b'['),
        b'{'..=b'~' => 38 + u32::from(b - b'{'),
    }
}

/// The bytes of each group, for checking which groups a grammar state loops on.
pub(crate) const GROUP_COUNT: u32 = 42;

/// True when `b` is valid UTF-8 under strict decoding, allowing an incomplete last character.
pub(crate) fn valid_utf8_prefix(b: &[u8]) -> bool {
    match std::str::from_utf8(b) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    }
}
/// The vocabulary as a byte trie, plus which tokens end generation.
///
/// Tokens with empty byte strings (control/special tokens) are never allowed by a grammar,
/// except the end-of-generation ids once the grammar is complete.
///
/// ```
/// use kestrel_sampling::TokenTrie;
/// let vocab: Vec<Vec<u8>> = vec![b"a".to_vec(), b"ab".to_vec(), b"b".to_vec(), Vec::new()];
/// let trie = TokenTrie::new(&vocab, &[3]);
/// assert_eq!(trie.vocab_size(), 4);
/// assert!(trie.is_eog(3));
/// ```
#[derive(Debug, Clone)]
pub struct TokenTrie {
    id: u64,
    vocab_size: usize,
    /// Edges of node `n` are `edge_byte/edge_node[child_start[n]..child_start[n + 1]]`.
    pub(crate) child_start: Vec<u32>,
    pub(crate) edge_byte: Vec<u8>,
    pub(crate) edge_node: Vec<u32>,
    /// Tokens ending at node `n` are `node_tokens[tok_start[n]..tok_start[n + 1]]`.
    pub(crate) tok_start: Vec<u32>,
    pub(crate) node_tokens: Vec<u32>,
    /// Nodes are in preorder: the subtree of `n` is `n..subtree_end[n]`.
    pub(crate) subtree_end: Vec<u32>,
    /// Byte groups ([`byte_group`]) of every edge below `n`, plus [`INVALID_UTF8`] when a
    /// token below `n` is not valid UTF-8 (an incomplete last character is fine).
    pub(crate) subtree_groups: Vec<u64>,
    /// Longest path in bytes below `n` (capped at 255).
    pub(crate) subtree_height: Vec<u8>,
    eog: Vec<u32>,
    is_eog: Vec<bool>,
    /// Every token's bytes, for accepting a token by id.
    bytes_start: Vec<u32>,
    bytes: Vec<u8>,
}

impl TokenTrie {
    /// Builds the trie from every token's bytes (index = token id) and the end-of-generation ids.
    pub fn new(tokens: &[Vec<u8>], eog_tokens: &[u32]) -> Self {
        let vocab_size = tokens.len();
        let mut order: Vec<u32> = (0..vocab_size as u32)
            .filter(|&i| !tokens[i as usize].is_empty())
            .collect();
        order.sort_by(|&a, &b| tokens[a as usize].cmp(&tokens[b as usize]).then(a.cmp(&b)));
        // nodes are created in preorder from the sorted strings; edges recorded as (parent, byte, child)
        let mut parent_of: Vec<(u32, u8)> = vec![(u32::MAX, 0)];
        let mut ends: Vec<(u32, u32)> = Vec::with_capacity(order.len()); // (node, token)
        let mut path: Vec<u32> = vec![0];
        let mut prev: &[u8] = &[];
        for &t in &order {
            let s = tokens[t as usize].as_slice();
            let common = s.iter().zip(prev).take_while(|(a, b)| a == b).count();
            path.truncate(common + 1);
            for &b in &s[common..] {
                let node = parent_of.len() as u32;
                parent_of.push((*path.last().unwrap_or(&0), b));
                path.push(node);
            }
            ends.push((*path.last().unwrap_or(&0), t));
            prev = s;
        }
        let n = parent_of.len();
        let mut child_start = vec![0u32; n + 1];
        for &(p, _) in &parent_of[1..] {
            child_start[p as usize + 1] += 1;
        }
        for i in 0..n {
            child_start[i + 1] += child_start[i];
        }
        let mut fill = child_start.clone();
        let mut edge_byte = vec![0u8; n - 1];
        let mut edge_node = vec![0u32; n - 1];
        for (child, &(p, b)) in parent_of.iter().enumerate().skip(1) {
            let slot = fill[p as usize] as usize;
            fill[p as usize] += 1;
            edge_byte[slot] = b;
            edge_node[slot] = child as u32;
        }
        let mut tok_start = vec![0u32; n + 1];
        for &(node, _) in &ends {
            tok_start[node as usize + 1] += 1;
        }
        for i in 0..n {
            tok_start[i + 1] += tok_start[i];
        }
        let mut fill = tok_start.clone();
        let mut node_tokens = vec![0u32; ends.len()];
        for &(node, t) in &ends {
            node_tokens[fill[node as usize] as usize] = t;
            fill[node as usize] += 1;
        }
        // preorder subtree ends and byte groups, bottom-up
        let mut subtree_end: Vec<u32> = (1..=n as u32).collect();
        let mut subtree_groups = vec![0u64; n];
        let mut subtree_height = vec![0u8; n];
        for &(node, t) in &ends {
            if !valid_utf8_prefix(&tokens[t as usize]) {
                subtree_groups[node as usize] |= INVALID_UTF8;
            }
        }
        for child in (1..n).rev() {
            let (p, b) = parent_of[child];
            let p = p as usize;
            subtree_end[p] = subtree_end[p].max(subtree_end[child]);
            subtree_groups[p] |= subtree_groups[child] | (1 << byte_group(b));
            subtree_height[p] = subtree_height[p].max(subtree_height[child].saturating_add(1));
        }
        let mut is_eog = vec![false; vocab_size];
        let mut eog = Vec::new();
        for &e in eog_tokens {
            if let Some(slot) = is_eog.get_mut(e as usize) {
                *slot = true;
                eog.push(e);
            }
        }
        let mut bytes_start = Vec::with_capacity(vocab_size + 1);
        let mut bytes = Vec::new();
        bytes_start.push(0);
        for t in tokens {
            bytes.extend_from_slice(t);
            bytes_start.push(bytes.len() as u32);
        }
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            vocab_size,
            child_start,
            edge_byte,
            edge_node,
            tok_start,
            node_tokens,
            subtree_end,
            subtree_groups,
            subtree_height,
            eog,
            is_eog,
            bytes_start,
            bytes,
        }
    }

    /// Number of tokens (ids are `0..vocab_size`).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Number of trie nodes (including the root).
    pub fn node_count(&self) -> usize {
        self.child_start.len() - 1
    }

    /// True for an end-of-generation token.
    pub fn is_eog(&self, id: u32) -> bool {
        self.is_eog.get(id as usize).copied().unwrap_or(false)
    }

    /// The end-of-generation token ids.
    pub fn eog_tokens(&self) -> &[u32] {
        &self.eog
    }

    /// A token's bytes (`None` for an id outside the vocabulary).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        if i >= self.vocab_size {
            return None;
        }
        Some(&self.bytes[self.bytes_start[i] as usize..self.bytes_start[i + 1] as usize])
    }

    /// Appends to `out` every token whose bytes are a non-empty prefix of `text` (shortest
    /// first): the tokens that can start writing `text`.
    ///
    /// ```
    /// use kestrel_sampling::TokenTrie;
    /// let vocab: Vec<Vec<u8>> = ["a", "ab", "abc", "b", "x"].iter().map(|s| s.as_bytes().to_vec()).collect();
    /// let trie = TokenTrie::new(&vocab, &[]);
    /// let mut out = Vec::new();
    /// trie.prefix_tokens(b"abx", &mut out);
    /// assert_eq!(out, vec![0, 1]);
    /// ```
    pub fn prefix_tokens(&self, text: &[u8], out: &mut Vec<u32>) {
        let mut node = 0usize;
        for &b in text {
            let (a, z) = (
                self.child_start[node] as usize,
                self.child_start[node + 1] as usize,
            );
            let Ok(e) = self.edge_byte[a..z].binary_search(&b) else {
                return;
            };
            node = self.edge_node[a + e] as usize;
            out.extend_from_slice(
                &self.node_tokens[self.tok_start[node] as usize..self.tok_start[node + 1] as usize],
            );
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

/// A vocabulary-sized bitmask of allowed tokens, reused from step to step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMask {
    pub(crate) bits: Vec<u64>,
    len: usize,
}

impl TokenMask {
    /// A mask for `vocab_size` tokens, all disallowed.
    pub fn new(vocab_size: usize) -> Self {
        Self {
            bits: vec![0; vocab_size.div_ceil(64)],
            len: vocab_size,
        }
    }

    /// Number of tokens the mask covers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-sized vocabulary.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when token `id` is allowed.
    #[inline]
    pub fn is_allowed(&self, id: u32) -> bool {
        let i = id as usize;
        i < self.len && self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    #[inline]
    pub(crate) fn allow(&mut self, id: u32) {
        let i = id as usize;
        self.bits[i / 64] |= 1 << (i % 64);
    }

    pub(crate) fn clear(&mut self) {
        self.bits.fill(0);
    }

    pub(crate) fn resize(&mut self, vocab_size: usize) {
        self.bits.resize(vocab_size.div_ceil(64), 0);
        self.len = vocab_size;
    }

    /// Number of allowed tokens.
    pub fn count_allowed(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Iterates over the allowed token ids.
    pub fn allowed(&self) -> impl Iterator<Item = u32> + '_ {
        self.bits.iter().enumerate().flat_map(|(w, &bits)| {
            let mut b = bits;
            std::iter::from_fn(move || {
                if b == 0 {
                    return None;
                }
                let t = b.trailing_zeros();
                b &= b - 1;
                Some(w as u32 * 64 + t)
            })
        })
    }

    /// Sets the logits of disallowed tokens to `-inf`.
    pub fn apply_to_logits(&self, logits: &mut [f32]) {
        for (chunk, &w) in logits.chunks_mut(64).zip(&self.bits) {
            if w == u64::MAX {
                continue;
            }
            for (j, l) in chunk.iter_mut().enumerate() {
                if w & (1 << j) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trie_shape_and_lookup() {
        let vocab: Vec<Vec<u8>> = vec![
            b"ab".to_vec(),
            b"a".to_vec(),
            b"abc".to_vec(),
            b"b".to_vec(),
            Vec::new(),
            b"ab".to_vec(),
        ];
        let t = TokenTrie::new(&vocab, &[4, 99]);
        // root -> a -> b -> c, root -> b
        assert_eq!(t.node_count(), 5);
        assert_eq!(t.eog_tokens(), &[4]);
        assert_eq!(t.token_bytes(2), Some(&b"abc"[..]));
        assert_eq!(t.token_bytes(6), None);
        // the "ab" node holds tokens 0 and 5
        let a = t.edge_node[t.child_start[0] as usize] as usize;
        let ab = t.edge_node[t.child_start[a] as usize] as usize;
        assert_eq!(
            &t.node_tokens[t.tok_start[ab] as usize..t.tok_start[ab + 1] as usize],
            &[0, 5]
        );
    }

    #[test]
    fn byte_groups_cover_every_byte() {
        let mut seen = vec![false; GROUP_COUNT as usize];
        for b in 0..=255u8 {
            let g = byte_group(b);
            assert!(g < GROUP_COUNT);
            seen[g as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert!(valid_utf8_prefix("é".as_bytes()) && valid_utf8_prefix(&"é".as_bytes()[..1]));
        assert!(!valid_utf8_prefix(&[0x80]) && !valid_utf8_prefix(&[0xE0, 0x80]));
    }

    #[test]
    fn mask_bits() {
        let mut m = TokenMask::new(130);
        m.allow(0);
        m.allow(64);
        m.allow(129);
        assert_eq!(m.allowed().collect::<Vec<_>>(), vec![0, 64, 129]);
        assert_eq!(m.count_allowed(), 3);
        let mut l = vec![1.0f32; 130];
        m.apply_to_logits(&mut l);
        assert_eq!(l.iter().filter(|x| x.is_finite()).count(), 3);
        assert!(!m.is_allowed(500));
    }
}
