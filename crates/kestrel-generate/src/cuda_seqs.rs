//! A scheduler's sequences on a GPU ([`CudaSeqs`]), each with its whole budget reserved at
//! admission in blocks of `block_size` tokens out of `kv_blocks`, as the CPU's pool does, and a
//! prefix cache. Two forms:
//!
//! - **Paged** (plans that can page, `CudaPlan::can_page`): the blocks are pages of one device
//!   pool the plan keeps, accounted by kestrel-kv's [`BlockPool`] as the CPU's `PagedCache`
//!   accounts its own; each sequence's cache maps its blocks (`CudaPlan::new_paged_cache`), and
//!   the prefix cache shares whole blocks of published prompts, not copies. A shared prefix is
//!   cut to whole prefill chunks that are also whole blocks (`unit`, below), so the new
//!   sequence prefills the rest in the chunks it would prefill alone and never writes a shared
//!   block: its logits stay the bits it gets alone.
//! - **One cache a sequence** (the others: state-space layers, latent attention, key and value
//!   heads of different sizes; or `KESTREL_CUDA_PAGED=0`): as described next.
//!
//! The prefix cache keeps what a sequence published (its prompt, once prefilled, and its
//! history when it ends): while it runs, in its own cache; once it has ended, its cache is
//! kept (its blocks then count as cached, and the least recently used are evicted when an
//! admission needs them). A new prompt that shares a prefix with one of them starts with those
//! rows copied from it (`CudaPlan::copy_prefix`), not prefilled. Only rows its source computed
//! in whole prefill chunks from a chunk boundary are taken, and only up to a chunk boundary, so
//! the new sequence prefills the rest in the chunks it would prefill alone: its logits stay
//! the bits it gets alone. Graphs with state-space layers reuse nothing (their state holds
//! every position at once).

use kestrel_graph::{CudaKvCache, CudaPlan};
use kestrel_kv::{BlockPool, KvError, PoolStats, PrefixStats, SeqId};

use crate::{BatchOptions, GenerateError};

/// Share of the device's free memory a default-sized page pool may take.
const POOL_SHARE: f64 = 0.9;

/// The GPU store: per-slot device caches, the block accounting of their budgets, and the
/// prefix cache.
pub(crate) struct CudaSeqs {
    /// The cache of each slot (a slot is a [`SeqId`]); `None` when free.
    pub(crate) caches: Vec<Option<CudaKvCache>>,
    /// Each slot's blocks, prompt length, and published tokens (its rows of them are final).
    reserved: Vec<usize>,
    prompt_len: Vec<usize>,
    published: Vec<Vec<u32>>,
    /// Ended sequences' caches kept for their published tokens.
    kept: Vec<Kept>,
    block_size: usize,
    total_blocks: usize,
    /// Blocks of running sequences, and of kept caches.
    used_blocks: usize,
    cached_blocks: usize,
    clock: u64,
    prefix: PrefixStats,
    /// Whether the plan's caches can lend their first positions (`CudaPlan::copies_prefixes`;
    /// not with state-space layers): without, nothing is published or kept.
    reuse: bool,
    /// The paged form's block accounting (its pool is the plan's); `None`: one cache a
    /// sequence.
    pages: Option<BlockPool>,
    /// The paged form's shared prefixes are a multiple of this many positions ([`unit`]).
    unit: usize,
}

/// Prompt positions a shared page prefix is cut to a multiple of: whole prefill chunks of
/// `chunk` (so the new sequence's chunks fall where they would alone) that are whole blocks of
/// `block` (so it never writes a shared block): their least common multiple.
fn unit(chunk: usize, block: usize) -> usize {
    let (chunk, block) = (chunk.max(1), block.max(1));
    let (mut a, mut b) = (chunk, block);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    chunk / a * block
}

/// An ended sequence's cache, kept for the tokens it published.
struct Kept {
    cache: CudaKvCache,
    tokens: Vec<u32>,
    prompt_len: usize,
    blocks: usize,
    last_used: u64,
}

/// Where a prefix comes from: a running slot or a kept cache.
#[derive(Clone, Copy, PartialEq)]
enum Source {
    Slot(usize),
    Kept(usize),
}

impl CudaSeqs {
    /// A store for up to `max_seqs` sequences and `total_blocks` blocks of `block_size`
    /// tokens; `reuse`: whether its caches may lend prefixes (`CudaPlan::copies_prefixes`).
    pub(crate) fn new(
        max_seqs: usize,
        block_size: usize,
        total_blocks: usize,
        reuse: bool,
    ) -> CudaSeqs {
        Self::with_pages(max_seqs, block_size, total_blocks, reuse, None)
    }

