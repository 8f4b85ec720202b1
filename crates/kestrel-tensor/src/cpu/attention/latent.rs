//! Attention whose keys and values differ in size, as DeepSeek's multi-head latent attention
//! needs. In the absorbed form llama.cpp runs, the cache is latent: one row per position of
//! `head_dim_k` values (the normed latent followed by the rotated key part) and no values; a query
//! head scores the whole row, and its values are the row's first `head_dim_v` entries. In the
//! decompressed form (files with `attn_kv_b`), keys of `head_dim_k` and values of `head_dim_v`
//! per head are cached apart. Query heads read cache heads as GQA groups them. One online-softmax
//! pass per (row, head), parallel over them; f32 accumulation, keys and values read in the
//! cache's type.

use rayon::prelude::*;

use super::batch::PagedSeq;
use super::kv::{head, KvElem, KvSlice};
use super::params::visible_keys;
use crate::error::{Result, TensorError};

/// Settings of [`attention_latent`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatentAttentionParams {
    /// Query heads.
    pub n_head: usize,
    /// Cache heads (`n_head` a multiple of it).
    pub n_kv_head: usize,
    /// Values per cache row and head (and per query head).
    pub head_dim_k: usize,
    /// Leading values of each cache head that are its values (`<= head_dim_k`).
    pub head_dim_v: usize,
    /// Multiplies `q·k`.
    pub scale: f32,
    /// Logit soft cap (0: none).
    pub softcap: f32,
    /// Sliding window (0: none), as [`visible_keys`] reads it.
    pub window: usize,
    /// A latent cache: the values are the front of each key head, and `seq.v` is not read;
    /// otherwise `seq.v` holds `head_dim_v` values per cache head.
    pub values_in_keys: bool,
}

/// One (row, head): softmax over the visible keys of `scale · q·k`; values from `v` (`None`:
/// the front of the keys' heads).
#[allow(clippy::too_many_arguments)]
fn row_head<T: KvElem>(
    q: &[f32],
    k: &[T],
    v: Option<&[T]>,
    seq: &PagedSeq<'_>,
    pos: i32,
    h: usize,
    p: &LatentAttentionParams,
    out: &mut [f32],
) {
    let (dk, dv) = (p.head_dim_k, p.head_dim_v);
    let group = p.n_head / p.n_kv_head;
    let stride = p.n_kv_head * dk;
    let off = (h / group) * dk;
    let (v_stride, v_off) = (p.n_kv_head * dv, (h / group) * dv);
    out.fill(0.0);
    let (lo, hi) = visible_keys(pos, seq.kv_len, p.window);
    let mut m = f32::NEG_INFINITY;
    let mut sum = 0.0f32;
    for j in lo..hi {
        let row = seq.rows.row(j);
        let kr = head(k, row * stride + off, dk);
        let mut s = T::dot(q, kr) * p.scale;
        if p.softcap != 0.0 {
            s = p.softcap * (s / p.softcap).tanh();
        }
        if s > m {
            // Rescale what was accumulated to the new maximum.
            let c = (m - s).exp();
            if m != f32::NEG_INFINITY {
                out.iter_mut().for_each(|o| *o *= c);
                sum *= c;
            }
            m = s;
        }
        let w = (s - m).exp();
        sum += w;
        let vr = match v {
            Some(v) => head(v, row * v_stride + v_off, dv),
            None => head(k, row * stride + off, dv),
        };
        T::axpy(out, w, vr);
    }
    if sum > 0.0 {
        let inv = 1.0 / sum;
        out.iter_mut().for_each(|o| *o *= inv);
    }
}

