//! Fused forms of launches a decode step runs back to back (issue 24: fewer, fuller kernels):
//! the residual add with the RMS norm after it (and with a sandwich norm before it), the Q8_1 quantization of a norm's or a gated
//! activation's output (the next matvec's input) in the same launch, a residual added in a
//! quantized matvec's epilogue, up to three matvecs of one activation row in one launch (q/k/v,
//! gate/up), and scale / soft cap / exact GELU reading their input from another buffer (a copy
//! saved). Each computes every value by the same float operations as the
//! launches it replaces, so the results are the same bits (`kernels/host/fused_check.cpp` and
//! `mmvq_check.cpp` on the CPU, the `cuda_kernels` tests on a GPU).

use cudarc::driver::{DevicePtr, DevicePtrMut};

use super::engine::{
    cfg, driver, elementwise_cfg, f32_only, f32_vector, grid_for, i32_of, no_scratch_err,
    same_shape,
};
use super::matvec::{mmvq_mixed_name, mmvq_multi_name, mmvq_rows_per_cta, MmvqSegs, MMVQ_WARPS};
use super::ops::rms_threads;
use super::{CudaDevice, DeviceTensor, Q8Ticket};
use crate::error::{Result, TensorError};
use crate::{DType, Shape};

/// A gated activation `act(gate) * up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Glu {
    /// `silu(gate) * up`.
    SwiGlu,
    /// `gelu(gate) * up` (tanh form).
    GeGlu,
}

impl CudaDevice {
    /// `out = x / sqrt(mean(x²) + eps) * weight` per row, with two optional fusions: `residual
    /// = (r, sum)` adds `r` to `x` first and writes that sum to `sum` too (a residual add and
    /// the norm after it), and `quantize` also leaves `out` as Q8_1 in the matvec scratch,
    /// returning the ticket a following [`Self::matmul_reusing`] of `out` takes to skip its
    /// own quantization. Quantizes only where it can: rows a multiple of 32 long (`None`
    /// otherwise, and the matmul quantizes as usual).
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn rms_norm_fused(
        &self,
        x: &DeviceTensor,
        residual: Option<(&DeviceTensor, &mut DeviceTensor)>,
        weight: Option<&DeviceTensor>,
        eps: f32,
        out: &mut DeviceTensor,
        quantize: bool,
    ) -> Result<Option<Q8Ticket>> {
        const OP: &str = "cuda rms_norm (fused)";
        f32_only(OP, x)?;
        f32_only(OP, out)?;
        same_shape(OP, "out", x, out)?;
        let (k, n) = (x.shape.row_len(), x.shape.n_rows());
        if let Some(w) = weight {
            f32_vector(OP, "weight", w, k)?;
        }
        if let Some((r, sum)) = &residual {
            f32_only(OP, r)?;
            f32_only(OP, sum)?;
            same_shape(OP, "residual", x, r)?;
            same_shape(OP, "sum", x, sum)?;
        }
        if n == 0 {
            return Ok(None);
        }
        let quantize = quantize && k.is_multiple_of(32);
        let name = match (residual.is_some(), quantize) {
            (false, false) => "rms_norm_f32",
            (false, true) => "rms_norm_q8_1_f32",
            (true, false) => "add_rms_norm_f32",
            (true, true) => "add_rms_norm_q8_1_f32",
        };
        let mut scratch = match quantize {
            true => Some(self.q8_scratch(OP, n, k)?),
            false => None,
        };
        let null = 0u64;
        let ki = i32_of(OP, k)?;
        let f = self.func(name)?;
        let mut b = self.launch(f);
        b.arg(&x.buf);
        let mut residual = residual;
        if let Some((r, sum)) = residual.as_mut() {
            b.arg(&r.buf).arg(&mut sum.buf);
        }
        match weight {
            Some(w) => b.arg(&w.buf),
            None => b.arg(&null),
        };
        b.arg(&mut out.buf);
        let mut ticket = None;
        if let Some((guard, t)) = scratch.as_mut() {
            let q = guard.as_mut().ok_or(TensorError::InvalidParam {
                op: OP,
                why: "no Q8_1 scratch",
            })?;
            b.arg(q);
            ticket = Some(*t);
        }
        b.arg(&ki).arg(&eps);
        // SAFETY: x, out (and r, sum) hold n*k f32, the weight k f32 or null (checked); the
        // scratch, when passed, n rows of k/32 Q8_1 blocks (grown by q8_scratch).
        unsafe { b.launch(cfg(grid_for(n, 1)?, (rms_threads(k), 1))) }
            .map_err(driver("launch fused rms_norm"))?;
        Ok(ticket)
    }

