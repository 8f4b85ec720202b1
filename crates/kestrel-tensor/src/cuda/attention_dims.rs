//! Attention whose values are not the keys' own head size: DeepSeek's latent attention (each
//! key's front serving as its value, `attention_mla_*`) and keys and values of their own head
//! sizes in their own caches (its decompressed form, `attention_kv_*`). The plain kernels, the
//! split scratch and the shared argument layout are `attention.rs`'s.

use cudarc::driver::CudaSlice;

use super::attention::{check_q_out, DecArgs, Split, MLA_MAX_HEAD_DIM, MLA_MAX_HEAD_DIM_V};
use super::engine::{cfg, driver, f32_only, grid_for, i32_of};
use super::kv_table::KvKind;
use super::{CudaDevice, DeviceIds, DeviceTensor};
use crate::cpu::AttentionParams;
use crate::error::{Result, TensorError};
use crate::Shape;

impl CudaDevice {
    /// DeepSeek's latent attention: `q` (`[n_tokens][n_head][head_dim]`) over the first
    /// `kv_len` positions of the key cache `k` (`[capacity][n_kv_head * head_dim]`, F16 or
    /// Q8_0), each key's first `head_dim_v` values serving as its value (the latent), writing
    /// `out` (`[n_tokens][n_head][head_dim_v]`). Causal, as [`Self::attention_ids`]; a CTA per
    /// (token, head), or decode steps split over key ranges as [`Self::attention_ids`] splits
    /// them (value heads of up to 512); key heads of up to 576 values.
    ///
    /// # Errors
    /// Head counts that do not divide, head sizes out of range (`head_dim_v` above
    /// `head_dim`, `head_dim` above 576; q8_0: not multiples of 32), shape or dtype mismatches,
    /// a launch failure.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_latent_ids(
        &self,
        q: &DeviceTensor,
        positions: &DeviceIds,
        k: &DeviceTensor,
        kv_len: usize,
        p: &AttentionParams,
        head_dim_v: usize,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda latent attention";
        f32_only(OP, q)?;
        f32_only(OP, out)?;
        let kind = KvKind::of(OP, k.dtype, k.dtype)?;
        if p.n_head == 0 || p.n_kv_head == 0 || !p.n_head.is_multiple_of(p.n_kv_head) {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "n_head must be a positive multiple of n_kv_head",
            });
        }
        if p.head_dim == 0
            || p.head_dim > MLA_MAX_HEAD_DIM
            || head_dim_v == 0
            || head_dim_v > p.head_dim
        {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "key heads of 1 to 576 values, value heads no longer",
            });
        }
        kind.check_heads(OP, p.head_dim, head_dim_v)?;
        let row = p.n_kv_head * p.head_dim;
        if k.shape.row_len() != row || k.shape.n_rows() < kv_len {
            return Err(TensorError::ShapeMismatch {
                op: OP,
                what: "k",
                expected: Shape::matrix(kv_len, row)?,
                actual: k.shape,
            });
        }
        let n_tokens = positions.host.len();
        let splits = self.attention_splits(n_tokens, p.n_head);
        if splits > 0 && head_dim_v <= MLA_MAX_HEAD_DIM_V {
            check_q_out(OP, q, out, n_tokens, p, head_dim_v)?;
            return self.attention_split(
                q,
                &positions.buf,
                (Some(k), None, kind),
                Split::Latent(head_dim_v),
                None,
                out,
                p,
                (kv_len, n_tokens, splits),
                None,
            );
        }
        self.launch_dims(
            kind.pick("attention_mla_f16", "attention_mla_q8_0"),
            q,
            &positions.buf,
            n_tokens,
            (k, None),
            kv_len,
            (p, head_dim_v),
            None,
            out,
        )
    }

    /// Attention whose values have their own head size (`attention_kv_*`: a CTA per (token,
    /// head), or its split form for decode steps; no table, no tiles), for
    /// [`Self::attention_ids_sinks`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention_kv_dims(
        &self,
        q: &DeviceTensor,
        dev_ids: Option<&CudaSlice<i32>>,
        positions: &[i32],
        (k, v): (Option<&DeviceTensor>, Option<&DeviceTensor>),
        kv_len: usize,
        p: &AttentionParams,
        head_dim_v: usize,
        sinks: Option<&DeviceTensor>,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda attention";
        let (Some(k), Some(v)) = (k, v) else {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "a batched step takes keys and values of one head size",
            });
        };
        let kind = KvKind::of(OP, k.dtype, v.dtype)?;
        let name = kind.pick("attention_kv_f16", "attention_kv_q8_0");
        let n_tokens = positions.len();
        let splits = self.attention_splits(n_tokens, p.n_head);
        let mut run = |pos: &CudaSlice<i32>| {
            if splits > 0 {
                check_q_out(OP, q, out, n_tokens, p, head_dim_v)?;
                return self.attention_split(
                    q,
                    pos,
                    (Some(k), Some(v), kind),
                    Split::KvDims(head_dim_v),
                    sinks,
                    &mut *out,
                    p,
                    (kv_len, n_tokens, splits),
                    None,
                );
            }
            self.launch_dims(
                name,
                q,
                pos,
                n_tokens,
                (k, Some(v)),
                kv_len,
                (p, head_dim_v),
                Some(sinks),
                &mut *out,
            )
        };
        match dev_ids {
            Some(d) => run(d),
            None => self.with_ids(positions.iter().copied(), run),
        }
    }

    /// Launches a decode-form attention kernel whose values have their own head size, a CTA per
    /// (token, head): `attention_kv_*` (`v` its own cache, then `sinks` last) or
    /// `attention_mla_*` (`v` none: the keys' front; no sinks argument). Checks q and out.
    #[allow(clippy::too_many_arguments)]
    fn launch_dims(
        &self,
        kernel: &'static str,
        q: &DeviceTensor,
        pos: &CudaSlice<i32>,
        n_tokens: usize,
        (k, v): (&DeviceTensor, Option<&DeviceTensor>),
        kv_len: usize,
        (p, head_dim_v): (&AttentionParams, usize),
        sinks: Option<Option<&DeviceTensor>>,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda attention";
        check_q_out(OP, q, out, n_tokens, p, head_dim_v)?;
        if n_tokens == 0 {
            return Ok(());
        }
        let (args, hdv) = (DecArgs::new(OP, p, kv_len)?, i32_of(OP, head_dim_v)?);
        let null = 0u64;
        let f = self.func(kernel)?;
        let mut b = self.launch(f);
        b.arg(&q.buf).arg(pos).arg(&k.buf);
        if let Some(v) = v {
            b.arg(&v.buf);
        }
        b.arg(&mut out.buf);
        args.push(&mut b, p, Some(&hdv));
        match sinks {
            Some(Some(s)) => b.arg(&s.buf),
            Some(None) => b.arg(&null),
            None => &mut b,
        };
        let config = cfg(
            grid_for(n_tokens * p.n_head, 1)?,
            (32, self.decode_attention_warps(n_tokens, p.n_head)),
        );
        // SAFETY: q holds tokens*n_head*head_dim f32, out tokens*n_head*head_dim_v (checked
        // here), k (and v) at least kv_len rows of their heads of the kernel's type and the
        // positions one i32 a token (checked by the callers); the arguments are the kernel's.
        unsafe { b.launch(config) }.map_err(driver("launch attention"))?;
        Ok(())
    }
}
