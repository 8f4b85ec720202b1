//! The two skinny products of a LoRA term `y = acc + f · B·(A·x)`, in f32, for the CPU plan's
//! fused low-rank op:
//! - [`low_rank_down`]: `t = A·x`, `A` `rank` rows of `k` (a few long dot products);
//! - [`low_rank_up`]: `out = acc + f · Bᵀᵀ·t` over a range of output columns, `B` given
//!   transposed (`rank` rows of `m`), so each output column is one SIMD lane.
//!
//! Each has a scalar twin that fixes its arithmetic (the SIMD kernels in [`x86_64`] give the
//! same bits, tested below for every instruction set this CPU runs):
//! - down: sixteen partial sums, lane `l` taking `i ≡ l (mod 16)` of the first `k - k % 16`
//!   terms with fused multiply-adds in order; summed as a tree (`l` with `l + 8`, then `+ 4`,
//!   `+ 2`, `+ 1`); then the last `k % 16` terms fused-added in order to a sum from 0, which is
//!   added last;
//! - up: per column, fused multiply-adds over `r` in order from 0, then `fma(s, f, acc)`.
//!
//! Both are row-local: a row's result never depends on the other rows of a step, so a
//! sequence gets the same bits alone and in any batch, with any thread count.

use std::ops::Range;

use super::dispatch::{active_isa, Isa};

#[cfg(target_arch = "x86_64")]
mod x86_64;

/// `t[r] = A_r · x` for the `t.len()` rows of `a` (`k` values each; `x` at least `k` long).
///
/// # Panics
/// `a` shorter than `t.len() · k`, or `x` shorter than `k`.
pub fn low_rank_down(a: &[f32], k: usize, x: &[f32], t: &mut [f32]) {
    assert!(
        a.len() >= t.len() * k && x.len() >= k,
        "low_rank_down: short inputs"
    );
    #[cfg(target_arch = "x86_64")]
    match active_isa() {
        // SAFETY: the active ISA says the CPU has the kernel's features; lengths checked above.
        Isa::Avx512 => return unsafe { x86_64::down_avx512(a, k, x, t) },
        Isa::Avx2 => return unsafe { x86_64::down_avx2(a, k, x, t) },
        _ => {}
    }
    low_rank_down_scalar(a, k, x, t);
}

/// `out[j - cols.start] = fma(Σ_r bt[r][j] · t[r], f, acc[j - cols.start])` for `j` in `cols`,
/// `bt` holding `t.len()` rows of `m` (`B` transposed).
///
/// # Panics
/// `cols` past `m`, `bt` shorter than `t.len() · m`, `acc` or `out` not `cols.len()` long.
pub fn low_rank_up(
    bt: &[f32],
    m: usize,
    t: &[f32],
    f: f32,
    cols: Range<usize>,
    acc: &[f32],
    out: &mut [f32],
) {
    check_up(bt, m, t, &cols, acc, out);
    #[cfg(target_arch = "x86_64")]
    match active_isa() {
        // SAFETY: the active ISA says the CPU has the kernel's features; lengths checked.
        Isa::Avx512 => return unsafe { x86_64::up_avx512(bt, m, t, f, cols, acc, out) },
        Isa::Avx2 => return unsafe { x86_64::up_avx2(bt, m, t, f, cols, acc, out) },
        _ => {}
    }
    low_rank_up_scalar(bt, m, t, f, cols, acc, out);
}

fn check_up(bt: &[f32], m: usize, t: &[f32], cols: &Range<usize>, acc: &[f32], out: &[f32]) {
    assert!(
        cols.start <= cols.end
            && cols.end <= m
            && bt.len() >= t.len() * m
            && acc.len() == cols.len()
            && out.len() == cols.len(),
        "low_rank_up: bad lengths"
    );
}

/// [`low_rank_down`]'s scalar twin.
pub fn low_rank_down_scalar(a: &[f32], k: usize, x: &[f32], t: &mut [f32]) {
    for (r, tr) in t.iter_mut().enumerate() {
        *tr = down_row_scalar(&a[r * k..(r + 1) * k], x);
    }
}

/// One row of [`low_rank_down_scalar`]: the lane sums, their tree, the tail.
fn down_row_scalar(a: &[f32], x: &[f32]) -> f32 {
    let k = a.len();
    let k16 = k - k % 16;
    let mut lanes = [0f32; 16];
    for (ca, cx) in a[..k16].chunks_exact(16).zip(x[..k16].chunks_exact(16)) {
        for l in 0..16 {
            lanes[l] = ca[l].mul_add(cx[l], lanes[l]);
        }
    }
    tree16(lanes) + tail_scalar(&a[k16..], &x[k16..k])
}

/// The lane sums' tree: `l` with `l + 8`, then `+ 4`, `+ 2`, `+ 1`.
fn tree16(v: [f32; 16]) -> f32 {
    let mut s8 = [0f32; 8];
    for l in 0..8 {
        s8[l] = v[l] + v[l + 8];
    }
    let mut s4 = [0f32; 4];
    for l in 0..4 {
        s4[l] = s8[l] + s8[l + 4];
    }
    let s2 = [s4[0] + s4[2], s4[1] + s4[3]];
    s2[0] + s2[1]
}

