//! The CUDA engine's position-dependent ops: RoPE, the f16 KV-cache append (also fused: a
//! step's queries and keys rotated and keys and values appended in one launch) and attention
//! over the cache (`kernels/rope.cu`, `kernels/kv_append.cu`, `kernels/attention.cu`).
//! Parameters are the CPU engine's ([`RopeParams`], [`AttentionParams`]) so a plan hands both
//! engines the same values.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::engine::{cfg, driver, f32_only, f32_vector, grid_for, i32_of, SPLITS_AUTO};
use super::{
    AttentionKernel, CudaDevice, DeviceIds, DeviceTensor, HeadNorm, MAX_ATTENTION_SPLITS,
    MAX_HEAD_DIM, MAX_MATVEC_ROWS,
};
use crate::cpu::{rope_yarn_corr_dims, AttentionParams, RopeMode, RopeParams};
use crate::error::{Result, TensorError};
use crate::{DType, Shape};

/// Query tokens from which attention may take the tiled kernel (`attention_f16_tiled`: a CTA
/// per 16 query rows of one KV head, K/V tiles staged in shared memory) instead of a CTA per
/// (token, head) reading K/V from global memory.
pub const TILED_ATTENTION_MIN_TOKENS: usize = 8;

/// The tiled kernel's CTAs must fill the device this many times over: with few KV heads it
/// makes few CTAs (Gemma 3 270M's one KV head: 128 for 512 tokens) and measured slower than the
/// CTA-per-(token, head) kernel (H200, session 35: Gemma-shaped pp512 62k t/s against 90k),
/// while at 288 CTAs (SmolLM2's three heads, 132 SMs) it was 1.29× faster.
const TILED_ATTENTION_MIN_WAVES: usize = 2;

/// Most warps of an `attention_f16` CTA (`DEC_MAX_WARPS` in attention.cu).
const DEC_MAX_WARPS: u32 = 16;

/// Warps of an `attention_f16_split` CTA (`SPLIT_WARPS` in attention.cu).
const SPLIT_WARPS: u32 = 16;

/// Query rows and keys per tile of `attention_f16_tiled` (`TILE_ROWS`, `TILE_KEYS`).
const TILE_ROWS: usize = 16;
const TILE_KEYS: usize = 32;

