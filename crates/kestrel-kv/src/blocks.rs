//! [`BlockPool`]: the block accounting of a paged KV cache, apart from where the blocks live:
//! which fixed-size blocks each sequence holds (its block table: its `i`-th block holds
//! positions `i·B .. (i+1)·B`), which are free, how many holders each has (sequences, and the
//! prefix cache, which shares whole blocks of earlier prompts between sequences), and eviction
//! of blocks only the prefix cache holds when a sequence needs them. [`PagedCache`] keeps its
//! blocks in host memory; a GPU scheduler keeps them in a device pool and hands each
//! sequence's table to its kernels.
//!
//! [`PagedCache`]: crate::PagedCache

use crate::prefix::PrefixIndex;
use crate::{KvError, PoolStats};

/// A sequence's handle in a [`BlockPool`] (and a [`PagedCache`](crate::PagedCache)).
pub type SeqId = usize;

#[derive(Debug, Default)]
struct Seq {
    /// Physical block of each logical block.
    table: Vec<u32>,
    /// Committed positions.
    len: usize,
    /// What its prefix lookup counted (blocks found, whole blocks not found), until its first
    /// successful [`BlockPool::reserve`] admits it: a sequence freed before that takes the
    /// counts back, so a request retried at each step until blocks free up counts once.
    lookup: Option<(u64, u64)>,
}

/// Which blocks of a pool each sequence holds, with reference counts and a prefix cache.
///
/// ```
/// use kestrel_kv::BlockPool;
/// let mut pool = BlockPool::new(4, 8).unwrap(); // 8 blocks of 4 tokens
/// let a = pool.add_seq();
/// pool.reserve(a, 6).unwrap(); // two blocks
/// pool.commit(a, 6).unwrap();
/// pool.publish_prefix(a, &[1, 2, 3, 4, 5, 6]).unwrap(); // its first whole block
/// let b = pool.add_seq();
/// assert_eq!(pool.attach_prefix(b, &[1, 2, 3, 4, 9]).unwrap(), 4); // shared, not copied
/// assert_eq!(pool.block_table(b).unwrap(), &pool.block_table(a).unwrap()[..1]);
/// pool.free_seq(a).unwrap();
/// pool.free_seq(b).unwrap();
/// assert_eq!(pool.free_blocks(), 7); // the prefix cache keeps the shared block
/// ```
pub struct BlockPool {
    block_size: usize,
    n_blocks: usize,
    /// Free blocks (a stack: the most recently freed is reused first, still warm in cache).
    free: Vec<u32>,
    /// Holders of each block: sequences, plus one when the prefix cache keeps it.
    refs: Vec<u32>,
    seqs: Vec<Option<Seq>>,
    prefix: PrefixIndex,
}

impl std::fmt::Debug for BlockPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockPool")
            .field("block_size", &self.block_size)
            .field("blocks", &self.n_blocks)
            .field("free", &self.free.len())
            .finish()
    }
}

