//! Paged KV caches on the GPU (vLLM's paged attention): a pool of pages of the plan
//! ([`CudaPlan::new_pool`]) holds the keys and values of many sequences, each a
//! [`CudaKvCache`] whose positions map to pool pages through its page table
//! ([`CudaPlan::new_paged_cache`], [`CudaKvCache::set_pages`]). Which pages a sequence holds is
//! the caller's to decide (a scheduler's block accounting, kestrel-kv's `BlockPool`); a page
//! may be mapped by several sequences (a shared prompt prefix), since a step writes only the
//! positions it appends.
//!
//! A paged sequence's steps reach its cache through the plan's [`KvTable`]: [`CudaPlan::run`]
//! writes one sequence's table (each token's entry its cache, the kernels and settings of a
//! contiguous cache's step, the tiled prefill kernel included), [`CudaPlan::run_batch`] an
//! entry per sequence. Addressing changes no arithmetic, so a paged sequence's logits are the
//! bits it gets with a contiguous cache.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use kestrel_tensor::cuda::KvTable;
use kestrel_tensor::DType;

use super::cache::{GraphSlot, LayerCache, PagedKv};
use super::{internal, CudaKvCache, CudaPlan, NEXT_PLAN_ID};
use crate::GraphError;

/// The plan's pool of KV pages.
pub(super) struct KvPool {
    /// Each attention layer's key and value matrices of `pages * page_rows` rows.
    layers: Vec<Option<LayerCache>>,
    pub(super) pages: usize,
    pub(super) page_rows: usize,
    pub(super) dtype: DType,
    /// Tells this pool from the plan's earlier ones (a paged cache records its pool's).
    pub(super) id: u64,
}

impl CudaKvCache {
    /// Whether its keys and values are pages of a plan's pool ([`CudaPlan::new_paged_cache`]).
    pub fn is_paged(&self) -> bool {
        self.paged.is_some()
    }

    /// The pool pages its positions map to, in order (`None`: a contiguous cache).
    pub fn pages(&self) -> Option<&[u32]> {
        self.paged.as_ref().map(|p| p.pages.ids())
    }

    /// Maps its positions to the pool pages `ids`, in position order: it then holds
    /// `ids.len() × page_rows` positions (its capacity), of which the first [`Self::len`] are
    /// cached. Pages already mapped keep their place when `ids` starts with them; the ids that
    /// changed are copied to the device (in stream order). The caller keeps the pages it maps
    /// to this sequence from being written by another one, except positions both hold alike
    /// (a shared prefix).
    ///
    /// # Errors
    /// A contiguous cache, an id outside the pool, more positions than the cache was made
    /// for, fewer than it holds, a driver error.
    pub fn set_pages(&mut self, ids: &[u32]) -> Result<(), GraphError> {
        let Some(p) = self.paged.as_mut() else {
            return Err(internal("pages set on a contiguous KV cache"));
        };
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= p.pool_pages) {
            return Err(GraphError::Batch(format!(
                "page {id} outside a pool of {} pages",
                p.pool_pages
            )));
        }
        let positions = ids.len().saturating_mul(p.pages.page_rows());
        if ids.len() > p.pages.max_pages() || positions < self.len {
            return Err(GraphError::ContextFull {
                needed: positions.max(self.len),
                capacity: p.max_positions,
            });
        }
        self.dev.set_kv_pages(&mut p.pages, ids)?;
        self.capacity = positions.min(p.max_positions);
        Ok(())
    }

    /// Takes its first `len` positions as cached: the pages mapped to them already hold them
    /// (a prompt prefix another sequence computed, its pages shared), so the next step writes
    /// position `len`. They continue as that sequence did from there. A step never writes
    /// below `len` (truncated or reset under it, the cache refuses its next step).
    ///
    /// # Errors
    /// A contiguous cache, `len` past the mapped positions.
    pub fn adopt_prefix(&mut self, len: usize) -> Result<(), GraphError> {
        let capacity = self.capacity;
        let Some(p) = self.paged.as_mut() else {
            return Err(internal("a prefix adopted by a contiguous KV cache"));
        };
        if len > capacity {
            return Err(GraphError::ContextFull {
                needed: len,
                capacity,
            });
        }
        p.shared = len;
        self.len = len;
        Ok(())
    }
}