/// The terms past the last whole 16: fused-added in order to a sum from 0.
fn tail_scalar(a: &[f32], x: &[f32]) -> f32 {
    a.iter().zip(x).fold(0f32, |s, (&p, &q)| p.mul_add(q, s))
}

/// [`low_rank_up`]'s scalar twin.
pub fn low_rank_up_scalar(
    bt: &[f32],
    m: usize,
    t: &[f32],
    f: f32,
    cols: Range<usize>,
    acc: &[f32],
    out: &mut [f32],
) {
    check_up(bt, m, t, &cols, acc, out);
    for ((j, o), &c) in cols.zip(out.iter_mut()).zip(acc) {
        *o = up_col_scalar(bt, m, t, j).mul_add(f, c);
    }
}

/// Column `j`'s sum `Σ_r bt[r][j] · t[r]`, fused-added over `r` in order from 0.
fn up_col_scalar(bt: &[f32], m: usize, t: &[f32], j: usize) -> f32 {
    t.iter()
        .enumerate()
        .fold(0f32, |s, (r, &tr)| bt[r * m + j].mul_add(tr, s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::Rng;

    /// Runs `f` once per instruction set this CPU has (the dispatch picks the process's own, so
    /// the SIMD kernels are called directly).
    fn each_isa(mut f: impl FnMut(Isa)) {
        for isa in Isa::available() {
            f(isa);
        }
    }

    fn down_with(isa: Isa, a: &[f32], k: usize, x: &[f32], t: &mut [f32]) {
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::available` lists only what this CPU runs.
            Isa::Avx512 => unsafe { x86_64::down_avx512(a, k, x, t) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { x86_64::down_avx2(a, k, x, t) },
            _ => low_rank_down_scalar(a, k, x, t),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn up_with(
        isa: Isa,
        bt: &[f32],
        m: usize,
        t: &[f32],
        f: f32,
        cols: Range<usize>,
        acc: &[f32],
        out: &mut [f32],
    ) {
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::available` lists only what this CPU runs.
            Isa::Avx512 => unsafe { x86_64::up_avx512(bt, m, t, f, cols, acc, out) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { x86_64::up_avx2(bt, m, t, f, cols, acc, out) },
            _ => low_rank_up_scalar(bt, m, t, f, cols, acc, out),
        }
    }

    #[test]
    fn simd_kernels_give_the_scalar_twins_bits() {
        let mut rng = Rng::new(17);
        for &(k, rank, m) in &[
            (576, 16, 1536),
            (17, 3, 5),
            (16, 1, 16),
            (1, 7, 33),
            (130, 8, 100),
            (4096, 64, 40),
            (0, 4, 9),
        ] {
            let a = rng.vec(rank * k, 1.0);
            let x = rng.vec(k, 3.0);
            let bt = rng.vec(rank * m, 1.0);
            let acc = rng.vec(m, 2.0);
            let mut want_t = vec![0f32; rank];
            low_rank_down_scalar(&a, k, &x, &mut want_t);
            for cols in [
                0..m,
                m / 3..m,
                m / 2..m / 2,
                1.min(m)..m.saturating_sub(1).max(1),
            ] {
                let n = cols.len();
                let mut want = vec![0f32; n];
                low_rank_up_scalar(
                    &bt,
                    m,
                    &want_t,
                    0.37,
                    cols.clone(),
                    &acc[cols.clone()],
                    &mut want,
                );
                each_isa(|isa| {
                    let mut t = vec![f32::NAN; rank];
                    down_with(isa, &a, k, &x, &mut t);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&t), bits(&want_t), "{isa:?} down k {k} rank {rank}");
                    let mut got = vec![f32::NAN; n];
                    up_with(
                        isa,
                        &bt,
                        m,
                        &t,
                        0.37,
                        cols.clone(),
                        &acc[cols.clone()],
                        &mut got,
                    );
                    assert_eq!(bits(&got), bits(&want), "{isa:?} up m {m} cols {cols:?}");
                });
            }
        }
    }

    #[test]
    fn the_twins_are_the_products_within_rounding() {
        let mut rng = Rng::new(3);
        let (k, rank, m) = (300, 5, 70);
        let a = rng.vec(rank * k, 1.0);
        let x = rng.vec(k, 1.0);
        let bt = rng.vec(rank * m, 1.0);
        let acc = rng.vec(m, 1.0);
        let mut t = vec![0f32; rank];
        low_rank_down(&a, k, &x, &mut t);
        let mut out = vec![0f32; m];
        low_rank_up(&bt, m, &t, -1.5, 0..m, &acc, &mut out);
        let t64: Vec<f64> = (0..rank)
            .map(|r| {
                (0..k)
                    .map(|i| f64::from(a[r * k + i]) * f64::from(x[i]))
                    .sum()
            })
            .collect();
        for j in 0..m {
            let s: f64 = (0..rank).map(|r| f64::from(bt[r * m + j]) * t64[r]).sum();
            let want = f64::from(acc[j]) - 1.5 * s;
            assert!(
                (f64::from(out[j]) - want).abs() < 1e-4 * (1.0 + want.abs()),
                "col {j}"
            );
        }
    }
}