    /// The store for a scheduler of `opts` over `blocks` blocks: paged where the plan can page
    /// (`KESTREL_CUDA_PAGED=0`: one cache a sequence, for comparison), else one cache a
    /// sequence. A pool is allocated whole, so when `kv_blocks` was left at its default (every
    /// sequence's full context) it is cut to what 90% of the device's free memory holds, saying
    /// so; a size asked for is allocated as asked.
    ///
    /// # Errors
    /// As [`Self::paged`].
    pub(crate) fn for_plan(
        plan: &mut CudaPlan,
        opts: &BatchOptions,
        blocks: usize,
    ) -> Result<CudaSeqs, GenerateError> {
        let paged =
            plan.can_page() && std::env::var("KESTREL_CUDA_PAGED").map_or(true, |v| v != "0");
        if !paged {
            return Ok(Self::new(
                opts.max_seqs,
                opts.block_size,
                blocks,
                plan.copies_prefixes(),
            ));
        }
        let mut blocks = blocks.max(1);
        if opts.kv_blocks == 0 {
            let per_block = plan.pool_bytes_for(1, opts.block_size).max(1);
            // The old store's frees are stream-ordered: counted once the stream has run them.
            plan.device().synchronize()?;
            let free = plan.device().memory_info()?.0;
            let fits = ((free as f64 * POOL_SHARE) as usize / per_block).max(1);
            if fits < blocks {
                eprintln!(
                    "kestrel: the GPU's KV pool holds {} of the {} blocks of {} positions the \
                     scheduler's {} full contexts would take ({:.1} GiB free); set kv_blocks to \
                     choose",
                    fits,
                    blocks,
                    opts.block_size,
                    opts.max_seqs,
                    free as f64 / f64::from(1u32 << 30)
                );
                blocks = fits;
            }
        }
        Self::paged(plan, opts.max_seqs, opts.block_size, blocks)
    }

    /// The paged form: `plan`'s pool of `total_blocks` pages of `block_size` positions (made
    /// here, replacing any earlier one), accounted as the CPU's pool accounts its blocks.
    ///
    /// # Errors
    /// A plan that cannot page, a bad block size, out of device memory.
    pub(crate) fn paged(
        plan: &mut CudaPlan,
        max_seqs: usize,
        block_size: usize,
        total_blocks: usize,
    ) -> Result<CudaSeqs, GenerateError> {
        let pool = BlockPool::new(block_size, total_blocks)?;
        plan.new_pool(total_blocks, block_size)?;
        let mut seqs = Self::with_pages(
            max_seqs,
            block_size,
            total_blocks,
            plan.copies_prefixes(),
            Some(pool),
        );
        seqs.unit = unit(plan.max_tokens(), block_size);
        Ok(seqs)
    }

    fn with_pages(
        max_seqs: usize,
        block_size: usize,
        total_blocks: usize,
        reuse: bool,
        pages: Option<BlockPool>,
    ) -> CudaSeqs {
        CudaSeqs {
            caches: Vec::with_capacity(max_seqs),
            reserved: Vec::with_capacity(max_seqs),
            prompt_len: Vec::with_capacity(max_seqs),
            published: Vec::with_capacity(max_seqs),
            kept: Vec::new(),
            block_size,
            total_blocks,
            used_blocks: 0,
            cached_blocks: 0,
            clock: 0,
            prefix: PrefixStats::default(),
            reuse,
            pages,
            unit: 1,
        }
    }

    pub(crate) fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// Blocks neither running nor cached.
    pub(crate) fn free_blocks(&self) -> usize {
        match &self.pages {
            Some(pool) => pool.free_blocks(),
            None => self.total_blocks - self.used_blocks - self.cached_blocks,
        }
    }

    pub(crate) fn total_blocks(&self) -> usize {
        self.total_blocks
    }

    pub(crate) fn cache(&mut self, seq: SeqId) -> Result<&mut CudaKvCache, GenerateError> {
        self.caches
            .get_mut(seq)
            .and_then(Option::as_mut)
            .ok_or(GenerateError::Kv(KvError::UnknownSeq(seq)))
    }

