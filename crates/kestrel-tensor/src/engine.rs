//! The `Engine` trait: the ops a forward pass needs, over [`Tensor`]s, object-safe so a plan can
//! hold `&dyn Engine`; and `CpuEngine`, which runs the `cpu` kernels in its own rayon pool
//! (`-t N` is the pool size). Outputs are caller-provided tensors; ops allocate nothing.
//!
//! Layouts (ggml dim order, `dims()[0]` fastest):
//! - matmul: `x [k, n]`, `w [k, m]` (any dtype), `out [m, n]` f32.
//! - rope: `x [head_dim, n_head, n_tokens]` f32, in place.
//! - attention: `q [head_dim, n_head, n_tokens]`, `k`/`v` `[head_dim, n_kv_head, capacity]`
//!   (f32 or f16; the first `kv_len` positions are read), `out` like `q`.
//! - norms, softmax, activations: rows of `dims()[0]` f32 elements.

use rayon::ThreadPool;

use crate::cpu;
use crate::cpu::{AttentionParams, KvSlice, RopeParams, SoftmaxParams};
use crate::error::{Result, TensorError};
use crate::{DType, Shape, Tensor};

/// The inference ops, implemented per device.
pub trait Engine: Send + Sync {
    /// A short name ("cpu").
    fn name(&self) -> &str;

    /// Threads the engine computes with.
    fn n_threads(&self) -> usize;

    /// `out[n×m] = x[n×k] · W[m×k]ᵀ`, weights of any supported dtype, read in place.
    fn matmul(&self, x: &Tensor, w: &Tensor, out: &mut Tensor) -> Result<()>;

    /// Embedding lookup: `out` row `i` = `table` row `ids[i]`, as f32.
    fn get_rows(&self, table: &Tensor, ids: &[u32], out: &mut Tensor) -> Result<()>;

    /// `x / sqrt(mean(x²) + eps) * weight` per row.
    fn rms_norm(
        &self,
        x: &Tensor,
        weight: Option<&Tensor>,
        eps: f32,
        out: &mut Tensor,
    ) -> Result<()>;

    /// `(x - mean) / sqrt(var + eps) * weight + bias` per row.
    fn layer_norm(
        &self,
        x: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
        out: &mut Tensor,
    ) -> Result<()>;

    /// RoPE in place; `positions` has one entry per token.
    fn rope(
        &self,
        x: &mut Tensor,
        positions: &[i32],
        params: &RopeParams,
        freq_factors: Option<&Tensor>,
    ) -> Result<()>;

    /// Row softmax in place, with scale, soft cap and an optional additive mask.
    fn softmax(&self, x: &mut Tensor, params: &SoftmaxParams, mask: Option<&Tensor>) -> Result<()>;

    /// Causal attention of `q` (tokens at `positions`) over the first `kv_len` cached positions.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        q: &Tensor,
        positions: &[i32],
        k: &Tensor,
        v: &Tensor,
        kv_len: usize,
        params: &AttentionParams,
        out: &mut Tensor,
    ) -> Result<()>;

    /// `out = a + b` (`b` same size or one row broadcast).
    fn add(&self, a: &Tensor, b: &Tensor, out: &mut Tensor) -> Result<()>;

    /// `out = a * b` (`b` same size or one row broadcast).
    fn mul(&self, a: &Tensor, b: &Tensor, out: &mut Tensor) -> Result<()>;

    /// `x *= s`.
    fn scale(&self, x: &mut Tensor, s: f32) -> Result<()>;

    /// `x = silu(x)`.
    fn silu(&self, x: &mut Tensor) -> Result<()>;

    /// `x = gelu(x)` (tanh approximation).
    fn gelu(&self, x: &mut Tensor) -> Result<()>;

    /// `out = silu(gate) * up`.
    fn swiglu(&self, gate: &Tensor, up: &Tensor, out: &mut Tensor) -> Result<()>;

    /// `out = gelu(gate) * up`.
    fn geglu(&self, gate: &Tensor, up: &Tensor, out: &mut Tensor) -> Result<()>;

    /// Per-row argmax (ties to the lowest index) into `out` (one entry per row).
    fn argmax(&self, x: &Tensor, out: &mut [u32]) -> Result<()>;
}

/// The CPU engine: scalar/auto-vectorized kernels, rayon over rows in a pool of its own.
pub struct CpuEngine {
    pool: ThreadPool,
}

impl CpuEngine {
    /// An engine with `n_threads` worker threads (0: one per logical CPU).
    ///
    /// # Errors
    /// [`TensorError::ThreadPool`] if the threads cannot be spawned.
    pub fn new(n_threads: usize) -> Result<CpuEngine> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n_threads)
            .thread_name(|i| format!("kestrel-cpu-{i}"))
            .build()?;
        Ok(CpuEngine { pool })
    }

    /// The pool the kernels run in.
    pub fn pool(&self) -> &ThreadPool {
        &self.pool
    }

    /// Runs `f` inside the pool. An execution plan should run a whole step this way: ops called
    /// from inside the pool skip rayon's cross-thread injection (and its occasional allocation).
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }
}

