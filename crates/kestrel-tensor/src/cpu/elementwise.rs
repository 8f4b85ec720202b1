//! Elementwise ops and activations on f32 slices: `add`, `mul` (with row broadcast of the second
//! operand), `scale`, `silu`, `gelu` (tanh approximation), the fused gated units `swiglu`
//! (`silu(gate) * up`) and `geglu` (`gelu(gate) * up`), and `argmax`.
//!
//! These are memory-bound one-pass loops; they run on the calling thread (a rayon split costs
//! more than it saves at the sizes of one decode step) except above [`PAR_MIN`] elements.
//!
//! The activations round as ggml's x86 CPU build does, because llama.cpp's logits depend on it
//! (a one-ulp difference in one activation can flip the q8 rounding of the next matmul's input):
//!
//! - SiLU (`silu`, `swiglu`): ggml's AVX512 `ggml_v_silu` on whole groups of 16 values,
//!   `x / (1 + ggml_v_expf(0 - x))`, where `ggml_v_expf` is a polynomial with FMAs (≤ 1.5 ulp
//!   from `exp`), emulated lane by lane here ([`silu_ggml`]); the last `len % 16` values of a
//!   slice use `x / (1 + expf(-x))` as ggml's scalar tail does. ggml restarts the groups of 16 at
//!   each row, so a slice of several rows matches it exactly when the row length is a multiple of
//!   16 (every FFN width in practice).
//! - GELU (`gelu`, `geglu`): ggml builds with `GGML_GELU_FP16` look the value up in a table
//!   indexed by the f16-rounded input, holding `f16(gelu(x))`, and return 0 for `x <= -10` and `x`
//!   for `x >= 10` ([`gelu_ggml`]); so the result is rounded to f16 (~5e-4 relative).
//!
//! [`silu_f32`] and [`gelu_f32`] are the plain formulas in f32.

use half::f16;
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
    if b == a || (b > 0 && a.is_multiple_of(b)) {
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
    for_chunks(out, |o, off| {
        by_rows_of(b, o, off, |o, b, j| {
            let n = o.len();
            for ((y, &x), &b) in o.iter_mut().zip(&a[j..j + n]).zip(b) {
                *y = f(x, b);
            }
        })
    });
    Ok(())
}

