//! [`KvTable`]: where each token of a step keeps its keys and values (`kernels/kv_rows.cuh`),
//! so one step runs several sequences whose caches are separate allocations, or sequences whose
//! caches are pages of a pool ([`KvPages`]: vLLM's paged attention). The table holds, per
//! attention layer and token, the device addresses of the token's key and value caches and of
//! its page table (none for a contiguous cache); the RoPE + KV-append, KV-append and attention
//! kernels read them instead of the caches they are given. The host writes it before each step
//! ([`CudaDevice::set_kv_entry`] or [`CudaDevice::set_kv_paged_entry`], then
//! [`CudaDevice::upload_kv_table`]: one small copy), so a captured graph that reads it replays
//! with whichever sequences the next step holds.
//!
//! A table is begun for a batched step ([`KvTable::begin`]: one token a sequence, each with a
//! one-token step's kernel settings) or for one sequence's step ([`KvTable::begin_sequence`]:
//! its tokens' entries alike, the kernels a step of that many tokens of one sequence takes,
//! the tiled prefill kernel included), so a token's bits do not depend on how its cache is
//! reached.
//!
//! The launches that read a table are `unsafe`: the table keeps addresses, not borrows, so the
//! caller promises the caches it was written from are still alive when the launch runs.

use cudarc::driver::{CudaSlice, DevicePtr};

use super::engine::driver;
use super::{CudaDevice, DeviceTensor};
use crate::error::{Result, TensorError};
use crate::DType;

const OP: &str = "cuda kv table";

/// Words of a table entry (`KV_ENTRY` in kv_rows.cuh): the key cache, the value cache, the page
/// table (0: contiguous) and the page shift.
const ENTRY: usize = 4;

/// Largest page: 2^16 positions.
const MAX_PAGE_SHIFT: u32 = 16;

/// One sequence's page table on the device ([`CudaDevice::new_kv_pages`]): position `p` of the
/// sequence is row `pages[p / page_rows] * page_rows + p % page_rows` of a pool's key and value
/// matrices. The ids are set from the host ([`CudaDevice::set_kv_pages`]) as the sequence
/// grows; only the changed tail is copied.
pub struct KvPages {
    buf: CudaSlice<i32>,
    host: Vec<u32>,
    shift: u32,
    /// The largest id set (checked against a pool's pages when an entry is written).
    max_id: Option<u32>,
}

impl std::fmt::Debug for KvPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvPages")
            .field("pages", &self.host.len())
            .field("page_rows", &self.page_rows())
            .finish()
    }
}

impl KvPages {
    /// Pages mapped.
    pub fn len(&self) -> usize {
        self.host.len()
    }

    /// True when no page is mapped.
    pub fn is_empty(&self) -> bool {
        self.host.is_empty()
    }

    /// Positions a page holds (a power of two).
    pub fn page_rows(&self) -> usize {
        1 << self.shift
    }

    /// Positions the mapped pages hold.
    pub fn positions(&self) -> usize {
        self.host.len() << self.shift
    }

    /// Most pages it maps.
    pub fn max_pages(&self) -> usize {
        self.buf.len()
    }

    /// The pool pages mapped, in position order.
    pub fn ids(&self) -> &[u32] {
        &self.host
    }
}

/// The element type of a device KV cache: f16 values, or q8_0 blocks (32 values, an f16 scale
/// and 32 int8 quants; rows and heads whole blocks), as the CPU engine's caches of those types.
/// Each kernel that reads or writes a cache has a form per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KvKind {
    F16,
    Q8_0,
}

impl KvKind {
    /// The kind of a key cache and a value cache, which must match.
    ///
    /// # Errors
    /// A dtype other than F16 or Q8_0, or keys and values of different dtypes.
    pub(super) fn of(op: &'static str, k: DType, v: DType) -> Result<KvKind> {
        let kind = match k {
            DType::F16 => KvKind::F16,
            DType::Q8_0 => KvKind::Q8_0,
            dtype => return Err(TensorError::UnsupportedDType { op, dtype }),
        };
        if v != k {
            return Err(TensorError::InvalidParam {
                op,
                why: "the key and value caches must have the same dtype",
            });
        }
        Ok(kind)
    }