impl BlockPool {
    /// A pool of `n_blocks` blocks of `block_size` tokens (a power of two up to 65,536).
    ///
    /// # Errors
    /// `Pool` for a bad block size or no blocks.
    pub fn new(block_size: usize, n_blocks: usize) -> Result<Self, KvError> {
        if !block_size.is_power_of_two() || block_size > 1 << 16 {
            return Err(KvError::Pool(format!(
                "block size {block_size} must be a power of two up to 65536"
            )));
        }
        if n_blocks == 0 || n_blocks > u32::MAX as usize {
            return Err(KvError::Pool(format!(
                "{n_blocks} blocks: a pool needs 1..=u32::MAX blocks"
            )));
        }
        Ok(BlockPool {
            block_size,
            n_blocks,
            free: (0..n_blocks as u32).rev().collect(),
            refs: vec![0; n_blocks],
            seqs: Vec::new(),
            prefix: PrefixIndex::new(n_blocks),
        })
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn total_blocks(&self) -> usize {
        self.n_blocks
    }

    /// Blocks free.
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Blocks `tokens` positions take.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// A new empty sequence (the lowest free id).
    pub fn add_seq(&mut self) -> SeqId {
        if let Some(i) = self.seqs.iter().position(Option::is_none) {
            self.seqs[i] = Some(Seq::default());
            return i;
        }
        self.seqs.push(Some(Seq::default()));
        self.seqs.len() - 1
    }

    fn seq(&self, seq: SeqId) -> Result<&Seq, KvError> {
        self.seqs
            .get(seq)
            .and_then(Option::as_ref)
            .ok_or(KvError::UnknownSeq(seq))
    }

    /// Committed positions of `seq`.
    pub fn seq_len(&self, seq: SeqId) -> Result<usize, KvError> {
        Ok(self.seq(seq)?.len)
    }

    /// Positions `seq` can hold without taking more blocks.
    pub fn seq_capacity(&self, seq: SeqId) -> Result<usize, KvError> {
        Ok(self.seq(seq)?.table.len() * self.block_size)
    }

    /// `seq`'s block table.
    pub fn block_table(&self, seq: SeqId) -> Result<&[u32], KvError> {
        Ok(&self.seq(seq)?.table)
    }

    /// Whether another sequence or the prefix cache also holds `block` (a step must not write
    /// it).
    pub fn is_shared(&self, block: u32) -> bool {
        self.refs.get(block as usize).is_some_and(|&r| r > 1)
    }

    /// Make room for positions `0..len` of `seq`, taking free blocks as needed (evicting
    /// blocks only the prefix cache holds, least recently used first). Either all the blocks
    /// are taken or none (`OutOfBlocks`).
    pub fn reserve(&mut self, seq: SeqId, len: usize) -> Result<(), KvError> {
        let have = self.seq(seq)?.table.len();
        let want = self.blocks_for(len);
        if want <= have {
            if let Some(s) = self.seqs.get_mut(seq).and_then(Option::as_mut) {
                s.lookup = None; // admitted: its lookup's counts stand
            }
            return Ok(());
        }
        let needed = want - have;
        while needed > self.free.len() {
            let Some(b) = self.prefix.evict_lru(&self.refs) else {
                break;
            };
            self.refs[b as usize] = 0;
            self.free.push(b);
        }
        if needed > self.free.len() {
            return Err(KvError::OutOfBlocks {
                needed,
                free: self.free.len(),
                total: self.n_blocks,
            });
        }
        let s = self.seqs[seq].as_mut().ok_or(KvError::UnknownSeq(seq))?;
        for _ in 0..needed {
            let Some(b) = self.free.pop() else { break };
            self.refs[b as usize] = 1;
            s.table.push(b);
        }
        s.lookup = None; // admitted: its lookup's counts stand
        Ok(())
    }

    /// Make positions `0..len` of `seq` its sequence (after a step wrote them).
    pub fn commit(&mut self, seq: SeqId, len: usize) -> Result<(), KvError> {
        let cap = self.seq_capacity(seq)?;
        if len > cap {
            return Err(KvError::Full {
                start: 0,
                end: len,
                capacity: cap,
            });
        }
        if let Some(s) = self.seqs.get_mut(seq).and_then(Option::as_mut) {
            s.len = len;
        }
        Ok(())
    }

    /// Drop positions past `len` of `seq`, returning whole blocks it no longer needs.
    pub fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), KvError> {
        let s = self
            .seqs
            .get_mut(seq)
            .and_then(Option::as_mut)
            .ok_or(KvError::UnknownSeq(seq))?;
        let keep = len.div_ceil(self.block_size);
        s.len = s.len.min(len);
        if let Some((hits, misses)) = s.lookup.as_mut() {
            // Attached blocks dropped before admission were not used after all.
            let dropped = hits.saturating_sub(keep as u64);
            *hits -= dropped;
            *misses += dropped;
            self.prefix.hits_to_misses(dropped);
        }
        while s.table.len() > keep {
            let Some(b) = s.table.pop() else { break };
            let r = &mut self.refs[b as usize];
            *r = r.saturating_sub(1);
            if *r == 0 {
                self.free.push(b);
            }
        }
        Ok(())
    }

    /// End `seq`, returning its blocks to the pool.
    pub fn free_seq(&mut self, seq: SeqId) -> Result<(), KvError> {
        self.truncate(seq, 0)?;
        if let Some((hits, misses)) = self.seqs[seq].take().and_then(|s| s.lookup) {
            self.prefix.uncount_lookup(hits, misses);
        }
        Ok(())
    }

    /// Whether `seq` holds no block yet.
    pub fn is_empty_seq(&self, seq: SeqId) -> Result<bool, KvError> {
        Ok(self.seq(seq)?.table.is_empty())
    }

    /// Start the empty sequence `seq` with the longest run of whole blocks of `tokens` that the
    /// prefix cache holds (shared, not copied); returns the positions it now has. The caller
    /// prefills from there. Pass the prompt without its last token, so at least one token is
    /// computed for the logits.
    pub fn attach_prefix(&mut self, seq: SeqId, tokens: &[u32]) -> Result<usize, KvError> {
        let s = self
            .seqs
            .get_mut(seq)
            .and_then(Option::as_mut)
            .ok_or(KvError::UnknownSeq(seq))?;
        if !s.table.is_empty() {
            return Err(KvError::Pool(format!(
                "sequence {seq} is not empty: a prefix attaches to a new sequence"
            )));
        }
        let blocks = self.prefix.lookup(tokens, self.block_size);
        for &b in &blocks {
            self.refs[b as usize] += 1;
        }
        let whole = (tokens.len() / self.block_size) as u64;
        s.lookup = Some((blocks.len() as u64, whole - blocks.len() as u64));
        s.len = blocks.len() * self.block_size;
        s.table.extend_from_slice(&blocks);
        Ok(s.len)
    }

