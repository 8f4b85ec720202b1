//! Attention for a batched step: several sequences' query rows in one parallel region.
//!
//! A decode step of B sequences has B segments of one row each. Attending them one segment at a
//! time costs a parallel region per segment and layer, each with only `n_head` small items (4 for
//! Gemma 3 270M); here the (row, head) items of every sequence that takes the per-row f16 path
//! share one region. Each item runs exactly the code the one-sequence call runs for it, so the
//! numerics are those of [`attention_paged`], sequence by sequence.

use rayon::prelude::*;

use super::f16_ggml::{takes_f16_ggml, F16Isa, F16Row};
use super::kv::{KvRows, KvSlice};
use super::params::AttentionParams;
use super::single::{attention_paged, check_args};
use crate::error::{Result, TensorError};

/// One sequence of [`attention_paged_batch`]: its `n_rows` consecutive query rows of the step
/// and its own cache.
#[derive(Clone, Copy, Debug)]
pub struct PagedSeq<'a> {
    /// Query rows (tokens) the sequence has in the step.
    pub n_rows: usize,
    /// Its keys.
    pub k: KvSlice<'a>,
    /// Its values.
    pub v: KvSlice<'a>,
    /// Positions `0..kv_len` are visible to it.
    pub kv_len: usize,
    /// Where each of its positions lives in `k` and `v`.
    pub rows: KvRows<'a>,
}

impl PagedSeq<'static> {
    /// A sequence with no rows (a filler for fixed-size arrays).
    pub const EMPTY: PagedSeq<'static> = PagedSeq {
        n_rows: 0,
        k: KvSlice::F32(&[]),
        v: KvSlice::F32(&[]),
        kv_len: 0,
        rows: KvRows::CONTIGUOUS,
    };
}