    /// A sandwich norm and the residual add and norm after it in one launch (Gemma's post-norms):
    /// `normed = rms_norm(o) * w1`, `sum = x + normed`, `out = rms_norm(sum) * w2`, the bits of
    /// [`Self::rms_norm_fused`] twice (the second with the residual). `quantize` also leaves
    /// `out` as Q8_1, as there.
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    #[allow(clippy::too_many_arguments)]
    pub fn norm_add_rms_norm(
        &self,
        (o, w1, eps1): (&DeviceTensor, Option<&DeviceTensor>, f32),
        normed: &mut DeviceTensor,
        (x, sum): (&DeviceTensor, &mut DeviceTensor),
        (w2, eps2): (Option<&DeviceTensor>, f32),
        out: &mut DeviceTensor,
        quantize: bool,
    ) -> Result<Option<Q8Ticket>> {
        const OP: &str = "cuda norm + add + rms_norm";
        f32_only(OP, o)?;
        for (what, t) in [
            ("normed", &*normed),
            ("x", x),
            ("sum", &*sum),
            ("out", &*out),
        ] {
            f32_only(OP, t)?;
            same_shape(OP, what, o, t)?;
        }
        let (k, n) = (o.shape.row_len(), o.shape.n_rows());
        for w in [w1, w2].into_iter().flatten() {
            f32_vector(OP, "weight", w, k)?;
        }
        if n == 0 {
            return Ok(None);
        }
        let quantize = quantize && k.is_multiple_of(32);
        let mut scratch = match quantize {
            true => Some(self.q8_scratch(OP, n, k)?),
            false => None,
        };
        let null = 0u64;
        let ki = i32_of(OP, k)?;
        let f = self.func(if quantize {
            "norm_add_rms_norm_q8_1_f32"
        } else {
            "norm_add_rms_norm_f32"
        })?;
        let mut b = self.launch(f);
        b.arg(&o.buf);
        match w1 {
            Some(w) => b.arg(&w.buf),
            None => b.arg(&null),
        };
        b.arg(&mut normed.buf).arg(&x.buf).arg(&mut sum.buf);
        match w2 {
            Some(w) => b.arg(&w.buf),
            None => b.arg(&null),
        };
        b.arg(&mut out.buf);
        let mut ticket = None;
        if let Some((guard, t)) = scratch.as_mut() {
            let q = guard.as_mut().ok_or_else(no_scratch_err)?;
            b.arg(q);
            ticket = Some(*t);
        }
        b.arg(&ki).arg(&eps1).arg(&eps2);
        // SAFETY: o, normed, x, sum and out hold n*k f32, the weights k f32 or null (checked);
        // the scratch, when passed, n rows of k/32 Q8_1 blocks (grown by q8_scratch).
        unsafe { b.launch(cfg(grid_for(n, 1)?, (rms_threads(k), 1))) }
            .map_err(driver("launch norm + add + rms_norm"))?;
        Ok(ticket)
    }

