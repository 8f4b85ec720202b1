//! One-row quantized matvecs whose last CTA also runs the row op after them
//! (`kernels/mmvq_tail.cu`), one launch where there were two (issue 24: decode of small models
//! is bound by launches), each with the bits of the launches it replaces:
//! - the RMS norm after the output and down projections ([`CudaDevice::matmul_norm_reusing`]):
//!   llama's norm after the residual add the epilogue takes, or Gemma's sandwich (post-norm,
//!   residual add, next norm), in place of [`CudaDevice::matmul_add_reusing`] or
//!   [`CudaDevice::matmul_reusing`] and then [`CudaDevice::rms_norm_fused`] or
//!   [`CudaDevice::norm_add_rms_norm`];
//! - the gated activation after the gate/up matvec ([`CudaDevice::matmul_gate_up_glu_reusing`]),
//!   in place of [`CudaDevice::matmul_multi_reusing`] and [`CudaDevice::glu_fused`].

use cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig};

use super::engine::{
    driver, f32_only, f32_vector, grid_for, i32_of, no_scratch_err, same_shape, ScratchGuard,
};
use super::fused::Glu;
use super::matvec::mmvq_multi_name;
use super::matvec::{mmvq_rows_per_cta, MMVQ_WARPS};
use super::ops::rms_threads;
use super::{CudaDevice, DeviceTensor, NormAfter, Q8Ticket};
use crate::error::{Result, TensorError};
use crate::{DType, Shape};

/// Longest row the fused norm takes: the last CTA keeps the row in shared memory (`k` floats,
/// given to every CTA of the launch), and its 128 threads take a row of this length in 16
/// values each. Longer rows belong to larger models, whose decode is bound by weight reads.
pub const MAX_NORM_AFTER_ROW: usize = 2048;

/// The fused kernels by weight type: plain, prefetching.
pub(super) const MMVQ_NORM: [(DType, [&str; 2]); 8] = [
    (DType::Q4K, ["mmvq_q4_K_1_norm", "mmvq_q4_K_1_norm_pf"]),
    (DType::Q5K, ["mmvq_q5_K_1_norm", "mmvq_q5_K_1_norm_pf"]),
    (DType::Q6K, ["mmvq_q6_K_1_norm", "mmvq_q6_K_1_norm_pf"]),
    (DType::Q4_0, ["mmvq_q4_0_1_norm", "mmvq_q4_0_1_norm_pf"]),
    (DType::Q4_1, ["mmvq_q4_1_1_norm", "mmvq_q4_1_1_norm_pf"]),
    (DType::Q5_0, ["mmvq_q5_0_1_norm", "mmvq_q5_0_1_norm_pf"]),
    (DType::Q5_1, ["mmvq_q5_1_1_norm", "mmvq_q5_1_1_norm_pf"]),
    (DType::Q8_0, ["mmvq_q8_0_1_norm", "mmvq_q8_0_1_norm_pf"]),
];

/// `MmvqNormTail` of kernels/mmvq_tail.cu, passed by value: device addresses (0: none).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct MmvqNormTail {
    normed: u64,
    w1: u64,
    x: u64,
    sum: u64,
    w2: u64,
    out: u64,
    q: u64,
    counter: u64,
    threads: i32,
    eps1: f32,
    eps2: f32,
    pad: i32,
}
const _: () = assert!(std::mem::size_of::<MmvqNormTail>() == 80);
super::launch::by_value!(MmvqNormTail);

/// The gate/up kernels by weight type: plain, prefetching.
pub(super) const MMVQ_MULTI_GLU: [(DType, [&str; 2]); 8] = [
    (
        DType::Q4K,
        ["mmvq_q4_K_multi_glu", "mmvq_q4_K_multi_glu_pf"],
    ),
    (
        DType::Q5K,
        ["mmvq_q5_K_multi_glu", "mmvq_q5_K_multi_glu_pf"],
    ),
    (
        DType::Q6K,
        ["mmvq_q6_K_multi_glu", "mmvq_q6_K_multi_glu_pf"],
    ),
    (
        DType::Q4_0,
        ["mmvq_q4_0_multi_glu", "mmvq_q4_0_multi_glu_pf"],
    ),
    (
        DType::Q4_1,
        ["mmvq_q4_1_multi_glu", "mmvq_q4_1_multi_glu_pf"],
    ),
    (
        DType::Q5_0,
        ["mmvq_q5_0_multi_glu", "mmvq_q5_0_multi_glu_pf"],
    ),
    (
        DType::Q5_1,
        ["mmvq_q5_1_multi_glu", "mmvq_q5_1_multi_glu_pf"],
    ),
    (
        DType::Q8_0,
        ["mmvq_q8_0_multi_glu", "mmvq_q8_0_multi_glu_pf"],
    ),
];