    /// Checks that heads of `head_dim` values (and value rows cut into pieces of `piece`) are
    /// whole q8_0 blocks; anything goes for f16.
    ///
    /// # Errors
    /// A q8_0 cache with a head or piece that is not a multiple of 32.
    pub(super) fn check_heads(self, op: &'static str, head_dim: usize, piece: usize) -> Result<()> {
        if self == KvKind::Q8_0 && !(head_dim.is_multiple_of(32) && piece.is_multiple_of(32)) {
            return Err(TensorError::InvalidParam {
                op,
                why: "a q8_0 KV cache needs heads of a multiple of 32 values",
            });
        }
        Ok(())
    }

    /// `f16` or `q8_0` of a kernel name.
    pub(super) fn pick(self, f16: &'static str, q8_0: &'static str) -> &'static str {
        match self {
            KvKind::F16 => f16,
            KvKind::Q8_0 => q8_0,
        }
    }
}

/// Per attention layer and token of a step, the addresses of the token's key and value caches
/// (f16 or q8_0) on the device, with what the launches check against on the host (row lengths,
/// element type, each cache's capacity).
pub struct KvTable {
    pub(super) buf: CudaSlice<u64>,
    host: Vec<u64>,
    layers: usize,
    max_tokens: usize,
    /// Tokens of the step being written.
    tokens: usize,
    /// Each layer's (key row, value row, element type), once a token's caches were set for it.
    rows: Vec<Option<(usize, usize, KvKind)>>,
    /// Positions token `t`'s caches hold in layer `l` (`l * max_tokens + t`; 0: not set).
    caps: Vec<usize>,
    /// The step's tokens are one sequence's ([`Self::begin_sequence`]).
    one_sequence: bool,
}

impl std::fmt::Debug for KvTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvTable")
            .field("layers", &self.layers)
            .field("max_tokens", &self.max_tokens)
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl KvTable {
    /// Most tokens a step may hold.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Tokens of the step last begun.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// Whether the step's tokens are one sequence's ([`Self::begin_sequence`]).
    pub fn is_one_sequence(&self) -> bool {
        self.one_sequence
    }

    /// Starts a batched decode step of `tokens` tokens, each of its own sequence: forgets every
    /// entry.
    ///
    /// # Errors
    /// More tokens than the table holds.
    pub fn begin(&mut self, tokens: usize) -> Result<()> {
        self.start(tokens, false)
    }

    /// Starts a step of `tokens` tokens of one sequence (a paged sequence's prefill or decode
    /// step; each token's entry is then its cache): forgets every entry.
    ///
    /// # Errors
    /// More tokens than the table holds.
    pub fn begin_sequence(&mut self, tokens: usize) -> Result<()> {
        self.start(tokens, true)
    }

    fn start(&mut self, tokens: usize, one_sequence: bool) -> Result<()> {
        if tokens > self.max_tokens {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "tokens",
                expected: self.max_tokens,
                actual: tokens,
            });
        }
        self.tokens = tokens;
        self.one_sequence = one_sequence;
        self.rows.fill(None);
        for l in 0..self.layers {
            self.caps[l * self.max_tokens..][..tokens].fill(0);
        }
        let used = self.used_words();
        self.host[..used].fill(0);
        Ok(())
    }

    /// Gives every token of the step token 0's caches in `layer` (a one-sequence step's
    /// entries are all alike: one entry written, then copied).
    ///
    /// # Errors
    /// A layer outside the table, token 0's entry not set for it.
    pub fn repeat_first(&mut self, layer: usize) -> Result<()> {
        let first_cap = self.caps.get(layer * self.max_tokens).copied().unwrap_or(0);
        if layer >= self.layers || self.tokens == 0 || first_cap == 0 {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "no entry for the step's first token in this layer",
            });
        }
        let b = self.base(layer);
        let (first, rest) = self.host[b..b + self.tokens * ENTRY].split_at_mut(ENTRY);
        for e in rest.chunks_exact_mut(ENTRY) {
            e.copy_from_slice(first);
        }
        self.caps[layer * self.max_tokens..][..self.tokens].fill(first_cap);
        Ok(())
    }

    /// The first table word of `layer` (its entries for the step's tokens follow): the step's
    /// entries are packed, layer after layer, so one copy of exactly them uploads the step, and
    /// a captured step (whose launches hold these addresses) replays with a step of as many
    /// tokens.
    fn base(&self, layer: usize) -> usize {
        layer * self.tokens * ENTRY
    }

    /// Words of the step's entries.
    fn used_words(&self) -> usize {
        self.layers.max(1) * self.tokens * ENTRY
    }

    /// Checks a launch over `layer` for a step at `positions`: one per token of the step, each
    /// inside its token's caches, whose rows are `k_row` and `v_row` (`None`: not checked).
    /// Returns the caches' element type.
    pub(super) fn check(
        &self,
        layer: usize,
        positions: &[i32],
        k_row: Option<usize>,
        v_row: Option<usize>,
    ) -> Result<KvKind> {
        if positions.len() != self.tokens {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "positions",
                expected: self.tokens,
                actual: positions.len(),
            });
        }
        let Some(&Some((kr, vr, kind))) = self.rows.get(layer) else {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "no caches were set for this layer",
            });
        };
        for (want, have, what) in [(k_row, kr, "key row"), (v_row, vr, "value row")] {
            if let Some(w) = want.filter(|&w| w != have) {
                return Err(TensorError::LengthMismatch {
                    op: OP,
                    what,
                    expected: have,
                    actual: w,
                });
            }
        }
        if self.one_sequence {
            // The tiled kernel reads its first token's entry for all of a CTA's tokens.
            let entries = &self.host[self.base(layer)..][..self.tokens * ENTRY];
            if entries.chunks_exact(ENTRY).any(|e| e != &entries[..ENTRY]) {
                return Err(TensorError::InvalidParam {
                    op: OP,
                    why: "a one-sequence step's tokens reach different caches",
                });
            }
        }
        let caps = &self.caps[layer * self.max_tokens..][..self.tokens];
        for (index, (&p, &cap)) in positions.iter().zip(caps).enumerate() {
            if p < 0 || p as usize >= cap {
                return Err(TensorError::IdOutOfRange {
                    op: OP,
                    index,
                    id: i64::from(p),
                    rows: cap,
                });
            }
        }
        Ok(kind)
    }
}

