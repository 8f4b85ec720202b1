//! Elementwise ops and activations on f32 slices: `add`, `mul` (with row broadcast of the second
//! operand), `scale`, `silu`, `gelu` (tanh approximation), the fused gated units `swiglu`
//! (`silu(gate) * up`) and `geglu` (`gelu(gate) * up`), and `argmax`.
//!
//! These are memory-bound one-pass loops; they run on the calling thread (a rayon split costs
//! more than it saves at the sizes of one decode step) except above [`PAR_MIN`] elements.
//!
//! GELU: ggml's CPU `ggml_gelu` is `0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))`; builds with
//! `GGML_GELU_FP16` (the default) look it up in a table indexed by the f16-rounded input and
//! return 0 for `x <= -10` and `x` for `x >= 10`. kestrel computes the exact formula in f32, so it
//! can differ from such a build by the f16 rounding of input and output (~1e-3 relative).

use rayon::prelude::*;

use crate::error::{Result, TensorError};

/// Slices longer than this are split over the rayon pool.
pub const PAR_MIN: usize = 1 << 16;

const PAR_CHUNK: usize = 1 << 14;

fn same_len(op: &'static str, what: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected != actual {
        return Err(TensorError::LengthMismatch {
            op,
            what,
            expected,
            actual,
        });
    }
    Ok(())
}

/// `b` either as long as `a` or one row that `a` is a whole number of.
fn broadcast_ok(op: &'static str, a: usize, b: usize) -> Result<()> {
    if b == a || (b > 0 && a % b == 0) {
        Ok(())
    } else {
        Err(TensorError::LengthMismatch {
            op,
            what: "second operand (same length or one row of the first)",
            expected: a,
            actual: b,
        })
    }
}

/// Runs `f(out_chunk, offset)` over `out`, in parallel when it is long.
fn for_chunks(out: &mut [f32], f: impl Fn(&mut [f32], usize) + Sync) {
    if out.len() >= PAR_MIN {
        out.par_chunks_mut(PAR_CHUNK)
            .enumerate()
            .for_each(|(i, c)| f(c, i * PAR_CHUNK));
    } else {
        f(out, 0);
    }
}

fn binary(
    op: &'static str,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    f: impl Fn(f32, f32) -> f32 + Sync,
) -> Result<()> {
    broadcast_ok(op, a.len(), b.len())?;
    same_len(op, "out", a.len(), out.len())?;
    if a.is_empty() {
        return Ok(());
    }
    let bl = b.len();
    for_chunks(out, |o, off| {
        for (i, y) in o.iter_mut().enumerate() {
            let j = off + i;
            *y = f(a[j], b[j % bl]);
        }
    });
    Ok(())
}

fn binary_assign(
    op: &'static str,
    a: &mut [f32],
    b: &[f32],
    f: impl Fn(f32, f32) -> f32 + Sync,
) -> Result<()> {
    broadcast_ok(op, a.len(), b.len())?;
    if a.is_empty() {
        return Ok(());
    }
    let bl = b.len();
    for_chunks(a, |o, off| {
        for (i, y) in o.iter_mut().enumerate() {
            *y = f(*y, b[(off + i) % bl]);
        }
    });
    Ok(())
}

/// `out = a + b` (`b` the same length as `a`, or one row broadcast over `a`'s rows).
pub fn add(a: &[f32], b: &[f32], out: &mut [f32]) -> Result<()> {
    binary("add", a, b, out, |x, y| x + y)
}

/// `a += b` (with the same broadcast as [`add`]).
pub fn add_assign(a: &mut [f32], b: &[f32]) -> Result<()> {
    binary_assign("add_assign", a, b, |x, y| x + y)
}

/// `out = a * b` (with the same broadcast as [`add`]).
pub fn mul(a: &[f32], b: &[f32], out: &mut [f32]) -> Result<()> {
    binary("mul", a, b, out, |x, y| x * y)
}

/// `a *= b` (with the same broadcast as [`add`]).
pub fn mul_assign(a: &mut [f32], b: &[f32]) -> Result<()> {
    binary_assign("mul_assign", a, b, |x, y| x * y)
}

/// `x *= s`.
pub fn scale(x: &mut [f32], s: f32) {
    for_chunks(x, |c, _| c.iter_mut().for_each(|v| *v *= s));
}

