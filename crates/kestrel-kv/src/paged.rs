//! `PagedCache`: a pool of fixed-size KV blocks shared by many sequences (vLLM's paged
//! attention layout).
//!
//! Every layer's keys and values live in one buffer of `n_blocks × block_size` token rows; a
//! block is the same row range in every layer. Each sequence owns a block table (its `i`-th
//! block holds positions `i·B .. (i+1)·B`), so appending never copies: [`reserve`] takes free
//! blocks for the positions a step will write, attention reads through the table
//! ([`KvRows`]), and [`free_seq`] returns the blocks. Blocks carry reference counts so that a
//! prefix cache can share them between sequences. The accounting is a [`BlockPool`]; this
//! type adds the host buffers and the recurrent states.
//!
//! [`reserve`]: PagedCache::reserve
//! [`free_seq`]: PagedCache::free_seq

use crate::blocks::BlockPool;
pub use crate::blocks::SeqId;
use crate::buf::Buf;
pub use crate::prefix::PrefixStats;
use crate::state::States;
use crate::{BatchKv, KvError, KvLayout, KvRows, LayerView, RecurrentState};

/// Occupancy of a [`PagedCache`] (or a [`BlockPool`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolStats {
    /// Blocks in the pool.
    pub total_blocks: usize,
    /// Blocks not held by any sequence.
    pub free_blocks: usize,
    /// Live sequences.
    pub sequences: usize,
    /// Committed tokens over all sequences.
    pub tokens: usize,
    /// Share of the token slots in held blocks that hold no committed token (internal
    /// fragmentation: the unfilled tail of each sequence's last block, and reserved rows).
    pub fragmentation: f64,
    /// Blocks held only by the prefix cache (free for the taking: evicted when needed).
    pub cached_blocks: usize,
    /// Prefix-cache counters.
    pub prefix: PrefixStats,
}

/// Many sequences' KV caches in one pool of blocks.
///
/// ```
/// use kestrel_kv::{BatchKv, KvDType, KvLayout, PagedCache};
/// let layout = KvLayout { n_layers: 1, n_kv_head: 1, layer_kv_heads: vec![], k_head_dim: 2, v_head_dim: 2, dtype: KvDType::F32,
///     recurrent: kestrel_kv::RecurrentLayout::NONE };
/// let mut pool = PagedCache::new(layout, 4, 8).unwrap(); // 8 blocks of 4 tokens
/// let a = pool.add_seq();
/// pool.reserve(a, 6).unwrap(); // two blocks
/// pool.write_seq(0, a, 0, &[1.0; 12], &[2.0; 12]).unwrap();
/// pool.commit(a, 6).unwrap();
/// assert_eq!(pool.stats().free_blocks, 6);
/// pool.free_seq(a).unwrap();
/// assert_eq!(pool.stats().free_blocks, 8);
/// ```
pub struct PagedCache {
    layout: KvLayout,
    k: Vec<Buf>,
    v: Vec<Buf>,
    blocks: BlockPool,
    /// Each sequence's recurrent state (slot = sequence id), for state-space layers.
    states: States,
}

impl std::fmt::Debug for PagedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagedCache")
            .field("block_size", &self.blocks.block_size())
            .field("stats", &self.stats())
            .finish()
    }
}

impl PagedCache {
    /// A pool of `n_blocks` blocks of `block_size` tokens (a power of two) for every layer.
    ///
    /// # Errors
    /// `Pool` for a bad block size or no blocks, `TooLarge` when the memory cannot be had.
    pub fn new(layout: KvLayout, block_size: usize, n_blocks: usize) -> Result<Self, KvError> {
        layout.check()?;
        let blocks = BlockPool::new(block_size, n_blocks)?;
        let tokens = block_size.saturating_mul(n_blocks);
        let too_large = || KvError::TooLarge {
            tokens,
            layers: layout.n_layers,
            bytes: layout.bytes_per_token().saturating_mul(tokens),
        };
        layout
            .bytes_per_token()
            .checked_mul(tokens)
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(too_large)?;
        let (k, v) = Buf::layers(&layout, tokens).map_err(|_| too_large())?;
        Ok(PagedCache {
            k,
            v,
            blocks,
            states: States::new(layout.recurrent),
            layout,
        })
    }

