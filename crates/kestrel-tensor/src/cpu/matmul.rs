//! Quantized matmul / matvec on the CPU: `out[n×m] = x[n×k] · W[m×k]ᵀ` for weights of any
//! [`DType`], read as raw block bytes (e.g. straight from the mmapped file) and dequantized one
//! block at a time into a stack buffer, never as a whole tensor.
//!
//! Work splits over output rows (rows of `W`) in chunks, one rayon task per chunk, in whatever
//! rayon pool the caller runs in. Inside a chunk, activation rows go in tiles of [`TILE`]: each
//! dequantized weight block is dotted with every row of the tile before the next block is read,
//! so prefill reuses each block `TILE` times; decode (n = 1) is the same loop with a tile of one.
//! The scalar kernels here are the reference the SIMD kernels of issue 5 replace.

use rayon::prelude::*;

use super::block::{dispatch, dot, BlockDequant, MAX_BLOCK};
use crate::error::{Result, TensorError};
use crate::DType;

/// Activation rows processed per dequantized weight block.
pub const TILE: usize = 8;

/// Output rows of `W` per rayon task is chosen so each thread gets about this many tasks (load
/// balance against per-task overhead).
const TASKS_PER_THREAD: usize = 4;

/// Fewest weight rows a task gets (keeps per-task overhead small for small matrices).
const MIN_ROWS_PER_TASK: usize = 16;

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

// SAFETY: tasks write through it only at indices no other task touches (their own weight rows'
// columns), and the borrow of `out` it came from outlives the parallel region.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// # Safety
    /// `i` is in bounds of the buffer and no other thread accesses element `i` meanwhile.
    #[inline]
    unsafe fn write(self, i: usize, v: f32) {
        // SAFETY: guaranteed by the caller.
        unsafe { *self.0.add(i) = v }
    }
}

/// `out[t*m + r] = sum_j x[t*k + j] * W[r][j]` for `t < n`, `r < m`.
///
/// `x` is `n` rows of `k` f32, `w` is `m` rows of `k` elements of `w_dtype` (raw little-endian
/// bytes at any alignment), `out` is `n` rows of `m`. Runs in the current rayon pool.
///
/// Accumulation is f32 per block and across blocks; against an f64 reference over the same
/// dequantized weights the error is within about `1e-5 * sum|x*w|`.
///
/// # Errors
/// `PartialBlock` if `k` is not a whole number of `w_dtype` blocks, `LengthMismatch` if a buffer
/// has the wrong size.
pub fn matmul(
    x: &[f32],
    n: usize,
    k: usize,
    w: &[u8],
    w_dtype: DType,
    m: usize,
    out: &mut [f32],
) -> Result<()> {
    const OP: &str = "matmul";
    let row_bytes = w_dtype.row_bytes(k).ok_or(TensorError::PartialBlock {
        dtype: w_dtype,
        row_len: k,
        block_size: w_dtype.block_size(),
    })?;
    check_len(OP, "x", n.checked_mul(k), x.len())?;
    check_len(OP, "out", n.checked_mul(m), out.len())?;
    check_len(OP, "weight bytes", m.checked_mul(row_bytes), w.len())?;
    if n == 0 || m == 0 {
        return Ok(());
    }
    if k == 0 {
        out.fill(0.0);
        return Ok(());
    }
    dispatch!(w_dtype, K => matmul_k::<K>(x, n, k, w, row_bytes, m, out));
    Ok(())
}

/// Decode-time matvec: `out[m] = W[m×k] · x[k]` (matmul with n = 1).
pub fn matvec(x: &[f32], w: &[u8], w_dtype: DType, m: usize, out: &mut [f32]) -> Result<()> {
    matmul(x, 1, x.len(), w, w_dtype, m, out)
}

fn check_len(
    op: &'static str,
    what: &'static str,
    expected: Option<usize>,
    actual: usize,
) -> Result<()> {
    match expected {
        Some(e) if e == actual => Ok(()),
        _ => Err(TensorError::LengthMismatch {
            op,
            what,
            expected: expected.unwrap_or(usize::MAX),
            actual,
        }),
    }
}

/// Rows of `W` per task for `m` rows in the current pool.
fn rows_per_task(m: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    m.div_ceil(threads * TASKS_PER_THREAD)
        .max(MIN_ROWS_PER_TASK)
}

fn matmul_k<K: BlockDequant>(
    x: &[f32],
    n: usize,
    k: usize,
    w: &[u8],
    row_bytes: usize,
    m: usize,
    out: &mut [f32],
) {
    debug_assert!(x.len() == n * k && out.len() == n * m && w.len() == m * row_bytes);
    if n == 1 {
        // Decode: output rows are contiguous, no shared pointer needed.
        let chunk = rows_per_task(m);
        out.par_chunks_mut(chunk)
            .zip(w.par_chunks(chunk * row_bytes))
            .for_each(|(o, wc)| {
                for (y, wr) in o.iter_mut().zip(wc.chunks_exact(row_bytes)) {
                    *y = super::block::vec_dot_k::<K>(wr, x);
                }
            });
        return;
    }
    let chunk = rows_per_task(m);
    let n_tasks = m.div_ceil(chunk);
    let out_ptr = OutPtr(out.as_mut_ptr());
    (0..n_tasks).into_par_iter().for_each(|task| {
        let r0 = task * chunk;
        let r1 = (r0 + chunk).min(m);
        let mut buf = [0f32; MAX_BLOCK];
        let mut t0 = 0;
        while t0 < n {
            let tn = (n - t0).min(TILE);
            for r in r0..r1 {
                let wr = &w[r * row_bytes..(r + 1) * row_bytes];
                let acc = tile_row::<K>(wr, &x[t0 * k..(t0 + tn) * k], k, tn, &mut buf);
                for (t, &v) in acc[..tn].iter().enumerate() {
                    // SAFETY: (t0 + t) < n and r < m, so the index is in bounds of `out`
                    // (len n*m, checked); column r belongs to this task's rows r0..r1 alone.
                    unsafe { out_ptr.write((t0 + t) * m + r, v) };
                }
            }
            t0 += tn;
        }
    });
}