/// `MmvqGluTail` of kernels/mmvq_tail.cu, passed by value: device addresses (0: none).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct MmvqGluTail {
    gate: u64,
    up: u64,
    out: u64,
    q: u64,
    counter: u64,
    n: i32,
    gelu: i32,
}
const _: () = assert!(std::mem::size_of::<MmvqGluTail>() == 48);
super::launch::by_value!(MmvqGluTail);

impl CudaDevice {
    /// The device address of the counter by which a launch's CTAs find the last of them
    /// (allocated at first use, zero between launches: each leaves it so).
    fn tail_counter(&self, op: &'static str) -> Result<u64> {
        let mut c = self
            .tail_counter
            .lock()
            .map_err(|_| TensorError::InvalidParam {
                op,
                why: "lock poisoned",
            })?;
        if c.is_none() {
            *c = Some(
                self.stream
                    .alloc_zeros::<u32>(1)
                    .map_err(|e| self.alloc_error(4, e))?,
            );
            self.bump_epoch();
        }
        let ptr = c
            .as_ref()
            .map(|c| c.device_ptr(&self.stream).0)
            .ok_or_else(no_scratch_err)?;
        Ok(ptr)
    }

    /// The Q8_1 scratch holding the one row `x` of `k` values (as `q8_input`: quantized now
    /// unless `ticket` still names it), grown first, when the tail leaves its own `width`-wide
    /// Q8_1 row there (`quantize`: written once every CTA has read x's); and the counter's
    /// address.
    fn tail_input(
        &self,
        op: &'static str,
        (x, ticket, k): (&DeviceTensor, Option<Q8Ticket>, usize),
        width: usize,
        quantize: bool,
    ) -> Result<(ScratchGuard<'_>, u64)> {
        if quantize {
            self.q8_grow(op, 1, width)?;
        }
        let (guard, _) = self.q8_input(x, ticket, 1, k)?;
        let counter = self.tail_counter(op)?;
        Ok((guard, counter))
    }

    /// Whether [`Self::matmul_gate_up_glu_reusing`] takes `n` activation rows against gate and
    /// up weights of `dtype` with `width` rows each: one row, a quantized type the multi
    /// matvec runs, `width` up to [`MAX_NORM_AFTER_ROW`] (the last CTA's 128 threads compute
    /// the whole activation).
    pub fn matvec_gate_up_glu_applies(&self, dtype: DType, n: usize, width: usize) -> bool {
        (1..=MAX_NORM_AFTER_ROW).contains(&width)
            && MMVQ_MULTI_GLU.iter().any(|(t, _)| *t == dtype)
            && self.matvec_multi_applies(&[dtype, dtype], n)
    }