    /// A pool sized to a memory budget of `mb` MiB (at least one block).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_budget_mb(layout: KvLayout, block_size: usize, mb: usize) -> Result<Self, KvError> {
        // A model of recurrent layers alone keeps no keys or values: its blocks only count
        // positions, and 4 KiB a block keeps their bookkeeping small.
        let per_block = match layout.bytes_per_token().saturating_mul(block_size) {
            0 => 4096,
            b => b,
        };
        let n = (mb.saturating_mul(1 << 20) / per_block).max(1);
        PagedCache::new(layout, block_size, n)
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.blocks.block_size()
    }

    /// Blocks in the pool.
    pub fn total_blocks(&self) -> usize {
        self.blocks.total_blocks()
    }

    /// Blocks free.
    pub fn free_blocks(&self) -> usize {
        self.blocks.free_blocks()
    }

    /// Blocks `tokens` positions take.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        self.blocks.blocks_for(tokens)
    }

    /// Bytes of the pool.
    pub fn memory_bytes(&self) -> usize {
        self.blocks.total_blocks() * self.blocks.block_size() * self.layout.bytes_per_token()
            + self.states.bytes()
    }

    /// A new empty sequence.
    pub fn add_seq(&mut self) -> SeqId {
        let i = self.blocks.add_seq();
        self.states.clear(i);
        i
    }

    /// Committed positions of `seq`.
    pub fn seq_len(&self, seq: SeqId) -> Result<usize, KvError> {
        self.blocks.seq_len(seq)
    }

    /// Positions `seq` can hold without taking more blocks.
    pub fn seq_capacity(&self, seq: SeqId) -> Result<usize, KvError> {
        self.blocks.seq_capacity(seq)
    }

    /// `seq`'s block table.
    pub fn block_table(&self, seq: SeqId) -> Result<&[u32], KvError> {
        self.blocks.block_table(seq)
    }

    /// Make room for positions `0..len` of `seq`, taking free blocks as needed. Either all the
    /// blocks are taken or none (`OutOfBlocks`).
    pub fn reserve(&mut self, seq: SeqId, len: usize) -> Result<(), KvError> {
        self.blocks.reserve(seq, len)
    }

    /// Make positions `0..len` of `seq` its sequence (after a step wrote them).
    pub fn commit(&mut self, seq: SeqId, len: usize) -> Result<(), KvError> {
        self.blocks.commit(seq, len)
    }

    /// Drop positions past `len` of `seq`, returning whole blocks it no longer needs.
    ///
    /// A sequence with recurrent state cannot go back part of the way (see
    /// [`KvCache::can_truncate`](crate::KvCache::can_truncate)): cut below its length, it
    /// starts over empty.
    pub fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), KvError> {
        let have = self.blocks.seq_len(seq)?;
        let len = if self.layout.recurrent.is_some() && len < have {
            self.states.clear(seq);
            0
        } else {
            len
        };
        self.blocks.truncate(seq, len)
    }

    /// End `seq`, returning its blocks to the pool.
    pub fn free_seq(&mut self, seq: SeqId) -> Result<(), KvError> {
        self.truncate(seq, 0)?;
        self.blocks.free_seq(seq)
    }

    /// Start the empty sequence `seq` with the longest run of whole blocks of `tokens` that the
    /// prefix cache holds (shared, not copied); returns the positions it now has. The caller
    /// prefills from there. Pass the prompt without its last token, so at least one token is
    /// computed for the logits.
    pub fn attach_prefix(&mut self, seq: SeqId, tokens: &[u32]) -> Result<usize, KvError> {
        if self.layout.recurrent.is_some() && self.blocks.is_empty_seq(seq)? {
            // A recurrent state is not made of blocks: there is no prefix to share.
            return self.blocks.seq_len(seq);
        }
        self.blocks.attach_prefix(seq, tokens)
    }

    /// Offer the whole blocks of `seq`'s first `tokens.len()` committed positions (`tokens`
    /// being the ids at those positions) to the prefix cache, so later sequences with the same
    /// prefix reuse them. The cache keeps its own reference; the sequence goes on as before.
    pub fn publish_prefix(&mut self, seq: SeqId, tokens: &[u32]) -> Result<(), KvError> {
        if self.layout.recurrent.is_some() {
            self.blocks.seq_len(seq)?;
            return Ok(());
        }
        self.blocks.publish_prefix(seq, tokens)
    }

    /// Empty the prefix cache (also of blocks running sequences hold: no later sequence finds
    /// them); blocks only the cache held are free again.
    pub fn clear_prefix_cache(&mut self) {
        self.blocks.clear_prefix_cache();
    }

    /// Occupancy and fragmentation.
    pub fn stats(&self) -> PoolStats {
        self.blocks.stats()
    }
}

