//! AVX2 and AVX-512 forms of the low-rank products, bit for bit the scalar twins in the parent
//! module: `down` keeps the sixteen lane sums in one 512-bit register (two 256-bit ones) and
//! sums them in the twins' tree; `up` puts one output column in each lane. Four rows (down) or
//! four column groups (up) run side by side so the fused multiply-add chains overlap. Each
//! kernel is written once (a macro) and instantiated for f32 and f16 halves, which differ only
//! in their load (f16 widened with F16C's exact conversion).

use std::arch::x86_64::*;
use std::ops::Range;

use half::f16;

use super::{tail_scalar, up_col_scalar, BT_BLOCK};

/// How far ahead of its loads the up kernel prefetches its (one) stream, in bytes.
const AHEAD_UP: usize = 4096;

/// Prefetches the line `bytes` past `p` (never faults, whatever the address).
#[inline(always)]
fn prefetch<T>(p: *const T, bytes: usize) {
    // SAFETY: a prefetch reads nothing and cannot fault.
    unsafe { _mm_prefetch::<_MM_HINT_T0>((p as *const i8).wrapping_add(bytes)) };
}

/// The down kernel's prefetch while it reads values `i..i + 16` of rows `r..r + 4`: the same
/// share of the next four rows (contiguous, `4k` values), so each group of rows arrives while
/// the one before it is summed (the first comes in on the hardware prefetchers).
#[inline(always)]
fn next_group<T>(a: *const T, r: usize, k: usize, i: usize) {
    let next = a.wrapping_add((r + 4) * k + 4 * i);
    for q in 0..4 {
        prefetch(next.wrapping_add(16 * q), 0);
    }
}

/// Sixteen f32 values at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn ld16_f32(p: *const f32) -> __m512 {
    // SAFETY: the caller's: sixteen values at `p`.
    unsafe { _mm512_loadu_ps(p) }
}

/// Sixteen f16 values at `p`, widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn ld16_f16(p: *const f16) -> __m512 {
    // SAFETY: the caller's: sixteen values (32 bytes) at `p`.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
}

/// Eight f32 values at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn ld8_f32(p: *const f32) -> __m256 {
    // SAFETY: the caller's: eight values at `p`.
    unsafe { _mm256_loadu_ps(p) }
}

/// Eight f16 values at `p`, widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn ld8_f16(p: *const f16) -> __m256 {
    // SAFETY: the caller's: eight values (16 bytes) at `p`.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
}

/// The twins' tree over sixteen lanes: `l + 8`, then `+ 4`, `+ 2`, `+ 1`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tree512(v: __m512) -> f32 {
    let lo = _mm512_castps512_ps256(v);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    tree256(_mm256_add_ps(lo, hi))
}

/// The tree from eight lanes (`l` with `l + 4`, then `+ 2`, `+ 1`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tree256(s8: __m256) -> f32 {
    let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps::<0b01>(s2, s2)))
}

macro_rules! down_avx512 {
    ($name:ident, $t:ty, $ld:ident) => {
        /// `low_rank_down` with AVX-512.
        ///
        /// # Safety
        /// The CPU has AVX-512 F/BW/VL and VNNI; `a` holds `t.len() · k` values, `x` at least
        /// `k`.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) unsafe fn $name(a: &[$t], k: usize, x: &[f32], t: &mut [f32]) {
            let k16 = k - k % 16;
            let rows = t.len();
            let (pa, px) = (a.as_ptr(), x.as_ptr());
            let mut r = 0;
            while r < rows {
                let n = (rows - r).min(4);
                let mut acc = [_mm512_setzero_ps(); 4];
                let mut i = 0;
                while i < k16 {
                    // SAFETY: i + 16 <= k <= x.len(); row r + q < rows lies in `a`.
                    unsafe {
                        let xv = _mm512_loadu_ps(px.add(i));
                        next_group(pa, r, k, i);
                        for (q, s) in acc.iter_mut().enumerate().take(n) {
                            *s = _mm512_fmadd_ps($ld(pa.add((r + q) * k + i)), xv, *s);
                        }
                    }
                    i += 16;
                }
                for (q, &s) in acc.iter().enumerate().take(n) {
                    let row = &a[(r + q) * k..(r + q + 1) * k];
                    t[r + q] = tree512(s) + tail_scalar(&row[k16..], &x[k16..k]);
                }
                r += n;
            }
        }
    };
}

