//! Attention of one sequence's query rows ([`attention`], [`attention_paged`]): checks the
//! arguments and picks the path by cache type and row count: llama.cpp's tiled path
//! (`tiled`) for 64 rows or more over f32/f16, its per-row f16 path (`f16_ggml`) below that,
//! kestrel's online-softmax path (`online`) otherwise.

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::f16_ggml::{run_f16_ggml, takes_f16_ggml};
use super::kv::{KvRows, KvSlice, Widened};
use super::online::{run, run2};
use super::params::{AttentionParams, GGML_FA_TILE_Q};
use super::tiled::run_tiled;
use crate::error::{Result, TensorError};

thread_local! {
    /// The widened K and V of a long prefill over an f16 cache (grows to the largest seen).
    static WIDE: std::cell::RefCell<Vec<Widened>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Attention of queries `q` (`[n_tokens][n_head][head_dim]`, token `t` at `positions[t]`) over
/// the first `kv_len` positions of `k` and `v`, writing `out` (`[n_tokens][n_head][head_dim]`).
/// A query sees keys at positions `<= its own` (causal) and inside the window. A query that sees
/// no key (a negative position) gets zeros.
///
/// `k` and `v` may be longer than `kv_len` rows (a preallocated cache); the extra rows are not
/// read. Tolerance against an f64 reference: ~1e-5 absolute for unit-scale inputs; f16 `k`/`v`
/// with fewer than [`GGML_FA_TILE_Q`] query rows round as llama.cpp does (f16 query and output
/// accumulator, `run_f16_ggml`): ~1e-3.
///
/// # Errors
/// `InvalidParam` for zero or non-multiple head counts, `LengthMismatch` for short buffers.
pub fn attention(
    q: &[f32],
    positions: &[i32],
    k: KvSlice<'_>,
    v: KvSlice<'_>,
    kv_len: usize,
    p: &AttentionParams,
    out: &mut [f32],
) -> Result<()> {
    attention_paged(q, positions, k, v, kv_len, KvRows::CONTIGUOUS, p, out)
}

/// [`attention`] over a cache whose positions live at the rows `rows` maps them to (a paged
/// cache's block table); the numerics are those of [`attention`] exactly, position by position.
///
/// # Errors
/// As [`attention`]; `LengthMismatch` also when the block table does not cover `kv_len`
/// positions or names a block outside `k`/`v`.
#[allow(clippy::too_many_arguments)]
pub fn attention_paged(
    q: &[f32],
    positions: &[i32],
    k: KvSlice<'_>,
    v: KvSlice<'_>,
    kv_len: usize,
    rows: KvRows<'_>,
    p: &AttentionParams,
    out: &mut [f32],
) -> Result<()> {
    check_args(q, positions, k, v, kv_len, rows, p, out)?;
    let hd_stride = p.n_kv_head * p.head_dim;
    match (k, v) {
        (KvSlice::F32(k), KvSlice::F32(v))
            if positions.len() >= GGML_FA_TILE_Q && p.head_dim.is_multiple_of(16) =>
        {
            if rows.shift == usize::BITS - 1 {
                run_tiled(q, positions, k, v, kv_len, p, out)
            } else {
                // A paged cache is gathered in position order first.
                let copy = |s: &[f32], d: &mut [f32]| d.copy_from_slice(s);
                with_gathered(k, v, kv_len, rows, hd_stride, copy, |wk, wv| {
                    run_tiled(q, positions, wk, wv, kv_len, p, out)
                })
            }
        }
        (KvSlice::F32(k), KvSlice::F32(v)) => run(q, positions, k, v, kv_len, rows, p, out),
        (KvSlice::F16(k16), KvSlice::F16(v16)) if takes_f16_ggml(k, v, positions.len(), p) => {
            run_f16_ggml(q, positions, k16, v16, kv_len, rows, p, out)
        }
        (KvSlice::F16(k), KvSlice::F16(v)) => {
            // Widen the visible cache once instead of once per (query row, head, key), in
            // position order (a paged cache is gathered here).
            let widen = |s: &[f16], d: &mut [f32]| s.convert_to_f32_slice(d);
            with_gathered(k, v, kv_len, rows, hd_stride, widen, |wk, wv| {
                if p.head_dim.is_multiple_of(16) {
                    // llama.cpp's tiled f32 path, rounding as it does.
                    run_tiled(q, positions, wk, wv, kv_len, p, out);
                    return;
                }
                let (wk, wv): (&[Widened], &[Widened]) =
                    (bytemuck::cast_slice(wk), bytemuck::cast_slice(wv));
                run2::<Widened, Widened>(
                    q,
                    positions,
                    wk,
                    wv,
                    kv_len,
                    KvRows::CONTIGUOUS,
                    p,
                    out,
                );
            })
        }
        (KvSlice::F32(k), KvSlice::F16(v)) => run2(q, positions, k, v, kv_len, rows, p, out),
        (KvSlice::F16(k), KvSlice::F32(v)) => run2(q, positions, k, v, kv_len, rows, p, out),
        (KvSlice::Q8_0(k), KvSlice::Q8_0(v)) if p.head_dim.is_multiple_of(32) => {
            run2(q, positions, k, v, kv_len, rows, p, out)
        }
        (KvSlice::Q4_0(k), KvSlice::Q4_0(v)) if p.head_dim.is_multiple_of(32) => {
            run2(q, positions, k, v, kv_len, rows, p, out)
        }
        _ => {
            return Err(TensorError::InvalidParam {
                op: "attention",
                why: "keys and values must both be f32/f16, or both q8_0 or q4_0 with head_dim a multiple of 32",
            })
        }
    }
    Ok(())
}

/// Runs `f` over the first `kv_len` positions of `k` and `v` as f32 rows in position order:
/// `conv` copies or widens each run of rows the block table `rows` keeps together, into this
/// thread's buffer (it grows to the largest seen, then allocates nothing; a call re-entered on
/// the thread gets buffers of its own).
fn with_gathered<S>(
    k: &[S],
    v: &[S],
    kv_len: usize,
    rows: KvRows<'_>,
    hd_stride: usize,
    conv: impl Fn(&[S], &mut [f32]),
    f: impl FnOnce(&[f32], &[f32]),
) {
    let n = kv_len * hd_stride;
    let run_len = if rows.shift == usize::BITS - 1 {
        kv_len.max(1)
    } else {
        1 << rows.shift
    };
    let gather = |wk: &mut [f32], wv: &mut [f32]| {
        let mut j = 0;
        while j < kv_len {
            let len = run_len.min(kv_len - j) * hd_stride;
            let (src, dst) = (rows.row(j) * hd_stride, j * hd_stride);
            conv(&k[src..src + len], &mut wk[dst..dst + len]);
            conv(&v[src..src + len], &mut wv[dst..dst + len]);
            j += run_len;
        }
    };
    WIDE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < 2 * n {
                buf.resize(2 * n, Widened(0.0));
            }
            let (wk, wv) = buf.split_at_mut(n);
            let wk: &mut [f32] = bytemuck::cast_slice_mut(wk);
            let wv: &mut [f32] = bytemuck::cast_slice_mut(&mut wv[..n]);
            gather(wk, wv);
            f(wk, wv)
        }
        Err(_) => {
            let (mut wk, mut wv) = (vec![0f32; n], vec![0f32; n]);
            gather(&mut wk, &mut wv);
            f(&wk, &wv)
        }
    })
}