impl BatchKv for PagedCache {
    fn layout(&self) -> &KvLayout {
        &self.layout
    }

    fn write_seq(
        &mut self,
        layer: usize,
        seq: SeqId,
        pos: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<(), KvError> {
        let n = self.layout.check_write(layer, k, v)?;
        let (kt, vt) = (
            self.layout.k_per_token(layer),
            self.layout.v_per_token(layer),
        );
        let cap = self.seq_capacity(seq)?;
        if pos.checked_add(n).is_none_or(|e| e > cap) {
            return Err(KvError::Full {
                start: pos,
                end: pos.saturating_add(n),
                capacity: cap,
            });
        }
        let bs = self.blocks.block_size();
        let table = self.blocks.block_table(seq)?;
        let rows = KvRows::paged(table, bs).map_err(|e| KvError::Pool(e.to_string()))?;
        let (kb, vb) = (&mut self.k[layer], &mut self.v[layer]);
        // One copy per run of positions inside a block.
        let mut i = 0;
        while i < n {
            let p = pos + i;
            let run = (bs - p % bs).min(n - i);
            let block = table[p / bs];
            if self.blocks.is_shared(block) {
                // a block another sequence or the prefix cache reads: never overwritten
                return Err(KvError::Pool(format!(
                    "sequence {seq} writes position {p} in shared block {block}"
                )));
            }
            let r = rows.row(p);
            kb.write(r * kt, &k[i * kt..(i + run) * kt])?;
            vb.write(r * vt, &v[i * vt..(i + run) * vt])?;
            i += run;
        }
        Ok(())
    }

    fn view_seq(&self, layer: usize, seq: SeqId, len: usize) -> Result<LayerView<'_>, KvError> {
        self.layout.check_layer(layer)?;
        let bs = self.blocks.block_size();
        let table = self.blocks.block_table(seq)?;
        let cap = table.len() * bs;
        if len > cap {
            return Err(KvError::Full {
                start: 0,
                end: len,
                capacity: cap,
            });
        }
        let tokens = self.blocks.total_blocks() * bs;
        Ok(LayerView {
            k: self.k[layer].slice(tokens * self.layout.k_per_token(layer)),
            v: self.v[layer].slice(tokens * self.layout.v_per_token(layer)),
            len,
            n_kv_head: self.layout.kv_heads(layer),
            k_head_dim: self.layout.k_head_dim,
            v_head_dim: self.layout.v_head_dim,
            rows: KvRows::paged(table, bs).map_err(|e| KvError::Pool(e.to_string()))?,
        })
    }

