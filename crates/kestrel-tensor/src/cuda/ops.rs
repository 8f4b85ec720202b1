//! The CUDA engine's row and elementwise ops: norms, embedding lookups, add/mul/scale,
//! activations, argmax. Each checks shapes on the host (the CPU engine's errors) and enqueues
//! its kernel on the device's stream.

use cudarc::driver::CudaSlice;

use super::engine::{cfg, driver, elementwise_cfg, f32_only, grid_for, i32_of, same_shape};
use super::{CudaDevice, DeviceIds, DeviceTensor, Unary};
use crate::error::{Result, TensorError};
use crate::{DType, Shape};

/// Embedding ids as the two callers hold them: token ids (`u32`) or a device buffer's host
/// copy (`i32`).
#[derive(Clone, Copy)]
enum Ids<'a> {
    U32(&'a [u32]),
    I32(&'a [i32]),
}

impl<'a> Ids<'a> {
    fn len(self) -> usize {
        match self {
            Ids::U32(v) => v.len(),
            Ids::I32(v) => v.len(),
        }
    }

    fn is_empty(self) -> bool {
        self.len() == 0
    }

    fn get(self, i: usize) -> i64 {
        match self {
            Ids::U32(v) => i64::from(v[i]),
            Ids::I32(v) => i64::from(v[i]),
        }
    }

    fn iter(self) -> impl ExactSizeIterator<Item = i64> + Clone + 'a {
        (0..self.len()).map(move |i| self.get(i))
    }
}

/// Threads of an `rms_norm_f32` CTA for rows of `k`: a value each, in whole warps, at most 1024
/// (up to 8 values each in registers beyond that, `RMS_PER_THREAD`; longer rows loop). Short
/// chains matter more than thread count where a step normalizes one row (measured: session
/// 41, H200, against 8 values a thread, SmolLM2-shaped tg128 +22% together with the fused norm +
/// Q8_1 and the 16-warp decode attention). From `k` alone, so a row's bits never depend on how
/// many rows share the launch.
pub(super) fn rms_threads(k: usize) -> u32 {
    let warps = k.div_ceil(32).clamp(1, 32);
    (warps * 32) as u32
}

impl CudaDevice {
    /// `x / sqrt(mean(x²) + eps) * weight` per row.
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn rms_norm(
        &self,
        x: &DeviceTensor,
        weight: Option<&DeviceTensor>,
        eps: f32,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        // The fused form's plain case: `rms_norm_f32`, no residual, no Q8_1.
        self.rms_norm_fused(x, None, weight, eps, out, false)
            .map(|_| ())
    }

    /// `(x - mean) / sqrt(var + eps) * weight + bias` per row.
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn layer_norm(
        &self,
        x: &DeviceTensor,
        weight: Option<&DeviceTensor>,
        bias: Option<&DeviceTensor>,
        eps: f32,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        self.layer_norm_impl(x, weight, bias, eps, out)
    }

    /// `layer_norm_f32` (block 256), shapes checked.
    fn layer_norm_impl(
        &self,
        x: &DeviceTensor,
        weight: Option<&DeviceTensor>,
        bias: Option<&DeviceTensor>,
        eps: f32,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        let name = "layer_norm_f32";
        f32_only(name, x)?;
        f32_only(name, out)?;
        same_shape(name, "out", x, out)?;
        let k = x.shape.row_len();
        for (what, v) in [("weight", weight), ("bias", bias)] {
            if let Some(v) = v {
                f32_only(name, v)?;
                if v.shape.elem_count() != k {
                    return Err(TensorError::LengthMismatch {
                        op: name,
                        what,
                        expected: k,
                        actual: v.shape.elem_count(),
                    });
                }
            }
        }
        let null = 0u64;
        let ki = i32_of(name, k)?;
        let f = self.func(name)?;
        let mut b = self.launch(f);
        b.arg(&x.buf);
        match weight {
            Some(w) => b.arg(&w.buf),
            None => b.arg(&null),
        };
        match bias {
            Some(v) => b.arg(&v.buf),
            None => b.arg(&null),
        };
        b.arg(&mut out.buf).arg(&ki).arg(&eps);
        // SAFETY: x and out hold rows*k f32, weight and bias k f32 or null (checked).
        unsafe { b.launch(cfg(grid_for(x.shape.n_rows(), 1)?, (256, 1))) }
            .map_err(driver("launch norm"))?;
        Ok(())
    }

