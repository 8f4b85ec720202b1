//! The prefix cache of a [`PagedCache`](crate::PagedCache): a radix tree over whole KV blocks.
//!
//! A node is one block of `B` token ids under its parent (the root is the empty prefix), and
//! points at the pool block holding those tokens' keys and values. A sequence whose prompt
//! starts with the same blocks (a system prompt, earlier chat turns) shares those pool blocks
//! instead of prefilling them. The cache holds one reference per block it indexes; a block only
//! the cache holds is free for the taking: when the pool runs short, the least recently used
//! leaf is evicted (leaves first, so no node is left under a missing parent).

use std::collections::HashMap;

const ROOT: u32 = u32::MAX;
const NONE: u32 = u32::MAX;

/// Prefix-cache counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixStats {
    /// Blocks indexed.
    pub nodes: usize,
    /// Blocks found for a new sequence (each one block of prefill saved).
    pub hit_blocks: u64,
    /// Whole prompt blocks looked up and not found.
    pub miss_blocks: u64,
    /// Blocks evicted to make room.
    pub evicted_blocks: u64,
}

struct Node {
    parent: u32,
    tokens: Box<[u32]>,
    block: u32,
    children: u32,
    last_used: u64,
}

pub(crate) struct PrefixIndex {
    nodes: Vec<Option<Node>>,
    free_nodes: Vec<u32>,
    children: HashMap<(u32, Box<[u32]>), u32>,
    /// The node indexing each pool block (`NONE` if none).
    block_node: Vec<u32>,
    clock: u64,
    stats: PrefixStats,
}

impl PrefixIndex {
    pub(crate) fn new(n_blocks: usize) -> PrefixIndex {
        PrefixIndex {
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            children: HashMap::new(),
            block_node: vec![NONE; n_blocks],
            clock: 0,
            stats: PrefixStats::default(),
        }
    }

    fn child(&self, parent: u32, tokens: &[u32]) -> Option<u32> {
        // The key owns its tokens; a lookup builds one (admission only, not per token).
        self.children.get(&(parent, tokens.into())).copied()
    }

    /// The pool blocks of the longest run of whole blocks of `tokens` in the tree (marked as
    /// just used).
    pub(crate) fn lookup(&mut self, tokens: &[u32], bs: usize) -> Vec<u32> {
        self.clock += 1;
        let mut out = Vec::new();
        let mut parent = ROOT;
        let whole = tokens.len() / bs;
        for chunk in tokens.chunks_exact(bs) {
            let Some(id) = self.child(parent, chunk) else {
                break;
            };
            let Some(node) = self.nodes[id as usize].as_mut() else {
                break;
            };
            node.last_used = self.clock;
            out.push(node.block);
            parent = id;
        }
        self.stats.hit_blocks += out.len() as u64;
        self.stats.miss_blocks += (whole - out.len()) as u64;
        out
    }

    /// Index the whole blocks of `tokens` held in pool blocks `table`; returns the blocks newly
    /// indexed (the caller adds the cache's reference to each). A block whose tokens are
    /// already indexed (under another pool block) is skipped and its node followed.
    pub(crate) fn insert(&mut self, tokens: &[u32], table: &[u32], bs: usize) -> Vec<u32> {
        self.clock += 1;
        let mut added = Vec::new();
        let mut parent = ROOT;
        for (chunk, &block) in tokens.chunks_exact(bs).zip(table) {
            if let Some(id) = self.child(parent, chunk) {
                if let Some(n) = self.nodes[id as usize].as_mut() {
                    n.last_used = self.clock;
                }
                parent = id;
                continue;
            }
            if self.block_node[block as usize] != NONE {
                break; // the block already stands for other tokens: nothing below can hang here
            }
            let node = Node {
                parent,
                tokens: chunk.into(),
                block,
                children: 0,
                last_used: self.clock,
            };
            let id = match self.free_nodes.pop() {
                Some(id) => {
                    self.nodes[id as usize] = Some(node);
                    id
                }
                None => {
                    self.nodes.push(Some(node));
                    (self.nodes.len() - 1) as u32
                }
            };
            self.children.insert((parent, chunk.into()), id);
            if parent != ROOT {
                if let Some(p) = self.nodes[parent as usize].as_mut() {
                    p.children += 1;
                }
            }
            self.block_node[block as usize] = id;
            self.stats.nodes += 1;
            added.push(block);
            parent = id;
        }
        added
    }

    /// Evict the least recently used leaf whose block only the cache holds (`refs == 1`);
    /// returns its block (the caller frees it).
    pub(crate) fn evict_lru(&mut self, refs: &[u32]) -> Option<u32> {
        let (id, _) = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.as_ref().map(|n| (i, n)))
            .filter(|(_, n)| n.children == 0 && refs[n.block as usize] == 1)
            .min_by_key(|(_, n)| n.last_used)?;
        let node = self.nodes[id].take()?;
        self.children.remove(&(node.parent, node.tokens));
        if node.parent != ROOT {
            if let Some(p) = self.nodes[node.parent as usize].as_mut() {
                p.children -= 1;
            }
        }
        self.block_node[node.block as usize] = NONE;
        self.free_nodes.push(id as u32);
        self.stats.nodes -= 1;
        self.stats.evicted_blocks += 1;
        Some(node.block)
    }

    /// Forget every node, also those whose blocks running sequences hold (rows computed at
    /// settings no longer used must not be found again); returns every block it indexed (the
    /// caller drops the cache's reference to each).
    pub(crate) fn clear(&mut self) -> Vec<u32> {
        let blocks: Vec<u32> = self.nodes.iter().flatten().map(|n| n.block).collect();
        self.stats.nodes = 0;
        self.nodes.clear();
        self.free_nodes.clear();
        self.children.clear();
        self.block_node.fill(NONE);
        blocks
    }

    /// Counts `n` blocks evicted (freed by the caller after [`Self::clear`]).
    pub(crate) fn count_evicted(&mut self, n: usize) {
        self.stats.evicted_blocks += n as u64;
    }

    /// Takes back a lookup's counts (`hits` found, `misses` not): the sequence it was for was
    /// never admitted, and its next try counts again.
    pub(crate) fn uncount_lookup(&mut self, hits: u64, misses: u64) {
        self.stats.hit_blocks = self.stats.hit_blocks.saturating_sub(hits);
        self.stats.miss_blocks = self.stats.miss_blocks.saturating_sub(misses);
    }

    /// Counts `n` blocks a lookup found as not found (the sequence kept fewer of them).
    pub(crate) fn hits_to_misses(&mut self, n: u64) {
        self.stats.hit_blocks = self.stats.hit_blocks.saturating_sub(n);
        self.stats.miss_blocks += n;
    }

    /// Blocks indexed that no sequence holds.
    pub(crate) fn cache_only_blocks(&self, refs: &[u32]) -> usize {
        self.nodes
            .iter()
            .flatten()
            .filter(|n| refs[n.block as usize] == 1)
            .count()
    }

    pub(crate) fn stats(&self) -> PrefixStats {
        self.stats
    }
}