    /// Offer the whole blocks of `seq`'s first `tokens.len()` committed positions (`tokens`
    /// being the ids at those positions) to the prefix cache, so later sequences with the same
    /// prefix reuse them. The cache keeps its own reference; the sequence goes on as before.
    pub fn publish_prefix(&mut self, seq: SeqId, tokens: &[u32]) -> Result<(), KvError> {
        let s = self
            .seqs
            .get(seq)
            .and_then(Option::as_ref)
            .ok_or(KvError::UnknownSeq(seq))?;
        let n = (tokens.len().min(s.len) / self.block_size).min(s.table.len());
        let added = self.prefix.insert(
            &tokens[..n * self.block_size],
            &s.table[..n],
            self.block_size,
        );
        for b in added {
            self.refs[b as usize] += 1;
        }
        Ok(())
    }

    /// Empty the prefix cache: no later sequence finds any block published so far (rows
    /// computed at settings no longer used, such as other adapter scales), whether or not a
    /// running sequence still holds it; blocks only the cache held are free again.
    pub fn clear_prefix_cache(&mut self) {
        let mut freed = 0;
        for b in self.prefix.clear() {
            let r = &mut self.refs[b as usize];
            *r = r.saturating_sub(1);
            if *r == 0 {
                self.free.push(b);
                freed += 1;
            }
        }
        // Blocks running sequences still hold are forgotten, not evicted.
        self.prefix.count_evicted(freed);
    }

    /// Occupancy and fragmentation.
    pub fn stats(&self) -> PoolStats {
        let live = self.seqs.iter().flatten();
        let (sequences, tokens) = live.fold((0, 0), |(n, t), s| (n + 1, t + s.len));
        let cached_blocks = self.prefix.cache_only_blocks(&self.refs);
        let held = (self.n_blocks - self.free.len() - cached_blocks) * self.block_size;
        PoolStats {
            cached_blocks,
            prefix: self.prefix.stats(),
            total_blocks: self.n_blocks,
            free_blocks: self.free.len(),
            sequences,
            tokens,
            fragmentation: if held == 0 {
                0.0
            } else {
                1.0 - tokens.min(held) as f64 / held as f64
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BlockPool;

    #[test]
    fn a_sequence_freed_before_admission_takes_its_lookup_counts_back() {
        let mut pool = BlockPool::new(4, 4).unwrap();
        let a = pool.add_seq();
        pool.reserve(a, 8).unwrap();
        pool.commit(a, 8).unwrap();
        let t = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        pool.publish_prefix(a, &t[..8]).unwrap();
        // Three tries while the pool is short (two blocks found, one whole block not), each
        // freed: nothing counts.
        for _ in 0..3 {
            let b = pool.add_seq();
            assert_eq!(pool.attach_prefix(b, &t).unwrap(), 8);
            assert!(pool.reserve(b, 24).is_err());
            pool.free_seq(b).unwrap();
        }
        let s = pool.stats().prefix;
        assert_eq!((s.hit_blocks, s.miss_blocks), (0, 0));
        // Admitted with one attached block kept (cut to a unit): one hit, two misses, once.
        let b = pool.add_seq();
        assert_eq!(pool.attach_prefix(b, &t).unwrap(), 8);
        pool.truncate(b, 4).unwrap();
        pool.reserve(b, 12).unwrap();
        pool.free_seq(b).unwrap();
        let s = pool.stats().prefix;
        assert_eq!((s.hit_blocks, s.miss_blocks), (1, 2));
    }

    #[test]
    fn clearing_the_prefix_cache_forgets_blocks_running_sequences_hold() {
        let mut pool = BlockPool::new(4, 8).unwrap();
        let a = pool.add_seq();
        pool.reserve(a, 8).unwrap();
        pool.commit(a, 8).unwrap();
        let t = [1, 2, 3, 4, 5, 6, 7, 8];
        pool.publish_prefix(a, &t).unwrap();
        assert_eq!(pool.stats().prefix.nodes, 2);
        pool.clear_prefix_cache();
        assert_eq!(
            pool.stats().prefix.evicted_blocks,
            0,
            "still held: not evicted"
        );
        // Rows computed at settings no longer used: a new sequence must not find them.
        let b = pool.add_seq();
        assert_eq!(pool.attach_prefix(b, &t).unwrap(), 0);
        assert_eq!(pool.free_blocks(), 6);
        pool.free_seq(a).unwrap();
        assert_eq!(pool.free_blocks(), 8);
        assert_eq!(pool.stats().cached_blocks, 0);
        assert_eq!(pool.stats().prefix.nodes, 0);
    }
}