    /// Embedding lookup: `out` row `i` = `table` row `ids[i]`, as f32.
    ///
    /// # Errors
    /// An id out of range, a dtype without a kernel, shape mismatches.
    pub fn get_rows(
        &self,
        table: &DeviceTensor,
        ids: &[u32],
        out: &mut DeviceTensor,
    ) -> Result<()> {
        self.get_rows_impl(None, table, Ids::U32(ids), out)
    }

    /// [`Self::get_rows`] with the ids in a device buffer the caller wrote (ids are i32 there;
    /// each is checked against the table's rows from the buffer's host copy).
    ///
    /// # Errors
    /// As [`Self::get_rows`], and a negative id.
    pub fn get_rows_ids(
        &self,
        table: &DeviceTensor,
        ids: &DeviceIds,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        self.get_rows_impl(Some(&ids.buf), table, Ids::I32(&ids.host), out)
    }

    fn get_rows_impl(
        &self,
        dev_ids: Option<&CudaSlice<i32>>,
        table: &DeviceTensor,
        ids: Ids<'_>,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda get_rows";
        f32_only(OP, out)?;
        let k = table.shape.row_len();
        let rows = table.shape.n_rows();
        if let Some((index, id)) = ids
            .iter()
            .enumerate()
            .find(|&(_, id)| id < 0 || id >= rows as i64)
        {
            return Err(TensorError::IdOutOfRange {
                op: OP,
                id,
                index,
                rows,
            });
        }
        if out.shape.elem_count() != ids.len() * k {
            return Err(TensorError::ShapeMismatch {
                op: OP,
                what: "out",
                expected: Shape::matrix(ids.len(), k)?,
                actual: out.shape,
            });
        }
        if ids.is_empty() {
            return Ok(());
        }
        let name = match table.dtype {
            DType::F32 => "get_rows_f32",
            DType::F16 => "get_rows_f16",
            DType::BF16 => "get_rows_bf16",
            DType::Q4_0 => "get_rows_q4_0",
            DType::Q4_1 => "get_rows_q4_1",
            DType::Q5_0 => "get_rows_q5_0",
            DType::Q5_1 => "get_rows_q5_1",
            DType::Q8_0 => "get_rows_q8_0",
            DType::Q4K => "get_rows_q4_K",
            DType::Q5K => "get_rows_q5_K",
            DType::Q6K => "get_rows_q6_K",
            dtype => return Err(TensorError::UnsupportedDType { op: OP, dtype }),
        };

        let ki = i32_of(OP, k)?;
        let mut run = |dev_ids: &CudaSlice<i32>| {
            let f = self.func(name)?;
            let mut b = self.launch(f);
            b.arg(&table.buf).arg(dev_ids).arg(&mut out.buf).arg(&ki);
            // SAFETY: ids are in range (checked), out holds ids*k f32.
            unsafe { b.launch(cfg(grid_for(ids.len(), 1)?, (256, 1))) }
                .map_err(driver("launch get_rows"))?;
            Ok(())
        };
        match dev_ids {
            Some(d) => run(d),
            None => self.with_ids(ids.iter().map(|i| i as i32), run),
        }
    }

    /// `out = a + b`, `b` the same size, one row repeated, or one value.
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn add(&self, a: &DeviceTensor, b: &DeviceTensor, out: &mut DeviceTensor) -> Result<()> {
        self.binary("add_f32", a, b, out)
    }

