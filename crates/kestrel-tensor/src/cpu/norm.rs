//! Row normalizations: `rms_norm` (llama.cpp's `x / sqrt(mean(x²) + eps)`, optionally times a
//! weight) and `layer_norm` (`(x - mean) / sqrt(var + eps) * w + b`). Sums are accumulated in
//! f64, as ggml accumulates them in `ggml_float` (double), of terms rounded to f32 as ggml's are.

use rayon::prelude::*;

use crate::error::{Result, TensorError};

/// Rows shorter than this are normalized several to a task.
const MIN_ELEMS_PER_TASK: usize = 4096;

fn check(op: &'static str, x: usize, row_len: usize, out: usize) -> Result<()> {
    if row_len == 0 || !x.is_multiple_of(row_len) {
        return Err(TensorError::InvalidParam {
            op,
            why: "input is not a whole number of non-empty rows",
        });
    }
    if out != x {
        return Err(TensorError::LengthMismatch {
            op,
            what: "out",
            expected: x,
            actual: out,
        });
    }
    Ok(())
}

fn check_vec(
    op: &'static str,
    what: &'static str,
    v: Option<&[f32]>,
    row_len: usize,
) -> Result<()> {
    match v {
        Some(v) if v.len() != row_len => Err(TensorError::LengthMismatch {
            op,
            what,
            expected: row_len,
            actual: v.len(),
        }),
        _ => Ok(()),
    }
}

fn min_rows(row_len: usize) -> usize {
    (MIN_ELEMS_PER_TASK / row_len.max(1)).max(1)
}

/// RMS norm of each `row_len`-long row of `x` into `out`: `x / sqrt(mean(x²) + eps) * weight`
/// (no multiply when `weight` is `None`). `out` may not alias `x`; see [`rms_norm_inplace`].
///
/// Tolerance against an f64 reference: ~1e-6 relative (the f64 sum, then f32 scaling).
pub fn rms_norm(
    x: &[f32],
    row_len: usize,
    weight: Option<&[f32]>,
    eps: f32,
    out: &mut [f32],
) -> Result<()> {
    check("rms_norm", x.len(), row_len, out.len())?;
    check_vec("rms_norm", "weight", weight, row_len)?;
    out.par_chunks_mut(row_len)
        .zip(x.par_chunks(row_len))
        .with_min_len(min_rows(row_len))
        .for_each(|(o, xr)| {
            let scale = rms_scale(xr, eps);
            match weight {
                Some(w) => {
                    for ((o, &v), &w) in o.iter_mut().zip(xr).zip(w) {
                        *o = v * scale * w;
                    }
                }
                None => {
                    for (o, &v) in o.iter_mut().zip(xr) {
                        *o = v * scale;
                    }
                }
            }
        });
    Ok(())
}

/// [`rms_norm`] in place.
pub fn rms_norm_inplace(
    x: &mut [f32],
    row_len: usize,
    weight: Option<&[f32]>,
    eps: f32,
) -> Result<()> {
    check("rms_norm", x.len(), row_len, x.len())?;
    check_vec("rms_norm", "weight", weight, row_len)?;
    x.par_chunks_mut(row_len)
        .with_min_len(min_rows(row_len))
        .for_each(|xr| {
            let scale = rms_scale(xr, eps);
            match weight {
                Some(w) => xr.iter_mut().zip(w).for_each(|(v, &w)| *v = *v * scale * w),
                None => xr.iter_mut().for_each(|v| *v *= scale),
            }
        });
    Ok(())
}