/// Calls `f(piece of o, b over it, index of the piece's start)` over the pieces of `o` (whose
/// first element is element `off` of a slice of rows of `b.len()`) that lie within one row:
/// zipped loops the compiler vectorizes, instead of an index modulo per element.
#[inline(always)]
fn by_rows_of(b: &[f32], o: &mut [f32], off: usize, mut f: impl FnMut(&mut [f32], &[f32], usize)) {
    let bl = b.len();
    let (mut j, mut rest) = (off, o);
    while !rest.is_empty() {
        let p = j % bl;
        let n = (bl - p).min(rest.len());
        let (piece, t) = rest.split_at_mut(n);
        f(piece, &b[p..p + n], j);
        j += n;
        rest = t;
    }
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
    for_chunks(a, |o, off| {
        by_rows_of(b, o, off, |o, b, _| {
            for (y, &b) in o.iter_mut().zip(b) {
                *y = f(*y, b);
            }
        })
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

/// SiLU of one value: `x / (1 + e^-x)` (ggml's scalar `ggml_silu_f32`, libm `expf`).
#[inline]
pub fn silu_f32(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU (tanh approximation) of one value, ggml's `ggml_gelu_f32` formula computed in f32.
#[inline]
pub fn gelu_f32(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6; // the same f32 as ggml's 0.79788456080286535587989211986876f
    const GELU_COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// `erf(x)` (Abramowitz & Stegun 7.1.26, absolute error below 1.5e-7, computed in f64): Rust's
/// `f64::erf` is not stable.
#[inline]
pub fn erf(x: f64) -> f64 {
    const P: f64 = 0.327_591_1;
    const A: [f64; 5] = [
        0.254_829_592,
        -0.284_496_736,
        1.421_413_741,
        -1.453_152_027,
        1.061_405_429,
    ];
    let ax = x.abs();
    let t = 1.0 / (1.0 + P * ax);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let y = 1.0 - poly * (-ax * ax).exp();
    if x < 0.0 {
        -y
    } else {
        y
    }
}

/// Exact GELU of one value: `x/2 · (1 + erf(x/√2))` (PyTorch's default `nn.GELU`, BERT's FFN).
#[inline]
pub fn gelu_erf_f32(x: f32) -> f32 {
    let x = f64::from(x);
    (0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2))) as f32
}

/// GELU as ggml's `GGML_GELU_FP16` builds compute it: 0 for `x <= -10`, `x` for `x >= 10`, else
/// `f16(gelu(f16(x)))` (the table lookup), widened back to f32.
#[inline]
pub fn gelu_ggml(x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        let table = GELU_TABLE.get_or_init(gelu_table);
        f16::from_bits(table[usize::from(f16::from_f32(x).to_bits())]).to_f32()
    }
}

/// `f16(gelu(h))` for every f16 bit pattern `h`, built once (as ggml's `ggml_cpu_init` does),
/// so GELU costs a lookup rather than a `tanh` per value.
static GELU_TABLE: std::sync::OnceLock<Box<[u16]>> = std::sync::OnceLock::new();

fn gelu_table() -> Box<[u16]> {
    (0..=u16::MAX)
        .map(|b| f16::from_f32(gelu_table_entry(f16::from_bits(b).to_f32())).to_bits())
        // One entry past the last: the AVX-512 GeGLU gathers 4 bytes at each entry.
        .chain([0])
        .collect()
}

/// `ggml_gelu_f32` as the table in ggml's `ggml_cpu_init` computes it: GCC contracts
/// `1 + GELU_COEF_A*x*x` into one FMA there (checked against libggml-cpu: without it 3 of 4608
/// values land on the other side of an f16 rounding boundary).
#[inline]
fn gelu_table_entry(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6; // the same f32 as ggml's 0.79788456080286535587989211986876f
    const GELU_COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (GELU_COEF_A * x).mul_add(x, 1.0)).tanh())
}

/// One lane of ggml's AVX512 `ggml_v_expf` (an Arm optimized-routines polynomial, max error
/// ~1.5 ulp): `2^n · p(b)` with `n = round(x·log2 e)`, `b = x - n·ln 2` in two FMA steps, `p` a
/// degree-5 polynomial evaluated with FMAs, then `_mm512_scalef_ps`; `|n| > 192` gives 0 or ∞.
#[inline(always)]
fn v_expf(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // log2(e)
    let n = z - r;
    let b = (-n).mul_add(
        f32::from_bits(0x35bf_be8e),                  // ln2 low part
        (-n).mul_add(f32::from_bits(0x3f31_7200), x), // ln2 high part
    );
    let u = b * b;
    let j = f32::from_bits(0x3c07_2010)
        .mul_add(b, f32::from_bits(0x3d2b_9f17))
        .mul_add(
            u,
            f32::from_bits(0x3e2a_af33).mul_add(b, f32::from_bits(0x3eff_fedb)),
        )
        .mul_add(u, f32::from_bits(0x3f7f_fff6).mul_add(b, 1.0));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    scalef(j, n)
}

/// `_mm512_scalef_ps(j, n)` for an integral `n` with `|n| <= 192`: `j · 2^n`, rounded once.
#[inline(always)]
fn scalef(j: f32, n: f32) -> f32 {
    let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    let k = n as i32;
    if (-126..=127).contains(&k) {
        j * pow2(k)
    } else {
        // The first product stays normal and exact; the second rounds once.
        let k1 = k / 2;
        j * pow2(k1) * pow2(k - k1)
    }
}