    /// `gate.1 = x · gate.0ᵀ`, `up.1 = x · up.0ᵀ` (one multi matvec launch, as
    /// [`Self::matmul_multi_reusing`]) and, in the same launch (its last CTA), `out =
    /// act(gate.1) * up.1` (as [`Self::glu_fused`]: `quantize` also leaves `out` as Q8_1 in the
    /// matvec scratch, rows a multiple of 32 long, and returns its ticket). `ticket` as
    /// [`Self::matmul_reusing`], for `x`. The same bits as the separate launches.
    ///
    /// # Errors
    /// What [`Self::matvec_gate_up_glu_applies`] refuses, shape or dtype mismatches, a launch
    /// failure.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_gate_up_glu_reusing(
        &self,
        x: &DeviceTensor,
        gate: (&DeviceTensor, &mut DeviceTensor),
        up: (&DeviceTensor, &mut DeviceTensor),
        glu: Glu,
        out: &mut DeviceTensor,
        quantize: bool,
        ticket: Option<Q8Ticket>,
    ) -> Result<Option<Q8Ticket>> {
        const OP: &str = "cuda gate/up matmul + glu";
        let (dtype, width, k) = (gate.0.dtype, gate.0.shape.n_rows(), x.shape.row_len());
        f32_only(OP, x)?;
        if up.0.dtype != dtype || !self.matvec_gate_up_glu_applies(dtype, x.shape.n_rows(), width) {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "one activation row, gate and up of one quantized type, at most 2048 rows",
            });
        }
        if !k.is_multiple_of(dtype.block_size()) {
            return Err(TensorError::PartialBlock {
                dtype,
                row_len: k,
                block_size: dtype.block_size(),
            });
        }
        f32_only(OP, out)?;
        same_shape(OP, "up", gate.1, up.1)?;
        same_shape(OP, "out", gate.1, out)?;
        let mut pairs = [Some(gate), Some(up), None];
        let (segs, total) = self.multi_segs(OP, &mut pairs, k)?;
        let [Some((_, gate_out)), Some((_, up_out)), None] = pairs else {
            return Err(no_scratch_err());
        };
        let quantize = quantize && width.is_multiple_of(32);
        let (mut guard, counter) = self.tail_input(OP, (x, ticket, k), width, quantize)?;
        let scratch = guard.as_mut().ok_or_else(no_scratch_err)?;
        let tail = MmvqGluTail {
            gate: gate_out.buf.device_ptr(&self.stream).0,
            up: up_out.buf.device_ptr(&self.stream).0,
            out: out.buf.device_ptr_mut(&self.stream).0,
            q: if quantize {
                scratch.device_ptr_mut(&self.stream).0
            } else {
                0
            },
            counter,
            n: i32_of(OP, width)?,
            gelu: i32::from(glu == Glu::GeGlu),
        };
        let rpc = mmvq_rows_per_cta();
        let prefetch = self.mmvq_prefetch();
        let (Some((_, names)), Some(_)) = (
            MMVQ_MULTI_GLU.iter().find(|(t, _)| *t == dtype),
            mmvq_multi_name(dtype, prefetch),
        ) else {
            return Err(TensorError::UnsupportedDType { op: OP, dtype });
        };
        let grid = if prefetch {
            self.mmvq_pf_grid(total, rpc as usize)?
        } else {
            grid_for(total, rpc as usize)?
        };
        let (nb_i, rpc_i) = (i32_of(OP, k / dtype.block_size())?, rpc as i32);
        let f = self.func(names[usize::from(prefetch)])?;
        let mut b = self.launch(f);
        b.arg(&segs)
            .arg(&*scratch)
            .arg(&nb_i)
            .arg(&rpc_i)
            .arg(&tail);
        let config = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (32, MMVQ_WARPS, 1),
            shared_mem_bytes: (2 * width * 4) as u32,
        };
        // SAFETY: each weight holds its width rows of k/block blocks of `dtype`, each output,
        // and `out`, width f32, the scratch x's Q8_1 row (and room for width/32 blocks more:
        // grown above); the counter is one u32, zero between launches; the last CTA stages
        // both rows in 2 * width <= 2 * MAX_NORM_AFTER_ROW floats of shared memory.
        unsafe { b.launch(config) }.map_err(driver("launch mmvq multi + glu"))?;
        if quantize {
            return self.q8_claim(&guard, 1, width).map(Some);
        }
        Ok(None)
    }

    /// Whether [`Self::matmul_norm_reusing`] takes `n` activation rows against a `dtype`
    /// weight of `m` rows: one row, a quantized type the one-row matvec runs, `m` up to
    /// [`MAX_NORM_AFTER_ROW`].
    pub fn matvec_norm_applies(&self, dtype: DType, n: usize, m: usize) -> bool {
        n == 1
            && (1..=MAX_NORM_AFTER_ROW).contains(&m)
            && MMVQ_NORM.iter().any(|(t, _)| *t == dtype)
            && self.matvec_quantized(dtype, n)
    }

    /// `product = x · wᵀ` (plus `add`, in the epilogue), then the RMS norm `norm` says of the
    /// product row, in the same launch: the last CTA to finish runs it. Without a sandwich
    /// `norm.out = rms_norm(product) * norm.weight`; with one (Gemma's post-norms) `normed =
    /// rms_norm(product) * w1`, `sum = residual + normed`, `norm.out = rms_norm(sum) *
    /// norm.weight`. `norm.quantize` also leaves `norm.out` as Q8_1 in the matvec scratch (rows
    /// a multiple of 32 long) and returns its ticket, for the next [`Self::matmul_reusing`];
    /// `ticket` as there, for `x`. The same bits as the separate launches.
    ///
    /// # Errors
    /// What [`Self::matvec_norm_applies`] refuses, shape or dtype mismatches, a launch failure.
    pub fn matmul_norm_reusing(
        &self,
        x: &DeviceTensor,
        w: &DeviceTensor,
        product: &mut DeviceTensor,
        add: Option<&DeviceTensor>,
        norm: NormAfter<'_>,
        ticket: Option<Q8Ticket>,
    ) -> Result<Option<Q8Ticket>> {
        const OP: &str = "cuda matmul + rms_norm";
        let (k, m, n) = (w.shape.row_len(), w.shape.n_rows(), x.shape.n_rows());
        if !self.matvec_norm_applies(w.dtype, n, m) {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "one activation row, a quantized weight of at most 2048 rows",
            });
        }
        f32_only(OP, x)?;
        if x.shape.row_len() != k || !k.is_multiple_of(w.dtype.block_size()) {
            return Err(TensorError::ShapeMismatch {
                op: OP,
                what: "x",
                expected: Shape::matrix(1, k)?,
                actual: x.shape,
            });
        }
        let NormAfter {
            weight,
            eps,
            out,
            quantize,
            sandwich,
        } = norm;
        let rows = [
            Some(("product", &*product)),
            Some(("out", &*out)),
            add.map(|a| ("add", a)),
            sandwich.as_ref().map(|s| ("normed", &*s.normed)),
            sandwich.as_ref().map(|s| ("residual", s.residual)),
            sandwich.as_ref().map(|s| ("sum", &*s.sum)),
        ];
        for (what, t) in rows.into_iter().flatten() {
            f32_only(OP, t)?;
            if t.shape.elem_count() != m {
                return Err(TensorError::ShapeMismatch {
                    op: OP,
                    what,
                    expected: Shape::matrix(1, m)?,
                    actual: t.shape,
                });
            }
        }
        for v in [weight, sandwich.as_ref().and_then(|s| s.weight)]
            .into_iter()
            .flatten()
        {
            f32_vector(OP, "norm weight", v, m)?;
        }
        same_shape(OP, "out", product, out)?;
        let quantize = quantize && m.is_multiple_of(32);
        let (mut guard, counter) = self.tail_input(OP, (x, ticket, k), m, quantize)?;
        let scratch = guard.as_mut().ok_or_else(no_scratch_err)?;
        let ptr = |t: Option<&DeviceTensor>| t.map_or(0, |t| t.buf.device_ptr(&self.stream).0);
        let (mut normed, mut sum, mut eps1, mut w1, mut residual) = (0, 0, 0.0, 0, 0);
        if let Some(s) = sandwich {
            normed = s.normed.buf.device_ptr_mut(&self.stream).0;
            sum = s.sum.buf.device_ptr_mut(&self.stream).0;
            (eps1, w1, residual) = (s.eps, ptr(s.weight), ptr(Some(s.residual)));
        }
        let tail = MmvqNormTail {
            normed,
            w1,
            x: residual,
            sum,
            w2: ptr(weight),
            out: out.buf.device_ptr_mut(&self.stream).0,
            q: if quantize {
                scratch.device_ptr_mut(&self.stream).0
            } else {
                0
            },
            counter,
            threads: rms_threads(m) as i32,
            eps1,
            eps2: eps,
            pad: 0,
        };
        let rpc = mmvq_rows_per_cta();
        let prefetch = self.mmvq_prefetch();
        let Some((_, names)) = MMVQ_NORM.iter().find(|(t, _)| *t == w.dtype) else {
            return Err(TensorError::UnsupportedDType {
                op: OP,
                dtype: w.dtype,
            });
        };
        let grid = if prefetch {
            self.mmvq_pf_grid(m, rpc as usize)?
        } else {
            grid_for(m, rpc as usize)?
        };
        let (nb_i, mi, rpc_i) = (
            i32_of(OP, k / w.dtype.block_size())?,
            i32_of(OP, m)?,
            rpc as i32,
        );
        let null = 0u64;
        let f = self.func(names[usize::from(prefetch)])?;
        let mut b = self.launch(f);
        b.arg(&w.buf).arg(&*scratch).arg(&mut product.buf);
        match add {
            Some(a) => b.arg(&a.buf),
            None => b.arg(&null),
        };
        b.arg(&nb_i).arg(&mi).arg(&rpc_i).arg(&tail);
        let config = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (32, MMVQ_WARPS, 1),
            shared_mem_bytes: (m * 4) as u32,
        };
        // SAFETY: w holds m rows of k/block blocks of its type, the scratch x's Q8_1 row (and
        // room for m/32 blocks more: grown above), product, out (and add, normed, residual,
        // sum) m f32, the norm weights m f32 or null (all checked); the counter is one u32,
        // zero between launches; m <= MAX_NORM_AFTER_ROW floats of shared memory.
        unsafe { b.launch(config) }.map_err(driver("launch mmvq + rms_norm"))?;
        if quantize {
            return self.q8_claim(&guard, 1, m).map(Some);
        }
        Ok(None)
    }
}