    /// `out = a * b`, `b` the same size, one row repeated, or one value.
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn mul(&self, a: &DeviceTensor, b: &DeviceTensor, out: &mut DeviceTensor) -> Result<()> {
        self.binary("mul_f32", a, b, out)
    }

    fn binary(
        &self,
        name: &'static str,
        a: &DeviceTensor,
        b: &DeviceTensor,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        for t in [a, b] {
            f32_only(name, t)?;
        }
        f32_only(name, out)?;
        same_shape(name, "out", a, out)?;
        let n = a.shape.elem_count();
        let b_len = b.shape.elem_count();
        if b_len != n && b_len != a.shape.row_len() && b_len != 1 {
            return Err(TensorError::ShapeMismatch {
                op: name,
                what: "b",
                expected: a.shape,
                actual: b.shape,
            });
        }
        let (ni, bi) = (n as i64, b_len.max(1) as i64);
        let f = self.func(name)?;
        let mut l = self.launch(f);
        l.arg(&a.buf)
            .arg(&b.buf)
            .arg(&mut out.buf)
            .arg(&ni)
            .arg(&bi);
        // SAFETY: a and out hold n f32, b b_len f32 (checked).
        unsafe { l.launch(elementwise_cfg(n)) }.map_err(driver("launch elementwise"))?;
        Ok(())
    }

    /// `x *= s`.
    ///
    /// # Errors
    /// A dtype mismatch or a launch failure.
    pub fn scale(&self, x: &mut DeviceTensor, s: f32) -> Result<()> {
        f32_only("cuda scale", x)?;
        let n = x.shape.elem_count() as i64;
        let f = self.func("scale_f32")?;
        let mut b = self.launch(f);
        b.arg(&mut x.buf).arg(&n).arg(&s);
        // SAFETY: x holds n f32.
        unsafe { b.launch(elementwise_cfg(n as usize)) }.map_err(driver("launch scale"))?;
        Ok(())
    }

    /// `x = silu(x)`.
    ///
    /// # Errors
    /// A dtype mismatch or a launch failure.
    pub fn silu(&self, x: &mut DeviceTensor) -> Result<()> {
        self.unary("silu_f32", x)
    }

    /// `x = gelu(x)` (tanh form).
    ///
    /// # Errors
    /// A dtype mismatch or a launch failure.
    pub fn gelu(&self, x: &mut DeviceTensor) -> Result<()> {
        self.unary("gelu_f32", x)
    }

    fn unary(&self, name: &'static str, x: &mut DeviceTensor) -> Result<()> {
        f32_only(name, x)?;
        let n = x.shape.elem_count() as i64;
        let f = self.func(name)?;
        let mut b = self.launch(f);
        b.arg(&mut x.buf).arg(&n);
        // SAFETY: x holds n f32.
        unsafe { b.launch(elementwise_cfg(n as usize)) }.map_err(driver("launch unary"))?;
        Ok(())
    }

    /// `out = op(src)`, element by element (the ops of [`Unary`]).
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn unary_op(&self, op: Unary, src: &DeviceTensor, out: &mut DeviceTensor) -> Result<()> {
        const OP: &str = "cuda unary";
        f32_only(OP, src)?;
        f32_only(OP, out)?;
        same_shape(OP, "out", src, out)?;
        let (code, a) = match op {
            Unary::Silu => (0i32, 0f32),
            Unary::Gelu => (1, 0.0),
            Unary::ReluSqr => (2, 0.0),
            Unary::Sigmoid => (3, 0.0),
            Unary::Clamp(limit) => (4, limit),
        };
        let n = src.shape.elem_count();
        let ni = n as i64;
        let f = self.func("unary_from_f32")?;
        let mut b = self.launch(f);
        b.arg(&src.buf)
            .arg(&mut out.buf)
            .arg(&ni)
            .arg(&code)
            .arg(&a);
        // SAFETY: src and out hold n f32 (checked).
        unsafe { b.launch(elementwise_cfg(n)) }.map_err(driver("launch unary"))?;
        Ok(())
    }

