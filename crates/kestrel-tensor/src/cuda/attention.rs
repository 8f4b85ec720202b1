//! The CUDA engine's attention over the KV cache, f16 or q8_0 (`kernels/attention.cu`,
//! `kernels/attention_tiled.cu`): decode kernels (a CTA per token and head, or the keys split
//! among CTAs), the tiled prefill kernel, and steps whose caches are reached through a
//! [`KvTable`]: a batched decode step whose tokens each read their own sequence's cache, or one
//! sequence's step over a paged cache. Each kernel has a form per cache type. Parameters are the CPU engine's
//! ([`AttentionParams`]) so a plan hands both engines the same values. The per-token and split
//! kernels can also leave their output as Q8_1 for the next matvec ([`CudaDevice::attention_ids_q8`]).
//! RoPE and the cache writes are `rope_kv.rs`; latent attention and values of their own head
//! size, `attention_dims.rs`.

use cudarc::driver::{CudaSlice, LaunchConfig};

use super::engine::{cfg, driver, f32_only, f32_vector, grid_for, i32_of, SPLITS_AUTO};
use super::kv_table::KvKind;
use super::launch::Launch;
use super::{
    AttentionKernel, CudaDevice, DeviceIds, DeviceTensor, KvTable, Q8Ticket, MAX_ATTENTION_SPLITS,
    MAX_HEAD_DIM, MAX_MATVEC_ROWS, MAX_WIDE_ROWS,
};
use crate::cpu::AttentionParams;
use crate::error::{Result, TensorError};
use crate::Shape;

/// Query tokens from which attention may take the tiled kernel (`attention_f16_tiled`: a CTA
/// per 16 query rows of one KV head, K/V tiles staged in shared memory) instead of a CTA per
/// (token, head) reading K/V from global memory.
pub const TILED_ATTENTION_MIN_TOKENS: usize = 8;

/// The tiled kernel's CTAs must fill the device this many times over: with few KV heads it
/// makes few CTAs (Gemma 3 270M's one KV head: 128 for 512 tokens) and measured slower than the
/// CTA-per-(token, head) kernel (H200, session 35: Gemma-shaped pp512 62k t/s against 90k),
/// while at 288 CTAs (SmolLM2's three heads, 132 SMs) it was 1.29× faster.
const TILED_ATTENTION_MIN_WAVES: usize = 2;

/// Longest key head of the latent attention kernels (`MLA_MAX_HEAD_DIM` in attention.cu).
pub const MLA_MAX_HEAD_DIM: usize = 576;

/// Longest value head of the latent attention's split form (`MLA_MAX_HEAD_DIM_V`); longer
/// ones take the CTA-per-(token, head) kernel.
pub(super) const MLA_MAX_HEAD_DIM_V: usize = 512;

/// Which split kernel runs (`attention_split`): the plain one (its table's address, 0 for
/// none), keys and values of their own head sizes (the value head size), or latent attention
/// (the value head size).
#[derive(Clone, Copy)]
pub(super) enum Split {
    Plain(u64),
    KvDims(usize),
    Latent(usize),
}

/// Most warps of an `attention_f16` CTA (`DEC_MAX_WARPS` in attention.cu).
const DEC_MAX_WARPS: u32 = 16;

/// Warps of an `attention_f16_split` CTA (`SPLIT_WARPS` in attention.cu).
const SPLIT_WARPS: u32 = 16;

/// Query rows and keys per tile of `attention_f16_tiled` (`TILE_ROWS`, `TILE_KEYS`).
const TILE_ROWS: usize = 16;
const TILE_KEYS: usize = 32;

/// The scalar arguments every attention kernel takes, as the kernels' `int`s: heads, KV heads,
/// head size, (the value head size, for `attention_kv_*`), the keys' bound, then the scale,
/// soft-cap, window and the causal flag.
pub(super) struct DecArgs {
    n_head: i32,
    n_kv_head: i32,
    head_dim: i32,
    kv_len: i32,
    window: i32,
    causal: i32,
}

