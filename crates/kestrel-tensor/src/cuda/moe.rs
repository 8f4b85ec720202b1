//! What a mixture-of-experts FFN needs on the GPU besides matmuls and gathers
//! (`kernels/elementwise.cu`): gpt-oss's clamped SwiGLU, an expert's output rows scattered
//! weighted into their (token, slot) rows, a token's slots summed in order, and small f32
//! values (the routing weights) written into a device buffer the caller keeps.

use super::engine::{driver, elementwise_cfg, f32_only, i32_of, same_shape};
use super::{CudaDevice, DeviceIds, DeviceTensor};
use crate::error::{Result, TensorError};

impl CudaDevice {
    /// `out = swiglu_oai(gate, up)`: gpt-oss's activation, `x = min(g, 7)`, `y = clamp(u, ±7)`,
    /// `x · sigmoid(1.702 x) · (y + 1)`.
    ///
    /// # Errors
    /// Shape or dtype mismatches, a launch failure.
    pub fn swiglu_oai(
        &self,
        gate: &DeviceTensor,
        up: &DeviceTensor,
        out: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda swiglu_oai";
        for t in [gate, up, &*out] {
            f32_only(OP, t)?;
        }
        same_shape(OP, "up", gate, up)?;
        same_shape(OP, "out", gate, out)?;
        let n = gate.shape.elem_count();
        let ni = n as i64;
        let f = self.func("swiglu_oai_f32")?;
        let mut b = self.launch(f);
        b.arg(&gate.buf).arg(&up.buf).arg(&mut out.buf).arg(&ni);
        // SAFETY: gate, up and out hold n f32 (checked).
        unsafe { b.launch(elementwise_cfg(n)) }.map_err(driver("launch swiglu_oai"))?;
        Ok(())
    }

    /// Row `i` of `src` times `w[i]` into row `dst_rows[i]` of `dst` (rows of the same width).
    ///
    /// # Errors
    /// Widths that differ, fewer weights or row indices than rows, a row outside `dst`, dtype
    /// mismatches, a launch failure.
    pub fn scatter_rows_scaled(
        &self,
        src: &DeviceTensor,
        dst_rows: &DeviceIds,
        w: &DeviceTensor,
        dst: &mut DeviceTensor,
    ) -> Result<()> {
        const OP: &str = "cuda scatter_rows_scaled";
        for t in [src, w, &*dst] {
            f32_only(OP, t)?;
        }
        let (n, width) = (src.shape.n_rows(), src.shape.row_len());
        if dst.shape.row_len() != width {
            return Err(TensorError::ShapeMismatch {
                op: OP,
                what: "dst",
                expected: src.shape,
                actual: dst.shape,
            });
        }
        for (what, have) in [("rows", dst_rows.host.len()), ("w", w.shape.elem_count())] {
            if have < n {
                return Err(TensorError::LengthMismatch {
                    op: OP,
                    what,
                    expected: n,
                    actual: have,
                });
            }
        }
        let rows = dst.shape.n_rows();
        if let Some((index, &r)) = dst_rows.host[..n]
            .iter()
            .enumerate()
            .find(|(_, &r)| r < 0 || r as usize >= rows)
        {
            return Err(TensorError::IdOutOfRange {
                op: OP,
                index,
                id: i64::from(r),
                rows,
            });
        }
        let (ni, wi) = (n as i64, width as i64);
        let f = self.func("scatter_rows_scaled_f32")?;
        let mut b = self.launch(f);
        b.arg(&src.buf)
            .arg(&dst_rows.buf)
            .arg(&w.buf)
            .arg(&mut dst.buf)
            .arg(&ni)
            .arg(&wi);
        // SAFETY: src holds n rows of width f32, dst_rows and w n values each, every row index
        // inside dst (checked).
        unsafe { b.launch(elementwise_cfg(n * width)) }.map_err(driver("launch scatter_rows"))?;
        Ok(())
    }

    /// `out[r] = outs[r·k] + outs[r·k + 1] + …`, the `k` slot rows of each row added in order.
    ///
    /// # Errors
    /// `outs` not `k` rows per row of `out`, dtype mismatches, a launch failure.
    pub fn sum_slots(&self, outs: &DeviceTensor, k: usize, out: &mut DeviceTensor) -> Result<()> {
        const OP: &str = "cuda sum_slots";
        f32_only(OP, outs)?;
        f32_only(OP, out)?;
        let (rows, width) = (out.shape.n_rows(), out.shape.row_len());
        if k == 0 || outs.shape.row_len() != width || outs.shape.n_rows() < rows * k {
            return Err(TensorError::ShapeMismatch {
                op: OP,
                what: "outs",
                expected: out.shape,
                actual: outs.shape,
            });
        }
        let (ri, ki, wi) = (rows as i64, i32_of(OP, k)?, width as i64);
        let f = self.func("sum_slots_f32")?;
        let mut b = self.launch(f);
        b.arg(&outs.buf)
            .arg(&mut out.buf)
            .arg(&ri)
            .arg(&ki)
            .arg(&wi);
        // SAFETY: outs holds rows*k rows of width f32, out rows rows (checked).
        unsafe { b.launch(elementwise_cfg(rows * width)) }.map_err(driver("launch sum_slots"))?;
        Ok(())
    }

    /// Writes `values` into the front of the F32 tensor `t` (in stream order).
    ///
    /// # Errors
    /// More values than `t` holds, a tensor that is not F32, a driver error.
    pub fn write_f32(&self, t: &mut DeviceTensor, values: &[f32]) -> Result<()> {
        f32_only("cuda write_f32", t)?;
        if values.len() > t.shape.elem_count() {
            return Err(TensorError::LengthMismatch {
                op: "cuda write_f32",
                what: "values",
                expected: t.shape.elem_count(),
                actual: values.len(),
            });
        }
        if values.is_empty() {
            return Ok(());
        }
        // SAFETY: f32 has no padding and u8 alignment 1: the values viewed as their bytes.
        let raw =
            unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), values.len() * 4) };
        self.stream
            .memcpy_htod(raw, &mut t.buf.slice_mut(0..raw.len()))
            .map_err(driver("cuMemcpyHtoD"))
    }
}