impl std::fmt::Debug for CpuEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuEngine({} threads)", self.pool.current_num_threads())
    }
}

fn f32_in<'a>(op: &'static str, t: &'a Tensor) -> Result<&'a [f32]> {
    if t.dtype() != DType::F32 {
        return Err(TensorError::UnsupportedDType {
            op,
            dtype: t.dtype(),
        });
    }
    t.as_f32()
}

fn f32_out<'a>(op: &'static str, t: &'a mut Tensor) -> Result<&'a mut [f32]> {
    if t.dtype() != DType::F32 {
        return Err(TensorError::UnsupportedDType {
            op,
            dtype: t.dtype(),
        });
    }
    t.as_f32_mut()
}

/// Checks that `t` has `rows` rows of `row_len` (any rank).
fn rows_of(
    op: &'static str,
    what: &'static str,
    t: &Tensor,
    row_len: usize,
    rows: usize,
) -> Result<()> {
    let s = t.shape();
    if s.row_len() != row_len || s.n_rows() != rows {
        return Err(TensorError::ShapeMismatch {
            op,
            what,
            expected: Shape::new(&[row_len, rows]).unwrap_or(s),
            actual: s,
        });
    }
    Ok(())
}

fn kv<'a>(op: &'static str, t: &'a Tensor) -> Result<KvSlice<'a>> {
    match t.dtype() {
        DType::F32 => Ok(KvSlice::F32(t.as_f32()?)),
        DType::F16 => Ok(KvSlice::F16(t.as_f16()?)),
        dtype => Err(TensorError::UnsupportedDType { op, dtype }),
    }
}

impl Engine for CpuEngine {
    fn name(&self) -> &str {
        "cpu"
    }

    fn n_threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    fn matmul(&self, x: &Tensor, w: &Tensor, out: &mut Tensor) -> Result<()> {
        const OP: &str = "matmul";
        let (k, n) = (x.shape().row_len(), x.shape().n_rows());
        let m = w.shape().n_rows();
        rows_of(OP, "w", w, k, m)?;
        rows_of(OP, "out", out, m, n)?;
        let xs = f32_in(OP, x)?;
        let os = f32_out(OP, out)?;
        self.install(|| cpu::matmul(xs, n, k, w.as_bytes(), w.dtype(), m, os))
    }

    fn get_rows(&self, table: &Tensor, ids: &[u32], out: &mut Tensor) -> Result<()> {
        const OP: &str = "get_rows";
        let k = table.shape().row_len();
        rows_of(OP, "out", out, k, ids.len())?;
        let os = f32_out(OP, out)?;
        self.install(|| {
            cpu::get_rows(
                table.as_bytes(),
                table.dtype(),
                table.shape().n_rows(),
                k,
                ids,
                os,
            )
        })
    }

    fn rms_norm(
        &self,
        x: &Tensor,
        weight: Option<&Tensor>,
        eps: f32,
        out: &mut Tensor,
    ) -> Result<()> {
        const OP: &str = "rms_norm";
        rows_of(OP, "out", out, x.shape().row_len(), x.shape().n_rows())?;
        let w = weight.map(|w| f32_in(OP, w)).transpose()?;
        let xs = f32_in(OP, x)?;
        let os = f32_out(OP, out)?;
        self.install(|| cpu::rms_norm(xs, x.shape().row_len(), w, eps, os))
    }

    fn layer_norm(
        &self,
        x: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
        out: &mut Tensor,
    ) -> Result<()> {
        const OP: &str = "layer_norm";
        rows_of(OP, "out", out, x.shape().row_len(), x.shape().n_rows())?;
        let w = weight.map(|w| f32_in(OP, w)).transpose()?;
        let b = bias.map(|b| f32_in(OP, b)).transpose()?;
        let xs = f32_in(OP, x)?;
        let os = f32_out(OP, out)?;
        self.install(|| cpu::layer_norm(xs, x.shape().row_len(), w, b, eps, os))
    }

