//! Quantized matmul / matvec on the CPU: `out[n×m] = x[n×k] · W[m×k]ᵀ` for weights of any
//! [`DType`], read as raw block bytes (e.g. straight from the mmapped file).
//!
//! [`matmul`] computes as llama.cpp's CPU backend does: each activation row is converted once
//! per call to the weight type's `vec_dot_type` (q8_0, q8_1, q8_K, f16 or bf16; see
//! [`super::q8`]) and every weight row is dotted with it by an integer kernel that mirrors
//! ggml's generic `ggml_vec_dot_*` (`cpu::qdot`). F32 weights take f32 activations as they
//! are. The converted activations live in a scratch buffer: the caller's
//! ([`matmul_with_scratch`]) or one per thread, so after the first call of a given size no call
//! allocates.
//!
//! [`matmul_dequantized`] is the exact-weights reference: each weight block is dequantized to
//! f32 and dotted with the f32 activations, activation rows in tiles of [`TILE`] per block.
//!
//! Work splits over output rows (rows of `W`) in chunks, one rayon task per chunk, in whatever
//! rayon pool the caller runs in.

use std::cell::RefCell;

use rayon::prelude::*;

use super::block::{dispatch, dot, BlockDequant, MAX_BLOCK};
use super::kernel_table::{PrepBuf, TypeKernels, Widened, MAX_TILE_ACTS, MAX_TILE_ROWS};
use super::out_ptr::OutPtr;
use super::prefetch::prefetch_next;
pub use super::scratch::MatmulScratch;
use crate::error::{Result, TensorError};
use crate::DType;

/// Activation rows processed per dequantized weight block.
pub const TILE: usize = 8;

/// Output rows of `W` per rayon task is chosen so each thread gets about this many tasks (load
/// balance against per-task overhead).
const TASKS_PER_THREAD: usize = 4;

/// Fewest weight rows a task gets (keeps per-task overhead small for small matrices).
const MIN_ROWS_PER_TASK: usize = 16;

/// Activation values up to which a matmul converts its activation rows on the calling thread.
const SERIAL_QUANTIZE: usize = 1 << 15;

/// Activation rows from which a matmul takes its kernels' prefill form
/// ([`dispatch::Widened`](super::kernel_table::Widened)).
const WIDEN_MIN_ROWS: usize = 16;

thread_local! {
    static SCRATCH: RefCell<MatmulScratch> = const { RefCell::new(MatmulScratch::new()) };
    /// Each pool thread's prepared activation side (see `dispatch::PreppedTileFn`).
    static PREP: RefCell<PrepBuf> = const { RefCell::new(Vec::new()) };
    /// Each pool thread's task rows widened to Q8_0 blocks (see `dispatch::Widened`).
    static WIDENED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Checks the sizes of a matmul call; returns the weight row bytes.
fn check_matmul(
    x: &[f32],
    n: usize,
    k: usize,
    w: &[u8],
    w_dtype: DType,
    m: usize,
    out: &[f32],
) -> Result<usize> {
    const OP: &str = "matmul";
    let row_bytes = w_dtype.row_bytes(k).ok_or(TensorError::PartialBlock {
        dtype: w_dtype,
        row_len: k,
        block_size: w_dtype.block_size(),
    })?;
    check_len(OP, "x", n.checked_mul(k), x.len())?;
    check_len(OP, "out", n.checked_mul(m), out.len())?;
    check_len(OP, "weight bytes", m.checked_mul(row_bytes), w.len())?;
    Ok(row_bytes)
}

/// `out[t*m + r] = sum_j x[t*k + j] * W[r][j]` for `t < n`, `r < m`, with llama.cpp's CPU
/// numerics: activations converted to the weight type's `vec_dot_type`, integer block dots.
///
/// `x` is `n` rows of `k` f32, `w` is `m` rows of `k` elements of `w_dtype` (raw little-endian
/// bytes at any alignment), `out` is `n` rows of `m`. Runs in the current rayon pool; the
/// converted activations go to this thread's scratch (see [`matmul_with_scratch`]).
///
/// Against an f64 reference over the dequantized weights and the f32 activations, the error is
/// that of the activation quantization: per 32 (q8_0/q8_1) or 256 (q8_K) values at most half a
/// step `amax/127` times the block's `Σ|w|`, plus f32 rounding; for F16/BF16 weights, the f16 /
/// bf16 rounding of each activation. F32 weights are exact up to f32 accumulation.
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
    check_matmul(x, n, k, w, w_dtype, m, out)?;
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => matmul_with_scratch(x, n, k, w, w_dtype, m, out, &mut scratch),
        // Re-entered on this thread (a matmul inside a matmul's task): use a fresh scratch.
        Err(_) => matmul_with_scratch(x, n, k, w, w_dtype, m, out, &mut MatmulScratch::new()),
    })
}

