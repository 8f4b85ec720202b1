//! The two skinny products of a LoRA term `y = acc + f · B·(A·x)`, summed in f32 over halves
//! stored as f32 or f16 ([`LowRankHalf`]: an F16 adapter streams half the bytes), for the CPU
//! plan's fused low-rank op:
//! - [`low_rank_down`]: `t = A·x`, `A` `rank` rows of `k` (a few long dot products);
//! - [`low_rank_up`]: `out = acc + f · Bᵀᵀ·t` over a range of output columns, `B` given
//!   transposed in column blocks ([`pack_bt`]: each block of [`BT_BLOCK`] output columns
//!   holds its `rank` rows one after another), so each output column is one SIMD lane and the
//!   kernel reads one sequential stream.
//!
//! Both kernels prefetch their halves a few KiB ahead: a term's halves are short streams (a
//! few KiB each) that the hardware prefetchers would only pick up halfway through, and in a
//! decode step each is read once, from memory.
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

use half::f16;

use super::isa::{active_isa, Isa};

#[cfg(target_arch = "x86_64")]
mod x86_64;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
}

/// An element type the low-rank kernels read halves in (f32 or f16; values are widened to f32
/// exactly, so both give the same bits for the same values).
pub trait LowRankHalf: Copy + Send + Sync + sealed::Sealed {
    /// The value as f32 (exact).
    fn widen(self) -> f32;

    #[doc(hidden)]
    /// Runs the down kernel of `isa` when there is one; `false` otherwise.
    fn down_simd(isa: Isa, a: &[Self], k: usize, x: &[f32], t: &mut [f32]) -> bool;

    #[doc(hidden)]
    /// Runs the up kernel of `isa` when there is one; `false` otherwise.
    #[allow(clippy::too_many_arguments)]
    fn up_simd(
        isa: Isa,
        bt: &[Self],
        m: usize,
        t: &[f32],
        f: f32,
        cols: Range<usize>,
        acc: &[f32],
        out: &mut [f32],
    ) -> bool;
}

macro_rules! half_impl {
    ($t:ty, $widen:expr, $d512:ident, $d2:ident, $u512:ident, $u2:ident) => {
        impl LowRankHalf for $t {
            #[inline(always)]
            fn widen(self) -> f32 {
                $widen(self)
            }

            #[allow(unused_variables)]
            fn down_simd(isa: Isa, a: &[Self], k: usize, x: &[f32], t: &mut [f32]) -> bool {
                #[cfg(target_arch = "x86_64")]
                match isa {
                    // SAFETY: `isa` is one this CPU runs (the callers pass the active one or
                    // one of `Isa::available`); lengths checked by the callers.
                    Isa::Avx512 => {
                        unsafe { x86_64::$d512(a, k, x, t) };
                        return true;
                    }
                    Isa::Avx2 => {
                        unsafe { x86_64::$d2(a, k, x, t) };
                        return true;
                    }
                    _ => {}
                }
                false
            }

            #[allow(unused_variables)]
            fn up_simd(
                isa: Isa,
                bt: &[Self],
                m: usize,
                t: &[f32],
                f: f32,
                cols: Range<usize>,
                acc: &[f32],
                out: &mut [f32],
            ) -> bool {
                #[cfg(target_arch = "x86_64")]
                match isa {
                    // SAFETY: as in `down_simd`.
                    Isa::Avx512 => {
                        unsafe { x86_64::$u512(bt, m, t, f, cols, acc, out) };
                        return true;
                    }
                    Isa::Avx2 => {
                        unsafe { x86_64::$u2(bt, m, t, f, cols, acc, out) };
                        return true;
                    }
                    _ => {}
                }
                false
            }
        }
    };
}

half_impl!(
    f32,
    |v: f32| v,
    down_avx512_f32,
    down_avx2_f32,
    up_avx512_f32,
    up_avx2_f32
);
half_impl!(
    f16,
    f16::to_f32,
    down_avx512_f16,
    down_avx2_f16,
    up_avx512_f16,
    up_avx2_f16
);

/// Prefetches the first `bytes` of `half` (a term's halves are read once per token, from
/// memory: the caller starts the next one's first bytes while it computes something else).
pub fn prefetch_head<T>(half: &[T], bytes: usize) {
    super::prefetch::prefetch_range(half.as_ptr().cast(), bytes.min(std::mem::size_of_val(half)));
}

