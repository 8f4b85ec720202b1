//! A scheduler's sequences on a GPU ([`CudaSeqs`]): one device cache per running sequence,
//! its whole budget reserved at admission and counted in blocks of `block_size` tokens against
//! `kv_blocks`, and a prefix cache of device caches.
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
use kestrel_kv::{KvError, PoolStats, PrefixStats, SeqId};

use crate::GenerateError;

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
        }
    }

    pub(crate) fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// Blocks neither running nor cached.
    pub(crate) fn free_blocks(&self) -> usize {
        self.total_blocks - self.used_blocks - self.cached_blocks
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
        let slot = match self.caches.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                self.caches.push(None);
                self.reserved.push(0);
                self.prompt_len.push(0);
                self.published.push(Vec::new());
                self.caches.len() - 1
            }
        };
        self.caches[slot] = Some(cache);
        self.reserved[slot] = blocks;
        self.prompt_len[slot] = prompt.len();
        self.published[slot].clear();
        self.used_blocks += blocks;
        Ok(Some((slot, cached)))
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
        let p = &mut self.published[seq];
        p.clear();
        p.extend_from_slice(&tokens[..tokens.len().min(have)]);
        Ok(())
    }

    /// Forgets every published prefix and kept cache (rows computed at adapter scales no longer
    /// used).
    pub(crate) fn clear_prefix_cache(&mut self) {
        self.published.iter_mut().for_each(Vec::clear);
        self.prefix.evicted_blocks += self.cached_blocks as u64;
        self.kept.clear();
        self.cached_blocks = 0;
    }

    /// Occupancy (kept caches as cached blocks, not free ones, as the CPU pool counts them).
    pub(crate) fn stats(&self) -> PoolStats {
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