impl CudaPlan {
    /// Whether this plan's sequences can keep paged caches ([`Self::new_pool`]): a graph whose
    /// batched steps run in one step ([`Self::batches_in_one_step`]: no state-space layers,
    /// latent attention or key and value heads of different sizes, whose kernels take one
    /// sequence's contiguous cache).
    pub fn can_page(&self) -> bool {
        self.batches_in_one_step()
    }

    /// Makes the plan's pool: `pages` pages of `page_rows` positions (a power of two) for
    /// every attention layer, of the plan's KV type ([`Self::set_kv_dtype`]), replacing any
    /// earlier pool (whose paged caches are then refused).
    ///
    /// # Errors
    /// A graph that cannot page ([`Self::can_page`]), no pages, a page size that is not a power of
    /// two up to 65,536, out of device memory (with the sizes asked and free).
    pub fn new_pool(&mut self, pages: usize, page_rows: usize) -> Result<(), GraphError> {
        if !self.can_page() {
            return Err(GraphError::Batch(
                "paged KV caches need a graph whose batched steps run in one step".into(),
            ));
        }
        if pages == 0 || !page_rows.is_power_of_two() || page_rows > 1 << 16 {
            return Err(GraphError::Batch(format!(
                "a pool of {pages} pages of {page_rows} positions (at least one page, a power \
                 of two up to 65536 positions)"
            )));
        }
        let rows = pages
            .checked_mul(page_rows)
            .filter(|&r| r <= i32::MAX as usize)
            .ok_or_else(|| {
                GraphError::Batch(format!("a pool of {pages} pages of {page_rows} positions"))
            })?;
        // The old pool first: its memory may be what the new one needs.
        self.pool = None;
        self.pool = Some(KvPool {
            layers: self.layer_caches(rows)?,
            pages,
            page_rows,
            dtype: self.kv_dtype,
            id: NEXT_PLAN_ID.fetch_add(1, Ordering::Relaxed),
        });
        Ok(())
    }

    /// Device bytes a pool of `pages` pages of `page_rows` positions takes at the plan's KV
    /// type (keys and values, every attention layer).
    pub fn pool_bytes_for(&self, pages: usize, page_rows: usize) -> usize {
        let rows = pages.saturating_mul(page_rows);
        let row = |w: usize| self.kv_dtype.row_bytes(w).unwrap_or(usize::MAX);
        self.kv_widths
            .iter()
            .enumerate()
            .filter_map(|(l, w)| w.map(|w| (l, w)))
            .map(|(l, w)| {
                let v = self.kv_v_widths.get(l).copied().unwrap_or(w).max(1);
                rows.saturating_mul(row(w).saturating_add(row(v)))
            })
            .fold(0usize, usize::saturating_add)
    }

    /// Drops the pool (its paged caches are then refused).
    pub fn drop_pool(&mut self) {
        self.pool = None;
    }

    /// The pool's pages and positions a page (`None`: no pool).
    pub fn pool_pages(&self) -> Option<(usize, usize)> {
        self.pool.as_ref().map(|p| (p.pages, p.page_rows))
    }

    /// Device bytes of the pool (keys and values, every layer).
    pub fn pool_bytes(&self) -> usize {
        self.pool.as_ref().map_or(0, |p| {
            p.layers
                .iter()
                .flatten()
                .map(|l| {
                    l.k.row_bytes() * l.k.shape().n_rows() + l.v.row_bytes() * l.v.shape().n_rows()
                })
                .sum()
        })
    }

