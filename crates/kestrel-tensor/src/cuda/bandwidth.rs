//! The device's memory bandwidth as a device-to-device copy measures it: the roof that decode's
//! weight reads are held against (`kestrel bench --device cuda` reports decode's share of it).

use super::engine::{driver, CudaDevice};
use super::CopyBandwidth;
use crate::error::{Result, TensorError};

/// Copies timed after the warm-up one, each repetition; the median repetition counts.
const COPIES: usize = 10;
const REPS: usize = 5;
/// The smallest copy worth timing (below it, launch latency dominates).
const MIN_BYTES: usize = 1 << 20;

impl CudaDevice {
    /// Times device-to-device copies of up to `max_bytes` (at most a quarter of the free memory;
    /// two buffers of that size are held while it runs) and returns their bandwidth, counted as
    /// bytes read plus bytes written a second (as `torch`'s copy benchmarks count it): the
    /// median of 5 repetitions of 10 copies, after one warm-up copy.
    ///
    /// # Errors
    /// [`TensorError::InvalidParam`] when under 1 MiB could be copied; out of device memory;
    /// a driver error.
    pub fn copy_bandwidth(&self, max_bytes: usize) -> Result<CopyBandwidth> {
        let (free, _) = self.memory_info()?;
        let bytes = max_bytes.min(free / 4) & !0xFFFF;
        if bytes < MIN_BYTES {
            return Err(TensorError::InvalidParam {
                op: "copy_bandwidth",
                why: "less than 1 MiB to copy",
            });
        }
        let src = self.alloc(bytes)?;
        let mut dst = self.alloc(bytes)?;
        let (start, end) = (self.new_event()?, self.new_event()?);
        self.stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(driver("cuMemcpyDtoD"))?;
        let mut ms = Vec::with_capacity(REPS);
        for _ in 0..REPS {
            self.record(&start)?;
            for _ in 0..COPIES {
                self.stream
                    .memcpy_dtod(&src, &mut dst)
                    .map_err(driver("cuMemcpyDtoD"))?;
            }
            self.record(&end)?;
            ms.push(start.elapsed_ms(&end)?);
        }
        ms.sort_by(f32::total_cmp);
        let secs = f64::from(ms[REPS / 2]).max(1e-6) / 1e3;
        Ok(CopyBandwidth {
            bytes,
            bytes_per_s: 2.0 * bytes as f64 * COPIES as f64 / secs,
        })
    }
}
