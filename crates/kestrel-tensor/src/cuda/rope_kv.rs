//! The CUDA engine's RoPE and KV-cache writes (`kernels/rope.cu`, `kernels/kv_append.cu`):
//! RoPE alone, the KV append, and a step's queries and keys rotated with keys and values
//! appended in one launch, into one sequence's caches or, for a batched decode step, each
//! token's own through a [`KvTable`]. Caches hold f16 values or q8_0 blocks, written as the CPU
//! engine's caches of those types are. Parameters are the CPU engine's ([`RopeParams`]) so a
//! plan hands both engines the same values.

use cudarc::driver::{CudaSlice, LaunchConfig};

use super::engine::{cfg, driver, f32_only, f32_vector, grid_for, i32_of};
use super::kv_table::KvKind;
use super::{CudaDevice, DeviceIds, DeviceTensor, HeadNorm, KvTable, MAX_HEAD_DIM};
use crate::cpu::{rope_yarn_corr_dims, RopeMode, RopeParams};
use crate::error::{Result, TensorError};
use crate::{DType, Shape};

impl CudaDevice {
    /// A zeroed tensor of any dtype (a KV cache: F16 or Q8_0, a row per position).
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
            let mut b = self.launch(f);
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
        if cache.dtype != DType::F16 {
            return Err(TensorError::UnsupportedDType {
                op: "cuda kv_append",
                dtype: cache.dtype,
            });
        }
        if positions.is_empty() {
            return Ok(());
        }
        let r = i32_of("cuda kv_append", row)?;
        self.with_ids(positions.iter().copied(), |pos: &CudaSlice<i32>| {
            let f = self.func("kv_append_f16")?;
            let mut b = self.launch(f);
            b.arg(&src.buf).arg(pos).arg(&mut cache.buf).arg(&r);
            // SAFETY: positions are inside the cache (checked), src holds tokens*row f32.
            unsafe { b.launch(cfg(grid_for(positions.len(), 1)?, (256, 1))) }
                .map_err(driver("launch kv_append"))?;
            Ok(())
        })
    }

    /// [`Self::kv_append`] of a step's keys and values in one launch, the positions in a device
    /// buffer the caller wrote (a CUDA graph replays it with each step's positions). The caches
    /// are both F16 or both Q8_0 (rows whole blocks; each block quantized as the CPU cache's
    /// q8_0 blocks are).
    ///
    /// # Errors
    /// As [`Self::kv_append`], for either pair; caches of different dtypes.
    pub fn kv_append2_ids(
        &self,
        (k_src, v_src): (&DeviceTensor, &DeviceTensor),
        positions: &DeviceIds,
        (k_cache, v_cache): (&mut DeviceTensor, &mut DeviceTensor),
    ) -> Result<()> {
        const OP: &str = "cuda kv_append";
        let k_row = i32_of(OP, check_kv_append(k_src, &positions.host, k_cache)?)?;
        let v_row = i32_of(OP, check_kv_append(v_src, &positions.host, v_cache)?)?;
        let kind = KvKind::of(OP, k_cache.dtype, v_cache.dtype)?;
        self.kv_append2_launch(
            (k_src, v_src),
            positions,
            Some((k_cache, v_cache)),
            None,
            (k_row, v_row, kind),
        )
    }

    /// [`Self::kv_append2_ids`] of keys alone (DeepSeek's latent cache: its values are the
    /// keys' front).
    ///
    /// # Errors
    /// As [`Self::kv_append`].
    pub fn kv_append_ids(
        &self,
        src: &DeviceTensor,
        positions: &DeviceIds,
        cache: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda kv_append";
        let row = i32_of(OP, check_kv_append(src, &positions.host, cache)?)?;
        let kind = KvKind::of(OP, cache.dtype, cache.dtype)?;
        if positions.host.is_empty() {
            return Ok(());
        }
        kind.check_heads(OP, row as usize, 32)?;
        let null = 0u64;
        let zero = 0i32;
        let f = self.func(kind.pick("kv_append2_f16", "kv_append2_q8_0"))?;
        let mut b = self.launch(f);
        b.arg(&src.buf)
            .arg(&src.buf)
            .arg(&positions.buf)
            .arg(&mut cache.buf)
            .arg(&null)
            .arg(&row)
            .arg(&zero)
            .arg(&null);
        let launch = LaunchConfig {
            grid_dim: (grid_for(positions.host.len(), 1)?, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the positions are inside the cache, src holds tokens*row f32 (checked); one
        // CTA row (blockIdx.y 0: keys only), so the null value cache is never touched.
        unsafe { b.launch(launch) }.map_err(driver("launch kv_append"))?;
        Ok(())
    }

    /// [`Self::kv_append2_ids`] of a batched decode step: token `t` appends to the caches
    /// `table` holds for it in `layer` (each sequence its own cache).
    ///
    /// # Errors
    /// As [`Self::kv_append2_ids`]; a table not written for this step's tokens.
    ///
    /// # Safety
    /// Every cache `table` was written from for `layer` must be alive (not dropped) and not
    /// borrowed elsewhere until the launch has run (stream order).
    pub unsafe fn kv_append2_table(
        &self,
        (k_src, v_src): (&DeviceTensor, &DeviceTensor),
        positions: &DeviceIds,
        table: &KvTable,
        layer: usize,
    ) -> Result<()> {
        const OP: &str = "cuda kv_append";
        f32_only(OP, k_src)?;
        f32_only(OP, v_src)?;
        let n = positions.host.len();
        for (what, t) in [("k_src", k_src), ("v_src", v_src)] {
            if t.shape.n_rows() != n {
                return Err(TensorError::LengthMismatch {
                    op: OP,
                    what,
                    expected: n,
                    actual: t.shape.n_rows(),
                });
            }
        }
        let kind = table.check(
            layer,
            &positions.host,
            Some(k_src.shape.row_len()),
            Some(v_src.shape.row_len()),
        )?;
        let rows = (
            i32_of(OP, k_src.shape.row_len())?,
            i32_of(OP, v_src.shape.row_len())?,
            kind,
        );
        self.kv_append2_launch((k_src, v_src), positions, None, Some((table, layer)), rows)
    }

    /// Launches `kv_append2_f16` or `kv_append2_q8_0` into `caches`, or through `table`
    /// (checked by the callers).
    fn kv_append2_launch(
        &self,
        (k_src, v_src): (&DeviceTensor, &DeviceTensor),
        positions: &DeviceIds,
        caches: Option<(&mut DeviceTensor, &mut DeviceTensor)>,
        table: Option<(&KvTable, usize)>,
        (k_row, v_row, kind): (i32, i32, KvKind),
    ) -> Result<()> {
        if positions.host.is_empty() {
            return Ok(());
        }
        // q8_0 rows are whole blocks (a cache's rows are: `zeros` refuses partial blocks).
        kind.check_heads("cuda kv_append", k_row as usize, v_row as usize)?;
        let null = 0u64;
        let tab = table.map_or(0, |(t, l)| self.kv_table_arg(t, l));
        let f = self.func(kind.pick("kv_append2_f16", "kv_append2_q8_0"))?;
        let mut b = self.launch(f);
        b.arg(&k_src.buf).arg(&v_src.buf).arg(&positions.buf);
        match caches {
            Some((k, v)) => b.arg(&mut k.buf).arg(&mut v.buf),
            None => b.arg(&null).arg(&null),
        };
        b.arg(&k_row).arg(&v_row).arg(&tab);
        let launch = LaunchConfig {
            grid_dim: (grid_for(positions.host.len(), 1)?, 2, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: positions are inside both caches (or each token's caches in the table), of
        // the kernel's element type, each src holds tokens*row f32 (checked by the callers).
        unsafe { b.launch(launch) }.map_err(driver("launch kv_append2"))?;
        Ok(())
    }

    /// A step's attention inputs in one launch (`rope_qk_append_f16`, or `_q8_0` for q8_0
    /// caches): the queries rotated from `q_src` into `q_out` (`n_head` heads a token), the keys
    /// rotated from `k_src` (`n_kv_head` heads) straight into the key cache at the step's
    /// positions, and `v_src` appended to the value cache: the bits of [`Self::rope_ids_from`] twice and [`Self::kv_append2_ids`],
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
        heads: (usize, usize, usize),
        p: &RopeParams,
        freq_factors: Option<&DeviceTensor>,
        q_scale: f32,
        head_norms: [Option<HeadNorm<'_>>; 2],
    ) -> Result<()> {
        self.rope_qk_append_impl(
            (q_src, q_out),
            (k_src, v_src),
            positions,
            KvDst::Caches(k_cache, v_cache),
            heads,
            p,
            freq_factors,
            q_scale,
            head_norms,
        )
    }

    /// [`Self::rope_qk_append_ids`] of a batched decode step: token `t`'s keys and values go
    /// into the caches `table` holds for it in `layer` (each sequence its own cache).
    ///
    /// # Errors
    /// As [`Self::rope_qk_append_ids`]; a table not written for this step's tokens.
    ///
    /// # Safety
    /// Every cache `table` was written from for `layer` must be alive (not dropped) and not
    /// borrowed elsewhere until the launch has run (stream order).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn rope_qk_append_table(
        &self,
        (q_src, q_out): (&DeviceTensor, &mut DeviceTensor),
        (k_src, v_src): (&DeviceTensor, &DeviceTensor),
        positions: &DeviceIds,
        (table, layer): (&KvTable, usize),
        heads: (usize, usize, usize),
        p: &RopeParams,
        freq_factors: Option<&DeviceTensor>,
        q_scale: f32,
        head_norms: [Option<HeadNorm<'_>>; 2],
    ) -> Result<()> {
        self.rope_qk_append_impl(
            (q_src, q_out),
            (k_src, v_src),
            positions,
            KvDst::Table(table, layer),
            heads,
            p,
            freq_factors,
            q_scale,
            head_norms,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn rope_qk_append_impl(
        &self,
        (q_src, q_out): (&DeviceTensor, &mut DeviceTensor),
        (k_src, v_src): (&DeviceTensor, &DeviceTensor),
        positions: &DeviceIds,
        mut dst: KvDst<'_>,
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
        let (k_row, v_row, kind) = match &dst {
            KvDst::Caches(k_cache, v_cache) => (
                check_kv_append(k_src, &positions.host, k_cache)?,
                check_kv_append(v_src, &positions.host, v_cache)?,
                KvKind::of(OP, k_cache.dtype, v_cache.dtype)?,
            ),
            KvDst::Table(table, layer) => {
                f32_only(OP, k_src)?;
                f32_only(OP, v_src)?;
                for (what, t) in [("k_src", k_src), ("v_src", v_src)] {
                    if t.shape.n_rows() != n_tok {
                        return Err(TensorError::LengthMismatch {
                            op: OP,
                            what,
                            expected: n_tok,
                            actual: t.shape.n_rows(),
                        });
                    }
                }
                let rows = (k_src.shape.row_len(), v_src.shape.row_len());
                let kind = table.check(*layer, &positions.host, Some(rows.0), Some(rows.1))?;
                (rows.0, rows.1, kind)
            }
        };
        if n_kv_head == 0 || !v_row.is_multiple_of(n_kv_head) {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "the value row must split evenly among the KV heads",
            });
        }
        kind.check_heads(OP, head_dim, v_row / n_kv_head)?;
        if kind != KvKind::F16 && head_dim > MAX_HEAD_DIM {
            // The q8_0 form rotates a key head in shared memory of 256 values.
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "a q8_0 cache takes key heads of at most 256 values here",
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
        let f = self.func(kind.pick("rope_qk_append_f16", "rope_qk_append_q8_0"))?;
        let mut b = self.launch(f);
        b.arg(&q_src.buf)
            .arg(&mut q_out.buf)
            .arg(&k_src.buf)
            .arg(&v_src.buf)
            .arg(&positions.buf);
        match freq_factors {
            Some(ff) => b.arg(&ff.buf),
            None => b.arg(&null),
        };
        let tab = match &dst {
            KvDst::Table(t, l) => self.kv_table_arg(t, *l),
            KvDst::Caches(..) => 0,
        };
        match &mut dst {
            KvDst::Caches(k_cache, v_cache) => b.arg(&mut k_cache.buf).arg(&mut v_cache.buf),
            KvDst::Table(..) => b.arg(&null).arg(&null),
        };
        b.arg(&nh).arg(&nkv).arg(&hd).arg(&vr);
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
        b.arg(&flags).arg(&eps[0]).arg(&eps[1]).arg(&tab);
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

/// Where a launch writes a step's keys and values: one sequence's caches, or each token's
/// caches in a table's layer.
enum KvDst<'a> {
    Caches(&'a mut DeviceTensor, &'a mut DeviceTensor),
    Table(&'a KvTable, usize),
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
    fn push<'a>(&'a self, b: &mut super::launch::Launch<'a>) {
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
/// the F16 or Q8_0 cache) and returns the row length.
fn check_kv_append(src: &DeviceTensor, positions: &[i32], cache: &DeviceTensor) -> Result<usize> {
    const OP: &str = "cuda kv_append";
    f32_only(OP, src)?;
    KvKind::of(OP, cache.dtype, cache.dtype)?;
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