    /// `out = act(gate) * up` that also leaves `out` as Q8_1 in the matvec scratch, returning
    /// the ticket for the next [`Self::matmul_reusing`] of `out`; without `quantize`, or for
    /// rows not a multiple of 32 long, the plain kernel (`None`).
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn glu_fused(
        &self,
        glu: Glu,
        gate: &DeviceTensor,
        up: &DeviceTensor,
        out: &mut DeviceTensor,
        quantize: bool,
    ) -> Result<Option<Q8Ticket>> {
        const OP: &str = "cuda glu (fused)";
        let k = gate.shape.row_len();
        if !quantize || !k.is_multiple_of(32) {
            match glu {
                Glu::SwiGlu => self.swiglu(gate, up, out)?,
                Glu::GeGlu => self.geglu(gate, up, out)?,
            }
            return Ok(None);
        }
        for t in [gate, up] {
            f32_only(OP, t)?;
        }
        f32_only(OP, out)?;
        same_shape(OP, "up", gate, up)?;
        same_shape(OP, "out", gate, out)?;
        let n = gate.shape.n_rows();
        if n == 0 {
            return Ok(None);
        }
        let nblocks = n * (k / 32);
        let (mut guard, ticket) = self.q8_scratch(OP, n, k)?;
        let q = guard.as_mut().ok_or(TensorError::InvalidParam {
            op: OP,
            why: "no Q8_1 scratch",
        })?;
        let name = match glu {
            Glu::SwiGlu => "swiglu_q8_1_f32",
            Glu::GeGlu => "geglu_q8_1_f32",
        };
        let nb = i32_of(OP, nblocks)?;
        let f = self.func(name)?;
        let mut b = self.launch(f);
        b.arg(&gate.buf)
            .arg(&up.buf)
            .arg(&mut out.buf)
            .arg(q)
            .arg(&nb);
        // SAFETY: gate, up and out hold n*k f32 (checked), the scratch n*k/32 Q8_1 blocks.
        unsafe { b.launch(cfg(grid_for(nblocks, 8)?, (256, 1))) }
            .map_err(driver("launch fused glu"))?;
        Ok(Some(ticket))
    }

    /// `out = x · wᵀ + add` with the add in the quantized matvec's epilogue (one launch, or
    /// two where `x` is not yet quantized): for weights and row counts where
    /// [`Self::matvec_quantized`] holds. `ticket` as [`Self::matmul_reusing`].
    ///
    /// # Errors
    /// As [`Self::matmul`]; `add` not the shape of `out`; a weight or row count the quantized
    /// matvec does not take.
    pub fn matmul_add_reusing(
        &self,
        x: &DeviceTensor,
        w: &DeviceTensor,
        add: &DeviceTensor,
        out: &mut DeviceTensor,
        ticket: Option<Q8Ticket>,
    ) -> Result<Option<Q8Ticket>> {
        self.matmul_epilogue(x, w, out, ticket, Some(add))
    }

    /// Whether [`Self::matmul_multi_reusing`] takes `n` activation rows against weights of
    /// these types: one row, two or three weights of one quantized type, or three whose first
    /// two share a type and whose third pairs with it in [`super::MIXED_MULTI_TYPES`].
    pub fn matvec_multi_applies(&self, dtypes: &[DType], n: usize) -> bool {
        n == 1
            && (2..=3).contains(&dtypes.len())
            && multi_kernel(dtypes, false).is_some()
            && dtypes.iter().all(|&d| self.matvec_quantized(d, n))
    }