/// `1 / sqrt(mean(x²) + eps)` as ggml's `ggml_compute_forward_rms_norm_f32` computes it: each
/// square rounded to f32 (`(ggml_float)(x*x)`), then summed in order in f64. Squaring in f64
/// instead changed the f32 mean by an ulp on a few rows in a hundred, which was enough to move
/// Gemma 3's decode logits by up to 0.6 against llama.cpp's.
#[inline]
fn rms_scale(xr: &[f32], eps: f32) -> f32 {
    let sum: f64 = xr.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / xr.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// Layer norm of each row: `(x - mean) / sqrt(var + eps) * weight + bias` (population variance;
/// weight and bias optional, as ggml's `ggml_norm` followed by mul/add).
///
/// Tolerance against an f64 reference: ~1e-5 relative.
pub fn layer_norm(
    x: &[f32],
    row_len: usize,
    weight: Option<&[f32]>,
    bias: Option<&[f32]>,
    eps: f32,
    out: &mut [f32],
) -> Result<()> {
    check("layer_norm", x.len(), row_len, out.len())?;
    check_vec("layer_norm", "weight", weight, row_len)?;
    check_vec("layer_norm", "bias", bias, row_len)?;
    out.par_chunks_mut(row_len)
        .zip(x.par_chunks(row_len))
        .with_min_len(min_rows(row_len))
        .for_each(|(o, xr)| {
            let n = xr.len() as f64;
            let mean = (xr.iter().map(|&v| v as f64).sum::<f64>() / n) as f32;
            let var: f64 = xr
                .iter()
                .map(|&v| {
                    let d = (v - mean) as f64;
                    d * d
                })
                .sum::<f64>()
                / n;
            let scale = 1.0 / (var as f32 + eps).sqrt();
            for (i, (o, &v)) in o.iter_mut().zip(xr).enumerate() {
                let mut y = (v - mean) * scale;
                if let Some(w) = weight {
                    y *= w[i];
                }
                if let Some(b) = bias {
                    y += b[i];
                }
                *o = y;
            }
        });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{max_abs_diff, Rng};

    #[test]
    fn rms_norm_matches_f64() {
        let mut rng = Rng::new(1);
        let (rows, k, eps) = (5, 96, 1e-6f32);
        let x = rng.vec(rows * k, 3.0);
        let w = rng.vec(k, 2.0);
        let mut want = vec![0f64; rows * k];
        let mut want_nw = vec![0f64; rows * k];
        for r in 0..rows {
            let xr = &x[r * k..(r + 1) * k];
            let ms: f64 = xr.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / k as f64;
            let s = 1.0 / (ms + eps as f64).sqrt();
            for j in 0..k {
                want[r * k + j] = xr[j] as f64 * s * w[j] as f64;
                want_nw[r * k + j] = xr[j] as f64 * s;
            }
        }
        let mut out = vec![0f32; rows * k];
        rms_norm(&x, k, Some(&w), eps, &mut out).unwrap();
        assert!(max_abs_diff(&out, &want) < 1e-5);
        rms_norm(&x, k, None, eps, &mut out).unwrap();
        assert!(max_abs_diff(&out, &want_nw) < 1e-5);
        let mut y = x.clone();
        rms_norm_inplace(&mut y, k, Some(&w), eps).unwrap();
        assert!(max_abs_diff(&y, &want) < 1e-5);
        assert!(rms_norm(&x, 7, None, eps, &mut out).is_err());
        assert!(rms_norm(&x, k, Some(&w[1..]), eps, &mut out).is_err());
        assert!(rms_norm(&x, 0, None, eps, &mut out).is_err());
    }

    /// The scale is ggml's to the bit: squares rounded to f32 before the f64 sum. Rows where
    /// exact (f64) squares would give another f32 mean exist among random ones; on those the
    /// output must follow ggml's expression.
    #[test]
    fn rms_norm_rounds_squares_as_ggml() {
        let mut rng = Rng::new(3);
        let (k, eps) = (640, 1e-6f32);
        let mut discriminating = 0;
        for _ in 0..400 {
            let x = rng.vec(k, 3.0);
            let ggml_sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
            let exact_sum: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
            let ggml_scale = 1.0 / ((ggml_sum / k as f64) as f32 + eps).sqrt();
            let exact_scale = 1.0 / ((exact_sum / k as f64) as f32 + eps).sqrt();
            if ggml_scale == exact_scale {
                continue;
            }
            discriminating += 1;
            let mut out = vec![0f32; k];
            rms_norm(&x, k, None, eps, &mut out).unwrap();
            for (o, &v) in out.iter().zip(&x) {
                assert_eq!(o.to_bits(), (v * ggml_scale).to_bits());
            }
        }
        assert!(discriminating > 0, "no row told the two roundings apart");
    }

    #[test]
    fn layer_norm_matches_f64() {
        let mut rng = Rng::new(2);
        let (rows, k, eps) = (4, 80, 1e-5f32);
        let x: Vec<f32> = rng.vec(rows * k, 2.0).iter().map(|v| v + 0.7).collect();
        let w = rng.vec(k, 1.5);
        let b = rng.vec(k, 0.5);
        let mut want = vec![0f64; rows * k];
        for r in 0..rows {
            let xr: Vec<f64> = x[r * k..(r + 1) * k].iter().map(|&v| v as f64).collect();
            let mean = xr.iter().sum::<f64>() / k as f64;
            let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / k as f64;
            for j in 0..k {
                want[r * k + j] =
                    (xr[j] - mean) / (var + eps as f64).sqrt() * w[j] as f64 + b[j] as f64;
            }
        }
        let mut out = vec![0f32; rows * k];
        layer_norm(&x, k, Some(&w), Some(&b), eps, &mut out).unwrap();
        assert!(max_abs_diff(&out, &want) < 1e-5);
    }
}