    /// Makes room for a sequence of `prompt` that may grow to `needed` tokens; its first
    /// positions copied from the prefix cache (at most `reuse` of them, never the last prompt
    /// token). Returns its id and the positions it starts with, or `None` when it must wait.
    pub(crate) fn admit(
        &mut self,
        plan: &CudaPlan,
        prompt: &[u32],
        needed: usize,
        reuse: usize,
    ) -> Result<Option<(SeqId, usize)>, GenerateError> {
        if self.pages.is_some() {
            return self.admit_paged(plan, prompt, needed, reuse);
        }
        let blocks = self.blocks_for(needed);
        if self.used_blocks + blocks > self.total_blocks {
            return Ok(None);
        }
        // The prefix first, so eviction spares its source.
        let chunk = plan.max_tokens().max(1);
        let upto = reuse.min(prompt.len().saturating_sub(1));
        let found = if plan.copies_prefixes() && upto >= chunk {
            self.longest(&prompt[..upto], chunk)
        } else {
            None
        };
        let mut found = found.filter(|&(_, n)| n > 0);
        // Kept caches make room, least recently used first, the prefix's source last.
        while self.used_blocks + self.cached_blocks + blocks > self.total_blocks {
            let spare = match found {
                Some((Source::Kept(i), _)) => Some(i),
                _ => None,
            };
            if let Some(i) = self.evict(spare) {
                if let Some((Source::Kept(j), _)) = found.as_mut() {
                    if i < *j {
                        *j -= 1; // the list shifted past the evicted entry
                    }
                }
                continue;
            }
            found = None;
            if self.evict(None).is_none() {
                return Ok(None);
            }
        }
        let mut cache = plan.new_cache(blocks * self.block_size)?;
        let mut cached = 0;
        if let Some((src, n)) = found {
            let from = match src {
                Source::Slot(s) => self.caches[s].as_ref(),
                Source::Kept(i) => {
                    self.clock += 1;
                    self.kept[i].last_used = self.clock;
                    Some(&self.kept[i].cache)
                }
            };
            if let Some(from) = from {
                plan.copy_prefix(from, &mut cache, n)?;
                cached = n;
                self.prefix.hit_blocks += (n / self.block_size) as u64;
            }
        }
        self.prefix.miss_blocks += ((upto - cached.min(upto)) / self.block_size) as u64;
        let slot = self
            .caches
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.caches.len());
        self.grow_slots(slot);
        self.caches[slot] = Some(cache);
        self.reserved[slot] = blocks;
        self.prompt_len[slot] = prompt.len();
        self.published[slot].clear();
        self.used_blocks += blocks;
        Ok(Some((slot, cached)))
    }

    /// Makes the per-slot lists hold slot `slot`.
    fn grow_slots(&mut self, slot: usize) {
        while self.caches.len() <= slot {
            self.caches.push(None);
            self.reserved.push(0);
            self.prompt_len.push(0);
            self.published.push(Vec::new());
        }
    }

    /// [`Self::admit`] of the paged form: its blocks from the pool (the shared prefix's from
    /// the prefix cache), mapped into a new paged cache.
    fn admit_paged(
        &mut self,
        plan: &CudaPlan,
        prompt: &[u32],
        needed: usize,
        reuse: usize,
    ) -> Result<Option<(SeqId, usize)>, GenerateError> {
        let unit = self.unit;
        let Some(pool) = self.pages.as_mut() else {
            return Err(GenerateError::Kv(KvError::Pool("no page pool".into())));
        };
        let seq = pool.add_seq();
        // The last prompt token always runs (for its logits).
        let upto = reuse.min(prompt.len().saturating_sub(1)) / unit * unit;
        let made = (|| -> Result<Option<(CudaKvCache, usize)>, GenerateError> {
            let mut cached = 0;
            if self.reuse && upto > 0 {
                cached = pool.attach_prefix(seq, &prompt[..upto])?;
                if cached % unit != 0 {
                    cached = cached / unit * unit;
                    pool.truncate(seq, cached)?;
                }
            }
            match pool.reserve(seq, needed) {
                Ok(()) => {}
                Err(KvError::OutOfBlocks { .. }) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
            let mut cache = plan.new_paged_cache(needed)?;
            cache.set_pages(pool.block_table(seq)?)?;
            cache.adopt_prefix(cached)?;
            Ok(Some((cache, cached)))
        })();
        let (cache, cached) = match made {
            Ok(Some(c)) => c,
            other => {
                pool.free_seq(seq)?;
                return other.map(|_| None);
            }
        };
        self.grow_slots(seq);
        self.caches[seq] = Some(cache);
        self.reserved[seq] = self.blocks_for(needed);
        self.prompt_len[seq] = prompt.len();
        Ok(Some((seq, cached)))
    }

    /// Records that `seq` holds `len` positions (its cache counts them; the paged form's
    /// accounting too, so publishing takes them).
    pub(crate) fn commit(&mut self, seq: SeqId, len: usize) -> Result<(), GenerateError> {
        let have = self.cache(seq)?.len();
        if have != len {
            return Err(GenerateError::InvalidOption {
                name: "batch",
                reason: format!("sequence {seq} holds {have} positions, not {len}"),
            });
        }
        if let Some(pool) = self.pages.as_mut() {
            pool.commit(seq, len)?;
        }
        Ok(())
    }

    /// The source sharing the longest reusable prefix with `prompt`, and that length: the
    /// common tokens, cut to the rows the source prefilled in whole chunks, rounded down to a
    /// chunk.
    fn longest(&self, prompt: &[u32], chunk: usize) -> Option<(Source, usize)> {
        let usable = |tokens: &[u32], prompt_len: usize| {
            let common = tokens
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count();
            common.min(prompt_len / chunk * chunk) / chunk * chunk
        };
        let live = self
            .published
            .iter()
            .enumerate()
            .filter(|(s, _)| self.caches[*s].is_some())
            .map(|(s, t)| (Source::Slot(s), usable(t, self.prompt_len[s])));
        let kept = self
            .kept
            .iter()
            .enumerate()
            .map(|(i, k)| (Source::Kept(i), usable(&k.tokens, k.prompt_len)));
        live.chain(kept).max_by_key(|&(_, n)| n)
    }

    /// Evicts the least recently used kept cache other than `spare`; its old index, or `None`
    /// when there is no other.
    fn evict(&mut self, spare: Option<usize>) -> Option<usize> {
        let i = self
            .kept
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != spare)
            .min_by_key(|(_, k)| k.last_used)
            .map(|(i, _)| i)?;
        let k = self.kept.remove(i);
        self.cached_blocks -= k.blocks;
        self.prefix.evicted_blocks += k.blocks as u64;
        Some(i)
    }

    /// Frees a sequence: its cache is kept for the prefix cache when it published tokens.
    pub(crate) fn free(&mut self, seq: SeqId) -> Result<(), GenerateError> {
        self.cache(seq)?;
        if let Some(pool) = self.pages.as_mut() {
            // Its published blocks stay in the prefix cache, which holds its own reference.
            pool.free_seq(seq)?;
            self.caches[seq] = None;
            self.reserved[seq] = 0;
            return Ok(());
        }
        let cache = self.caches[seq].take();
        let blocks = std::mem::take(&mut self.reserved[seq]);
        self.used_blocks -= blocks;
        let tokens = std::mem::take(&mut self.published[seq]);
        if let (Some(cache), false) = (cache, tokens.is_empty()) {
            self.clock += 1;
            self.kept.push(Kept {
                cache,
                tokens,
                prompt_len: self.prompt_len[seq],
                blocks,
                last_used: self.clock,
            });
            self.cached_blocks += blocks;
        }
        Ok(())
    }

    /// Records that `seq`'s rows of `tokens` are final (offered to later prompts).
    pub(crate) fn publish(&mut self, seq: SeqId, tokens: &[u32]) -> Result<(), GenerateError> {
        let have = self.cache(seq)?.len();
        if !self.reuse {
            return Ok(());
        }
        if self.pages.is_some() {
            // Only prompt rows computed in whole chunks, cut to whole units.
            let unit = self.unit;
            let n = tokens
                .len()
                .min(have)
                .min(self.prompt_len[seq] / unit * unit);
            if let Some(pool) = self.pages.as_mut() {
                pool.publish_prefix(seq, &tokens[..n])?;
            }
            return Ok(());
        }
        let p = &mut self.published[seq];
        p.clear();
        p.extend_from_slice(&tokens[..tokens.len().min(have)]);
        Ok(())
    }

    /// Forgets every published prefix and kept cache (rows computed at adapter scales no longer
    /// used).
    pub(crate) fn clear_prefix_cache(&mut self) {
        if let Some(pool) = self.pages.as_mut() {
            pool.clear_prefix_cache();
            return;
        }
        self.published.iter_mut().for_each(Vec::clear);
        self.prefix.evicted_blocks += self.cached_blocks as u64;
        self.kept.clear();
        self.cached_blocks = 0;
    }

    /// Occupancy (kept caches as cached blocks, not free ones, as the CPU pool counts them).
    pub(crate) fn stats(&self) -> PoolStats {
        if let Some(pool) = &self.pages {
            return pool.stats();
        }
        let live = self.caches.iter().flatten();
        let tokens: usize = live.clone().map(CudaKvCache::len).sum();
        let held = self.used_blocks * self.block_size;
        PoolStats {
            total_blocks: self.total_blocks,
            free_blocks: self.free_blocks(),
            sequences: live.count(),
            tokens,
            fragmentation: if held == 0 {
                0.0
            } else {
                1.0 - tokens as f64 / held as f64
            },
            cached_blocks: self.cached_blocks,
            prefix: PrefixStats {
                nodes: self.cached_blocks,
                ..self.prefix
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::unit;

    #[test]
    fn a_shared_prefix_is_whole_chunks_and_whole_blocks() {
        assert_eq!(unit(512, 16), 512);
        assert_eq!(unit(8, 16), 16);
        assert_eq!(unit(8, 8), 8);
        assert_eq!(unit(12, 16), 48);
        assert_eq!(unit(0, 16), 16);
    }
}