    fn state_seq(&mut self, layer: usize, seq: SeqId) -> Result<RecurrentState<'_>, KvError> {
        if !self.layout.recurrent.is_some() {
            return Err(KvError::NoState);
        }
        self.blocks.seq_len(seq)?;
        self.states.ensure(seq)?;
        self.states.layer(seq, layer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{kv_get, KvDType};

    fn layout(dtype: KvDType) -> KvLayout {
        KvLayout {
            n_layers: 2,
            n_kv_head: 2,
            layer_kv_heads: Vec::new(),
            k_head_dim: 2,
            v_head_dim: 2,
            dtype,
            recurrent: crate::RecurrentLayout::NONE,
        }
    }

    /// Two interleaved sequences write across block boundaries; each view reads back exactly
    /// its own positions through its table.
    #[test]
    fn sequences_read_back_their_own_positions() {
        for dtype in [KvDType::F32, KvDType::F16] {
            let mut pool = PagedCache::new(layout(dtype), 4, 16).unwrap();
            let (a, b) = (pool.add_seq(), pool.add_seq());
            let tok = |seq: usize, p: usize| (seq * 100 + p) as f32;
            for step in 0..5 {
                for seq in [a, b] {
                    let (pos, n) = (step * 3, 3);
                    pool.reserve(seq, pos + n).unwrap();
                    let k: Vec<f32> = (pos..pos + n).flat_map(|p| [tok(seq, p); 4]).collect();
                    let v: Vec<f32> = k.iter().map(|x| -x).collect();
                    pool.write_seq(1, seq, pos, &k, &v).unwrap();
                    pool.commit(seq, pos + n).unwrap();
                }
            }
            for seq in [a, b] {
                let view = pool.view_seq(1, seq, 15).unwrap();
                for p in 0..15 {
                    let r = view.rows.row(p);
                    assert_eq!(kv_get(&view.k, r * 4 + 3), Some(tok(seq, p)));
                    assert_eq!(kv_get(&view.v, r * 4), Some(-tok(seq, p)));
                }
            }
            let st = pool.stats();
            assert_eq!((st.free_blocks, st.sequences, st.tokens), (8, 2, 30));
            assert!((st.fragmentation - (1.0 - 30.0 / 32.0)).abs() < 1e-9);
        }
    }

    /// A pool whose layers have different KV head counts sizes each layer by its own and reads
    /// each back at its own width.
    #[test]
    fn layers_of_different_kv_heads_read_back() {
        let mut l = layout(KvDType::F32);
        l.layer_kv_heads = vec![3, 1];
        let mut pool = PagedCache::new(l, 4, 2).unwrap();
        assert_eq!(pool.memory_bytes(), 8 * 4 * (3 + 1) * 4);
        let s = pool.add_seq();
        pool.reserve(s, 5).unwrap();
        for (layer, heads) in [(0, 3), (1, 1)] {
            let w = heads * 2;
            let k: Vec<f32> = (0..5 * w).map(|i| (layer * 1000 + i) as f32).collect();
            pool.write_seq(layer, s, 0, &k, &k).unwrap();
        }
        for (layer, heads) in [(0, 3), (1, 1)] {
            let view = pool.view_seq(layer, s, 5).unwrap();
            assert_eq!(view.n_kv_head, heads);
            let r = view.rows.row(4);
            let w = heads * 2;
            assert_eq!(
                kv_get(&view.k, r * w + w - 1),
                Some((layer * 1000 + 5 * w - 1) as f32)
            );
        }
    }

    #[test]
    fn blocks_are_reserved_all_or_nothing_and_returned() {
        let mut pool = PagedCache::new(layout(KvDType::F16), 8, 4).unwrap();
        let a = pool.add_seq();
        pool.reserve(a, 17).unwrap(); // 3 blocks
        let b = pool.add_seq();
        assert_eq!(
            pool.reserve(b, 9),
            Err(KvError::OutOfBlocks {
                needed: 2,
                free: 1,
                total: 4
            })
        );
        assert_eq!(pool.seq_capacity(b).unwrap(), 0);
        pool.truncate(a, 8).unwrap();
        assert_eq!(pool.free_blocks(), 3);
        pool.reserve(b, 9).unwrap();
        // Writing past the reserved positions is refused, not a panic.
        assert!(matches!(
            pool.write_seq(0, b, 15, &[0.0; 8], &[0.0; 8]),
            Err(KvError::Full { .. })
        ));
        assert!(pool.view_seq(0, b, 17).is_err());
        pool.free_seq(a).unwrap();
        pool.free_seq(b).unwrap();
        assert_eq!(pool.free_blocks(), 4);
        assert_eq!(pool.seq_len(a), Err(KvError::UnknownSeq(a)));
        // Freed slots are reused.
        assert_eq!(pool.add_seq(), 0);
    }

    #[test]
    fn bad_pools_are_errors() {
        assert!(PagedCache::new(layout(KvDType::F32), 6, 4).is_err());
        assert!(PagedCache::new(layout(KvDType::F32), 8, 0).is_err());
        assert!(matches!(
            PagedCache::new(layout(KvDType::F32), 1 << 16, usize::MAX / 4),
            Err(KvError::TooLarge { .. }) | Err(KvError::Pool(_))
        ));
        let pool = PagedCache::with_budget_mb(layout(KvDType::F16), 16, 1).unwrap();
        // 2 layers × (4 + 4) values × 2 bytes = 32 bytes a token, 512 a block.
        assert_eq!(pool.total_blocks(), 2048);
        assert_eq!(pool.memory_bytes(), 1 << 20);
    }

    /// A prompt's whole blocks published by one sequence are shared by the next one with the
    /// same prefix (no copy, reference-counted), survive the first sequence's end, are never
    /// overwritten, and are evicted least-recently-used when the pool runs short.
    #[test]
    fn prefix_blocks_are_shared_kept_and_evicted() {
        let mut pool = PagedCache::new(layout(KvDType::F32), 4, 6).unwrap();
        let prompt: Vec<u32> = (0..10).collect(); // 2 whole blocks + 2
        let a = pool.add_seq();
        assert_eq!(pool.attach_prefix(a, &prompt[..9]).unwrap(), 0);
        pool.reserve(a, 10).unwrap();
        for layer in 0..2 {
            let k: Vec<f32> = (0..10 * 4).map(|i| i as f32).collect();
            pool.write_seq(layer, a, 0, &k, &k).unwrap();
        }
        pool.commit(a, 10).unwrap();
        pool.publish_prefix(a, &prompt).unwrap();
        let table_a = pool.block_table(a).unwrap()[..2].to_vec();
        pool.free_seq(a).unwrap();
        let st = pool.stats();
        assert_eq!(
            (st.free_blocks, st.cached_blocks, st.prefix.nodes),
            (4, 2, 2)
        );
        // Same first 8 tokens: both blocks reused in place.
        let b = pool.add_seq();
        let mut other = prompt.clone();
        other[9] = 99;
        assert_eq!(pool.attach_prefix(b, &other[..9]).unwrap(), 8);
        assert_eq!(pool.block_table(b).unwrap(), &table_a[..]);
        let v = pool.view_seq(1, b, 8).unwrap();
        assert_eq!(kv_get(&v.k, v.rows.row(7) * 4 + 3), Some(31.0));
        // A shared block is never overwritten.
        assert!(pool.write_seq(0, b, 4, &[0.0; 4], &[0.0; 4]).is_err());
        // A different second block: only the first is shared.
        let c = pool.add_seq();
        let mut third = prompt.clone();
        third[5] = 77;
        assert_eq!(pool.attach_prefix(c, &third).unwrap(), 4);
        // Admitted (a sequence freed before admission takes its lookup's counts back).
        pool.reserve(b, 10).unwrap();
        pool.reserve(c, 10).unwrap();
        pool.free_seq(b).unwrap();
        pool.free_seq(c).unwrap();
        assert_eq!(pool.stats().prefix.hit_blocks, 3);
        // Needing the whole pool evicts the cached blocks (leaf first).
        let d = pool.add_seq();
        pool.reserve(d, 24).unwrap();
        let st = pool.stats();
        assert_eq!(
            (st.free_blocks, st.cached_blocks, st.prefix.evicted_blocks),
            (0, 0, 2)
        );
        pool.free_seq(d).unwrap();
        assert_eq!(pool.free_blocks(), 6);
        // Clearing drops what is left.
        let e = pool.add_seq();
        pool.reserve(e, 8).unwrap();
        pool.commit(e, 8).unwrap();
        pool.publish_prefix(e, &prompt[..8]).unwrap();
        pool.free_seq(e).unwrap();
        assert_eq!(pool.free_blocks(), 4);
        pool.clear_prefix_cache();
        assert_eq!(pool.free_blocks(), 6);
    }

    /// Recurrent sequences: a state per sequence, zeroed when it starts over, no prefix shared.
    #[test]
    fn recurrent_states_are_per_sequence() {
        let l = KvLayout {
            n_layers: 0,
            recurrent: crate::RecurrentLayout {
                n_layers: 2,
                conv: 3,
                ssm: 5,
            },
            ..layout(KvDType::F32)
        };
        let mut pool = PagedCache::with_budget_mb(l, 16, 1).unwrap();
        let a = pool.add_seq();
        let b = pool.add_seq();
        pool.state_seq(1, a).unwrap().ssm.fill(1.0);
        pool.state_seq(0, b).unwrap().conv.fill(2.0);
        assert!(pool.state_seq(1, b).unwrap().ssm.iter().all(|&v| v == 0.0));
        assert_eq!(pool.state_seq(1, a).unwrap().ssm, &[1.0; 5]);
        assert!(pool.state_seq(2, a).is_err());
        pool.reserve(a, 20).unwrap();
        pool.commit(a, 20).unwrap();
        pool.publish_prefix(a, &[7; 20]).unwrap();
        // Cut back part of the way: the sequence starts over.
        pool.truncate(a, 10).unwrap();
        assert_eq!(pool.seq_len(a).unwrap(), 0);
        assert!(pool.state_seq(1, a).unwrap().ssm.iter().all(|&v| v == 0.0));
        let c = pool.add_seq();
        assert_eq!(pool.attach_prefix(c, &[7; 20]).unwrap(), 0);
        pool.free_seq(b).unwrap();
        let d = pool.add_seq();
        assert_eq!(d, b);
        assert!(pool.state_seq(0, d).unwrap().conv.iter().all(|&v| v == 0.0));
    }
}