/// Attention of the query rows `q` (`[rows][n_head][head_dim_k]`, the rows of `seqs` in order,
/// row `r` at `positions[r]`) over each sequence's cache (keys `seq.k`; values `seq.v`, or the
/// keys' front in a latent cache), writing `out` (`[rows][n_head][head_dim_v]`). A query that sees no key gets zeros. Tolerance
/// against an f64 reference: ~1e-5 relative for unit-scale inputs and an f32 cache.
///
/// # Errors
/// `InvalidParam` for zero or non-multiple head counts, a value size above the key size, or a
/// quantized cache whose sizes are not multiples of 32; `LengthMismatch` for buffers that do not
/// hold the rows of `seqs`, or a cache shorter than a sequence's positions.
pub fn attention_latent(
    q: &[f32],
    positions: &[i32],
    seqs: &[PagedSeq<'_>],
    p: &LatentAttentionParams,
    out: &mut [f32],
) -> Result<()> {
    const OP: &str = "latent attention";
    let bad = |why| Err(TensorError::InvalidParam { op: OP, why });
    if p.n_head == 0 || p.n_kv_head == 0 || !p.n_head.is_multiple_of(p.n_kv_head) {
        return bad("the query heads must be a non-zero multiple of the cache heads");
    }
    if p.head_dim_v == 0 || p.head_dim_v > p.head_dim_k {
        return bad("the value size must be between 1 and the key size");
    }
    let rows: usize = seqs
        .iter()
        .try_fold(0usize, |a, s| a.checked_add(s.n_rows))
        .unwrap_or(usize::MAX);
    let (qw, ow) = (p.n_head * p.head_dim_k, p.n_head * p.head_dim_v);
    for (what, expected, actual) in [
        ("positions", rows, positions.len()),
        ("q", rows.saturating_mul(qw), q.len()),
        ("out", rows.saturating_mul(ow), out.len()),
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
    let stride = p.n_kv_head * p.head_dim_k;
    for s in seqs {
        let quantized = matches!(s.k, KvSlice::Q8_0(_) | KvSlice::Q4_0(_));
        if quantized && (!p.head_dim_k.is_multiple_of(32) || !p.head_dim_v.is_multiple_of(32)) {
            return bad("a quantized cache needs head sizes that are multiples of 32");
        }
        let same_type = matches!(
            (s.k, s.v),
            (KvSlice::F32(_), KvSlice::F32(_))
                | (KvSlice::F16(_), KvSlice::F16(_))
                | (KvSlice::Q8_0(_), KvSlice::Q8_0(_))
                | (KvSlice::Q4_0(_), KvSlice::Q4_0(_))
        );
        if !p.values_in_keys && !same_type {
            return bad("keys and values of different types");
        }
        // The highest row any visible position maps to must be inside the cache.
        let top = (0..s.kv_len).map(|j| s.rows.row(j) + 1).max().unwrap_or(0);
        let mut need = vec![("k", top.saturating_mul(stride), s.k.len())];
        if !p.values_in_keys {
            let vs = p.n_kv_head * p.head_dim_v;
            need.push(("v", top.saturating_mul(vs), s.v.len()));
        }
        for (what, expected, actual) in need {
            if actual < expected {
                return Err(TensorError::LengthMismatch {
                    op: OP,
                    what,
                    expected,
                    actual,
                });
            }
        }
    }
    // (sequence, first row) of every row, so that each (row, head) item finds its cache.
    let mut starts = Vec::with_capacity(seqs.len());
    let mut r0 = 0;
    for (i, s) in seqs.iter().enumerate() {
        starts.push((r0, i));
        r0 += s.n_rows;
    }
    let dv = p.head_dim_v;
    out.par_chunks_mut(dv).enumerate().for_each(|(i, o)| {
        let (r, h) = (i / p.n_head, i % p.n_head);
        let si = match starts.binary_search_by(|&(first, _)| first.cmp(&r)) {
            Ok(mut x) => {
                // Sequences with no rows share a first row: take the last of them.
                while x + 1 < starts.len() && starts[x + 1].0 == r {
                    x += 1;
                }
                starts[x].1
            }
            Err(x) => starts[x - 1].1,
        };
        let seq = &seqs[si];
        let qh = &q[r * qw + h * p.head_dim_k..r * qw + (h + 1) * p.head_dim_k];
        let latent = p.values_in_keys;
        let pos = positions[r];
        // Keys and values of one type (checked above); a latent cache's values are its keys.
        match (seq.k, seq.v) {
            (KvSlice::F32(k), KvSlice::F32(v)) if !latent => {
                row_head(qh, k, Some(v), seq, pos, h, p, o)
            }
            (KvSlice::F16(k), KvSlice::F16(v)) if !latent => {
                row_head(qh, k, Some(v), seq, pos, h, p, o)
            }
            (KvSlice::Q8_0(k), KvSlice::Q8_0(v)) if !latent => {
                row_head(qh, k, Some(v), seq, pos, h, p, o)
            }
            (KvSlice::Q4_0(k), KvSlice::Q4_0(v)) if !latent => {
                row_head(qh, k, Some(v), seq, pos, h, p, o)
            }
            (KvSlice::F32(k), _) => row_head(qh, k, None, seq, pos, h, p, o),
            (KvSlice::F16(k), _) => row_head(qh, k, None, seq, pos, h, p, o),
            (KvSlice::Q8_0(k), _) => row_head(qh, k, None, seq, pos, h, p, o),
            (KvSlice::Q4_0(k), _) => row_head(qh, k, None, seq, pos, h, p, o),
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::KvRows;
    use half::f16;

    fn val(i: usize) -> f32 {
        ((i * 37 % 23) as f32 - 11.0) / 7.0
    }

    /// The definition in f64: softmax over the visible keys, values the keys' first `dv`.
    fn reference(
        q: &[f32],
        k: &[f32],
        pos: usize,
        p: &LatentAttentionParams,
        r: usize,
        h: usize,
    ) -> Vec<f64> {
        let (dk, dv) = (p.head_dim_k, p.head_dim_v);
        let kvh = h / (p.n_head / p.n_kv_head);
        let qh = &q[(r * p.n_head + h) * dk..(r * p.n_head + h + 1) * dk];
        let krow = |j: usize| &k[(j * p.n_kv_head + kvh) * dk..(j * p.n_kv_head + kvh + 1) * dk];
        let lo = if p.window > 0 {
            (pos + 1).saturating_sub(p.window)
        } else {
            0
        };
        let scores: Vec<f64> = (lo..=pos)
            .map(|j| {
                let d: f64 = qh
                    .iter()
                    .zip(krow(j))
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum();
                d * p.scale as f64
            })
            .collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
        (0..dv)
            .map(|d| {
                scores
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (s - m).exp() / z * krow(lo + i)[d] as f64)
                    .sum()
            })
            .collect()
    }

    #[test]
    fn matches_the_f64_definition_with_gqa_and_a_window() {
        for (n_head, n_kv_head, window) in [(4usize, 1usize, 0usize), (4, 2, 3)] {
            let p = LatentAttentionParams {
                n_head,
                n_kv_head,
                head_dim_k: 40,
                head_dim_v: 24,
                scale: 0.2,
                softcap: 0.0,
                window,
                values_in_keys: true,
            };
            let kv_len = 6;
            let k: Vec<f32> = (0..kv_len * n_kv_head * 40).map(val).collect();
            let positions = [4i32, 5];
            let q: Vec<f32> = (0..2 * n_head * 40).map(|i| val(i + 5)).collect();
            let seq = PagedSeq {
                n_rows: 2,
                k: KvSlice::F32(&k),
                v: KvSlice::F32(&[]),
                kv_len,
                rows: KvRows::CONTIGUOUS,
            };
            let mut out = vec![0f32; 2 * n_head * 24];
            attention_latent(&q, &positions, &[seq], &p, &mut out).unwrap();
            for (r, &pos) in positions.iter().enumerate() {
                for h in 0..n_head {
                    let want = reference(&q, &k, pos as usize, &p, r, h);
                    for (d, w) in want.iter().enumerate() {
                        let got = out[(r * n_head + h) * 24 + d] as f64;
                        assert!(
                            (got - w).abs() < 1e-5,
                            "row {r} head {h} dim {d}: {got} vs {w}"
                        );
                    }
                }
            }
        }
    }

    /// Two sequences in one call give what each gives alone, bit for bit; an f16 cache stays
    /// within f16 rounding of the f32 one.
    #[test]
    fn a_batch_equals_each_sequence_alone_and_f16_is_close() {
        let p = LatentAttentionParams {
            n_head: 2,
            n_kv_head: 1,
            head_dim_k: 64,
            head_dim_v: 32,
            scale: 0.125,
            softcap: 0.0,
            window: 0,
            values_in_keys: true,
        };
        let ka: Vec<f32> = (0..5 * 64).map(val).collect();
        let kb: Vec<f32> = (0..3 * 64).map(|i| val(i + 11)).collect();
        let q: Vec<f32> = (0..3 * 2 * 64).map(|i| val(i + 2)).collect();
        let positions = [3i32, 4, 2];
        let a = PagedSeq {
            n_rows: 2,
            k: KvSlice::F32(&ka),
            v: KvSlice::F32(&[]),
            kv_len: 5,
            rows: KvRows::CONTIGUOUS,
        };
        let b = PagedSeq {
            n_rows: 1,
            k: KvSlice::F32(&kb),
            kv_len: 3,
            ..a
        };
        let mut both = vec![0f32; 3 * 2 * 32];
        attention_latent(&q, &positions, &[a, b], &p, &mut both).unwrap();
        let mut alone_a = vec![0f32; 2 * 2 * 32];
        attention_latent(&q[..2 * 128], &positions[..2], &[a], &p, &mut alone_a).unwrap();
        let mut alone_b = vec![0f32; 2 * 32];
        attention_latent(&q[2 * 128..], &positions[2..], &[b], &p, &mut alone_b).unwrap();
        assert_eq!(&both[..128], &alone_a[..]);
        assert_eq!(&both[128..], &alone_b[..]);

        let ka16: Vec<f16> = ka.iter().map(|&x| f16::from_f32(x)).collect();
        let a16 = PagedSeq {
            k: KvSlice::F16(&ka16),
            ..a
        };
        let mut out16 = vec![0f32; 2 * 2 * 32];
        attention_latent(&q[..256], &positions[..2], &[a16], &p, &mut out16).unwrap();
        for (x, y) in out16.iter().zip(&alone_a) {
            assert!((x - y).abs() < 2e-3, "{x} vs {y}");
        }
    }

    /// Values cached apart, of their own size (the decompressed form), against the f64
    /// definition.
    #[test]
    fn values_of_their_own_size_match_the_definition() {
        let (n_head, n_kv_head, dk, dv) = (4usize, 2usize, 24usize, 16usize);
        let p = LatentAttentionParams {
            n_head,
            n_kv_head,
            head_dim_k: dk,
            head_dim_v: dv,
            scale: 0.3,
            softcap: 0.0,
            window: 0,
            values_in_keys: false,
        };
        let kv_len = 5;
        let k: Vec<f32> = (0..kv_len * n_kv_head * dk).map(val).collect();
        let v: Vec<f32> = (0..kv_len * n_kv_head * dv).map(|i| val(i + 9)).collect();
        let q: Vec<f32> = (0..n_head * dk).map(|i| val(i + 4)).collect();
        let seq = PagedSeq {
            n_rows: 1,
            k: KvSlice::F32(&k),
            v: KvSlice::F32(&v),
            kv_len,
            rows: KvRows::CONTIGUOUS,
        };
        let mut out = vec![0f32; n_head * dv];
        attention_latent(&q, &[4], &[seq], &p, &mut out).unwrap();
        for h in 0..n_head {
            let kvh = h / (n_head / n_kv_head);
            let qh = &q[h * dk..(h + 1) * dk];
            let s: Vec<f64> = (0..kv_len)
                .map(|j| {
                    let kr = &k[(j * n_kv_head + kvh) * dk..(j * n_kv_head + kvh + 1) * dk];
                    0.3 * qh
                        .iter()
                        .zip(kr)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
            for d in 0..dv {
                let want: f64 = (0..kv_len)
                    .map(|j| (s[j] - m).exp() / z * v[(j * n_kv_head + kvh) * dv + d] as f64)
                    .sum();
                let got = out[h * dv + d] as f64;
                assert!(
                    (got - want).abs() < 1e-5,
                    "head {h} dim {d}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn bad_sizes_are_errors() {
        let p = LatentAttentionParams {
            n_head: 2,
            n_kv_head: 1,
            head_dim_k: 8,
            head_dim_v: 16,
            scale: 1.0,
            softcap: 0.0,
            window: 0,
            values_in_keys: true,
        };
        let k = [0f32; 8];
        let seq = PagedSeq {
            n_rows: 1,
            k: KvSlice::F32(&k),
            v: KvSlice::F32(&[]),
            kv_len: 1,
            rows: KvRows::CONTIGUOUS,
        };
        let mut out = [0f32; 32];
        assert!(attention_latent(&[0.0; 16], &[0], &[seq], &p, &mut out).is_err());
        let p = LatentAttentionParams { head_dim_v: 4, ..p };
        let short = PagedSeq { kv_len: 2, ..seq };
        let mut out = [0f32; 8];
        assert!(attention_latent(&[0.0; 16], &[1], &[short], &p, &mut out).is_err());
    }
}