/// [`attention_paged`] for consecutive sequences of one step: `q`, `positions` and `out` hold
/// the rows of `seqs[0]`, then those of `seqs[1]`, and so on. Sequences with fewer than
/// [`GGML_FA_TILE_Q`](super::params::GGML_FA_TILE_Q) rows over f16 caches (decode) are
/// attended together in one parallel region; the others one after another. The result equals
/// calling [`attention_paged`] on each sequence's rows, bit for bit.
///
/// # Errors
/// As [`attention_paged`] for any sequence; `LengthMismatch` when the sequences' rows do not
/// add up to `positions.len()`, or `q`/`out` do not hold that many rows.
///
/// # Example
/// ```
/// use kestrel_tensor::cpu::{attention_paged_batch, AttentionParams, KvRows, KvSlice, PagedSeq};
/// let p = AttentionParams { n_head: 1, n_kv_head: 1, head_dim: 2, scale: 1.0, softcap: 0.0, window: 0 };
/// let (k, v) = ([1.0f32, 0.0, 0.0, 1.0], [1.0f32, 2.0, 3.0, 4.0]);
/// let one = PagedSeq { n_rows: 1, k: KvSlice::F32(&k), v: KvSlice::F32(&v), kv_len: 1, rows: KvRows::CONTIGUOUS };
/// let two = PagedSeq { kv_len: 2, ..one };
/// let mut out = [0f32; 4];
/// attention_paged_batch(&[1.0, 0.0, 1.0, 0.0], &[0, 1], &[one, two], &p, &mut out).unwrap();
/// assert_eq!(&out[..2], &[1.0, 2.0]); // the first sequence sees only its first key
/// ```
pub fn attention_paged_batch(
    q: &[f32],
    positions: &[i32],
    seqs: &[PagedSeq<'_>],
    p: &AttentionParams,
    out: &mut [f32],
) -> Result<()> {
    const OP: &str = "attention";
    let width = p.n_head.saturating_mul(p.head_dim);
    let total = seqs
        .iter()
        .try_fold(0usize, |a, s| a.checked_add(s.n_rows))
        .unwrap_or(usize::MAX);
    let q_len = total.saturating_mul(width);
    for (what, expected, actual) in [
        ("positions", total, positions.len()),
        ("q", q_len, q.len()),
        ("out", q_len, out.len()),
    ] {
        if expected != actual {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what,
                expected,
                actual,
            });
        }
    }
    let mut r0 = 0;
    for s in seqs {
        let r1 = r0 + s.n_rows;
        let (qs, os) = (&q[r0 * width..r1 * width], &out[r0 * width..r1 * width]);
        check_args(qs, &positions[r0..r1], s.k, s.v, s.kv_len, s.rows, p, os)?;
        r0 = r1;
    }
    let joint = |s: &PagedSeq<'_>| takes_f16_ggml(s.k, s.v, s.n_rows, p);
    let n_joint = seqs.iter().filter(|s| joint(s)).count();
    if n_joint > 1 {
        let hd = p.head_dim;
        let isa = F16Isa::detect();
        out.par_chunks_mut(hd).enumerate().for_each(|(i, o)| {
            let t = i / p.n_head;
            let mut first = 0;
            let Some(s) = seqs.iter().find(|s| {
                first += s.n_rows;
                t < first
            }) else {
                return;
            };
            if let (true, KvSlice::F16(k), KvSlice::F16(v)) = (joint(s), s.k, s.v) {
                let qr = &q[i * hd..(i + 1) * hd];
                let row = F16Row::new(qr, i % p.n_head, k, v, positions[t], s.kv_len, s.rows, p);
                isa.row(&row, o);
            }
        });
    }
    let mut r0 = 0;
    for s in seqs {
        let r1 = r0 + s.n_rows;
        if n_joint <= 1 || !joint(s) {
            let (qs, os) = (&q[r0 * width..r1 * width], &mut out[r0 * width..r1 * width]);
            attention_paged(qs, &positions[r0..r1], s.k, s.v, s.kv_len, s.rows, p, os)?;
        }
        r0 = r1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::Rng;
    use half::f16;

    /// Decode rows of several sequences (one paged pool, their own block tables), a longer
    /// prompt chunk among them, f16 and f32 caches: the batch equals one call per sequence,
    /// bit for bit.
    #[test]
    fn batch_equals_one_call_per_sequence() {
        let mut rng = Rng::new(7);
        let p = AttentionParams {
            n_head: 4,
            n_kv_head: 2,
            head_dim: 32,
            scale: 0.17,
            softcap: 0.0,
            window: 5,
        };
        let (block, n_blocks) = (4usize, 64usize);
        let stride = p.n_kv_head * p.head_dim;
        let pool = block * n_blocks * stride;
        let k32 = rng.vec(pool, 1.0);
        let v32 = rng.vec(pool, 1.0);
        let k16: Vec<f16> = k32.iter().map(|&x| f16::from_f32(x)).collect();
        let v16: Vec<f16> = v32.iter().map(|&x| f16::from_f32(x)).collect();
        // Each sequence owns blocks in a scattered order: (rows this step, visible keys, table).
        let tables: Vec<Vec<u32>> = (0..5)
            .map(|s| {
                (0..20)
                    .map(|b| ((b * 5 + s * 13) % n_blocks) as u32)
                    .collect()
            })
            .collect();
        let shapes = [(1usize, 9usize), (1, 1), (70, 70), (3, 20), (1, 40)];
        for f16_kv in [true, false] {
            let (k, v) = if f16_kv {
                (KvSlice::F16(&k16), KvSlice::F16(&v16))
            } else {
                (KvSlice::F32(&k32), KvSlice::F32(&v32))
            };
            let seqs: Vec<PagedSeq<'_>> = shapes
                .iter()
                .zip(&tables)
                .map(|(&(n_rows, kv_len), t)| PagedSeq {
                    n_rows,
                    k,
                    v,
                    kv_len,
                    rows: KvRows::paged(t, block).unwrap(),
                })
                .collect();
            let positions: Vec<i32> = shapes
                .iter()
                .flat_map(|&(n, kv)| (kv - n..kv).map(|x| x as i32))
                .collect();
            let width = p.n_head * p.head_dim;
            let q = rng.vec(positions.len() * width, 1.0);
            let mut batch = vec![0f32; q.len()];
            attention_paged_batch(&q, &positions, &seqs, &p, &mut batch).unwrap();
            let mut r0 = 0;
            for s in &seqs {
                let r1 = r0 + s.n_rows;
                let mut one = vec![0f32; (r1 - r0) * width];
                let qs = &q[r0 * width..r1 * width];
                attention_paged(
                    qs,
                    &positions[r0..r1],
                    s.k,
                    s.v,
                    s.kv_len,
                    s.rows,
                    &p,
                    &mut one,
                )
                .unwrap();
                let got = &batch[r0 * width..r1 * width];
                assert!(
                    one.iter().zip(got).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "f16 {f16_kv}: sequence of {} rows differs",
                    s.n_rows
                );
                r0 = r1;
            }
        }
    }

    #[test]
    fn rows_that_do_not_add_up_are_an_error() {
        let p = AttentionParams {
            n_head: 1,
            n_kv_head: 1,
            head_dim: 2,
            scale: 1.0,
            softcap: 0.0,
            window: 0,
        };
        let k = [0f32; 4];
        let s = PagedSeq {
            n_rows: 2,
            k: KvSlice::F32(&k),
            v: KvSlice::F32(&k),
            kv_len: 2,
            rows: KvRows::CONTIGUOUS,
        };
        let mut out = [0f32; 2];
        assert!(attention_paged_batch(&[0.0; 2], &[0], &[s], &p, &mut out).is_err());
        let short = PagedSeq { kv_len: 3, ..s };
        let mut out = [0f32; 4];
        assert!(attention_paged_batch(&[0.0; 4], &[0, 1], &[short], &p, &mut out).is_err());
    }
}