macro_rules! down_avx2 {
    ($name:ident, $t:ty, $ld:ident) => {
        /// `low_rank_down` with AVX2: lanes 0–7 and 8–15 in two registers.
        ///
        /// # Safety
        /// The CPU has AVX2, FMA and F16C; lengths as for the AVX-512 form.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn $name(a: &[$t], k: usize, x: &[f32], t: &mut [f32]) {
            let k16 = k - k % 16;
            let rows = t.len();
            let (pa, px) = (a.as_ptr(), x.as_ptr());
            let mut r = 0;
            while r < rows {
                let n = (rows - r).min(4);
                let mut lo = [_mm256_setzero_ps(); 4];
                let mut hi = [_mm256_setzero_ps(); 4];
                let mut i = 0;
                while i < k16 {
                    // SAFETY: as in the AVX-512 form.
                    unsafe {
                        let x0 = _mm256_loadu_ps(px.add(i));
                        let x1 = _mm256_loadu_ps(px.add(i + 8));
                        next_group(pa, r, k, i);
                        for q in 0..n {
                            let row = pa.add((r + q) * k + i);
                            lo[q] = _mm256_fmadd_ps($ld(row), x0, lo[q]);
                            hi[q] = _mm256_fmadd_ps($ld(row.add(8)), x1, hi[q]);
                        }
                    }
                    i += 16;
                }
                for q in 0..n {
                    let row = &a[(r + q) * k..(r + q + 1) * k];
                    t[r + q] =
                        tree256(_mm256_add_ps(lo[q], hi[q])) + tail_scalar(&row[k16..], &x[k16..k]);
                }
                r += n;
            }
        }
    };
}

macro_rules! up_kernel {
    ($name:ident, $t:ty, $ld:ident, $feat:literal, $w:expr, $vec:ty, $zero:ident, $set1:ident,
     $fma:ident, $load:ident, $store:ident) => {
        /// `low_rank_up`: one output column per lane, four registers side by side.
        ///
        /// # Safety
        /// The CPU has the function's features; lengths checked by the caller (`cols` within
        /// `m`, `bt` `t.len()` rows of `m`, `acc` and `out` `cols.len()` long).
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn $name(
            bt: &[$t],
            m: usize,
            t: &[f32],
            f: f32,
            cols: Range<usize>,
            acc: &[f32],
            out: &mut [f32],
        ) {
            const W: usize = $w;
            let n = cols.len();
            let whole = n - n % W;
            let (pb, pc, po) = (bt.as_ptr(), acc.as_ptr(), out.as_mut_ptr());
            let fv = $set1(f);
            let mut c = 0;
            let rank = t.len();
            while c < whole {
                let blocks = ((whole - c) / W).min(4);
                // The 4·W columns from `j` lie in one block of `BT_BLOCK` (`cols.start` starts
                // a block, `c` is a multiple of 4·W, which divides `BT_BLOCK`), `w` wide.
                let j = cols.start + c;
                let start = j - j % BT_BLOCK;
                let w = BT_BLOCK.min(m - start);
                let mut s: [$vec; 4] = [$zero(); 4];
                for (r, &tr) in t.iter().enumerate() {
                    let tv = $set1(tr);
                    // SAFETY: columns j .. j + blocks·W lie within `m` (c + W·blocks <= whole
                    // <= cols.len()) and within the block's `w` (see above); row r < rank.
                    unsafe {
                        let row = pb.add(start * rank + r * w + (j - start));
                        for (b, sb) in s.iter_mut().enumerate().take(blocks) {
                            prefetch(row.add(b * W), AHEAD_UP);
                            *sb = $fma($ld(row.add(b * W)), tv, *sb);
                        }
                    }
                }
                for (b, &sb) in s.iter().enumerate().take(blocks) {
                    // SAFETY: c + W·b + W <= whole <= cols.len() = acc.len() = out.len().
                    unsafe {
                        let cv = $load(pc.add(c + b * W));
                        $store(po.add(c + b * W), $fma(sb, fv, cv));
                    }
                }
                c += blocks * W;
            }
            for i in whole..n {
                out[i] = up_col_scalar(bt, m, t, cols.start + i).mul_add(f, acc[i]);
            }
        }
    };
}

down_avx512!(down_avx512_f32, f32, ld16_f32);
down_avx512!(down_avx512_f16, f16, ld16_f16);
down_avx2!(down_avx2_f32, f32, ld8_f32);
down_avx2!(down_avx2_f16, f16, ld8_f16);
up_kernel!(
    up_avx512_f32,
    f32,
    ld16_f32,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    16,
    __m512,
    _mm512_setzero_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps
);
up_kernel!(
    up_avx512_f16,
    f16,
    ld16_f16,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    16,
    __m512,
    _mm512_setzero_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps
);
up_kernel!(
    up_avx2_f32,
    f32,
    ld8_f32,
    "avx2,fma,f16c",
    8,
    __m256,
    _mm256_setzero_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps
);
up_kernel!(
    up_avx2_f16,
    f16,
    ld8_f16,
    "avx2,fma,f16c",
    8,
    __m256,
    _mm256_setzero_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps
);
