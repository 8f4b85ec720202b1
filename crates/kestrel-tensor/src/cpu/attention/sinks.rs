//! Attention sinks (gpt-oss): a learned logit per head that joins every query's softmax
//! denominator and nothing else. llama.cpp adds it at the end of its flash-attention loop
//! (`S = S·ms + vs`, the output rescaled by `ms` when the sink exceeds the running maximum);
//! here any attention path's output is corrected afterwards by the same factor,
//! `S / (S + e^(sink − M)) = 1 / (1 + e^(sink − LSE))`, with the row's log-sum-exp of its scaled
//! (and soft-capped) scores recomputed over the keys it saw. Only the families with sinks pay for
//! the second pass over the keys.

use super::batch::PagedSeq;
use super::kv::{head, KvElem, KvSlice};
use super::params::{visible_keys, AttentionParams};
use crate::{Result, TensorError};

fn lse<T: KvElem>(
    q: &[f32],
    k: &[T],
    seq: &PagedSeq<'_>,
    pos: i32,
    h: usize,
    p: &AttentionParams,
) -> f32 {
    let hd = p.head_dim;
    let group = p.n_head / p.n_kv_head;
    let stride = p.n_kv_head * hd;
    let off = (h / group) * hd;
    let (lo, hi) = visible_keys(pos, seq.kv_len, p.window);
    let score = |j: usize| {
        let row = seq.rows.row(j);
        let kr = head(k, row * stride + off, hd);
        let mut x = T::dot(q, kr) * p.scale;
        if p.softcap != 0.0 {
            x = p.softcap * (x / p.softcap).tanh();
        }
        x
    };
    let m = (lo..hi).map(score).fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        return m;
    }
    let s: f64 = (lo..hi).map(|j| ((score(j) - m) as f64).exp()).sum();
    m + s.ln() as f32
}

/// Multiply each (row, head) of an attention output `out` (`[rows][n_head][head_dim]`, the rows
/// of `seqs` in order, row `r` at `positions[r]`) by `1 / (1 + e^(sinks[h] − LSE))`, as if the
/// head's sink logit had been in the softmax.
///
/// # Errors
/// `LengthMismatch` when `sinks` is not one value per head or the buffers do not fit `seqs`.
pub fn apply_attention_sinks(
    q: &[f32],
    positions: &[i32],
    seqs: &[PagedSeq<'_>],
    p: &AttentionParams,
    sinks: &[f32],
    out: &mut [f32],
) -> Result<()> {
    let width = p.n_head * p.head_dim;
    let rows: usize = seqs.iter().map(|s| s.n_rows).sum();
    for (what, expected, actual) in [
        ("sinks", p.n_head, sinks.len()),
        ("positions", rows, positions.len()),
        ("q", rows * width, q.len()),
        ("out", rows * width, out.len()),
    ] {
        if expected != actual {
            return Err(TensorError::LengthMismatch {
                op: "attention sinks",
                what,
                expected,
                actual,
            });
        }
    }
    let hd = p.head_dim;
    let mut r = 0;
    for seq in seqs {
        for _ in 0..seq.n_rows {
            for h in 0..p.n_head {
                let qh = &q[r * width + h * hd..r * width + (h + 1) * hd];
                let l = match seq.k {
                    KvSlice::F32(k) => lse(qh, k, seq, positions[r], h, p),
                    KvSlice::F16(k) => lse(qh, k, seq, positions[r], h, p),
                    KvSlice::Q8_0(k) => lse(qh, k, seq, positions[r], h, p),
                    KvSlice::Q4_0(k) => lse(qh, k, seq, positions[r], h, p),
                };
                let f = if l == f32::NEG_INFINITY {
                    // No key: the sink takes all the weight, and values are zeros anyway.
                    0.0
                } else {
                    1.0 / (1.0 + (sinks[h] - l).exp())
                };
                for o in &mut out[r * width + h * hd..r * width + (h + 1) * hd] {
                    *o *= f;
                }
            }
            r += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{attention_paged_batch, KvRows};

    /// Against the definition: softmax over the scores plus the sink, in f64.
    #[test]
    fn sinks_match_the_softmax_with_an_extra_logit() {
        let (n_head, hd, kv_len) = (2usize, 8usize, 5usize);
        let p = AttentionParams {
            n_head,
            n_kv_head: 1,
            head_dim: hd,
            scale: 0.3,
            softcap: 0.0,
            window: 0,
        };
        let val = |i: usize| ((i * 37 % 17) as f32 - 8.0) / 5.0;
        let k: Vec<f32> = (0..kv_len * hd).map(val).collect();
        let v: Vec<f32> = (0..kv_len * hd).map(|i| val(i + 3)).collect();
        let q: Vec<f32> = (0..2 * n_head * hd).map(|i| val(i + 7)).collect();
        let positions = [3i32, 4];
        let seq = PagedSeq {
            n_rows: 2,
            k: KvSlice::F32(&k),
            v: KvSlice::F32(&v),
            kv_len,
            rows: KvRows::CONTIGUOUS,
        };
        let sinks = [0.7f32, -1.5];
        let mut out = vec![0f32; q.len()];
        attention_paged_batch(&q, &positions, &[seq], &p, &mut out).unwrap();
        apply_attention_sinks(&q, &positions, &[seq], &p, &sinks, &mut out).unwrap();
        for (r, &pos) in positions.iter().enumerate() {
            for h in 0..n_head {
                let qh = &q[(r * n_head + h) * hd..(r * n_head + h + 1) * hd];
                let scores: Vec<f64> = (0..=pos as usize)
                    .map(|j| {
                        (0..hd)
                            .map(|d| qh[d] as f64 * k[j * hd + d] as f64)
                            .sum::<f64>()
                            * p.scale as f64
                    })
                    .collect();
                let z: f64 = scores.iter().map(|s| s.exp()).sum::<f64>() + (sinks[h] as f64).exp();
                for d in 0..hd {
                    let want: f64 = scores
                        .iter()
                        .enumerate()
                        .map(|(j, s)| s.exp() / z * v[j * hd + d] as f64)
                        .sum();
                    let got = out[(r * n_head + h) * hd + d] as f64;
                    assert!(
                        (got - want).abs() < 1e-5,
                        "row {r} head {h} dim {d}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