/// The argument checks of [`attention_paged`].
#[allow(clippy::too_many_arguments)]
pub(super) fn check_args(
    q: &[f32],
    positions: &[i32],
    k: KvSlice<'_>,
    v: KvSlice<'_>,
    kv_len: usize,
    rows: KvRows<'_>,
    p: &AttentionParams,
    out: &[f32],
) -> Result<()> {
    const OP: &str = "attention";
    if p.n_head == 0 || p.n_kv_head == 0 || p.head_dim == 0 || !p.n_head.is_multiple_of(p.n_kv_head)
    {
        return Err(TensorError::InvalidParam {
            op: OP,
            why: "head counts and head_dim must be non-zero, n_head a multiple of n_kv_head",
        });
    }
    let q_len = positions
        .len()
        .checked_mul(p.n_head)
        .and_then(|x| x.checked_mul(p.head_dim))
        .unwrap_or(usize::MAX);
    let kv_needed = rows
        .rows_needed(kv_len)
        .unwrap_or(usize::MAX)
        .checked_mul(p.n_kv_head)
        .and_then(|x| x.checked_mul(p.head_dim))
        .unwrap_or(usize::MAX);
    for (what, expected, actual, exact) in [
        ("q", q_len, q.len(), true),
        ("out", q_len, out.len(), true),
        ("k", kv_needed, k.len(), false),
        ("v", kv_needed, v.len(), false),
    ] {
        if (exact && actual != expected) || actual < expected {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what,
                expected,
                actual,
            });
        }
    }
    Ok(())
}