/// `t[r] = A_r · x` for the `t.len()` rows of `a` (`k` values each; `x` at least `k` long).
///
/// # Panics
/// `a` shorter than `t.len() · k`, or `x` shorter than `k`.
pub fn low_rank_down<T: LowRankHalf>(a: &[T], k: usize, x: &[f32], t: &mut [f32]) {
    assert!(
        a.len() >= t.len() * k && x.len() >= k,
        "low_rank_down: short inputs"
    );
    if !T::down_simd(active_isa(), a, k, x, t) {
        low_rank_down_scalar(a, k, x, t);
    }
}

/// Output columns per block of a packed `Bᵀ` ([`pack_bt`]).
pub const BT_BLOCK: usize = 64;

/// Where `Bᵀ[r][j]` lies in a packed `Bᵀ` of `rank` rows of `m`: column block `j / BT_BLOCK`
/// starts at `rank · BT_BLOCK` values per block before it and holds its `rank` rows of `w`
/// values one after another (`w` = `BT_BLOCK`, or what is left of `m` in the last block).
#[inline]
pub fn bt_index(rank: usize, m: usize, r: usize, j: usize) -> usize {
    let start = j - j % BT_BLOCK;
    let w = BT_BLOCK.min(m - start);
    start * rank + r * w + (j - start)
}

/// `B` (`m` rows of `rank`, ggml's `lora_b` layout) as [`low_rank_up`] reads it: transposed
/// and cut into column blocks ([`bt_index`]).
///
/// # Panics
/// `b` not `m · rank` long.
pub fn pack_bt<T: Copy>(b: &[T], rank: usize, m: usize) -> Vec<T> {
    assert_eq!(b.len(), m * rank, "pack_bt: B is not m x rank");
    let mut out = b.to_vec();
    for (j, row) in b.chunks_exact(rank.max(1)).enumerate() {
        for (r, &v) in row.iter().enumerate() {
            out[bt_index(rank, m, r, j)] = v;
        }
    }
    out
}

/// `out[j - cols.start] = fma(Σ_r Bᵀ[r][j] · t[r], f, acc[j - cols.start])` for `j` in `cols`,
/// `bt` holding `Bᵀ` (`t.len()` rows of `m`) packed by [`pack_bt`]. A rank-1 `Bᵀ` packs to
/// itself.
///
/// # Panics
/// `cols` past `m` or not starting at a block ([`BT_BLOCK`]), `bt` shorter than
/// `t.len() · m`, `acc` or `out` not `cols.len()` long.
pub fn low_rank_up<T: LowRankHalf>(
    bt: &[T],
    m: usize,
    t: &[f32],
    f: f32,
    cols: Range<usize>,
    acc: &[f32],
    out: &mut [f32],
) {
    check_up(bt.len(), m, t, &cols, acc, out);
    if !T::up_simd(active_isa(), bt, m, t, f, cols.clone(), acc, out) {
        low_rank_up_scalar(bt, m, t, f, cols, acc, out);
    }
}

fn check_up(bt: usize, m: usize, t: &[f32], cols: &Range<usize>, acc: &[f32], out: &[f32]) {
    assert!(
        cols.start <= cols.end
            && cols.end <= m
            && cols.start.is_multiple_of(BT_BLOCK)
            && bt >= t.len() * m
            && acc.len() == cols.len()
            && out.len() == cols.len(),
        "low_rank_up: bad lengths"
    );
}

/// [`low_rank_down`]'s scalar twin.
pub fn low_rank_down_scalar<T: LowRankHalf>(a: &[T], k: usize, x: &[f32], t: &mut [f32]) {
    for (r, tr) in t.iter_mut().enumerate() {
        *tr = down_row_scalar(&a[r * k..(r + 1) * k], x);
    }
}

