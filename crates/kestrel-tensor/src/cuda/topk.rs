//! Top-k of output rows on the device (`kernels/topk.cu`), so top-k sampling copies back `k`
//! (id, logit) pairs a row instead of the whole row: the sampler's own top-k candidates, in its
//! order (NaN and -inf never; larger logits first in `total_cmp`'s order; ties by lower id), so
//! the host sampler goes on from them and draws what it would have drawn from the row.

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::engine::{driver, f32_only, i32_of, CudaDevice, DeviceTensor};
use crate::error::{Result, TensorError};

/// Most candidates [`CudaDevice::top_k`] keeps a row (`TOPK_MAX` in kernels/topk.cu).
pub const MAX_TOP_K: usize = 256;

/// Threads of a `topk_f32` CTA (`TOPK_THREADS`).
const TOPK_THREADS: u32 = 1024;

/// Room on the device for the top `k` candidates of up to `rows` rows, with the host copies
/// the last [`CudaDevice::top_k`] left.
pub struct DeviceTopK {
    ids: CudaSlice<u32>,
    vals: CudaSlice<f32>,
    counts: CudaSlice<i32>,
    host_ids: Vec<u32>,
    host_vals: Vec<f32>,
    host_counts: Vec<i32>,
    rows: usize,
    k: usize,
}

impl DeviceTopK {
    /// Row `row`'s candidates from the last [`CudaDevice::top_k`]: ids and logits, best first
    /// (fewer than `k` when the row had fewer candidates; empty past the rows it ran).
    pub fn row(&self, row: usize) -> (&[u32], &[f32]) {
        let Some(&n) = self.host_counts.get(row) else {
            return (&[], &[]);
        };
        let at = row * self.k;
        let n = usize::try_from(n).unwrap_or(0).min(self.k);
        (&self.host_ids[at..at + n], &self.host_vals[at..at + n])
    }

    /// Rows the last [`CudaDevice::top_k`] ran.
    pub fn rows(&self) -> usize {
        self.host_counts.len()
    }

    /// Most rows it holds.
    pub fn capacity(&self) -> usize {
        self.rows
    }

    /// Candidates a row it holds at most.
    pub fn k(&self) -> usize {
        self.k
    }
}

impl std::fmt::Debug for DeviceTopK {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceTopK({} rows of {})", self.rows, self.k)
    }
}

impl CudaDevice {
    /// Room for the top `k` (1 to [`MAX_TOP_K`]) candidates of up to `rows` rows.
    ///
    /// # Errors
    /// `k` out of range; out of device memory.
    pub fn new_top_k(&self, rows: usize, k: usize) -> Result<DeviceTopK> {
        if k == 0 || k > MAX_TOP_K {
            return Err(TensorError::InvalidParam {
                op: "cuda top_k",
                why: "k must be 1 to 256",
            });
        }
        let rows = rows.max(1);
        let n = rows * k;
        let ids = self
            .stream
            .alloc_zeros::<u32>(n)
            .map_err(|e| self.alloc_error(n * 4, e))?;
        let vals = self
            .stream
            .alloc_zeros::<f32>(n)
            .map_err(|e| self.alloc_error(n * 4, e))?;
        let counts = self
            .stream
            .alloc_zeros::<i32>(rows)
            .map_err(|e| self.alloc_error(rows * 4, e))?;
        Ok(DeviceTopK {
            ids,
            vals,
            counts,
            host_ids: vec![0; n],
            host_vals: vec![0.0; n],
            host_counts: Vec::with_capacity(rows),
            rows,
            k,
        })
    }

    /// The top `out.k()` candidates of each row of `x` (F32), found on the device and copied
    /// back into `out` (8 bytes a candidate and 4 a row); read them with [`DeviceTopK::row`].
    ///
    /// # Errors
    /// A dtype mismatch, more rows than `out` holds, a launch or copy failure.
    pub fn top_k(&self, x: &DeviceTensor, out: &mut DeviceTopK) -> Result<()> {
        const OP: &str = "cuda top_k";
        f32_only(OP, x)?;
        let rows = x.shape.n_rows();
        if rows > out.rows {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "out",
                expected: rows,
                actual: out.rows,
            });
        }
        out.host_counts.clear();
        if rows == 0 {
            return Ok(());
        }
        let (n_i, k_i) = (i32_of(OP, x.shape.row_len())?, i32_of(OP, out.k)?);
        let f = self.func("topk_f32")?;
        let mut b = self.stream.launch_builder(f);
        b.arg(&x.buf)
            .arg(&n_i)
            .arg(&k_i)
            .arg(&mut out.ids)
            .arg(&mut out.vals)
            .arg(&mut out.counts);
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (u32::try_from(rows).unwrap_or(u32::MAX), 1, 1),
            block_dim: (TOPK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: x holds rows*n f32; ids and vals rows*k (k <= TOPK_MAX, checked at
        // new_top_k), counts rows (rows <= out.rows, checked above).
        unsafe { b.launch(cfg) }.map_err(driver("launch topk"))?;
        let n = rows * out.k;
        out.host_counts.resize(rows, 0);
        self.stream
            .memcpy_dtoh(&out.counts.slice(0..rows), &mut out.host_counts[..])
            .map_err(driver("cuMemcpyDtoH"))?;
        self.stream
            .memcpy_dtoh(&out.ids.slice(0..n), &mut out.host_ids[..n])
            .map_err(driver("cuMemcpyDtoH"))?;
        self.stream
            .memcpy_dtoh(&out.vals.slice(0..n), &mut out.host_vals[..n])
            .map_err(driver("cuMemcpyDtoH"))?;
        self.stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))
    }
}