    fn rope(
        &self,
        x: &mut Tensor,
        positions: &[i32],
        params: &RopeParams,
        freq_factors: Option<&Tensor>,
    ) -> Result<()> {
        const OP: &str = "rope";
        let s = x.shape();
        // A 2-D `[head_dim * n_head, n_tokens]` would be read as one head per token: refuse it.
        if s.rank() < 3 || s.dim(2) * s.dim(3) != positions.len() {
            return Err(TensorError::ShapeMismatch {
                op: OP,
                what: "x (want [head_dim, n_head, n_tokens])",
                expected: Shape::new(&[s.dim(0), s.dim(1), positions.len()]).unwrap_or(s),
                actual: s,
            });
        }
        let (head_dim, n_head) = (s.dim(0), s.dim(1));
        let ff = freq_factors.map(|f| f32_in(OP, f)).transpose()?;
        let xs = f32_out(OP, x)?;
        self.install(|| cpu::rope(xs, n_head, head_dim, positions, params, ff))
    }

    fn softmax(&self, x: &mut Tensor, params: &SoftmaxParams, mask: Option<&Tensor>) -> Result<()> {
        const OP: &str = "softmax";
        let n = x.shape().row_len();
        let m = mask.map(|m| f32_in(OP, m)).transpose()?;
        let xs = f32_out(OP, x)?;
        self.install(|| cpu::softmax(xs, n, params, m))
    }

    fn attention(
        &self,
        q: &Tensor,
        positions: &[i32],
        k: &Tensor,
        v: &Tensor,
        kv_len: usize,
        params: &AttentionParams,
        out: &mut Tensor,
    ) -> Result<()> {
        const OP: &str = "attention";
        rows_of(OP, "out", out, q.shape().row_len(), q.shape().n_rows())?;
        let qs = f32_in(OP, q)?;
        let (ks, vs) = (kv(OP, k)?, kv(OP, v)?);
        let os = f32_out(OP, out)?;
        self.install(|| cpu::attention(qs, positions, ks, vs, kv_len, params, os))
    }

    fn add(&self, a: &Tensor, b: &Tensor, out: &mut Tensor) -> Result<()> {
        let (a, b) = (f32_in("add", a)?, f32_in("add", b)?);
        let o = f32_out("add", out)?;
        self.install(|| cpu::add(a, b, o))
    }

    fn mul(&self, a: &Tensor, b: &Tensor, out: &mut Tensor) -> Result<()> {
        let (a, b) = (f32_in("mul", a)?, f32_in("mul", b)?);
        let o = f32_out("mul", out)?;
        self.install(|| cpu::mul(a, b, o))
    }

    fn scale(&self, x: &mut Tensor, s: f32) -> Result<()> {
        let x = f32_out("scale", x)?;
        self.install(|| cpu::scale(x, s));
        Ok(())
    }

    fn silu(&self, x: &mut Tensor) -> Result<()> {
        let x = f32_out("silu", x)?;
        self.install(|| cpu::silu(x));
        Ok(())
    }

    fn gelu(&self, x: &mut Tensor) -> Result<()> {
        let x = f32_out("gelu", x)?;
        self.install(|| cpu::gelu(x));
        Ok(())
    }

    fn swiglu(&self, gate: &Tensor, up: &Tensor, out: &mut Tensor) -> Result<()> {
        let (g, u) = (f32_in("swiglu", gate)?, f32_in("swiglu", up)?);
        let o = f32_out("swiglu", out)?;
        self.install(|| cpu::swiglu(g, u, o))
    }

    fn geglu(&self, gate: &Tensor, up: &Tensor, out: &mut Tensor) -> Result<()> {
        let (g, u) = (f32_in("geglu", gate)?, f32_in("geglu", up)?);
        let o = f32_out("geglu", out)?;
        self.install(|| cpu::geglu(g, u, o))
    }