/// One row of [`low_rank_down_scalar`]: the lane sums, their tree, the tail.
fn down_row_scalar<T: LowRankHalf>(a: &[T], x: &[f32]) -> f32 {
    let k = a.len();
    let k16 = k - k % 16;
    let mut lanes = [0f32; 16];
    for (ca, cx) in a[..k16].chunks_exact(16).zip(x[..k16].chunks_exact(16)) {
        for l in 0..16 {
            lanes[l] = ca[l].widen().mul_add(cx[l], lanes[l]);
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
fn tail_scalar<T: LowRankHalf>(a: &[T], x: &[f32]) -> f32 {
    a.iter()
        .zip(x)
        .fold(0f32, |s, (&p, &q)| p.widen().mul_add(q, s))
}

/// [`low_rank_up`]'s scalar twin.
pub fn low_rank_up_scalar<T: LowRankHalf>(
    bt: &[T],
    m: usize,
    t: &[f32],
    f: f32,
    cols: Range<usize>,
    acc: &[f32],
    out: &mut [f32],
) {
    check_up(bt.len(), m, t, &cols, acc, out);
    for ((j, o), &c) in cols.zip(out.iter_mut()).zip(acc) {
        *o = up_col_scalar(bt, m, t, j).mul_add(f, c);
    }
}

/// Column `j`'s sum `Σ_r Bᵀ[r][j] · t[r]`, fused-added over `r` in order from 0.
fn up_col_scalar<T: LowRankHalf>(bt: &[T], m: usize, t: &[f32], j: usize) -> f32 {
    let rank = t.len();
    t.iter().enumerate().fold(0f32, |s, (r, &tr)| {
        bt[bt_index(rank, m, r, j)].widen().mul_add(tr, s)
    })
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

    fn down_with<T: LowRankHalf>(isa: Isa, a: &[T], k: usize, x: &[f32], t: &mut [f32]) {
        if isa == Isa::Scalar || !T::down_simd(isa, a, k, x, t) {
            low_rank_down_scalar(a, k, x, t);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn up_with<T: LowRankHalf>(
        isa: Isa,
        bt: &[T],
        m: usize,
        t: &[f32],
        f: f32,
        cols: Range<usize>,
        acc: &[f32],
        out: &mut [f32],
    ) {
        if isa == Isa::Scalar || !T::up_simd(isa, bt, m, t, f, cols.clone(), acc, out) {
            low_rank_up_scalar(bt, m, t, f, cols, acc, out);
        }
    }

    /// Every ISA with halves of type `T` gives the bits of the f32 scalar twin on the halves'
    /// widened values (`aw`, `btw`).
    #[allow(clippy::too_many_arguments)]
    fn check_twins<T: LowRankHalf>(
        a: &[T],
        bt: &[T],
        aw: &[f32],
        btw: &[f32],
        (k, rank, m): (usize, usize, usize),
        x: &[f32],
        acc: &[f32],
    ) {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut want_t = vec![0f32; rank];
        low_rank_down_scalar(aw, k, x, &mut want_t);
        let at = |c: usize| c - c % BT_BLOCK;
        for cols in [
            0..m,
            at(m / 3)..m,
            at(m / 2)..at(m / 2),
            0..m.saturating_sub(1),
        ] {
            let (n, c) = (cols.len(), &acc[cols.clone()]);
            let mut want = vec![0f32; n];
            low_rank_up_scalar(btw, m, &want_t, 0.37, cols.clone(), c, &mut want);
            each_isa(|isa| {
                let mut t = vec![f32::NAN; rank];
                down_with(isa, a, k, x, &mut t);
                assert_eq!(bits(&t), bits(&want_t), "{isa:?} down k {k} rank {rank}");
                let mut got = vec![f32::NAN; n];
                up_with(isa, bt, m, &t, 0.37, cols.clone(), c, &mut got);
                assert_eq!(bits(&got), bits(&want), "{isa:?} up m {m} cols {cols:?}");
            });
        }
    }

    #[test]
    fn simd_kernels_give_the_scalar_twins_bits() {
        let mut rng = Rng::new(17);
        for &dims in &[
            (576, 16, 1536),
            (17, 3, 5),
            (16, 1, 16),
            (1, 7, 33),
            (130, 8, 100),
            (4096, 64, 40),
            (64, 16, 200),
            (0, 4, 9),
        ] {
            let (k, rank, m) = dims;
            let a = rng.vec(rank * k, 1.0);
            let x = rng.vec(k, 3.0);
            let bt = rng.vec(rank * m, 1.0);
            let acc = rng.vec(m, 2.0);
            check_twins(&a, &bt, &a, &bt, dims, &x, &acc);
            let half = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
            let wide = |v: &[f16]| v.iter().map(|x| x.to_f32()).collect::<Vec<_>>();
            let (a16, bt16) = (half(&a), half(&bt));
            check_twins(&a16, &bt16, &wide(&a16), &wide(&bt16), dims, &x, &acc);
        }
    }

    #[test]
    fn the_twins_are_the_products_within_rounding() {
        let mut rng = Rng::new(3);
        let (k, rank, m) = (300, 5, 150);
        let a = rng.vec(rank * k, 1.0);
        let x = rng.vec(k, 1.0);
        let b = rng.vec(m * rank, 1.0);
        let bt = pack_bt(&b, rank, m);
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
            let s: f64 = (0..rank).map(|r| f64::from(b[j * rank + r]) * t64[r]).sum();
            let want = f64::from(acc[j]) - 1.5 * s;
            assert!(
                (f64::from(out[j]) - want).abs() < 1e-4 * (1.0 + want.abs()),
                "col {j}"
            );
        }
    }
}