/// Dots one weight row with `tn <= TILE` activation rows, dequantizing each block once.
#[inline]
fn tile_row<K: BlockDequant>(
    wr: &[u8],
    xs: &[f32],
    k: usize,
    tn: usize,
    buf: &mut [f32; MAX_BLOCK],
) -> [f32; TILE] {
    let mut acc = [0f32; TILE];
    let nb = k / K::N;
    for b in 0..nb {
        let blk = &mut buf[..K::N];
        K::dequant(&wr[b * K::BYTES..(b + 1) * K::BYTES], blk);
        for (t, a) in acc[..tn].iter_mut().enumerate() {
            *a += dot(blk, &xs[t * k + b * K::N..t * k + (b + 1) * K::N]);
        }
    }
    let done = nb * K::N;
    if K::FLOAT && done < k {
        let tail = &mut buf[..k - done];
        K::dequant(&wr[nb * K::BYTES..], tail);
        for (t, a) in acc[..tn].iter_mut().enumerate() {
            *a += dot(tail, &xs[t * k + done..(t + 1) * k]);
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{quantized_rows, Rng};

    fn reference(x: &[f32], n: usize, k: usize, w: &[f32], m: usize) -> (Vec<f64>, Vec<f64>) {
        let mut out = vec![0f64; n * m];
        let mut mag = vec![0f64; n * m];
        for t in 0..n {
            for r in 0..m {
                for j in 0..k {
                    let p = x[t * k + j] as f64 * w[r * k + j] as f64;
                    out[t * m + r] += p;
                    mag[t * m + r] += p.abs();
                }
            }
        }
        (out, mag)
    }

    fn check(dtype: DType, n: usize, k: usize, m: usize, seed: u64) {
        let mut rng = Rng::new(seed);
        let (w, wf) = quantized_rows(&mut rng, dtype, m, k);
        let x = rng.vec(n * k, 1.0);
        let mut out = vec![f32::NAN; n * m];
        matmul(&x, n, k, &w, dtype, m, &mut out).unwrap();
        let (want, mag) = reference(&x, n, k, &wf, m);
        for i in 0..n * m {
            let err = (out[i] as f64 - want[i]).abs();
            assert!(
                err <= 1e-5 * mag[i] + 1e-6,
                "{dtype} n={n} k={k} m={m} at {i}: {} vs {}",
                out[i],
                want[i]
            );
        }
    }

    #[test]
    fn every_dtype_matches_f64_reference_decode_and_prefill() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            for (i, dtype) in DType::ALL.into_iter().enumerate() {
                // n = 1 (decode), n = 11 (a full tile plus a partial one); m not a multiple of
                // the task chunk.
                check(dtype, 1, 512, 37, i as u64);
                check(dtype, 11, 256, 45, 100 + i as u64);
            }
        });
    }

    #[test]
    fn float_weights_with_odd_k_and_unaligned_bytes() {
        let mut rng = Rng::new(3);
        let (n, k, m) = (3, 45, 5);
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let (w, wf) = quantized_rows(&mut rng, dtype, m, k);
            let mut shifted = vec![0u8; w.len() + 1];
            shifted[1..].copy_from_slice(&w);
            let x = rng.vec(n * k, 1.0);
            let mut out = vec![0f32; n * m];
            matmul(&x, n, k, &shifted[1..], dtype, m, &mut out).unwrap();
            let (want, _) = reference(&x, n, k, &wf, m);
            for i in 0..n * m {
                assert!((out[i] as f64 - want[i]).abs() < 1e-5, "{dtype}");
            }
        }
    }

    #[test]
    fn quantized_weights_at_odd_addresses() {
        let mut rng = Rng::new(4);
        let (n, k, m) = (2, 256, 3);
        let (w, wf) = quantized_rows(&mut rng, DType::Q4K, m, k);
        let mut shifted = vec![0u8; w.len() + 1];
        shifted[1..].copy_from_slice(&w);
        let x = rng.vec(n * k, 1.0);
        let mut out = vec![0f32; n * m];
        matmul(&x, n, k, &shifted[1..], DType::Q4K, m, &mut out).unwrap();
        let (want, mag) = reference(&x, n, k, &wf, m);
        for i in 0..n * m {
            assert!((out[i] as f64 - want[i]).abs() <= 1e-5 * mag[i]);
        }
    }

    #[test]
    fn bad_sizes_are_errors() {
        let x = vec![0f32; 64];
        let w = vec![0u8; 36];
        let mut out = vec![0f32; 1];
        assert!(matmul(&x, 1, 64, &w, DType::Q4_0, 1, &mut out).is_ok());
        assert!(matches!(
            matmul(&x, 1, 64, &w[..35], DType::Q4_0, 1, &mut out),
            Err(TensorError::LengthMismatch { .. })
        ));
        assert!(matches!(
            matmul(&x[..63], 1, 63, &w, DType::Q4_0, 1, &mut out),
            Err(TensorError::PartialBlock { .. })
        ));
        assert!(matmul(&x, 2, 64, &w, DType::Q4_0, 1, &mut out).is_err());
        assert!(matmul(&x, 1, 64, &w, DType::Q4_0, 1, &mut []).is_err());
        assert!(matmul(&x, usize::MAX, 2, &w, DType::Q4_0, 1, &mut out).is_err());
    }
}