    fn argmax(&self, x: &Tensor, out: &mut [u32]) -> Result<()> {
        const OP: &str = "argmax";
        let n = x.shape().row_len();
        let xs = f32_in(OP, x)?;
        if out.len() != x.shape().n_rows() {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "out",
                expected: x.shape().n_rows(),
                actual: out.len(),
            });
        }
        if n == 0 {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "rows are empty",
            });
        }
        for (o, row) in out.iter_mut().zip(xs.chunks_exact(n)) {
            *o = cpu::argmax(row).unwrap_or(0) as u32;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cpu::testutil::{quantized_rows, Rng};
    use crate::storage::ByteOwner;

    fn assert_object_safe(_: &dyn Engine) {}

    #[test]
    fn engine_runs_ops_on_tensors_with_shared_weights() {
        let e = CpuEngine::new(2).unwrap();
        assert_object_safe(&e);
        assert_eq!(e.n_threads(), 2);
        let mut rng = Rng::new(51);
        let (k, m, n) = (256, 10, 3);
        let (wb, wf) = quantized_rows(&mut rng, DType::Q4K, m, k);
        // The weights borrow an Arc'd buffer, as they would borrow the mmap.
        let mut file = vec![0u8; 32];
        file.extend_from_slice(&wb);
        let owner: ByteOwner = Arc::new(file);
        let w = Tensor::from_shared(DType::Q4K, Shape::matrix(m, k).unwrap(), owner, 32).unwrap();
        let xv = rng.vec(n * k, 1.0);
        let x = Tensor::from_f32(Shape::matrix(n, k).unwrap(), &xv).unwrap();
        let mut out = Tensor::zeros(DType::F32, Shape::matrix(n, m).unwrap()).unwrap();
        e.matmul(&x, &w, &mut out).unwrap();
        let o = out.as_f32().unwrap();
        for t in 0..n {
            for r in 0..m {
                let want: f64 = (0..k)
                    .map(|j| xv[t * k + j] as f64 * wf[r * k + j] as f64)
                    .sum();
                // The activations are quantized to q8_K (one super-block here): each is off by
                // at most half a step amax/127.
                let xs = &xv[t * k..(t + 1) * k];
                let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                let wsum: f64 = wf[r * k..(r + 1) * k].iter().map(|v| v.abs() as f64).sum();
                let tol = wsum * amax / 254.0 + 1e-4;
                assert!((o[t * m + r] as f64 - want).abs() < tol);
            }
        }
        // Shape errors name the operand.
        let mut bad = Tensor::zeros(DType::F32, Shape::matrix(n, m + 1).unwrap()).unwrap();
        assert!(matches!(
            e.matmul(&x, &w, &mut bad),
            Err(TensorError::ShapeMismatch { what: "out", .. })
        ));
        let mut ids_out = Tensor::zeros(DType::F32, Shape::matrix(2, k).unwrap()).unwrap();
        e.get_rows(&w, &[9, 0], &mut ids_out).unwrap();
        assert_eq!(&ids_out.as_f32().unwrap()[..k], &wf[9 * k..10 * k]);
        assert!(matches!(
            e.get_rows(&w, &[10, 0], &mut ids_out),
            Err(TensorError::IdOutOfRange { .. })
        ));
        let mut am = [0u32; 3];
        e.argmax(&out, &mut am).unwrap();
        for (t, &a) in am.iter().enumerate() {
            assert_eq!(Some(a as usize), cpu::argmax(&o[t * m..(t + 1) * m]));
        }
        // A quantized tensor cannot be an f32 operand.
        let mut norm_out = Tensor::zeros(DType::F32, Shape::matrix(m, k).unwrap()).unwrap();
        assert!(matches!(
            e.rms_norm(&w, None, 1e-6, &mut norm_out),
            Err(TensorError::UnsupportedDType { .. })
        ));
    }

    #[test]
    fn engine_attention_and_rope_on_tensors() {
        let e = CpuEngine::new(1).unwrap();
        let (hd, nh, nkv, nt) = (16, 2, 1, 3);
        let mut rng = Rng::new(52);
        let mut q = Tensor::from_f32(
            Shape::new(&[hd, nh, nt]).unwrap(),
            &rng.vec(hd * nh * nt, 1.0),
        )
        .unwrap();
        let kv_shape = Shape::new(&[hd, nkv, 8]).unwrap();
        let mut k = Tensor::zeros(DType::F16, kv_shape).unwrap();
        let kvals = rng.vec(hd * nkv * 8, 1.0);
        cpu::f32_to_f16(&kvals, k.as_f16_mut().unwrap()).unwrap();
        let v = Tensor::from_f32(kv_shape, &rng.vec(hd * nkv * 8, 1.0)).unwrap();
        e.rope(&mut q, &[0, 1, 2], &RopeParams::default(), None)
            .unwrap();
        let mut flat = Tensor::zeros(DType::F32, Shape::matrix(nt, hd * nh).unwrap()).unwrap();
        assert!(matches!(
            e.rope(&mut flat, &[0, 1, 2], &RopeParams::default(), None),
            Err(TensorError::ShapeMismatch { .. })
        ));
        assert!(e
            .rope(&mut q, &[0, 1], &RopeParams::default(), None)
            .is_err());
        let mut out = Tensor::zeros(DType::F32, q.shape()).unwrap();
        let p = AttentionParams {
            n_head: nh,
            n_kv_head: nkv,
            head_dim: hd,
            scale: 0.25,
            softcap: 0.0,
            window: 0,
        };
        e.attention(&q, &[0, 1, 2], &k, &v, 3, &p, &mut out)
            .unwrap();
        // The first token sees only key 0: its output is v[0].
        let vv = v.as_f32().unwrap();
        let o = out.as_f32().unwrap();
        for d in 0..hd {
            assert!((o[d] - vv[d]).abs() < 1e-6);
        }
        let q8 = Tensor::zeros(DType::Q8_0, Shape::new(&[32, 1, 1]).unwrap()).unwrap();
        assert!(e.attention(&q8, &[0], &k, &v, 1, &p, &mut out).is_err());
    }
}