    /// `out = x · wᵀ` for each (weight, output) pair of `first`, `second` and `third` (two or
    /// three weights of one quantized type read by one activation row: a layer's q/k/v or
    /// gate/up; or q/k/v with v of the type [`super::MIXED_MULTI_TYPES`] pairs with q's) in one
    /// launch, plus the quantization of `x` unless `ticket` still names it:
    /// the same values as one [`Self::matmul_reusing`] per weight (each row of the launch
    /// belongs to one weight and reduces as it would alone). Allocates nothing.
    ///
    /// # Errors
    /// What [`Self::matvec_multi_applies`] refuses, shape mismatches, a launch failure.
    pub fn matmul_multi_reusing(
        &self,
        x: &DeviceTensor,
        first: (&DeviceTensor, &mut DeviceTensor),
        second: (&DeviceTensor, &mut DeviceTensor),
        third: Option<(&DeviceTensor, &mut DeviceTensor)>,
        ticket: Option<Q8Ticket>,
    ) -> Result<Option<Q8Ticket>> {
        const OP: &str = "cuda matmul (multi)";
        f32_only(OP, x)?;
        let n = x.shape.n_rows();
        let dtype = first.0.dtype;
        let types = [
            dtype,
            second.0.dtype,
            third.as_ref().map_or(dtype, |t| t.0.dtype),
        ];
        if !self.matvec_multi_applies(&types, n) {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "two or three weights of one quantized type and one activation row",
            });
        }
        let k = x.shape.row_len();
        let wblock = dtype.block_size();
        if !k.is_multiple_of(wblock) {
            return Err(TensorError::PartialBlock {
                dtype,
                row_len: k,
                block_size: wblock,
            });
        }
        let mut pairs = [Some(first), Some(second), third];
        let used = 2 + usize::from(pairs[2].is_some());
        let (segs, total) = self.multi_segs(OP, &mut pairs, k)?;
        let (mut guard, issued) = self.q8_input(x, ticket, 1, k)?;
        let scratch = guard.as_mut().ok_or_else(no_scratch_err)?;
        let nb_i = i32_of(OP, k / wblock)?;
        let rpc = mmvq_rows_per_cta();
        let prefetch = self.mmvq_prefetch();
        let name = multi_kernel(&types[..used], prefetch)
            .ok_or(TensorError::UnsupportedDType { op: OP, dtype })?;
        let grid = if prefetch {
            self.mmvq_pf_grid(total, rpc as usize)?
        } else {
            grid_for(total, rpc as usize)?
        };
        let f = self.func(name)?;
        let mut b = self.launch(f);
        let rpc_i = rpc as i32;
        b.arg(&segs).arg(&*scratch).arg(&nb_i).arg(&rpc_i);
        // SAFETY: each weight holds its m rows of k/block blocks of `dtype`, each output m f32,
        // the scratch one row of Q8_1 blocks of x (all checked or made above); the kernel
        // reads and writes only those, a row of the launch belonging to one weight.
        unsafe { b.launch(cfg(grid, (32, MMVQ_WARPS))) }.map_err(driver("launch mmvq multi"))?;
        Ok(issued)
    }

    /// The segments of a multi-weight matvec launch over (weight, output) `pairs` of rows of
    /// `k` values (each weight's shape and output checked), and their rows in all.
    pub(super) fn multi_segs(
        &self,
        op: &'static str,
        pairs: &mut [Option<(&DeviceTensor, &mut DeviceTensor)>; 3],
        k: usize,
    ) -> Result<(MmvqSegs, usize)> {
        let mut segs = MmvqSegs {
            w: [0; 3],
            out: [0; 3],
            m: [0; 3],
            pad: 0,
        };
        let mut total = 0;
        for (i, (w, out)) in pairs.iter_mut().flatten().enumerate() {
            f32_only(op, out)?;
            let m = w.shape.n_rows();
            if w.shape.row_len() != k || out.shape.elem_count() != m {
                return Err(TensorError::ShapeMismatch {
                    op,
                    what: "weight or output",
                    expected: Shape::matrix(m, k)?,
                    actual: w.shape,
                });
            }
            // Event tracking is off for every context (engine.rs): the guards record nothing.
            segs.w[i] = w.buf.device_ptr(&self.stream).0;
            segs.out[i] = out.buf.device_ptr_mut(&self.stream).0;
            segs.m[i] = i32_of(op, m)?;
            total += m;
        }
        Ok((segs, total))
    }

    /// `out = src * s` (one launch where a copy and [`Self::scale`] took two; the same bits).
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn scale_from(&self, src: &DeviceTensor, out: &mut DeviceTensor, s: f32) -> Result<()> {
        self.unary_from("scale_from_f32", src, out, Some(s))
    }

    /// `out = cap * tanh(src / cap)` (as [`Self::softcap`], from another buffer).
    ///
    /// # Errors
    /// A cap that is not positive, shape or dtype mismatches, a launch failure.
    pub fn softcap_from(&self, src: &DeviceTensor, out: &mut DeviceTensor, cap: f32) -> Result<()> {
        if cap.is_nan() || cap <= 0.0 {
            return Err(TensorError::InvalidParam {
                op: "cuda softcap",
                why: "the cap must be positive",
            });
        }
        self.unary_from("softcap_from_f32", src, out, Some(cap))
    }

    /// `out = gelu(src)`, the exact (erf) form (as [`Self::gelu_erf`], from another buffer).
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn gelu_erf_from(&self, src: &DeviceTensor, out: &mut DeviceTensor) -> Result<()> {
        self.unary_from("gelu_erf_from_f32", src, out, None)
    }

    /// Llama 4's attention temperature: `out = src * f(pos)` per token row of `width` values,
    /// `f(pos) = ln(floor((pos + offset) / floor_scale) + 1) · scale + 1` (the division in f32,
    /// the rest in f64, as the CPU engine), the tokens' positions from `positions` (a device
    /// buffer the caller wrote, so a CUDA graph replays it).
    ///
    /// # Errors
    /// A `floor_scale` of 0, `src`/`out` not `positions.len() × width` f32, a launch failure.
    #[allow(clippy::too_many_arguments)]
    pub fn attn_temperature_ids_from(
        &self,
        src: &DeviceTensor,
        out: &mut DeviceTensor,
        positions: &super::DeviceIds,
        width: usize,
        floor_scale: u32,
        scale: f32,
        offset: f32,
    ) -> Result<()> {
        const OP: &str = "attn_temp_from_f32";
        if floor_scale == 0 {
            return Err(TensorError::InvalidParam {
                op: "cuda attention temperature",
                why: "the floor scale must be positive",
            });
        }
        f32_only(OP, src)?;
        f32_only(OP, out)?;
        same_shape(OP, "out", src, out)?;
        let want = positions.len() * width;
        if src.shape.elem_count() != want {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "src",
                expected: want,
                actual: src.shape.elem_count(),
            });
        }
        if want == 0 {
            return Ok(());
        }
        let (n, w) = (want as i64, width as i64);
        let fs = floor_scale as f32;
        let f = self.func(OP)?;
        let mut b = self.launch(f);
        b.arg(&src.buf)
            .arg(&mut out.buf)
            .arg(&positions.buf)
            .arg(&n)
            .arg(&w)
            .arg(&fs)
            .arg(&scale)
            .arg(&offset);
        // SAFETY: src and out hold n = tokens × width f32, positions one i32 per token (checked).
        unsafe { b.launch(elementwise_cfg(want)) }
            .map_err(driver("launch attention temperature"))?;
        Ok(())
    }

    fn unary_from(
        &self,
        name: &'static str,
        src: &DeviceTensor,
        out: &mut DeviceTensor,
        param: Option<f32>,
    ) -> Result<()> {
        f32_only(name, src)?;
        f32_only(name, out)?;
        same_shape(name, "out", src, out)?;
        let n = src.shape.elem_count() as i64;
        let f = self.func(name)?;
        let mut b = self.launch(f);
        b.arg(&src.buf).arg(&mut out.buf).arg(&n);
        if let Some(p) = &param {
            b.arg(p);
        }
        // SAFETY: src and out hold n f32 (checked).
        unsafe { b.launch(elementwise_cfg(n as usize)) }.map_err(driver("launch unary"))?;
        Ok(())
    }
}

/// The multi-weight matvec kernel for these weight types (two or three of one type, or
/// [`super::MIXED_MULTI_TYPES`]' q/k type twice and its v type), if there is one.
fn multi_kernel(dtypes: &[DType], prefetch: bool) -> Option<&'static str> {
    match *dtypes {
        [a, b] | [a, b, _] if a != b => None,
        [a, _] => mmvq_multi_name(a, prefetch),
        [a, _, c] if c == a => mmvq_multi_name(a, prefetch),
        [a, _, c] => mmvq_mixed_name(a, c, prefetch),
        _ => None,
    }
}