impl CudaDevice {
    /// A table for steps of up to `max_tokens` tokens over `layers` layers (a layer index is a
    /// graph's attention layer; layers without attention are never set).
    ///
    /// # Errors
    /// Out of device memory.
    pub fn new_kv_table(&self, layers: usize, max_tokens: usize) -> Result<KvTable> {
        let words = layers.max(1) * max_tokens.max(1) * ENTRY;
        let buf = self
            .stream
            .alloc_zeros::<u64>(words)
            .map_err(|e| self.alloc_error(words * 8, e))?;
        Ok(KvTable {
            buf,
            host: vec![0; words],
            layers,
            max_tokens: max_tokens.max(1),
            tokens: 0,
            rows: vec![None; layers],
            caps: vec![0; layers * max_tokens.max(1)],
            one_sequence: false,
        })
    }

    /// A page table of up to `max_pages` pages of `page_rows` positions (a power of two up to
    /// 65,536), none mapped yet.
    ///
    /// # Errors
    /// A page size that is not a power of two or too large, no pages, out of device memory.
    pub fn new_kv_pages(&self, max_pages: usize, page_rows: usize) -> Result<KvPages> {
        if !page_rows.is_power_of_two() || page_rows > 1 << MAX_PAGE_SHIFT || max_pages == 0 {
            return Err(TensorError::InvalidParam {
                op: OP,
                why:
                    "a page table needs pages of a power of two up to 65536 positions, at least one",
            });
        }
        let buf = self
            .stream
            .alloc_zeros::<i32>(max_pages)
            .map_err(|e| self.alloc_error(max_pages * 4, e))?;
        Ok(KvPages {
            buf,
            host: Vec::with_capacity(max_pages),
            shift: page_rows.trailing_zeros(),
            max_id: None,
        })
    }