/// SiLU as ggml's AVX512 `ggml_v_silu` computes one lane: `x / (1 + ggml_v_expf(0 - x))`.
#[inline(always)]
pub fn silu_ggml(x: f32) -> f32 {
    x / (1.0 + v_expf(0.0 - x))
}

/// Sets each `out[j] = f(j, out[j])` with ggml's split: whole groups of 16 from the start of
/// the slice take `simd`, the last `len % 16` take `tail`. Compiled with FMA where the CPU has
/// it, so the emulated vector FMAs are single instructions rather than libm calls.
fn silu_like<S, T>(out: &mut [f32], simd: S, tail: T)
where
    S: Fn(usize, f32) -> f32 + Sync,
    T: Fn(usize, f32) -> f32 + Sync,
{
    let n = out.len();
    let vec_end = n - n % 16;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        #[target_feature(enable = "fma")]
        fn with_fma<S: Fn(usize, f32) -> f32, T: Fn(usize, f32) -> f32>(
            o: &mut [f32],
            off: usize,
            vec_end: usize,
            simd: &S,
            tail: &T,
        ) {
            apply(o, off, vec_end, simd, tail)
        }
        // SAFETY: the CPU has FMA (checked above).
        for_chunks(out, |o, off| unsafe {
            with_fma(o, off, vec_end, &simd, &tail)
        });
        return;
    }
    for_chunks(out, |o, off| apply(o, off, vec_end, &simd, &tail));
}

/// The loop of [`silu_like`] over one chunk starting at element `off`.
#[inline(always)]
fn apply<S: Fn(usize, f32) -> f32, T: Fn(usize, f32) -> f32>(
    o: &mut [f32],
    off: usize,
    vec_end: usize,
    simd: &S,
    tail: &T,
) {
    for (i, y) in o.iter_mut().enumerate() {
        let j = off + i;
        *y = if j < vec_end {
            simd(j, *y)
        } else {
            tail(j, *y)
        };
    }
}

/// Whether the AVX-512 SiLU (`x86_64::silu`) runs here.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn simd_silu() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::isa::active_isa() >= super::isa::Isa::Avx512
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Runs `groups(whole groups of 16, index of the first)` over the leading `len - len % 16`
/// values of `out` (ggml's split: the chunks of `for_chunks` start at multiples of 16, so their
/// groups are ggml's) and `out[j] = tail(j, out[j])` over the rest.
#[cfg(target_arch = "x86_64")]
fn groups_then_tail(
    out: &mut [f32],
    groups: impl Fn(&mut [f32], usize) + Sync,
    tail: impl Fn(usize, f32) -> f32 + Sync,
) {
    let vec_end = out.len() - out.len() % 16;
    for_chunks(out, |o, off| {
        let v = vec_end.saturating_sub(off).min(o.len());
        let (head, rest) = o.split_at_mut(v);
        groups(head, off);
        for (i, y) in rest.iter_mut().enumerate() {
            *y = tail(off + v + i, *y);
        }
    });
}

/// `x = silu(x)`, rounding as ggml's `ggml_vec_silu_f32` (see the module docs).
pub fn silu(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd_silu() {
        // SAFETY: the active ISA is AVX-512, so the CPU has the kernel's features.
        groups_then_tail(
            x,
            |h, _| unsafe { super::x86_64::silu::silu(h) },
            |_, y| silu_f32(y),
        );
        return;
    }
    silu_like(
        x,
        #[inline(always)]
        |_, v| silu_ggml(v),
        #[inline(always)]
        |_, v| silu_f32(v),
    );
}

/// `x = gelu(x)`, rounding as ggml's `GGML_GELU_FP16` table (see [`gelu_ggml`]).
pub fn gelu(x: &mut [f32]) {
    for_chunks(x, |c, _| c.iter_mut().for_each(|v| *v = gelu_ggml(*v)));
}

/// `x = gelu_erf(x)` (exact GELU, see [`gelu_erf_f32`]).
pub fn gelu_erf(x: &mut [f32]) {
    for_chunks(x, |c, _| c.iter_mut().for_each(|v| *v = gelu_erf_f32(*v)));
}