/// `q` holds `n_tokens` rows of `n_head` query heads and `out` as many of `head_dim_v`-wide
/// value heads.
pub(super) fn check_q_out(
    op: &'static str,
    q: &DeviceTensor,
    out: &DeviceTensor,
    n_tokens: usize,
    p: &AttentionParams,
    head_dim_v: usize,
) -> Result<()> {
    for (what, t, w) in [("q", q, p.head_dim), ("out", out, head_dim_v)] {
        let want = n_tokens * p.n_head * w;
        if t.shape.elem_count() != want {
            return Err(TensorError::LengthMismatch {
                op,
                what,
                expected: want,
                actual: t.shape.elem_count(),
            });
        }
    }
    Ok(())
}

impl DecArgs {
    pub(super) fn new(op: &'static str, p: &AttentionParams, kv_len: usize) -> Result<Self> {
        Ok(DecArgs {
            n_head: i32_of(op, p.n_head)?,
            n_kv_head: i32_of(op, p.n_kv_head)?,
            head_dim: i32_of(op, p.head_dim)?,
            kv_len: i32_of(op, kv_len)?,
            window: i32_of(op, p.window)?,
            causal: 1,
        })
    }

    /// Pushes the arguments in the kernels' order, `head_dim_v` after the head size when given.
    pub(super) fn push<'a>(
        &'a self,
        b: &mut Launch<'a>,
        p: &'a AttentionParams,
        head_dim_v: Option<&'a i32>,
    ) {
        b.arg(&self.n_head).arg(&self.n_kv_head).arg(&self.head_dim);
        if let Some(v) = head_dim_v {
            b.arg(v);
        }
        b.arg(&self.kv_len)
            .arg(&p.scale)
            .arg(&p.softcap)
            .arg(&self.window)
            .arg(&self.causal);
    }
}

impl CudaDevice {
    /// Warps of an `attention_f16` CTA for `n_tokens` query tokens of `n_head` heads: 16 for
    /// steps of up to [`MAX_MATVEC_ROWS`] tokens (decode, speculative verification) while a
    /// token's heads at 16 warps each fit four to an SM (each warp then walks a sixteenth of the
    /// keys; measured: session 41, H200, SmolLM2-shaped tg128 +22% with the fused norms), else
    /// 4, as measured for prefill (16 cost Gemma-3-shaped pp512 7%). Any step of up to 8 tokens
    /// takes the same, and a batched decode step (up to 64) asks with one token per query, so a
    /// token's result does not depend on how many share the step.
    pub(super) fn decode_attention_warps(&self, n_tokens: usize, n_head: usize) -> u32 {
        if n_tokens <= MAX_MATVEC_ROWS && n_head * DEC_MAX_WARPS as usize <= 4 * self.sm_count {
            DEC_MAX_WARPS
        } else {
            4
        }
    }