    /// A new, empty cache for one sequence of up to `max_positions` positions whose keys and
    /// values are pages of the plan's pool, none mapped yet ([`CudaKvCache::set_pages`] maps
    /// them; its capacity is what they hold).
    ///
    /// # Errors
    /// No pool, out of device memory (the page table's).
    pub fn new_paged_cache(&self, max_positions: usize) -> Result<CudaKvCache, GraphError> {
        let pool = self
            .pool
            .as_ref()
            .ok_or_else(|| GraphError::Batch("no KV pool: make one with new_pool".into()))?;
        let max_positions = max_positions.max(1);
        let max_pages = max_positions.div_ceil(pool.page_rows);
        Ok(CudaKvCache {
            layers: self.kv_widths.iter().map(|_| None).collect(),
            widths: self.kv_widths.clone(),
            dtype: pool.dtype,
            states: Vec::new(),
            checkpoint: None,
            dirty: false,
            dev: Arc::clone(&self.dev),
            capacity: 0,
            len: 0,
            slot: GraphSlot::default(),
            paged: Some(PagedKv {
                pages: self.dev.new_kv_pages(max_pages, pool.page_rows)?,
                pool: pool.id,
                pool_pages: pool.pages,
                max_positions,
                shared: 0,
            }),
        })
    }

    /// The step's table, sized for a batched step or one sequence's whole step, made at the
    /// first step that needs it.
    pub(super) fn table(&mut self) -> Result<&mut KvTable, GraphError> {
        if self.kv_table.is_none() {
            let tokens = self.max_batch.max(self.max_tokens);
            self.kv_table = Some(self.dev.new_kv_table(self.kv_widths.len(), tokens)?);
        }
        self.kv_table
            .as_mut()
            .ok_or_else(|| internal("no KV table"))
    }

    /// Writes table entry `token` for `cache` in every attention layer: its pages of the pool,
    /// or its own matrices.
    pub(super) fn set_entries(
        &mut self,
        cache: &mut CudaKvCache,
        token: usize,
    ) -> Result<(), GraphError> {
        let (Some(table), dev) = (self.kv_table.as_mut(), &self.dev) else {
            return Err(internal("no KV table"));
        };
        match &cache.paged {
            Some(p) => {
                if cache.len < p.shared {
                    return Err(GraphError::Batch(format!(
                        "a step at position {} of a paged cache whose first {} positions are \
                         pages another sequence computed",
                        cache.len, p.shared
                    )));
                }
                let pool = self
                    .pool
                    .as_mut()
                    .filter(|pool| pool.id == p.pool && pool.dtype == cache.dtype)
                    .ok_or_else(|| {
                        GraphError::Batch("a paged KV cache of another pool than the plan's".into())
                    })?;
                for (layer, lc) in pool.layers.iter_mut().enumerate() {
                    if let Some(lc) = lc {
                        dev.set_kv_paged_entry(
                            table,
                            layer,
                            token,
                            (&mut lc.k, &mut lc.v),
                            &p.pages,
                        )?;
                    }
                }
            }
            None => {
                for (layer, lc) in cache.layers.iter_mut().enumerate() {
                    if let Some(lc) = lc {
                        dev.set_kv_entry(table, layer, token, &mut lc.k, &mut lc.v)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes and uploads one paged sequence's table for a step of `t` tokens.
    pub(super) fn write_sequence_table(
        &mut self,
        cache: &mut CudaKvCache,
        t: usize,
    ) -> Result<(), GraphError> {
        self.table()?.begin_sequence(t)?;
        self.set_entries(cache, 0)?;
        let Some(table) = self.kv_table.as_mut() else {
            return Err(internal("no KV table"));
        };
        for (layer, w) in self.kv_widths.iter().enumerate() {
            if w.is_some() {
                table.repeat_first(layer)?;
            }
        }
        self.upload_table()
    }

    pub(super) fn upload_table(&mut self) -> Result<(), GraphError> {
        let (Some(table), dev) = (self.kv_table.as_mut(), &self.dev) else {
            return Err(internal("no KV table"));
        };
        Ok(dev.upload_kv_table(table)?)
    }
}
