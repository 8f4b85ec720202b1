//! Top-k of output rows on the device (`kernels/topk.cu`), so top-k sampling copies back `k`
//! (id, logit) pairs a row instead of the whole row: the sampler's own top-k candidates, in its
//! order (NaN and -inf never; larger logits first in `total_cmp`'s order; ties by lower id), so
//! the host sampler goes on from them and draws what it would have drawn from the row.

use cudarc::driver::CudaSlice;

use super::engine::{driver, f32_only, i32_of, CudaDevice, DeviceTensor};
use crate::error::{Result, TensorError};

/// Most candidates [`CudaDevice::top_k`] keeps a row (`TOPK_MAX` in kernels/topk.cu).
pub const MAX_TOP_K: usize = 256;

/// Threads of a `topk_f32` CTA (`TOPK_THREADS`).
const TOPK_THREADS: u32 = 1024;

/// Room on the device for the top candidates (up to [`MAX_TOP_K`]) of up to `rows` rows, with
/// the host copies the last [`CudaDevice::top_k`] left.
pub struct DeviceTopK {
    /// `rows` rows of 1 + 2·k words: the count, k ids, k logits' bits (kernels/topk.cu).
    buf: CudaSlice<u32>,
    raw: Vec<u32>,
    host_ids: Vec<u32>,
    host_vals: Vec<f32>,
    host_counts: Vec<usize>,
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

    /// The `k` of the last [`CudaDevice::top_k`].
    pub fn k(&self) -> usize {
        self.k
    }
}

impl std::fmt::Debug for DeviceTopK {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceTopK({} rows, k {})", self.rows, self.k)
    }
}

impl CudaDevice {
    /// Room for the top candidates (up to [`MAX_TOP_K`]) of up to `rows` rows.
    ///
    /// # Errors
    /// Out of device memory.
    pub fn new_top_k(&self, rows: usize) -> Result<DeviceTopK> {
        let rows = rows.max(1);
        let words = rows * (1 + 2 * MAX_TOP_K);
        let buf = self
            .stream
            .alloc_zeros::<u32>(words)
            .map_err(|e| self.alloc_error(words * 4, e))?;
        Ok(DeviceTopK {
            buf,
            raw: vec![0; words],
            host_ids: Vec::with_capacity(rows * MAX_TOP_K),
            host_vals: Vec::with_capacity(rows * MAX_TOP_K),
            host_counts: Vec::with_capacity(rows),
            rows,
            k: 1,
        })
    }

    /// The top `k` (1 to [`MAX_TOP_K`]) candidates of each row of `x` (F32), found on the
    /// device and copied back into `out` in one copy (8 bytes a candidate and 4 a row); read
    /// them with [`DeviceTopK::row`].
    ///
    /// # Errors
    /// A dtype mismatch, `k` out of range, more rows than `out` holds, a launch or copy
    /// failure.
    pub fn top_k(&self, x: &DeviceTensor, k: usize, out: &mut DeviceTopK) -> Result<()> {
        const OP: &str = "cuda top_k";
        f32_only(OP, x)?;
        if k == 0 || k > MAX_TOP_K {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "k must be 1 to 256",
            });
        }
        let rows = x.shape.n_rows();
        if rows > out.rows {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "out",
                expected: rows,
                actual: out.rows,
            });
        }
        out.k = k;
        out.host_counts.clear();
        out.host_ids.clear();
        out.host_vals.clear();
        if rows == 0 {
            return Ok(());
        }
        let (n_i, k_i) = (i32_of(OP, x.shape.row_len())?, i32_of(OP, k)?);
        let f = self.func("topk_f32")?;
        let mut b = self.launch(f);
        b.arg(&x.buf).arg(&n_i).arg(&k_i).arg(&mut out.buf);
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (u32::try_from(rows).unwrap_or(u32::MAX), 1, 1),
            block_dim: (TOPK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: x holds rows*n f32; the buffer rows*(1 + 2*MAX_TOP_K) words, of which the
        // kernel writes rows*(1 + 2k) (k <= MAX_TOP_K and rows <= out.rows, checked above).
        unsafe { b.launch(cfg) }.map_err(driver("launch topk"))?;
        let words = rows * (1 + 2 * k);
        self.stream
            .memcpy_dtoh(&out.buf.slice(0..words), &mut out.raw[..words])
            .map_err(driver("cuMemcpyDtoH"))?;
        self.stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))?;
        for r in out.raw[..words].chunks_exact(1 + 2 * k) {
            let n = (r[0] as usize).min(k);
            out.host_counts.push(n);
            // Every row keeps k slots, so row i starts at i * k.
            out.host_ids.extend_from_slice(&r[1..1 + k]);
            out.host_vals
                .extend(r[1 + k..1 + 2 * k].iter().map(|&b| f32::from_bits(b)));
        }
        Ok(())
    }
}