/// SiLU of one value: `x / (1 + e^-x)`.
#[inline]
pub fn silu_f32(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU (tanh approximation) of one value, ggml's formula computed exactly in f32.
#[inline]
pub fn gelu_f32(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// `x = silu(x)`.
pub fn silu(x: &mut [f32]) {
    for_chunks(x, |c, _| c.iter_mut().for_each(|v| *v = silu_f32(*v)));
}

/// `x = gelu(x)` (tanh approximation).
pub fn gelu(x: &mut [f32]) {
    for_chunks(x, |c, _| c.iter_mut().for_each(|v| *v = gelu_f32(*v)));
}

/// `out = silu(gate) * up`.
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<()> {
    same_len("swiglu", "up", gate.len(), up.len())?;
    binary("swiglu", gate, up, out, |g, u| silu_f32(g) * u)
}

/// `out = gelu(gate) * up`.
pub fn geglu(gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<()> {
    same_len("geglu", "up", gate.len(), up.len())?;
    binary("geglu", gate, up, out, |g, u| gelu_f32(g) * u)
}

/// Index of the largest value; ties go to the lowest index, NaNs are never chosen unless they
/// come first (llama.cpp's greedy sampler compares with `>` from index 0). `None` if empty.
pub fn argmax(x: &[f32]) -> Option<usize> {
    let first = *x.first()?;
    let mut best = 0;
    let mut bv = first;
    for (i, &v) in x.iter().enumerate().skip(1) {
        if v > bv {
            best = i;
            bv = v;
        }
    }
    Some(best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{max_abs_diff, Rng};

    fn silu64(x: f64) -> f64 {
        x / (1.0 + (-x).exp())
    }

    fn gelu64(x: f64) -> f64 {
        0.5 * x
            * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * x * (1.0 + 0.044715 * x * x)).tanh())
    }

    #[test]
    fn binary_ops_broadcast_and_check_lengths() {
        let a = [1f32, 2.0, 3.0, 4.0];
        let mut out = [0f32; 4];
        add(&a, &[10.0, 20.0], &mut out).unwrap();
        assert_eq!(out, [11.0, 22.0, 13.0, 24.0]);
        mul(&a, &a, &mut out).unwrap();
        assert_eq!(out, [1.0, 4.0, 9.0, 16.0]);
        let mut b = a;
        add_assign(&mut b, &[1.0]).unwrap();
        assert_eq!(b, [2.0, 3.0, 4.0, 5.0]);
        mul_assign(&mut b, &[2.0, 0.5, 1.0, 0.0]).unwrap();
        assert_eq!(b, [4.0, 1.5, 4.0, 0.0]);
        scale(&mut b, 0.5);
        assert_eq!(b, [2.0, 0.75, 2.0, 0.0]);
        assert!(add(&a, &[1.0, 2.0, 3.0], &mut out).is_err());
        assert!(add(&a, &[], &mut out).is_err());
        assert!(add(&a, &a, &mut out[..3]).is_err());
        assert!(swiglu(&a, &a[..2], &mut out).is_err());
    }

    #[test]
    fn activations_match_f64() {
        let mut rng = Rng::new(31);
        // Long enough to take the parallel path.
        let n = PAR_MIN + 123;
        let g = rng.vec(n, 8.0);
        let u = rng.vec(n, 2.0);
        let mut out = vec![0f32; n];
        swiglu(&g, &u, &mut out).unwrap();
        let want: Vec<f64> = g
            .iter()
            .zip(&u)
            .map(|(&g, &u)| silu64(g as f64) * u as f64)
            .collect();
        assert!(max_abs_diff(&out, &want) < 1e-5);
        geglu(&g, &u, &mut out).unwrap();
        let want: Vec<f64> = g
            .iter()
            .zip(&u)
            .map(|(&g, &u)| gelu64(g as f64) * u as f64)
            .collect();
        assert!(max_abs_diff(&out, &want) < 1e-5);
        let mut x = g.clone();
        silu(&mut x);
        let want: Vec<f64> = g.iter().map(|&g| silu64(g as f64)).collect();
        assert!(max_abs_diff(&x, &want) < 1e-5);
        let mut x = g.clone();
        gelu(&mut x);
        let want: Vec<f64> = g.iter().map(|&g| gelu64(g as f64)).collect();
        assert!(max_abs_diff(&x, &want) < 1e-5);
        // Extremes stay finite.
        assert_eq!(gelu_f32(-100.0), 0.0);
        assert_eq!(gelu_f32(100.0), 100.0);
        assert_eq!(silu_f32(-200.0), 0.0);
    }

    #[test]
    fn argmax_ties_go_low() {
        assert_eq!(argmax(&[]), None);
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), Some(1));
        assert_eq!(argmax(&[f32::NAN, 1.0]), Some(0));
        assert_eq!(argmax(&[0.0, f32::NAN, 1.0]), Some(2));
        assert_eq!(argmax(&[-1.0, -0.5, f32::NEG_INFINITY]), Some(1));
    }
}