    /// Key ranges a step of `n_tokens` query tokens of `n_head` heads may split each query's
    /// keys into (`attention_f16_split`), 0 for `attention_f16`. Decode and verification steps
    /// (up to [`MAX_MATVEC_ROWS`] tokens, all alike, so a token's bits do not depend on its
    /// step) whose heads would leave most SMs idle take up to two CTAs an SM (at most
    /// [`MAX_ATTENTION_SPLITS`]); the kernel uses as many as the query's keys fill at 256 each,
    /// so short contexts run on one CTA a head as before, while a Gemma 3 270M step (4 heads)
    /// over 4,096 keys runs on 64 CTAs instead of 4 walking every key.
    pub(super) fn attention_splits(&self, n_tokens: usize, n_head: usize) -> usize {
        if n_tokens == 0 || n_tokens > MAX_MATVEC_ROWS || n_head == 0 {
            return 0;
        }
        match self
            .attention_splits
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            SPLITS_AUTO => {
                let n = (2 * self.sm_count / n_head).min(MAX_ATTENTION_SPLITS);
                if n < 2 {
                    0
                } else {
                    n
                }
            }
            n => n as usize,
        }
    }

    /// How decode steps split attention over the keys: `None` chooses per model (the default
    /// unless `KESTREL_CUDA_ATTN_SPLIT` is set), `Some(0)` keeps a CTA per (token, head),
    /// `Some(n)` takes `n` key ranges (at most [`MAX_ATTENTION_SPLITS`]). Tests and A/B runs;
    /// a plan's captured graphs keep the setting they were captured with.
    pub fn set_attention_splits(&self, splits: Option<usize>) {
        let v = splits.map_or(SPLITS_AUTO, |n| n.min(MAX_ATTENTION_SPLITS) as u32);
        self.attention_splits
            .store(v, std::sync::atomic::Ordering::Relaxed);
    }

    /// Picks the kernel attention takes for several query tokens (tests and A/B runs;
    /// `KESTREL_CUDA_ATTENTION` sets the default when the device opens).
    pub fn set_attention_kernel(&self, kernel: AttentionKernel) {
        self.attention_kernel
            .store(kernel as u8, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Where attention reads a step's keys and values (as [`KvDst`]).
enum KvSrc<'a> {
    Caches(&'a DeviceTensor, &'a DeviceTensor),
    Table(&'a KvTable, usize),
}

impl CudaDevice {
    /// Causal attention of `q` (`[n_tokens][n_head][head_dim]`, token `t` at `positions[t]`)
    /// over the first `kv_len` positions of the caches `k` and `v` (`[capacity][n_kv_head *
    /// head_dim]`, both F16 or both Q8_0), with the CPU engine's scale, soft cap, window and
    /// GQA rules.
    ///
    /// # Errors
    /// Head counts that do not divide, a head of 0 or over 256 values (a q8_0 cache: not a
    /// multiple of 32), `kv_len` over the capacity, shape or dtype mismatches, a launch failure.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        q: &DeviceTensor,
        positions: &[i32],
        k: &DeviceTensor,
        v: &DeviceTensor,
        kv_len: usize,
        p: &AttentionParams,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        self.attention_impl(
            None,
            q,
            positions,
            KvSrc::Caches(k, v),
            kv_len,
            p,
            None,
            out,
            false,
        )
        .map(|_| ())
    }

    /// [`Self::attention`] with the positions in a device buffer the caller wrote.
    ///
    /// # Errors
    /// As [`Self::attention`].
    #[allow(clippy::too_many_arguments)]
    pub fn attention_ids(
        &self,
        q: &DeviceTensor,
        positions: &DeviceIds,
        k: &DeviceTensor,
        v: &DeviceTensor,
        kv_len: usize,
        p: &AttentionParams,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        self.attention_ids_sinks(q, positions, (k, v), kv_len, p, None, out)
    }

    /// [`Self::attention_ids`] with gpt-oss's attention sinks: `sinks` (F32, one logit per
    /// query head) joins each query's softmax denominator without a value (`None`: none).
    ///
    /// # Errors
    /// As [`Self::attention`]; sinks that are not one f32 per head.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_ids_sinks(
        &self,
        q: &DeviceTensor,
        positions: &DeviceIds,
        (k, v): (&DeviceTensor, &DeviceTensor),
        kv_len: usize,
        p: &AttentionParams,
        sinks: Option<&DeviceTensor>,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        self.attention_ids_q8(q, positions, (k, v), kv_len, p, sinks, out, false)
            .map(|_| ())
    }

    /// [`Self::attention_ids_sinks`] that, when `quantize`, also leaves `out` as Q8_1 in the
    /// matvec scratch, returning the ticket a following [`Self::matmul_reusing`] of `out` takes
    /// to skip its quantization (the same bytes `quantize_q8_1` writes); `None` without
    /// `quantize`, or where the step takes the tiled kernel or heads are not a multiple of 32
    /// long (then `out` alone is written).
    ///
    /// # Errors
    /// As [`Self::attention_ids_sinks`].
    #[allow(clippy::too_many_arguments)]
    pub fn attention_ids_q8(
        &self,
        q: &DeviceTensor,
        positions: &DeviceIds,
        (k, v): (&DeviceTensor, &DeviceTensor),
        kv_len: usize,
        p: &AttentionParams,
        sinks: Option<&DeviceTensor>,
        out: &mut DeviceTensor,
        quantize: bool,
    ) -> Result<Option<Q8Ticket>> {
        self.attention_impl(
            Some(&positions.buf),
            q,
            &positions.host,
            KvSrc::Caches(k, v),
            kv_len,
            p,
            sinks,
            out,
            quantize,
        )
    }

    /// Causal attention over the caches `table` holds in `layer` for each token of `q` (at
    /// `positions[t]`). A batched decode step's table ([`KvTable::begin`]): each token its own
    /// sequence's cache, with a single sequence's decode kernel and settings for every token, so
    /// a token's bits are those of its sequence decoding alone ([`Self::attention_ids`] over its
    /// own cache). One sequence's table ([`KvTable::begin_sequence`], a paged cache): the
    /// kernel and settings [`Self::attention_ids`] takes for that many tokens, so the bits are
    /// those of the same step over a contiguous cache.
    ///
    /// # Errors
    /// As [`Self::attention`]; a batched step of more tokens than [`MAX_WIDE_ROWS`], a table
    /// not written for this step's tokens.
    ///
    /// # Safety
    /// Every cache `table` was written from for `layer` must be alive (not dropped) and not
    /// written elsewhere until the launch has run (stream order).
    pub unsafe fn attention_table(
        &self,
        q: &DeviceTensor,
        positions: &DeviceIds,
        (table, layer): (&KvTable, usize),
        p: &AttentionParams,
        sinks: Option<&DeviceTensor>,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.attention_table_q8(q, positions, (table, layer), p, sinks, out, false) }
            .map(|_| ())
    }

    /// [`Self::attention_table`] that also leaves `out` as Q8_1 in the matvec scratch when
    /// `quantize` (as [`Self::attention_ids_q8`]).
    ///
    /// # Errors
    /// As [`Self::attention_table`].
    ///
    /// # Safety
    /// As [`Self::attention_table`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn attention_table_q8(
        &self,
        q: &DeviceTensor,
        positions: &DeviceIds,
        (table, layer): (&KvTable, usize),
        p: &AttentionParams,
        sinks: Option<&DeviceTensor>,
        out: &mut DeviceTensor,
        quantize: bool,
    ) -> Result<Option<Q8Ticket>> {
        if !table.is_one_sequence() && positions.host.len() > MAX_WIDE_ROWS {
            return Err(TensorError::InvalidParam {
                op: "cuda attention",
                why: "a batched decode step holds at most 64 tokens",
            });
        }
        self.attention_impl(
            Some(&positions.buf),
            q,
            &positions.host,
            KvSrc::Table(table, layer),
            0,
            p,
            sinks,
            out,
            quantize,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn attention_impl(
        &self,
        dev_ids: Option<&CudaSlice<i32>>,
        q: &DeviceTensor,
        positions: &[i32],
        kv: KvSrc<'_>,
        kv_len: usize,
        p: &AttentionParams,
        sinks: Option<&DeviceTensor>,
        out: &mut DeviceTensor,
        quantize: bool,
    ) -> Result<Option<Q8Ticket>> {
        const OP: &str = "cuda attention";
        f32_only(OP, q)?;
        f32_only(OP, out)?;
        if let Some(s) = sinks {
            f32_vector(OP, "sinks", s, p.n_head)?;
        }
        if p.n_head == 0 || p.n_kv_head == 0 || !p.n_head.is_multiple_of(p.n_kv_head) {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "n_head must be a positive multiple of n_kv_head",
            });
        }
        if p.head_dim == 0 || p.head_dim > MAX_HEAD_DIM {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "head_dim must be 1 to 256",
            });
        }
        let row = p.n_kv_head * p.head_dim;
        // A table's caches: each token's position inside its own (keys above it are never
        // read, so the kernel's bound is the largest it takes).
        let (kv_len, table, kind, head_dim_v, batched) = match &kv {
            KvSrc::Caches(k, v) => {
                let kind = KvKind::of(OP, k.dtype, v.dtype)?;
                // Values may have their own head size (DeepSeek's decompressed form).
                let v_row = v.shape.row_len();
                let hd_v = v_row / p.n_kv_head;
                if hd_v == 0 || hd_v > MAX_HEAD_DIM || hd_v * p.n_kv_head != v_row {
                    return Err(TensorError::InvalidParam {
                        op: OP,
                        why: "value rows must be n_kv_head heads of 1 to 256 values",
                    });
                }
                for (what, t, r) in [("k", k, row), ("v", v, v_row)] {
                    if t.shape.row_len() != r || t.shape.n_rows() < kv_len {
                        return Err(TensorError::ShapeMismatch {
                            op: OP,
                            what,
                            expected: Shape::matrix(kv_len, r)?,
                            actual: t.shape,
                        });
                    }
                }
                (kv_len, 0, kind, hd_v, false)
            }
            KvSrc::Table(t, layer) => {
                let kind = t.check(*layer, positions, Some(row), Some(row))?;
                (
                    i32::MAX as usize,
                    self.kv_table_arg(t, *layer),
                    kind,
                    p.head_dim,
                    !t.is_one_sequence(),
                )
            }
        };
        kind.check_heads(OP, p.head_dim, head_dim_v)?;
        let (k, v) = match kv {
            KvSrc::Caches(k, v) => (Some(k), Some(v)),
            KvSrc::Table(..) => (None, None),
        };
        if head_dim_v != p.head_dim {
            return self
                .attention_kv_dims(
                    q,
                    dev_ids,
                    positions,
                    (k, v),
                    kv_len,
                    p,
                    head_dim_v,
                    sinks,
                    out,
                )
                .map(|()| None);
        }
        check_q_out(OP, q, out, positions.len(), p, p.head_dim)?;
        if positions.is_empty() {
            return Ok(None);
        }
        let quantize = quantize && p.head_dim.is_multiple_of(32);
        let mut run = |pos: &CudaSlice<i32>| {
            let args = DecArgs::new(OP, p, kv_len)?;
            let n_tokens = positions.len();
            let rows = n_tokens * (p.n_head / p.n_kv_head);
            let ctas = rows.div_ceil(TILE_ROWS) * p.n_kv_head;
            let choice = AttentionKernel::from_index(
                self.attention_kernel
                    .load(std::sync::atomic::Ordering::Relaxed),
            );
            let fills = ctas >= TILED_ATTENTION_MIN_WAVES * self.sm_count;
            let tiled = !batched
                && match choice {
                    AttentionKernel::Tiled => true,
                    AttentionKernel::PerToken => false,
                    _ => fills,
                }
                && n_tokens >= TILED_ATTENTION_MIN_TOKENS
                && p.head_dim.is_multiple_of(2);
            // A batched decode step takes a one-token step's settings for each of its tokens.
            let alike = if batched { 1 } else { n_tokens };
            let splits = if tiled {
                0
            } else {
                self.attention_splits(alike, p.n_head)
            };
            // The output as Q8_1 too (the per-token and split kernels), into the matvec scratch.
            let mut q8 = if quantize && !tiled {
                Some(self.q8_scratch(OP, n_tokens, p.n_head * p.head_dim)?)
            } else {
                None
            };
            let ticket = q8.as_ref().map(|(_, t)| *t);
            let q8_buf = match q8.as_mut() {
                Some((guard, _)) => Some(guard.as_mut().ok_or(TensorError::InvalidParam {
                    op: OP,
                    why: "no Q8_1 scratch",
                })?),
                None => None,
            };
            if splits > 0 {
                return self
                    .attention_split(
                        q,
                        pos,
                        (k, v, kind),
                        Split::Plain(table),
                        sinks,
                        out,
                        p,
                        (kv_len, n_tokens, splits),
                        q8_buf,
                    )
                    .map(|()| ticket);
            }
            let nt = i32_of(OP, n_tokens)?;
            let f = self.func(if tiled {
                kind.pick("attention_f16_tiled", "attention_q8_0_tiled")
            } else {
                kind.pick("attention_f16", "attention_q8_0")
            })?;
            let null = 0u64;
            let mut b = self.launch(f);
            b.arg(&q.buf).arg(pos);
            match (k, v) {
                (Some(k), Some(v)) => b.arg(&k.buf).arg(&v.buf),
                _ => b.arg(&null).arg(&null),
            };
            b.arg(&mut out.buf);
            args.push(&mut b, p, None);
            let config = if tiled {
                b.arg(&nt).arg(&table);
                match sinks {
                    Some(s) => b.arg(&s.buf),
                    None => b.arg(&null),
                };
                LaunchConfig {
                    grid_dim: (
                        grid_for(rows, TILE_ROWS)?,
                        u32::try_from(p.n_kv_head).map_err(|_| TensorError::InvalidParam {
                            op: OP,
                            why: "too many KV heads",
                        })?,
                        1,
                    ),
                    block_dim: (32, 4, 1),
                    // At most 32.1 KiB (head_dim <= 256): the kernel's layout (the q8_0 form's
                    // block scales are static).
                    shared_mem_bytes: ((TILE_ROWS * p.head_dim + TILE_KEYS * (p.head_dim / 2 + 1))
                        * 4) as u32,
                }
            } else {
                b.arg(&table);
                match sinks {
                    Some(s) => b.arg(&s.buf),
                    None => b.arg(&null),
                };
                match q8_buf {
                    Some(q8) => b.arg(q8),
                    None => b.arg(&null),
                };
                cfg(
                    grid_for(n_tokens * p.n_head, 1)?,
                    (32, self.decode_attention_warps(alike, p.n_head)),
                )
            };
            // SAFETY: q and out hold tokens*n_head*head_dim f32, k and v at least kv_len rows of
            // n_kv_head*head_dim values of the kernel's type, positions one i32 per token (all
            // checked); the Q8_1 scratch (when given) tokens*n_head*head_dim/32 blocks; the
            // shared memory is what the tiled kernel lays out.
            unsafe { b.launch(config) }.map_err(driver("launch attention"))?;
            Ok(ticket)
        };
        match dev_ids {
            Some(d) => run(d),
            None => self.with_ids(positions.iter().copied(), run),
        }
    }

    /// A split attention kernel (`attention_f16_split` or `_q8_0_split`, or the `kv_` or
    /// `mla_` forms, as `form` says) over `splits` key ranges (checked by the caller), its
    /// partial results in the device's split scratch (grown here, for a step of up to
    /// [`MAX_MATVEC_ROWS`] or [`MAX_WIDE_ROWS`] tokens, which a graph replays without growing
    /// it again).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention_split(
        &self,
        q: &DeviceTensor,
        pos: &CudaSlice<i32>,
        (k, v, kind): (Option<&DeviceTensor>, Option<&DeviceTensor>, KvKind),
        form: Split,
        sinks: Option<&DeviceTensor>,
        out: &mut DeviceTensor,
        p: &AttentionParams,
        (kv_len, n_tokens, splits): (usize, usize, usize),
        q8: Option<&mut CudaSlice<u8>>,
    ) -> Result<()> {
        const OP: &str = "cuda attention";
        // Sized for 8 tokens, or at once for a batched step's most (64), so a scheduler whose
        // batches grow one sequence at a time grows it (and retires captured graphs) once.
        let tokens = if n_tokens <= MAX_MATVEC_ROWS {
            MAX_MATVEC_ROWS
        } else {
            n_tokens.max(MAX_WIDE_ROWS)
        };
        let rows = tokens * p.n_head;
        let head_dim_v = match form {
            Split::Plain(_) => p.head_dim,
            Split::KvDims(h) | Split::Latent(h) => h,
        };
        let floats = rows * splits * (head_dim_v + 2);
        let mut guard = self
            .split_scratch
            .lock()
            .map_err(|_| TensorError::InvalidParam {
                op: OP,
                why: "lock poisoned",
            })?;
        if guard
            .as_ref()
            .is_none_or(|(part, counters)| part.len() < floats || counters.len() < rows)
        {
            // Counters start at zero: each launch leaves them so.
            let part = self
                .stream
                .alloc_zeros::<f32>(floats)
                .map_err(|e| self.alloc_error(floats * 4, e))?;
            let counters = self
                .stream
                .alloc_zeros::<u32>(rows)
                .map_err(|e| self.alloc_error(rows * 4, e))?;
            *guard = Some((part, counters));
            self.bump_epoch();
        }
        let Some((part, counters)) = guard.as_mut() else {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "no split scratch",
            });
        };
        let args = DecArgs::new(OP, p, kv_len)?;
        let hdv = i32_of(OP, head_dim_v)?;
        let f = self.func(match form {
            Split::Plain(_) => kind.pick("attention_f16_split", "attention_q8_0_split"),
            Split::KvDims(_) => kind.pick("attention_kv_f16_split", "attention_kv_q8_0_split"),
            Split::Latent(_) => kind.pick("attention_mla_f16_split", "attention_mla_q8_0_split"),
        })?;
        let null = 0u64;
        let mut b = self.launch(f);
        b.arg(&q.buf).arg(pos);
        match k {
            Some(k) => b.arg(&k.buf),
            None => b.arg(&null),
        };
        // Latent attention's values are its keys' front: no value argument.
        if !matches!(form, Split::Latent(_)) {
            match v {
                Some(v) => b.arg(&v.buf),
                None => b.arg(&null),
            };
        }
        b.arg(&mut out.buf).arg(part).arg(counters);
        let table = match form {
            Split::Plain(t) => t,
            _ => 0,
        };
        match form {
            Split::Plain(_) => args.push(&mut b, p, None),
            Split::KvDims(_) | Split::Latent(_) => args.push(&mut b, p, Some(&hdv)),
        }
        if let Split::Plain(_) = form {
            b.arg(&table);
        }
        if !matches!(form, Split::Latent(_)) {
            match sinks {
                Some(s) => b.arg(&s.buf),
                None => b.arg(&null),
            };
        }
        // The plain form's Q8_1 output (null: none).
        if let Split::Plain(_) = form {
            match q8 {
                Some(q8) => b.arg(q8),
                None => b.arg(&null),
            };
        }
        let config = LaunchConfig {
            grid_dim: (grid_for(n_tokens * p.n_head, 1)?, splits as u32, 1),
            block_dim: (32, SPLIT_WARPS, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: q holds tokens*n_head*head_dim f32 and out tokens*n_head*head_dim_v, k (and
        // v) at least kv_len rows of their heads of the kernel's type, positions one i32 per
        // token (checked by the callers); part holds tokens*n_head*splits*(head_dim_v + 2) f32
        // or more and counters tokens*n_head u32, all zero (sized above; each launch leaves
        // them zero); splits <= SPLIT_MAX; the arguments are the kernel's.
        unsafe { b.launch(config) }.map_err(driver("launch attention_split"))?;
        Ok(())
    }
}