    /// `out[r] = a[r] * s[r]`: each row of `a` times the one value of `s`'s row `r`.
    ///
    /// # Errors
    /// Shape or dtype mismatches (`s` one value a row of `a`), a launch failure.
    pub fn mul_row_scalar(
        &self,
        a: &DeviceTensor,
        s: &DeviceTensor,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda mul_row_scalar";
        for t in [a, s, &*out] {
            f32_only(OP, t)?;
        }
        same_shape(OP, "out", a, out)?;
        let rows = a.shape.n_rows();
        if s.shape.elem_count() != rows {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "s",
                expected: rows,
                actual: s.shape.elem_count(),
            });
        }
        let n = a.shape.elem_count();
        let (ni, wi) = (n as i64, a.shape.row_len().max(1) as i64);
        let f = self.func("mul_row_scalar_f32")?;
        let mut b = self.launch(f);
        b.arg(&a.buf)
            .arg(&s.buf)
            .arg(&mut out.buf)
            .arg(&ni)
            .arg(&wi);
        // SAFETY: a and out hold n f32, s one per row of width values (checked).
        unsafe { b.launch(elementwise_cfg(n)) }.map_err(driver("launch mul_row_scalar"))?;
        Ok(())
    }

    /// `out[r] = src[r][offset .. offset + out's row length]` for each row.
    ///
    /// # Errors
    /// Columns past `src`'s rows, row counts that differ, dtype mismatches, a launch failure.
    pub fn slice_cols(
        &self,
        src: &DeviceTensor,
        offset: usize,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda slice";
        f32_only(OP, src)?;
        f32_only(OP, out)?;
        let (rows, in_width, width) =
            (src.shape.n_rows(), src.shape.row_len(), out.shape.row_len());
        if out.shape.n_rows() != rows || offset.checked_add(width).is_none_or(|e| e > in_width) {
            return Err(TensorError::ShapeMismatch {
                op: OP,
                what: "out",
                expected: Shape::matrix(rows, in_width.saturating_sub(offset))?,
                actual: out.shape,
            });
        }
        let n = rows * width;
        let args = [rows, in_width, width, offset].map(|v| v as i64);
        let f = self.func("slice_cols_f32")?;
        let mut b = self.launch(f);
        b.arg(&src.buf).arg(&mut out.buf);
        for v in &args {
            b.arg(v);
        }
        // SAFETY: src holds rows*in_width f32, out rows*width, offset + width <= in_width.
        unsafe { b.launch(elementwise_cfg(n)) }.map_err(driver("launch slice"))?;
        Ok(())
    }

    /// Values `offset .. offset + w` of each of the `n_head` heads of `head_in` values in a row
    /// of `src` (`w` = out's row length / `n_head`): one part of every head.
    ///
    /// # Errors
    /// Parts past a head, rows that do not hold `n_head` heads, dtype mismatches, a launch
    /// failure.
    pub fn head_slice(
        &self,
        src: &DeviceTensor,
        (n_head, head_in, offset): (usize, usize, usize),
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda head_slice";
        f32_only(OP, src)?;
        f32_only(OP, out)?;
        let rows = src.shape.n_rows();
        let w = out.shape.row_len() / n_head.max(1);
        if n_head == 0
            || src.shape.row_len() != n_head * head_in
            || out.shape.row_len() != n_head * w
            || out.shape.n_rows() != rows
            || offset + w > head_in
        {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "rows of n_head heads, and a part inside each head",
            });
        }
        let args = [rows, n_head, head_in, offset, w].map(|v| v as i64);
        let f = self.func("head_slice_f32")?;
        let mut b = self.launch(f);
        b.arg(&src.buf).arg(&mut out.buf);
        for v in &args {
            b.arg(v);
        }
        // SAFETY: src holds rows*n_head*head_in f32, out rows*n_head*w, offset + w <= head_in.
        unsafe { b.launch(elementwise_cfg(rows * n_head * w)) }
            .map_err(driver("launch head_slice"))?;
        Ok(())
    }

    /// Each of `n_head` output heads: head `h % heads[0]` of `a`, then head `h % heads[1]` of
    /// `b` (`heads[i]`: `n_head` or 1, an input of one head repeated for every head).
    ///
    /// # Errors
    /// Head counts other than `n_head` or 1, rows that do not split into heads, row counts or
    /// an output width that differ, dtype mismatches, a launch failure.
    pub fn head_concat(
        &self,
        (a, b): (&DeviceTensor, &DeviceTensor),
        n_head: usize,
        heads: [usize; 2],
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda head_concat";
        for t in [a, b, &*out] {
            f32_only(OP, t)?;
        }
        let rows = a.shape.n_rows();
        let ok_heads = heads.iter().all(|&h| h == n_head || h == 1) && n_head > 0;
        let (wa, wb) = (
            a.shape.row_len() / heads[0].max(1),
            b.shape.row_len() / heads[1].max(1),
        );
        if !ok_heads
            || a.shape.row_len() != heads[0] * wa
            || b.shape.row_len() != heads[1] * wb
            || b.shape.n_rows() != rows
            || out.shape.n_rows() != rows
            || out.shape.row_len() != n_head * (wa + wb)
        {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "inputs of n_head heads or one, rows that split into heads, out n_head heads of both",
            });
        }
        let args = [rows, n_head, heads[0], heads[1], wa, wb].map(|v| v as i64);
        let f = self.func("head_concat_f32")?;
        let mut l = self.launch(f);
        l.arg(&a.buf).arg(&b.buf).arg(&mut out.buf);
        for v in &args {
            l.arg(v);
        }
        // SAFETY: a holds rows*heads[0]*wa f32, b rows*heads[1]*wb, out rows*n_head*(wa+wb).
        unsafe { l.launch(elementwise_cfg(rows * n_head * (wa + wb))) }
            .map_err(driver("launch head_concat"))?;
        Ok(())
    }

    /// `out = silu(gate) * up`.
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn swiglu(
        &self,
        gate: &DeviceTensor,
        up: &DeviceTensor,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        self.gated("swiglu_f32", gate, up, out)
    }

    /// `out = gelu(gate) * up`.
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn geglu(
        &self,
        gate: &DeviceTensor,
        up: &DeviceTensor,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        self.gated("geglu_f32", gate, up, out)
    }

    fn gated(
        &self,
        name: &'static str,
        gate: &DeviceTensor,
        up: &DeviceTensor,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        for t in [gate, up] {
            f32_only(name, t)?;
        }
        f32_only(name, out)?;
        same_shape(name, "up", gate, up)?;
        same_shape(name, "out", gate, out)?;
        let n = gate.shape.elem_count() as i64;
        let f = self.func(name)?;
        let mut b = self.launch(f);
        b.arg(&gate.buf).arg(&up.buf).arg(&mut out.buf).arg(&n);
        // SAFETY: all three hold n f32 (checked).
        unsafe { b.launch(elementwise_cfg(n as usize)) }.map_err(driver("launch gated"))?;
        Ok(())
    }

    /// Per-row argmax (ties to the lowest index), copied back into `out` (waits for the stream).
    ///
    /// # Errors
    /// A dtype or length mismatch, a driver error.
    pub fn argmax(&self, x: &DeviceTensor, out: &mut [u32]) -> Result<()> {
        const OP: &str = "cuda argmax";
        f32_only(OP, x)?;
        let rows = x.shape.n_rows();
        if out.len() != rows {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "out",
                expected: rows,
                actual: out.len(),
            });
        }
        let mut dev = self
            .stream
            .alloc_zeros::<u32>(rows.max(1))
            .map_err(|e| self.alloc_error(rows * 4, e))?;
        let ki = i32_of(OP, x.shape.row_len())?;
        let f = self.func("argmax_f32")?;
        let mut b = self.launch(f);
        b.arg(&x.buf).arg(&mut dev).arg(&ki);
        // SAFETY: x holds rows*k f32, dev rows u32.
        unsafe { b.launch(cfg(grid_for(rows, 1)?, (256, 1))) }.map_err(driver("launch argmax"))?;
        let host = self
            .stream
            .clone_dtoh(&dev)
            .map_err(driver("cuMemcpyDtoH"))?;
        self.stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))?;
        out.copy_from_slice(&host[..rows]);
        Ok(())
    }

    /// Per-row argmax of `x` (as [`Self::argmax`]) into `out`'s device buffer, then its host
    /// copy (`out.as_slice()`, one id a row; waits for the stream): greedy decoding copies back
    /// 4 bytes a row instead of a vocabulary of logits. Allocates nothing once `out` has held
    /// as many rows.
    ///
    /// # Errors
    /// A dtype mismatch, more rows than `out` holds, a driver error.
    pub fn argmax_ids(&self, x: &DeviceTensor, out: &mut DeviceIds) -> Result<()> {
        const OP: &str = "cuda argmax";
        f32_only(OP, x)?;
        let rows = x.shape.n_rows();
        if rows > out.buf.len() {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "out",
                expected: rows,
                actual: out.buf.len(),
            });
        }
        out.host.resize(rows, 0);
        if rows == 0 {
            return Ok(());
        }
        let ki = i32_of(OP, x.shape.row_len())?;
        let f = self.func("argmax_f32")?;
        let mut b = self.launch(f);
        b.arg(&x.buf).arg(&mut out.buf).arg(&ki);
        // SAFETY: x holds rows*k f32, out at least rows i32 (the kernel writes u32 ids below
        // 2^31: a row's length is an i32).
        unsafe { b.launch(cfg(grid_for(rows, 1)?, (256, 1))) }.map_err(driver("launch argmax"))?;
        self.stream
            .memcpy_dtoh(&out.buf.slice(0..rows), &mut out.host[..rows])
            .map_err(driver("cuMemcpyDtoH"))?;
        self.stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))
    }

    /// `x = cap * tanh(x / cap)`.
    ///
    /// # Errors
    /// A dtype mismatch, a cap that is not positive, a launch failure.
    pub fn softcap(&self, x: &mut DeviceTensor, cap: f32) -> Result<()> {
        f32_only("cuda softcap", x)?;
        if cap.is_nan() || cap <= 0.0 {
            return Err(TensorError::InvalidParam {
                op: "cuda softcap",
                why: "the cap must be positive",
            });
        }
        let n = x.shape.elem_count() as i64;
        let f = self.func("softcap_f32")?;
        let mut b = self.launch(f);
        b.arg(&mut x.buf).arg(&n).arg(&cap);
        // SAFETY: x holds n f32.
        unsafe { b.launch(elementwise_cfg(n as usize)) }.map_err(driver("launch softcap"))?;
        Ok(())
    }

    /// `x = gelu(x)`, the exact (erf) form.
    ///
    /// # Errors
    /// A dtype mismatch or a launch failure.
    pub fn gelu_erf(&self, x: &mut DeviceTensor) -> Result<()> {
        self.unary("gelu_erf_f32", x)
    }
}

#[cfg(test)]
mod tests {
    use super::rms_threads;

    #[test]
    fn rms_norm_threads_hold_a_row_in_whole_warps() {
        // A value a thread up to 1024 threads; rows past 1024 values share them (past 8192
        // values the kernel loops).
        assert_eq!(rms_threads(576), 576);
        assert_eq!(rms_threads(640), 640);
        assert_eq!(rms_threads(64), 64);
        assert_eq!(rms_threads(1), 32);
        assert_eq!(rms_threads(4096), 1024);
        assert_eq!(rms_threads(16_384), 1024);
    }
}