/// `out = silu(gate) * up`, rounding as ggml's `ggml_vec_swiglu_f32` (see the module docs).
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<()> {
    same_len("swiglu", "up", gate.len(), up.len())?;
    same_len("swiglu", "out", gate.len(), out.len())?;
    #[cfg(target_arch = "x86_64")]
    if simd_silu() {
        groups_then_tail(
            out,
            // SAFETY: the active ISA is AVX-512, so the CPU has the kernel's features.
            |h, off| unsafe { super::x86_64::silu::swiglu(&gate[off..], &up[off..], h) },
            |j, _| silu_f32(gate[j]) * up[j],
        );
        return Ok(());
    }
    silu_like(
        out,
        #[inline(always)]
        |j, _| silu_ggml(gate[j]) * up[j],
        #[inline(always)]
        |j, _| silu_f32(gate[j]) * up[j],
    );
    Ok(())
}

/// `out = gelu(gate) * up`, rounding as ggml's `ggml_vec_geglu_f32` with `GGML_GELU_FP16`:
/// 0 for `gate <= -10`, `gate * up` for `gate >= 10`, else `f16(gelu(f16(gate))) * up`.
pub fn geglu(gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<()> {
    same_len("geglu", "up", gate.len(), up.len())?;
    #[cfg(target_arch = "x86_64")]
    if simd_silu() {
        same_len("geglu", "out", gate.len(), out.len())?;
        let table = GELU_TABLE.get_or_init(gelu_table);
        groups_then_tail(
            out,
            // SAFETY: the active ISA is AVX-512, so the CPU has the kernel's features.
            |h, off| unsafe { super::x86_64::silu::geglu(table, &gate[off..], &up[off..], h) },
            |j, _| geglu_one(gate[j], up[j]),
        );
        return Ok(());
    }
    binary("geglu", gate, up, out, geglu_one)
}

/// One value of [`geglu`].
#[inline]
fn geglu_one(g: f32, u: f32) -> f32 {
    if g <= -10.0 {
        0.0
    } else if g >= 10.0 {
        g * u
    } else {
        gelu_ggml(g) * u
    }
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
    fn erf_matches_its_series_and_gelu_erf_its_definition() {
        // erf by its Taylor series (exact enough in f64 for |x| <= 3).
        let series = |x: f64| {
            let (mut term, mut sum, mut n) = (x, x, 0.0);
            while term.abs() > 1e-17 {
                n += 1.0;
                term *= -x * x / n;
                sum += term / (2.0 * n + 1.0);
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        };
        let mut rng = Rng::new(77);
        for _ in 0..2000 {
            let x = f64::from(rng.f32()) * 3.0;
            assert!((erf(x) - series(x)).abs() < 2e-7, "erf({x})");
        }
        assert!((erf(5.0) - 1.0).abs() < 1e-10 && (erf(-5.0) + 1.0).abs() < 1e-10);
        let mut xs: Vec<f32> = (0..200).map(|i| i as f32 / 10.0 - 10.0).collect();
        let want: Vec<f32> = xs
            .iter()
            .map(|&x| {
                (0.5 * f64::from(x) * (1.0 + series(f64::from(x) / 2f64.sqrt()).clamp(-1.0, 1.0)))
                    as f32
            })
            .collect();
        gelu_erf(&mut xs);
        for (i, (&g, &w)) in xs.iter().zip(&want).enumerate() {
            // Beyond |x| = 3√2 the series is not used: erf is ±1 within 1e-9 there.
            let x = i as f32 / 10.0 - 10.0;
            if x.abs() < 4.2 {
                assert!((g - w).abs() < 1e-6, "gelu_erf({x}) = {g}, want {w}");
            }
        }
        assert_eq!(gelu_erf_f32(0.0), 0.0);
        assert!((gelu_erf_f32(10.0) - 10.0).abs() < 1e-6 && gelu_erf_f32(-10.0).abs() < 1e-6);
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
        // GELU is rounded to f16 (as ggml's table): relative 2^-11 of the value, plus the f16
        // rounding of the input moving the curve (slope <= 1.13) by 2^-11 |x|.
        geglu(&g, &u, &mut out).unwrap();
        for ((&o, &g), &u) in out.iter().zip(&g).zip(&u) {
            let want = gelu64(g as f64) * u as f64;
            let tol = (gelu64(g as f64).abs() + 1.2 * (g as f64).abs()) / 2048.0 * (u as f64).abs();
            assert!(
                (o as f64 - want).abs() <= tol + 1e-6,
                "geglu({g}) * {u}: {o} vs {want}"
            );
        }
        let mut x = g.clone();
        silu(&mut x);
        let want: Vec<f64> = g.iter().map(|&g| silu64(g as f64)).collect();
        assert!(max_abs_diff(&x, &want) < 1e-5);
        let mut x = g.clone();
        gelu(&mut x);
        for (&o, &g) in x.iter().zip(&g) {
            let want = gelu64(g as f64);
            let tol = (want.abs() + 1.2 * (g as f64).abs()) / 2048.0;
            assert!(
                (o as f64 - want).abs() <= tol + 1e-7,
                "gelu({g}): {o} vs {want}"
            );
        }
        assert_eq!(gelu_ggml(-10.0), 0.0);
        assert_eq!(gelu_ggml(12.5), 12.5);
        // Extremes stay finite.
        assert_eq!(gelu_f32(-100.0), 0.0);
        assert_eq!(gelu_f32(100.0), 100.0);
        assert_eq!(silu_f32(-200.0), 0.0);
    }

    #[test]
    fn simd_silu_equals_the_lane_emulation_bit_for_bit() {
        // Whatever kernel runs here (the AVX-512 one on such CPUs), every value of a group of
        // 16 is `silu_ggml` and the tail `silu_f32`, including the clamped and special inputs.
        let mut rng = Rng::new(5);
        let mut g = rng.vec(16 * 300 + 7, 20.0);
        g.extend([
            0.0,
            -0.0,
            88.0,
            -88.0,
            89.0,
            -104.0,
            130.0,
            -140.0,
            1e30,
            -1e30,
            1e-40,
            -1e-40,
            f32::INFINITY,
            f32::NEG_INFINITY,
            200.0,
            -200.0,
        ]);
        g.rotate_right(16);
        let u = rng.vec(g.len(), 3.0);
        let vec_end = g.len() - g.len() % 16;
        let lane = |j: usize, x: f32| {
            if j < vec_end {
                silu_ggml(x)
            } else {
                silu_f32(x)
            }
        };
        let mut out = vec![0f32; g.len()];
        swiglu(&g, &u, &mut out).unwrap();
        let mut x = g.clone();
        silu(&mut x);
        for j in 0..g.len() {
            let want = lane(j, g[j]);
            assert_eq!(x[j].to_bits(), want.to_bits(), "silu({}) at {j}", g[j]);
            let want = want * u[j];
            assert_eq!(out[j].to_bits(), want.to_bits(), "swiglu({}) at {j}", g[j]);
        }
        // GeGLU likewise against `geglu_one`, around the ±10 cut-offs and f16's edges too.
        g.extend([
            -10.0, 10.0, -9.999, 9.999, 65504.0, 65520.0, -65520.0, 6e-8, -6e-8, 3e-5,
        ]);
        g.push(f32::NAN);
        let u = rng.vec(g.len(), 3.0);
        let mut out = vec![0f32; g.len()];
        geglu(&g, &u, &mut out).unwrap();
        for j in 0..g.len() {
            let want = geglu_one(g[j], u[j]);
            if want.is_nan() {
                assert!(out[j].is_nan(), "geglu({}) at {j}", g[j]);
            } else {
                assert_eq!(out[j].to_bits(), want.to_bits(), "geglu({}) at {j}", g[j]);
            }
        }
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