impl CudaDevice {
    /// Warps of an `attention_f16` CTA for `n_tokens` query tokens of `n_head` heads: 16 for
    /// steps of up to [`MAX_MATVEC_ROWS`] tokens (decode, speculative verification) while a
    /// token's heads at 16 warps each fit four to an SM (each warp then walks a sixteenth of the
    /// keys; measured: session 41, H200, SmolLM2-shaped tg128 +22% with the fused norms), else
    /// 4, as measured for prefill (16 cost Gemma-3-shaped pp512 7%). Any step of up to 8 tokens
    /// takes the same, so a token's result does not depend on how many share the step.
    fn decode_attention_warps(&self, n_tokens: usize, n_head: usize) -> u32 {
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
    fn attention_splits(&self, n_tokens: usize, n_head: usize) -> usize {
        if n_tokens > MAX_MATVEC_ROWS || n_head == 0 {
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

    /// A zeroed tensor of any dtype (a KV cache: F16 `[row, capacity]`).
    ///
    /// # Errors
    /// A partial block, out of memory.
    pub fn zeros(&self, dtype: DType, shape: Shape) -> Result<DeviceTensor> {
        let bytes = dtype
            .row_bytes(shape.row_len())
            .ok_or(TensorError::PartialBlock {
                dtype,
                row_len: shape.row_len(),
                block_size: dtype.block_size(),
            })?
            .saturating_mul(shape.n_rows());
        Ok(DeviceTensor {
            dtype,
            shape,
            buf: self.alloc(bytes)?,
        })
    }

    /// RoPE in place on `x` (`[n_tokens][n_head][head_dim]`), token `t` at `positions[t]`,
    /// with the CPU engine's parameters and optional per-pair frequency divisors.
    ///
    /// # Errors
    /// Shape mismatches, an odd or too large `n_rot`, a launch failure.
    pub fn rope(
        &self,
        x: &mut DeviceTensor,
        positions: &[i32],
        n_head: usize,
        head_dim: usize,
        p: &RopeParams,
        freq_factors: Option<&DeviceTensor>,
    ) -> Result<()> {
        self.rope_impl(None, None, x, positions, n_head, head_dim, p, freq_factors)
    }

    /// [`Self::rope`] reading `src` and writing `out` (same shape, the unrotated dims copied),
    /// with the positions in a device buffer the caller wrote (a CUDA graph replays it with each
    /// step's positions): one launch where a copy and an in-place rotation took two.
    ///
    /// # Errors
    /// As [`Self::rope`], and `src` of another size than `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_ids_from(
        &self,
        src: &DeviceTensor,
        out: &mut DeviceTensor,
        positions: &DeviceIds,
        n_head: usize,
        head_dim: usize,
        p: &RopeParams,
        freq_factors: Option<&DeviceTensor>,
    ) -> Result<()> {
        self.rope_impl(
            Some(&positions.buf),
            Some(src),
            out,
            &positions.host,
            n_head,
            head_dim,
            p,
            freq_factors,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn rope_impl(
        &self,
        dev_ids: Option<&CudaSlice<i32>>,
        src: Option<&DeviceTensor>,
        x: &mut DeviceTensor,
        positions: &[i32],
        n_head: usize,
        head_dim: usize,
        p: &RopeParams,
        freq_factors: Option<&DeviceTensor>,
    ) -> Result<()> {
        const OP: &str = "cuda rope";
        f32_only(OP, x)?;
        let ra = RopeArgs::new(OP, p, head_dim, freq_factors)?;
        let n_rot = ra.n_rot;
        let want = positions.len() * n_head * head_dim;
        if x.shape.elem_count() != want {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "x",
                expected: want,
                actual: x.shape.elem_count(),
            });
        }
        if let Some(src) = src {
            f32_only(OP, src)?;
            if src.shape.elem_count() != want {
                return Err(TensorError::LengthMismatch {
                    op: OP,
                    what: "src",
                    expected: want,
                    actual: src.shape.elem_count(),
                });
            }
        }
        if want == 0 || n_rot == 0 {
            return Ok(());
        }
        let mut run = |pos: &CudaSlice<i32>| {
            let null = 0u64;
            let (nh, hd) = (i32_of(OP, n_head)?, i32_of(OP, head_dim)?);
            let f = self.func("rope_f32")?;
            let mut b = self.stream.launch_builder(f);
            match src {
                Some(src) => b.arg(&src.buf),
                None => b.arg(&null),
            };
            b.arg(&mut x.buf).arg(pos);
            match freq_factors {
                Some(ff) => b.arg(&ff.buf),
                None => b.arg(&null),
            };
            b.arg(&nh).arg(&hd);
            ra.push(&mut b);
            let grid = grid_for(positions.len() * n_head, 1)?;
            // SAFETY: x (and src, or null) hold tokens*n_head*head_dim f32, positions one i32 per
            // token, ff n_rot/2 f32 or null (checked); one thread per rotated pair.
            unsafe { b.launch(cfg(grid, ((n_rot / 2) as u32, 1))) }
                .map_err(driver("launch rope"))?;
            Ok(())
        };
        match dev_ids {
            Some(d) => run(d),
            None => self.with_ids(positions.iter().copied(), run),
        }
    }

    /// Writes `src` (`[n_tokens][row]` f32) into the F16 cache (`[capacity][row]`) at
    /// `positions`, rounding to f16 as the CPU cache does.
    ///
    /// # Errors
    /// A position outside the cache, shape or dtype mismatches, a launch failure.
    pub fn kv_append(
        &self,
        src: &DeviceTensor,
        positions: &[i32],
        cache: &mut DeviceTensor,
    ) -> Result<()> {
        let row = check_kv_append(src, positions, cache)?;
        if positions.is_empty() {
            return Ok(());
        }
        let r = i32_of("cuda kv_append", row)?;
        self.with_ids(positions.iter().copied(), |pos: &CudaSlice<i32>| {
            let f = self.func("kv_append_f16")?;
            let mut b = self.stream.launch_builder(f);
            b.arg(&src.buf).arg(pos).arg(&mut cache.buf).arg(&r);
            // SAFETY: positions are inside the cache (checked), src holds tokens*row f32.
            unsafe { b.launch(cfg(grid_for(positions.len(), 1)?, (256, 1))) }
                .map_err(driver("launch kv_append"))?;
            Ok(())
        })
    }

    /// [`Self::kv_append`] of a step's keys and values in one launch, the positions in a device
    /// buffer the caller wrote (a CUDA graph replays it with each step's positions).
    ///
    /// # Errors
    /// As [`Self::kv_append`], for either pair.
    pub fn kv_append2_ids(
        &self,
        (k_src, v_src): (&DeviceTensor, &DeviceTensor),
        positions: &DeviceIds,
        (k_cache, v_cache): (&mut DeviceTensor, &mut DeviceTensor),
    ) -> Result<()> {
        const OP: &str = "cuda kv_append";
        let k_row = i32_of(OP, check_kv_append(k_src, &positions.host, k_cache)?)?;
        let v_row = i32_of(OP, check_kv_append(v_src, &positions.host, v_cache)?)?;
        if positions.host.is_empty() {
            return Ok(());
        }
        let f = self.func("kv_append2_f16")?;
        let mut b = self.stream.launch_builder(f);
        b.arg(&k_src.buf)
            .arg(&v_src.buf)
            .arg(&positions.buf)
            .arg(&mut k_cache.buf)
            .arg(&mut v_cache.buf)
            .arg(&k_row)
            .arg(&v_row);
        let launch = LaunchConfig {
            grid_dim: (grid_for(positions.host.len(), 1)?, 2, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: positions are inside both caches, each src holds tokens*row f32 (checked).
        unsafe { b.launch(launch) }.map_err(driver("launch kv_append2"))?;
        Ok(())
    }
    /// A step's attention inputs in one launch (`rope_qk_append_f16`): the queries rotated from
    /// `q_src` into `q_out` (`n_head` heads a token), the keys rotated from `k_src` (`n_kv_head`
    /// heads) straight into the f16 key cache at the step's positions, and `v_src` appended to
    /// the value cache: the bits of [`Self::rope_ids_from`] twice and [`Self::kv_append2_ids`],
    /// in one launch instead of three (a CTA per query head, per key head, and per KV head's
    /// slice of the value row). The positions are the device buffer the caller wrote. The
    /// queries leave times `q_scale` (1: as rotated), the bits of a [`Self::scale_from`] after
    /// the rotation (Gemma scales its queries between RoPE and attention). `head_norms` (queries,
    /// keys): an RMS norm of each head before its rotation, `(weight, eps)`, the bits of
    /// [`Self::rms_norm`] over head-long rows (Gemma 3's and Qwen 3's Q/K norms; heads of at
    /// most 256).
    ///
    /// # Errors
    /// Shape or dtype mismatches, a position outside the caches, bad RoPE parameters, a launch
    /// failure.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_qk_append_ids(
        &self,
        (q_src, q_out): (&DeviceTensor, &mut DeviceTensor),
        (k_src, v_src): (&DeviceTensor, &DeviceTensor),
        positions: &DeviceIds,
        (k_cache, v_cache): (&mut DeviceTensor, &mut DeviceTensor),
        (n_head, n_kv_head, head_dim): (usize, usize, usize),
        p: &RopeParams,
        freq_factors: Option<&DeviceTensor>,
        q_scale: f32,
        head_norms: [Option<HeadNorm<'_>>; 2],
    ) -> Result<()> {
        const OP: &str = "cuda rope_qk_append";
        let normed = head_norms.iter().any(Option::is_some);
        if normed && head_dim > MAX_HEAD_DIM {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "per-head norms take heads of at most 256",
            });
        }
        for w in head_norms.iter().flatten().filter_map(|(w, _)| *w) {
            f32_vector(OP, "head norm weight", w, head_dim)?;
        }
        let n_tok = positions.host.len();
        let ra = RopeArgs::new(OP, p, head_dim, freq_factors)?;
        for (what, t, len) in [
            ("q_src", q_src, n_head * head_dim),
            ("q_out", &*q_out, n_head * head_dim),
        ] {
            f32_only(OP, t)?;
            if t.shape.elem_count() != n_tok * len {
                return Err(TensorError::LengthMismatch {
                    op: OP,
                    what,
                    expected: n_tok * len,
                    actual: t.shape.elem_count(),
                });
            }
        }
        let k_row = check_kv_append(k_src, &positions.host, k_cache)?;
        let v_row = check_kv_append(v_src, &positions.host, v_cache)?;
        if n_kv_head == 0 || !v_row.is_multiple_of(n_kv_head) {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "the value row must split evenly among the KV heads",
            });
        }
        if k_row != n_kv_head * head_dim {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "key row",
                expected: n_kv_head * head_dim,
                actual: k_row,
            });
        }
        if n_tok == 0 {
            return Ok(());
        }
        let (nh, nkv, hd, vr) = (
            i32_of(OP, n_head)?,
            i32_of(OP, n_kv_head)?,
            i32_of(OP, head_dim)?,
            i32_of(OP, v_row)?,
        );
        let null = 0u64;
        let f = self.func("rope_qk_append_f16")?;
        let mut b = self.stream.launch_builder(f);
        b.arg(&q_src.buf)
            .arg(&mut q_out.buf)
            .arg(&k_src.buf)
            .arg(&v_src.buf)
            .arg(&positions.buf);
        match freq_factors {
            Some(ff) => b.arg(&ff.buf),
            None => b.arg(&null),
        };
        b.arg(&mut k_cache.buf)
            .arg(&mut v_cache.buf)
            .arg(&nh)
            .arg(&nkv)
            .arg(&hd)
            .arg(&vr);
        ra.push(&mut b);
        b.arg(&q_scale);
        let flags = i32::from(head_norms[0].is_some()) | (i32::from(head_norms[1].is_some()) << 1);
        let eps = head_norms.map(|n| n.map_or(0.0, |(_, e)| e));
        for n in &head_norms {
            match n.and_then(|(w, _)| w) {
                Some(w) => b.arg(&w.buf),
                None => b.arg(&null),
            };
        }
        b.arg(&flags).arg(&eps[0]).arg(&eps[1]);
        let launch = LaunchConfig {
            grid_dim: (
                grid_for(n_tok, 1)?,
                i32_of(OP, n_head + 2 * n_kv_head)? as u32,
                1,
            ),
            // With norms, exactly rms_norm's block for a head (>= head_dim >= n_rot threads).
            block_dim: (
                if normed {
                    super::ops::rms_threads(head_dim)
                } else {
                    (ra.n_rot / 2).max(32) as u32
                },
                1,
                1,
            ),
            shared_mem_bytes: 0,
        };
        // SAFETY: q_src and q_out hold tokens*n_head*head_dim f32, k_src and v_src a row per
        // token of the caches' rows (k: n_kv_head*head_dim), positions inside both caches, ff
        // n_rot/2 f32 or null (all checked); at least one thread per rotated pair.
        unsafe { b.launch(launch) }.map_err(driver("launch rope_qk_append"))?;
        Ok(())
    }
}