/// [`matmul`] with the caller's scratch for the converted activations.
///
/// # Errors
/// As [`matmul`].
#[allow(clippy::too_many_arguments)]
pub fn matmul_with_scratch(
    x: &[f32],
    n: usize,
    k: usize,
    w: &[u8],
    w_dtype: DType,
    m: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) -> Result<()> {
    matmul_segmented(x, n, k, w, w_dtype, m, out, &[n], scratch)
}

/// [`matmul_with_scratch`] over activation rows that belong to consecutive sequences of
/// `segments[i]` rows each (a batched step). The numerics of a row depend only on its place in
/// its own segment, never on the other sequences: where llama.cpp sums groups of 4 rows in
/// another order than single rows (Q4_K), each segment's rows are grouped from its own start,
/// as a step of that sequence alone would be.
///
/// # Errors
/// As [`matmul`]; `LengthMismatch` if the segments do not add up to `n`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_segmented(
    x: &[f32],
    n: usize,
    k: usize,
    w: &[u8],
    w_dtype: DType,
    m: usize,
    out: &mut [f32],
    segments: &[usize],
    scratch: &mut MatmulScratch,
) -> Result<()> {
    let total = segments.iter().try_fold(0usize, |a, &l| a.checked_add(l));
    check_len("matmul", "segment rows", total, n)?;
    let row_bytes = check_matmul(x, n, k, w, w_dtype, m, out)?;
    if n == 0 || m == 0 {
        return Ok(());
    }
    if k == 0 {
        out.fill(0.0);
        return Ok(());
    }
    use super::qdot::*;
    // The active instruction set's kernels; types without SIMD kernels run their scalar twins.
    let kt = super::dispatch::kernels();
    match w_dtype {
        // vec_dot_type F32: the activations as they are, each row by the one-row kernel, so a
        // row's numerics never depend on how many rows share the step (the multi-row tiles sum
        // in another order). F32 matrices are small where they occur (routers, test files).
        DType::F32 => dispatch!(w_dtype, K => {
            for (xr, or) in x.chunks_exact(k).zip(out.chunks_exact_mut(m)) {
                matmul_k::<K>(xr, 1, k, w, row_bytes, m, or);
            }
        }),
        DType::F16 => matmul_q::<DF16>(
            TypeKernels::scalar::<DF16>(),
            x,
            n,
            k,
            w,
            row_bytes,
            m,
            out,
            segments,
            scratch,
        ),
        DType::BF16 => matmul_q::<DBF16>(
            TypeKernels::scalar::<DBF16>(),
            x,
            n,
            k,
            w,
            row_bytes,
            m,
            out,
            segments,
            scratch,
        ),
        DType::Q4_0 => matmul_q::<DQ4_0>(kt.q4_0, x, n, k, w, row_bytes, m, out, segments, scratch),
        DType::Q4_1 => matmul_q::<DQ4_1>(kt.q4_1, x, n, k, w, row_bytes, m, out, segments, scratch),
        DType::Q5_0 => matmul_q::<DQ5_0>(kt.q5_0, x, n, k, w, row_bytes, m, out, segments, scratch),
        DType::Q5_1 => matmul_q::<DQ5_1>(kt.q5_1, x, n, k, w, row_bytes, m, out, segments, scratch),
        DType::Q8_0 => matmul_q::<DQ8_0>(kt.q8_0, x, n, k, w, row_bytes, m, out, segments, scratch),
        DType::Q2K => matmul_q::<DQ2K>(kt.q2_k, x, n, k, w, row_bytes, m, out, segments, scratch),
        DType::Q3K => matmul_q::<DQ3K>(kt.q3_k, x, n, k, w, row_bytes, m, out, segments, scratch),
        DType::Q4K => matmul_q::<DQ4K>(kt.q4_k, x, n, k, w, row_bytes, m, out, segments, scratch),
        DType::Q5K => matmul_q::<DQ5K>(kt.q5_k, x, n, k, w, row_bytes, m, out, segments, scratch),
        DType::Q6K => matmul_q::<DQ6K>(kt.q6_k, x, n, k, w, row_bytes, m, out, segments, scratch),
        DType::Q8K => matmul_q::<DQ8K>(
            TypeKernels::scalar::<DQ8K>(),
            x,
            n,
            k,
            w,
            row_bytes,
            m,
            out,
            segments,
            scratch,
        ),
        DType::IQ4NL => {
            matmul_q::<DIQ4NL>(kt.iq4_nl, x, n, k, w, row_bytes, m, out, segments, scratch)
        }
        DType::IQ4XS => {
            matmul_q::<DIQ4XS>(kt.iq4_xs, x, n, k, w, row_bytes, m, out, segments, scratch)
        }
        DType::MXFP4 => {
            matmul_q::<DMXFP4>(kt.mxfp4, x, n, k, w, row_bytes, m, out, segments, scratch)
        }
        DType::TQ1_0 => matmul_q::<DTQ1_0>(
            TypeKernels::scalar::<DTQ1_0>(),
            x,
            n,
            k,
            w,
            row_bytes,
            m,
            out,
            segments,
            scratch,
        ),
        DType::TQ2_0 => matmul_q::<DTQ2_0>(
            TypeKernels::scalar::<DTQ2_0>(),
            x,
            n,
            k,
            w,
            row_bytes,
            m,
            out,
            segments,
            scratch,
        ),
        DType::IQ2XXS => {
            matmul_q::<DIQ2XXS>(kt.iq2_xxs, x, n, k, w, row_bytes, m, out, segments, scratch)
        }
        DType::IQ2XS => {
            matmul_q::<DIQ2XS>(kt.iq2_xs, x, n, k, w, row_bytes, m, out, segments, scratch)
        }
        DType::IQ2S => {
            matmul_q::<DIQ2S>(kt.iq2_s, x, n, k, w, row_bytes, m, out, segments, scratch)
        }
        DType::IQ3XXS => {
            matmul_q::<DIQ3XXS>(kt.iq3_xxs, x, n, k, w, row_bytes, m, out, segments, scratch)
        }
        DType::IQ3S => {
            matmul_q::<DIQ3S>(kt.iq3_s, x, n, k, w, row_bytes, m, out, segments, scratch)
        }
        DType::IQ1S => matmul_q::<DIQ1S>(
            TypeKernels::scalar::<DIQ1S>(),
            x,
            n,
            k,
            w,
            row_bytes,
            m,
            out,
            segments,
            scratch,
        ),
        DType::IQ1M => matmul_q::<DIQ1M>(
            TypeKernels::scalar::<DIQ1M>(),
            x,
            n,
            k,
            w,
            row_bytes,
            m,
            out,
            segments,
            scratch,
        ),
    }
    Ok(())
}

