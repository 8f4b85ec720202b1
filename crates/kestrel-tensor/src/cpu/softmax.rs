//! Row softmax, numerically stable (max subtracted), with ggml `soft_max_ext`'s optional scale
//! and additive mask and an optional Gemma-2-style soft cap:
//! `y = softmax(cap * tanh(x * scale / cap) + mask)` (no cap: `softmax(x * scale + mask)`).

use rayon::prelude::*;

use crate::error::{Result, TensorError};

/// Softmax settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftmaxParams {
    /// Multiplies the input first (1 for none).
    pub scale: f32,
    /// Soft cap `c`: `c * tanh(x / c)` after scaling (0 for none).
    pub softcap: f32,
}

impl Default for SoftmaxParams {
    fn default() -> Self {
        SoftmaxParams {
            scale: 1.0,
            softcap: 0.0,
        }
    }
}

/// Softmax of each `row_len`-long row of `x`, in place. `mask`, when given, is added after scale
/// and cap; it is either one row (`row_len` values, shared by all rows) or one row per row of
/// `x`. A row whose every entry is `-inf` becomes all zeros (nothing to attend to).
///
/// Tolerance against an f64 reference: ~1e-6 absolute.
pub fn softmax(
    x: &mut [f32],
    row_len: usize,
    p: &SoftmaxParams,
    mask: Option<&[f32]>,
) -> Result<()> {
    const OP: &str = "softmax";
    if row_len == 0 || !x.len().is_multiple_of(row_len) {
        return Err(TensorError::InvalidParam {
            op: OP,
            why: "input is not a whole number of non-empty rows",
        });
    }
    let per_row = match mask {
        None => false,
        Some(m) if m.len() == row_len => false,
        Some(m) if m.len() == x.len() => true,
        Some(m) => {
            return Err(TensorError::LengthMismatch {
                op: OP,
                what: "mask",
                expected: x.len(),
                actual: m.len(),
            })
        }
    };
    x.par_chunks_mut(row_len)
        .enumerate()
        .with_min_len((4096 / row_len).max(1))
        .for_each(|(r, row)| {
            let m = mask.map(|m| {
                if per_row {
                    &m[r * row_len..(r + 1) * row_len]
                } else {
                    m
                }
            });
            softmax_row(row, p, m);
        });
    Ok(())
}

/// Softmax of one row in place (see [`softmax`]).
pub fn softmax_row(row: &mut [f32], p: &SoftmaxParams, mask: Option<&[f32]>) {
    let mut max = f32::NEG_INFINITY;
    for (i, v) in row.iter_mut().enumerate() {
        let mut s = *v * p.scale;
        if p.softcap != 0.0 {
            s = p.softcap * (s / p.softcap).tanh();
        }
        if let Some(m) = mask {
            s += m[i];
        }
        *v = s;
        max = max.max(s);
    }
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let mut sum = 0f64;
    for v in row.iter_mut() {
        let e = (*v - max).exp();
        *v = e;
        sum += e as f64;
    }
    let inv = (1.0 / sum) as f32;
    row.iter_mut().for_each(|v| *v *= inv);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{max_abs_diff, Rng};

    fn reference(x: &[f32], n: usize, p: &SoftmaxParams, mask: Option<&[f32]>) -> Vec<f64> {
        let mut out = vec![0f64; x.len()];
        for (r, row) in x.chunks(n).enumerate() {
            let s: Vec<f64> = row
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let mut s = v as f64 * p.scale as f64;
                    if p.softcap != 0.0 {
                        let c = p.softcap as f64;
                        s = c * (s / c).tanh();
                    }
                    s + mask.map_or(0.0, |m| m[if m.len() == n { i } else { r * n + i }] as f64)
                })
                .collect();
            let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = s.iter().map(|v| (v - max).exp()).sum();
            for i in 0..n {
                out[r * n + i] = (s[i] - max).exp() / sum;
            }
        }
        out
    }

    #[test]
    fn matches_f64_with_scale_cap_and_masks() {
        let mut rng = Rng::new(9);
        let (rows, n) = (6, 50);
        let x = rng.vec(rows * n, 20.0);
        let row_mask: Vec<f32> = (0..n)
            .map(|i| {
                if i % 7 == 3 {
                    f32::NEG_INFINITY
                } else {
                    rng.f32()
                }
            })
            .collect();
        let full_mask = rng.vec(rows * n, 2.0);
        for p in [
            SoftmaxParams::default(),
            SoftmaxParams {
                scale: 0.125,
                softcap: 0.0,
            },
            SoftmaxParams {
                scale: 0.5,
                softcap: 5.0,
            },
        ] {
            for mask in [None, Some(row_mask.as_slice()), Some(full_mask.as_slice())] {
                let mut y = x.clone();
                softmax(&mut y, n, &p, mask).unwrap();
                let want = reference(&x, n, &p, mask);
                assert!(max_abs_diff(&y, &want) < 1e-6, "{p:?}");
            }
        }
    }

    #[test]
    fn fully_masked_rows_are_zero_and_large_inputs_are_stable() {
        let mut x = vec![1e30f32, 1e30, 0.0];
        softmax(&mut x, 3, &SoftmaxParams::default(), None).unwrap();
        assert_eq!(x, vec![0.5, 0.5, 0.0]);
        let mut x = vec![1.0f32, 2.0];
        let m = [f32::NEG_INFINITY; 2];
        softmax(&mut x, 2, &SoftmaxParams::default(), Some(&m)).unwrap();
        assert_eq!(x, vec![0.0, 0.0]);
        assert!(softmax(&mut x, 2, &SoftmaxParams::default(), Some(&[0.0; 3])).is_err());
        assert!(softmax(&mut x, 3, &SoftmaxParams::default(), None).is_err());
    }
}