/// The RoPE settings every rope kernel takes last (`n_rot, neox, freq_base, freq_scale,
/// ext_factor, attn_factor, corr0, corr1`), checked once: `n_rot` even, at most the head and
/// 2048, frequency factors f32 and covering the rotated pairs.
struct RopeArgs {
    n_rot: usize,
    nr: i32,
    neox: i32,
    p: RopeParams,
    corr: [f32; 2],
}

impl RopeArgs {
    fn new(
        op: &'static str,
        p: &RopeParams,
        head_dim: usize,
        freq_factors: Option<&DeviceTensor>,
    ) -> Result<RopeArgs> {
        let n_rot = if p.n_rot == 0 { head_dim } else { p.n_rot };
        if !n_rot.is_multiple_of(2) || n_rot > head_dim || n_rot > 2048 {
            return Err(TensorError::InvalidParam {
                op,
                why: "n_rot must be even, at most head_dim and at most 2048",
            });
        }
        if let Some(ff) = freq_factors {
            f32_only(op, ff)?;
            if ff.shape.elem_count() < n_rot / 2 {
                return Err(TensorError::LengthMismatch {
                    op,
                    what: "freq_factors",
                    expected: n_rot / 2,
                    actual: ff.shape.elem_count(),
                });
            }
        }
        let corr = rope_yarn_corr_dims(n_rot, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow);
        Ok(RopeArgs {
            n_rot,
            nr: i32_of(op, n_rot)?,
            neox: i32::from(p.mode == RopeMode::Neox),
            p: *p,
            corr,
        })
    }