    /// Maps `pages`' positions to the pool pages `ids` (in position order), copying the ids
    /// that changed to the device (in stream order: kernels enqueued before read the old ones).
    ///
    /// # Errors
    /// More ids than the table maps, an id above `i32::MAX`, a driver error.
    pub fn set_kv_pages(&self, pages: &mut KvPages, ids: &[u32]) -> Result<()> {
        if ids.len() > pages.buf.len() {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "page ids",
                expected: pages.buf.len(),
                actual: ids.len(),
            });
        }
        if ids.iter().any(|&id| id > i32::MAX as u32) {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "a page id above i32::MAX",
            });
        }
        let same = pages
            .host
            .iter()
            .zip(ids)
            .take_while(|(a, b)| a == b)
            .count();
        if same < ids.len() {
            let tail: Vec<i32> = ids[same..].iter().map(|&id| id as i32).collect();
            let mut dst = pages.buf.slice_mut(same..ids.len());
            self.stream
                .memcpy_htod(&tail, &mut dst)
                .map_err(driver("cuMemcpyHtoD"))?;
        }
        pages.host.clear();
        pages.host.extend_from_slice(ids);
        pages.max_id = ids.iter().copied().max();
        Ok(())
    }

    /// Token `token` of the step keeps `layer`'s keys in `k` and values in `v` (F16 or Q8_0
    /// matrices of a row per position, both alike; every token of a layer has the same row
    /// lengths and type).
    ///
    /// # Errors
    /// A layer or token outside the table, a cache that is not F16 or Q8_0, keys and values of
    /// different types, rows or types unlike the layer's other tokens'.
    pub fn set_kv_entry(
        &self,
        table: &mut KvTable,
        layer: usize,
        token: usize,
        k: &mut DeviceTensor,
        v: &mut DeviceTensor,
    ) -> Result<()> {
        if layer >= table.layers || token >= table.tokens {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "layer or token outside the table",
            });
        }
        let kind = KvKind::of(OP, k.dtype, v.dtype)?;
        let rows = (k.shape.row_len(), v.shape.row_len(), kind);
        match table.rows[layer] {
            Some(have) if have != rows => {
                return Err(TensorError::InvalidParam {
                    op: OP,
                    why: "a token's caches differ in row length or type from the layer's others",
                })
            }
            _ => table.rows[layer] = Some(rows),
        }
        let at = table.base(layer) + ENTRY * token;
        {
            let (kp, _k) = k.buf.device_ptr(&self.stream);
            let (vp, _v) = v.buf.device_ptr(&self.stream);
            table.host[at..at + ENTRY].copy_from_slice(&[kp, vp, 0, 0]);
        }
        table.caps[layer * table.max_tokens + token] = k.shape.n_rows().min(v.shape.n_rows());
        Ok(())
    }

    /// Token `token` of the step keeps `layer`'s keys and values in pages of a pool: `pages`
    /// maps its positions to rows of `k_pool` and `v_pool` (F16 or Q8_0 matrices of a row per
    /// pool position, both alike), as [`Self::set_kv_entry`] otherwise.
    ///
    /// # Errors
    /// As [`Self::set_kv_entry`]; a page past the pool's rows.
    pub fn set_kv_paged_entry(
        &self,
        table: &mut KvTable,
        layer: usize,
        token: usize,
        (k_pool, v_pool): (&mut DeviceTensor, &mut DeviceTensor),
        pages: &KvPages,
    ) -> Result<()> {
        let pool_rows = k_pool.shape.n_rows().min(v_pool.shape.n_rows());
        if let Some(max) = pages.max_id {
            if ((max as usize + 1) << pages.shift) > pool_rows {
                return Err(TensorError::IdOutOfRange {
                    op: OP,
                    index: 0,
                    id: i64::from(max),
                    rows: pool_rows >> pages.shift,
                });
            }
        }
        self.set_kv_entry(table, layer, token, k_pool, v_pool)?;
        let at = table.base(layer) + ENTRY * token;
        let (pp, _p) = pages.buf.device_ptr(&self.stream);
        table.host[at + 2] = pp;
        table.host[at + 3] = u64::from(pages.shift);
        table.caps[layer * table.max_tokens + token] = pages.positions();
        Ok(())
    }

    /// Copies the table's entries to the device (in stream order: kernels enqueued before read
    /// the old ones).
    ///
    /// # Errors
    /// A driver error.
    pub fn upload_kv_table(&self, table: &mut KvTable) -> Result<()> {
        let used = table.used_words();
        let mut dst = table.buf.slice_mut(0..used);
        self.stream
            .memcpy_htod(&table.host[..used], &mut dst)
            .map_err(driver("cuMemcpyHtoD"))
    }

    /// The device address of `layer`'s part of `table`, for a kernel's `kv_table` argument.
    pub(super) fn kv_table_arg(&self, table: &KvTable, layer: usize) -> u64 {
        let (p, _rec) = table.buf.device_ptr(&self.stream);
        p + (table.base(layer) * 8) as u64
    }
}
