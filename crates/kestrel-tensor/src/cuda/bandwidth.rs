//! The device's memory bandwidth as a device-to-device copy measures it: the roof that decode's
//! weight reads are held against (`kestrel bench --device cuda` reports decode's share of it);
//! and the weight-read bandwidth of the matmul kernels alone (`kestrel bench --matvec`), which
//! says whether a decode step's gap to that roof is in the kernels or between them.

use super::engine::{driver, CudaDevice, DeviceTensor};
use super::{CopyBandwidth, MatmulTiming, MAX_MATVEC_ROWS};
use crate::error::{Result, TensorError};

/// Copies timed after the warm-up one, each repetition; the median repetition counts.
const COPIES: usize = 10;
const REPS: usize = 5;
/// The smallest copy worth timing (below it, launch latency dominates).
const MIN_BYTES: usize = 1 << 20;
/// Device time a timed repetition of matmul passes aims at (short passes are replayed several
/// times a repetition, so the events' resolution does not count), and the most passes it takes.
const MATMUL_REP_SECONDS: f64 = 2e-3;
const MAX_PASSES: usize = 200;

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

    /// Times `x · Wᵀ` for each of `weights` in turn (a pass), as a decode step runs its
    /// projections: the pass is captured once as a CUDA graph (no launch gaps of the host) and
    /// replayed, its activations quantized once before the capture (the pass measures the
    /// weight-reading kernels, not the Q8_1 quantization a step shares between them). Each of
    /// `reps` repetitions (at least 1) replays the pass enough times for ~2 ms of device time;
    /// the median repetition counts. With weights whose total exceeds L2, each launch reads its
    /// weight from device memory, as in decode. `out` takes every product (the last one stays).
    /// The matmul settings in force ([`Self::set_mmvq_prefetch`], ...) are the ones timed.
    ///
    /// # Errors
    /// No weights; a weight whose shape does not fit `x` and `out`; rows that take more than
    /// one matvec launch (over 8, unless the tensor-core matvec takes them: the GEMM and
    /// launches of 8 are not timed here); out of device memory; a driver error.
    pub fn time_matmuls(
        &self,
        weights: &[&DeviceTensor],
        x: &DeviceTensor,
        out: &mut DeviceTensor,
        reps: usize,
    ) -> Result<MatmulTiming> {
        const OP: &str = "time_matmuls";
        if weights.is_empty() {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "no weights to time",
            });
        }
        let n = x.shape.n_rows();
        if n == 0 || (n > MAX_MATVEC_ROWS && !self.wide_applies(weights[0].dtype, n)) {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "only rows one matvec launch takes are timed (1-8, or 9-64 quantized)",
            });
        }
        // Untimed pass: grows the scratch buffers, loads the kernels, and leaves `x` quantized
        // under a ticket every captured matmul then reuses.
        let mut ticket = None;
        for w in weights {
            ticket = self.matmul_reusing(x, w, out, ticket)?.or(ticket);
        }
        self.synchronize()?;
        let epoch = self.epoch();
        self.begin_capture()?;
        let queued = weights
            .iter()
            .try_for_each(|w| self.matmul_reusing(x, w, out, ticket).map(|_| ()));
        let captured = self.end_capture();
        queued?;
        let graph = captured?.ok_or(TensorError::InvalidParam {
            op: OP,
            why: "the capture recorded no kernels",
        })?;
        if self.epoch() != epoch {
            return Err(TensorError::InvalidParam {
                op: OP,
                why: "a scratch buffer grew while the pass was captured",
            });
        }
        let (start, end) = (self.new_event()?, self.new_event()?);
        // Warm-up replay, then one timed replay to size the repetitions.
        graph.launch()?;
        self.record(&start)?;
        graph.launch()?;
        self.record(&end)?;
        let once = f64::from(start.elapsed_ms(&end)?).max(1e-4) / 1e3;
        let passes = ((MATMUL_REP_SECONDS / once).ceil() as usize).clamp(1, MAX_PASSES);
        let reps = reps.max(1);
        let mut secs = Vec::with_capacity(reps);
        for _ in 0..reps {
            self.record(&start)?;
            for _ in 0..passes {
                graph.launch()?;
            }
            self.record(&end)?;
            secs.push(f64::from(start.elapsed_ms(&end)?) / 1e3 / passes as f64);
        }
        secs.sort_by(f64::total_cmp);
        let weight_bytes = weights
            .iter()
            .map(|w| w.buf.len() as u64)
            .fold(0u64, u64::saturating_add);
        Ok(MatmulTiming {
            weight_bytes,
            matmuls: weights.len(),
            seconds: secs[reps / 2],
        })
    }
}