    /// Pushes the eight trailing arguments.
    fn push<'a>(&'a self, b: &mut cudarc::driver::LaunchArgs<'a>) {
        b.arg(&self.nr)
            .arg(&self.neox)
            .arg(&self.p.freq_base)
            .arg(&self.p.freq_scale)
            .arg(&self.p.ext_factor)
            .arg(&self.p.attn_factor)
            .arg(&self.corr[0])
            .arg(&self.corr[1]);
    }
}

/// Checks a KV append (f32 rows of the cache's row length, one per position, each position inside
/// the F16 cache) and returns the row length.
fn check_kv_append(src: &DeviceTensor, positions: &[i32], cache: &DeviceTensor) -> Result<usize> {
    const OP: &str = "cuda kv_append";
    f32_only(OP, src)?;
    if cache.dtype != DType::F16 {
        return Err(TensorError::UnsupportedDType {
            op: OP,
            dtype: cache.dtype,
        });
    }
    let row = cache.shape.row_len();
    let capacity = cache.shape.n_rows();
    if src.shape.row_len() != row || src.shape.n_rows() != positions.len() {
        return Err(TensorError::ShapeMismatch {
            op: OP,
            what: "src",
            expected: Shape::matrix(positions.len(), row)?,
            actual: src.shape,
        });
    }
    if let Some((index, &p)) = positions
        .iter()
        .enumerate()
        .find(|(_, &p)| p < 0 || p as usize >= capacity)
    {
        return Err(TensorError::IdOutOfRange {
            op: OP,
            index,
            id: i64::from(p),
            rows: capacity,
        });
    }
    Ok(row)
}