/// Decode-time matvec: `out[m] = W[m×k] · x[k]` (matmul with n = 1).
pub fn matvec(x: &[f32], w: &[u8], w_dtype: DType, m: usize, out: &mut [f32]) -> Result<()> {
    matmul(x, 1, x.len(), w, w_dtype, m, out)
}

/// The exact-weights reference: like [`matmul`], but each weight block is dequantized to f32 and
/// dotted with the f32 activations (no activation quantization). Accumulation is f32 per block
/// and across blocks; against an f64 reference over the same dequantized weights the error is
/// within about `1e-5 * sum|x*w|`.
///
/// # Errors
/// As [`matmul`].
pub fn matmul_dequantized(
    x: &[f32],
    n: usize,
    k: usize,
    w: &[u8],
    w_dtype: DType,
    m: usize,
    out: &mut [f32],
) -> Result<()> {
    let row_bytes = check_matmul(x, n, k, w, w_dtype, m, out)?;
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

/// Converts the activation rows, then dots every weight row with each of them with `kern`.
#[allow(clippy::too_many_arguments)]
fn matmul_q<D: super::qdot::QDot>(
    kern: TypeKernels<D::Act>,
    x: &[f32],
    n: usize,
    k: usize,
    w: &[u8],
    row_bytes: usize,
    m: usize,
    out: &mut [f32],
    segments: &[usize],
    scratch: &mut MatmulScratch,
) {
    matmul_q_with::<D>(kern, x, n, k, w, row_bytes, m, out, segments, scratch);
}

/// [`matmul_q`] with the kernels `kern` (a test picks another instruction set's).
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_q_with<D: super::qdot::QDot>(
    kern: TypeKernels<D::Act>,
    x: &[f32],
    n: usize,
    k: usize,
    w: &[u8],
    row_bytes: usize,
    m: usize,
    out: &mut [f32],
    segments: &[usize],
    scratch: &mut MatmulScratch,
) {
    debug_assert!(x.len() == n * k && out.len() == n * m && w.len() == m * row_bytes);
    let nb = k / D::ACT_N;
    if n == 1 {
        let acts = scratch.slice::<D::Act>(nb);
        D::quantize(x, acts);
        let acts = &*acts;
        let chunk = rows_per_task(m);
        out.par_chunks_mut(chunk)
            .zip(w.par_chunks(chunk * row_bytes))
            .for_each(|(o, wc)| (kern.rows)(wc, acts, o));
        return;
    }
    // Rows of the two order classes go to two contiguous parts of the converted activations,
    // `first` rows for `kern.tile`, the rest for `second`. For types whose llama.cpp paths sum
    // single rows and groups of 4 in different orders (`kern.single`, Q4_K), each segment's
    // first `len - len % 4` rows form groups of 4 (as llama.cpp groups a batch) and its last
    // `len % 4` rows take the single-row order. For types llama.cpp sums in another order
    // once a matmul has many rows (`kern.wide`, Q6_K), a segment's rows all take the wide
    // order when it has at least `min` of them. Other types tile every row alike.
    let (acts, perm) = scratch.slice_and_perm::<D::Act>(n * nb, n);
    let mut split = |second_class: &dyn Fn(usize, usize) -> bool| {
        let n_first: usize = segments
            .iter()
            .map(|&len| (0..len).filter(|&i| !second_class(i, len)).count())
            .sum();
        let (mut f, mut s, mut row) = (0, n_first, 0);
        for &len in segments {
            for i in 0..len {
                let slot = if second_class(i, len) { &mut s } else { &mut f };
                perm[*slot] = (row + i) as u32;
                *slot += 1;
            }
            row += len;
        }
        n_first
    };
    let (n_first, second) = match (kern.single, kern.wide) {
        (Some(single), _) => (split(&|i, len| i >= len - len % 4), single),
        (None, Some((min, wide))) => (split(&|_, len| len >= min), wide),
        (None, None) => (split(&|_, _| false), kern.tile),
    };
    let perm = &*perm;
    let quantize = |(i, a): (usize, &mut [D::Act])| {
        let t = perm[i] as usize;
        D::quantize(&x[t * k..(t + 1) * k], a)
    };
    if n * k <= SERIAL_QUANTIZE {
        // A few rows (a decode step of several sequences): quicker here than a parallel region.
        acts.chunks_mut(nb).enumerate().for_each(quantize);
    } else {
        acts.par_chunks_mut(nb).enumerate().for_each(quantize);
    }
    let acts = &*acts;
    let chunk = rows_per_task(m);
    let n_tasks = m.div_ceil(chunk);
    let out_ptr = OutPtr::new(out);

    // The plain tile's activation side can be prepared once per group and task when both
    // parts run it (the q8_0 family: no second order).
    let prepped = kern
        .prepped
        .filter(|_| kern.single.is_none() && kern.wide.is_none());
    // The prefill form (rows widened once per task) pays when many groups of activation rows
    // read the rows, not in a decode step of a few sequences (the widening writes and reads
    // back half as many bytes again as the weights).
    let widened = kern
        .widened
        .filter(|_| prepped.is_none() && kern.single.is_none() && kern.wide.is_none())
        .filter(|_| n >= WIDEN_MIN_ROWS);
    let (tile_rows, tile_acts) = widened.map_or((kern.tile_rows, kern.tile_acts), |w| w.shape);
    let (tile_rows, tile_acts) = (
        tile_rows.clamp(1, MAX_TILE_ROWS),
        tile_acts.clamp(1, MAX_TILE_ACTS),
    );
    (0..n_tasks).into_par_iter().for_each(|task| {
        PREP.with(|cell| {
            let mut own = PrepBuf::new();
            let mut guard = cell.try_borrow_mut();
            let prep = match guard.as_mut() {
                Ok(p) => &mut **p,
                // Re-entered on this thread (a matmul inside a matmul's task).
                Err(_) => &mut own,
            };
            let r0 = task * chunk;
            let r1 = (r0 + chunk).min(m);
            WIDENED.with(|wcell| {
                let mut own_w = Vec::new();
                let mut wguard = wcell.try_borrow_mut();
                let wbuf = match wguard.as_mut() {
                    Ok(b) => &mut **b,
                    Err(_) => &mut own_w,
                };
                // The weights the tiles read: the task's rows widened (row `r` at `r - r0`), or
                // the matrix as it is.
                let (w, row_bytes, first, tile, second) = match widened {
                    Some(Widened {
                        widen: None, tile, ..
                    }) => (w, row_bytes, 0, tile, tile),
                    Some(Widened {
                        widen: Some(widen),
                        tile,
                        ..
                    }) => {
                        let rb = nb * std::mem::size_of::<kestrel_gguf::quant::BlockQ8_0>();
                        let need = (r1 - r0) * rb;
                        if wbuf.len() < need {
                            wbuf.resize(need, 0);
                        }
                        widen(&w[r0 * row_bytes..r1 * row_bytes], &mut wbuf[..need]);
                        (&wbuf[..need], rb, r0, tile, tile)
                    }
                    None => (w, row_bytes, 0, kern.tile, second),
                };
                // This task's weight rows stay in cache while groups of up to `tile_acts`
                // activation rows pass over them; each weight block is unpacked once per group.
                let parts = [(0, n_first, tile), (n_first, n, second)];
                for (lo, hi, tile) in parts {
                    let mut t0 = lo;
                    while t0 < hi {
                        let tn = (hi - t0).min(tile_acts);
                        let group = &acts[t0 * nb..(t0 + tn) * nb];
                        let mut o = [0f32; MAX_TILE_ROWS * MAX_TILE_ACTS];
                        let mut r = r0;
                        while r < r1 {
                            let nw = (r1 - r).min(tile_rows);
                            let wr = &w[(r - first) * row_bytes..(r - first + nw) * row_bytes];
                            if t0 == 0 {
                                // Only the first group streams these rows; later ones find them
                                // in cache.
                                prefetch_next(wr);
                            }
                            match prepped {
                                Some(pt) => pt(wr, group, tn, &mut o[..nw * tn], prep, r == r0),
                                None => tile(wr, group, tn, &mut o[..nw * tn]),
                            }
                            for j in 0..nw {
                                for (i, &v) in o[j * tn..(j + 1) * tn].iter().enumerate() {
                                    let t = perm[t0 + i] as usize;
                                    // SAFETY: t < n (a permutation of 0..n) and r + j < r1 <= m,
                                    // so the index is in bounds of `out` (len n*m, checked);
                                    // column r + j belongs to this task alone.
                                    unsafe { out_ptr.write(t * m + r + j, v) };
                                }
                            }
                            r += nw;
                        }
                        t0 += tn;
                    }
                }
            })
        })
    });
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
    let out_ptr = OutPtr::new(out);
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
mod tests;