impl CudaDevice {
    /// Causal attention of `q` (`[n_tokens][n_head][head_dim]`, token `t` at `positions[t]`)
    /// over the first `kv_len` positions of the F16 caches `k` and `v` (`[capacity][n_kv_head *
    /// head_dim]`), with the CPU engine's scale, soft cap, window and GQA rules.
    ///
    /// # Errors
    /// Head counts that do not divide, a head of 0 or over 256 values,
    /// `kv_len` over the capacity, shape or dtype mismatches, a launch failure.
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
        self.attention_impl(None, q, positions, k, v, kv_len, p, out)
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
        self.attention_impl(
            Some(&positions.buf),
            q,
            &positions.host,
            k,
            v,
            kv_len,
            p,
            out,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn attention_impl(
        &self,
        dev_ids: Option<&CudaSlice<i32>>,
        q: &DeviceTensor,
        positions: &[i32],
        k: &DeviceTensor,
        v: &DeviceTensor,
        kv_len: usize,
        p: &AttentionParams,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda attention";
        f32_only(OP, q)?;
        f32_only(OP, out)?;
        for t in [k, v] {
            if t.dtype != DType::F16 {
                return Err(TensorError::UnsupportedDType {
                    op: OP,
                    dtype: t.dtype,
                });
            }
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
        for (what, t) in [("k", k), ("v", v)] {
            if t.shape.row_len() != row || t.shape.n_rows() < kv_len {
                return Err(TensorError::ShapeMismatch {
                    op: OP,
                    what,
                    expected: Shape::matrix(kv_len, row)?,
                    actual: t.shape,
                });
            }
        }
        let want = positions.len() * p.n_head * p.head_dim;
        for (what, t) in [("q", q), ("out", &*out)] {
            if t.shape.elem_count() != want {
                return Err(TensorError::LengthMismatch {
                    op: OP,
                    what,
                    expected: want,
                    actual: t.shape.elem_count(),
                });
            }
        }
        if want == 0 {
            return Ok(());
        }
        let mut run = |pos: &CudaSlice<i32>| {
            let (nh, nkv, hd, kl) = (
                i32_of(OP, p.n_head)?,
                i32_of(OP, p.n_kv_head)?,
                i32_of(OP, p.head_dim)?,
                i32_of(OP, kv_len)?,
            );
            let window = i32_of(OP, p.window)?;
            let causal = 1i32;
            let n_tokens = positions.len();
            let rows = n_tokens * (p.n_head / p.n_kv_head);
            let ctas = rows.div_ceil(TILE_ROWS) * p.n_kv_head;
            let choice = AttentionKernel::from_index(
                self.attention_kernel
                    .load(std::sync::atomic::Ordering::Relaxed),
            );
            let fills = ctas >= TILED_ATTENTION_MIN_WAVES * self.sm_count;
            let tiled = match choice {
                AttentionKernel::Tiled => true,
                AttentionKernel::PerToken => false,
                _ => fills,
            } && n_tokens >= TILED_ATTENTION_MIN_TOKENS
                && p.head_dim.is_multiple_of(2);
            let splits = if tiled {
                0
            } else {
                self.attention_splits(n_tokens, p.n_head)
            };
            if splits > 0 {
                return self.attention_split(q, pos, k, v, out, p, (kv_len, n_tokens, splits));
            }
            let nt = i32_of(OP, n_tokens)?;
            let f = self.func(if tiled {
                "attention_f16_tiled"
            } else {
                "attention_f16"
            })?;
            let mut b = self.stream.launch_builder(f);
            b.arg(&q.buf)
                .arg(pos)
                .arg(&k.buf)
                .arg(&v.buf)
                .arg(&mut out.buf)
                .arg(&nh)
                .arg(&nkv)
                .arg(&hd)
                .arg(&kl)
                .arg(&p.scale)
                .arg(&p.softcap)
                .arg(&window)
                .arg(&causal);
            let config = if tiled {
                b.arg(&nt);
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
                    // At most 32.1 KiB (head_dim <= 256): the kernel's layout.
                    shared_mem_bytes: ((TILE_ROWS * p.head_dim + TILE_KEYS * (p.head_dim / 2 + 1))
                        * 4) as u32,
                }
            } else {
                cfg(
                    grid_for(n_tokens * p.n_head, 1)?,
                    (32, self.decode_attention_warps(n_tokens, p.n_head)),
                )
            };
            // SAFETY: q and out hold tokens*n_head*head_dim f32, k and v at least kv_len rows of
            // n_kv_head*head_dim f16, positions one i32 per token (all checked); the shared
            // memory is what the tiled kernel lays out.
            unsafe { b.launch(config) }.map_err(driver("launch attention"))?;
            Ok(())
        };
        match dev_ids {
            Some(d) => run(d),
            None => self.with_ids(positions.iter().copied(), run),
        }
    }

    /// `attention_f16_split` over `splits` key ranges (checked by the caller), its partial
    /// results in the device's split scratch (grown here, for a step of up to
    /// [`MAX_MATVEC_ROWS`] tokens, which a graph replays without growing it again).
    #[allow(clippy::too_many_arguments)]
    fn attention_split(
        &self,
        q: &DeviceTensor,
        pos: &CudaSlice<i32>,
        k: &DeviceTensor,
        v: &DeviceTensor,
        out: &mut DeviceTensor,
        p: &AttentionParams,
        (kv_len, n_tokens, splits): (usize, usize, usize),
    ) -> Result<()> {
        const OP: &str = "cuda attention";
        let rows = n_tokens.max(MAX_MATVEC_ROWS) * p.n_head;
        let floats = rows * splits * (p.head_dim + 2);
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
        let (nh, nkv, hd, kl) = (
            i32_of(OP, p.n_head)?,
            i32_of(OP, p.n_kv_head)?,
            i32_of(OP, p.head_dim)?,
            i32_of(OP, kv_len)?,
        );
        let window = i32_of(OP, p.window)?;
        let causal = 1i32;
        let f = self.func("attention_f16_split")?;
        let mut b = self.stream.launch_builder(f);
        b.arg(&q.buf)
            .arg(pos)
            .arg(&k.buf)
            .arg(&v.buf)
            .arg(&mut out.buf)
            .arg(part)
            .arg(counters)
            .arg(&nh)
            .arg(&nkv)
            .arg(&hd)
            .arg(&kl)
            .arg(&p.scale)
            .arg(&p.softcap)
            .arg(&window)
            .arg(&causal);
        let config = LaunchConfig {
            grid_dim: (grid_for(n_tokens * p.n_head, 1)?, splits as u32, 1),
            block_dim: (32, SPLIT_WARPS, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: q and out hold tokens*n_head*head_dim f32, k and v at least kv_len rows of
        // n_kv_head*head_dim f16, positions one i32 per token (checked by `attention_impl`);
        // part holds tokens*n_head*splits*(head_dim + 2) f32 and counters tokens*n_head u32,
        // all zero (sized above; each launch leaves them zero); splits <= SPLIT_MAX.
        unsafe { b.launch(config) }.map_err(driver("launch attention_split"))?;
        Ok(())
    }
}
