//! AVX-512 VNNI kernels for Q4_K and Q6_K weights in the float orders of the llama.cpp x86
//! paths that run them, bit for bit their scalar twins in `cpu::qdot`:
//! - Q4_K, which llama.cpp repacks at load (`q4_K_8x8`): its gemv order for single rows
//!   ([`dot_q4_k_x86`](crate::cpu::qdot::dot_q4_k_x86): one exact integer per super-block,
//!   one `fma` into `acc`, the mins into `acc_min`, `acc - acc_min` at the end), and its gemm
//!   order for groups of 4 activation rows (one `fma` per pair of 32-value sub-blocks).
//! - Q6_K, which it does not repack: `ggml_vec_dot_q6_K_q8_K`'s AVX2 order as the reference
//!   build runs it (8 integer lanes per super-block, the `-32` offset from `bsums` per lane,
//!   `fma` per lane, `hsum_float_8`; twin `qdot::k_x86::dot_q6_k_x86`).
//!
//! The integer parts use `vpdpbusd` on unsigned weight bytes (Q4_K nibbles as they are, Q6_K
//! quants before the `-32`) against 64 activation bytes at a time: exact, so any lane arrangement gives the same integers; only the float steps have to
//! follow llama.cpp's order. Sixteen (weight row, activation row) results at a time share one
//! register: [`reduce16`] sums 16 vectors' lanes into the 16 lanes of one.

// Rows, activations and lanes index parallel arrays, as the kernels' descriptions do.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use kestrel_gguf::quant::{BlockQ8K, QK_K};

use super::avx512::{fp16, rd16};
use super::kquants::check;
use crate::cpu::qdot::k4_scales;

/// Bytes of one Q4_K / Q6_K block.
const Q4K_BYTES: usize = 144;
const Q6K_BYTES: usize = 210;

/// Lane `i` of the result is the (wrapping) sum of the 16 lanes of `v[i]`: a tree of
/// 128-bit, 64-bit and 32-bit shuffles and adds (45 instructions for 16 sums). The tree
/// leaves sum `j` in lane `4 (j mod 4) + j / 4`, so the inputs go in transposed.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn reduce16(v: &[__m512i; 16]) -> __m512i {
    const T: [usize; 16] = [0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15];
    let s = |j: usize| v[T[j]];
    let x: [__m512i; 8] = std::array::from_fn(|k| {
        let (a, b) = (s(2 * k), s(2 * k + 1));
        _mm512_add_epi32(
            _mm512_shuffle_i32x4::<0b01_00_01_00>(a, b),
            _mm512_shuffle_i32x4::<0b11_10_11_10>(a, b),
        )
    });
    let y: [__m512i; 4] = std::array::from_fn(|k| {
        let (a, b) = (x[2 * k], x[2 * k + 1]);
        _mm512_add_epi32(
            _mm512_shuffle_i32x4::<0b10_00_10_00>(a, b),
            _mm512_shuffle_i32x4::<0b11_01_11_01>(a, b),
        )
    });
    let z: [__m512; 2] = std::array::from_fn(|k| {
        let (a, b) = (y[2 * k], y[2 * k + 1]);
        _mm512_castsi512_ps(_mm512_add_epi32(
            _mm512_unpacklo_epi64(a, b),
            _mm512_unpackhi_epi64(a, b),
        ))
    });
    _mm512_add_epi32(
        _mm512_castps_si512(_mm512_shuffle_ps::<0b10_00_10_00>(z[0], z[1])),
        _mm512_castps_si512(_mm512_shuffle_ps::<0b11_01_11_01>(z[0], z[1])),
    )
}

/// Sums of 32 activations per 32-value sub-block (`bsums` pairs), as llama.cpp's repacked
/// kernels form them (`hadd` of the 16-value sums).
#[inline(always)]
fn bsums32(yb: &BlockQ8K) -> [i32; 8] {
    std::array::from_fn(|j| i32::from(yb.bsums[2 * j]) + i32::from(yb.bsums[2 * j + 1]))
}

/// One Q4_K super-block's header: `d`, `dmin`, the 8 sub-block scales and mins.
struct Q4kHead {
    d: f32,
    dmin: f32,
    scales: [u8; 8],
    mins: [u8; 8],
}

/// Reads the header of the Q4_K block at `b`.
///
/// # Safety
/// `b` points at a whole block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4k_head(b: *const u8) -> Q4kHead {
    let mut packed = [0u8; 12];
    // SAFETY: bytes 4..16 of the block are its scales; d and dmin are at 0 and 2.
    let (d, dmin) = unsafe {
        std::ptr::copy_nonoverlapping(b.add(4), packed.as_mut_ptr(), 12);
        (fp16(rd16(b)), fp16(rd16(b.add(2))))
    };
    let (scales, mins) = k4_scales(&packed);
    Q4kHead {
        d,
        dmin,
        scales,
        mins,
    }
}

/// The 64 quants of sub-blocks `2p` and `2p + 1` of the Q4_K block at `b`, as bytes 0..16.
///
/// # Safety
/// `b` points at a whole block, `p < 4`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4k_quants(b: *const u8, p: usize) -> __m512i {
    // SAFETY: qs (128 bytes at 16) holds 32 bytes per pair of sub-blocks.
    let q = unsafe { _mm256_loadu_si256(b.add(16 + 32 * p).cast()) };
    let m4 = _mm256_set1_epi8(0x0f);
    let lo = _mm256_and_si256(q, m4);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// The scales of sub-blocks `2p` (lanes 0..8) and `2p + 1` (lanes 8..16).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q4k_scale_pair(h: &Q4kHead, p: usize) -> __m512i {
    _mm512_inserti64x4::<1>(
        _mm512_set1_epi32(i32::from(h.scales[2 * p])),
        _mm256_set1_epi32(i32::from(h.scales[2 * p + 1])),
    )
}

/// 64 activation quants of the q8_K block at offset `64p`.
///
/// # Safety
/// `p < 4`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn act64(yb: &BlockQ8K, p: usize) -> __m512i {
    // SAFETY: 256 quants, 64 of them from 64p.
    unsafe { _mm512_loadu_si512(yb.qs.as_ptr().add(64 * p).cast()) }
}

/// `Σ min · bsum` over the 8 sub-blocks.
#[inline(always)]
fn q4k_mins(h: &Q4kHead, bs: &[i32; 8]) -> i32 {
    (0..8).map(|j| i32::from(h.mins[j]) * bs[j]).sum()
}

/// Q4_K rows against one q8_K activation row in llama.cpp's gemv order: `out[r]` for the
/// `out.len()` consecutive rows in `w`, 16 rows per pass (lane = row).
///
/// # Safety
/// The CPU has AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn rows_q4_k(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
    let nb = y.len();
    check(w, out.len() * nb, Q4K_BYTES);
    let rb = nb * Q4K_BYTES;
    let zero = _mm512_setzero_si512();
    for (c, oc) in out.chunks_mut(16).enumerate() {
        let n = oc.len();
        // Rows past the end repeat the last one (their lanes are dropped).
        let row = |r: usize| {
            // SAFETY: row (16c + min(r, n-1)) lies in w (checked above).
            unsafe { w.as_ptr().add((16 * c + r.min(n - 1)) * rb) }
        };
        let mut acc = _mm512_setzero_ps();
        let mut acc_min = _mm512_setzero_ps();
        for (i, yb) in y.iter().enumerate() {
            // SAFETY: the activation block holds 256 quants.
            let a: [__m512i; 4] = std::array::from_fn(|p| unsafe { act64(yb, p) });
            let bs = bsums32(yb);
            let mut v = [zero; 16];
            let mut dw = [0f32; 16];
            let mut dm = [0f32; 16];
            let mut mins = [0i32; 16];
            for r in 0..16 {
                // SAFETY: block i of the row is in bounds.
                let b = unsafe { row(r).add(i * Q4K_BYTES) };
                // SAFETY: b is a whole block.
                let h = unsafe { q4k_head(b) };
                for (p, &ap) in a.iter().enumerate() {
                    // SAFETY: p < 4.
                    let q = unsafe { q4k_quants(b, p) };
                    let s = _mm512_dpbusd_epi32(zero, q, ap);
                    v[r] = _mm512_add_epi32(v[r], _mm512_mullo_epi32(s, q4k_scale_pair(&h, p)));
                }
                dw[r] = h.d;
                dm[r] = h.dmin;
                mins[r] = q4k_mins(&h, &bs);
            }
            let yd = _mm512_set1_ps(yb.d);
            // SAFETY: 16 f32 / i32 each, unaligned loads.
            let (dw, dm, mins) = unsafe {
                (
                    _mm512_loadu_ps(dw.as_ptr()),
                    _mm512_loadu_ps(dm.as_ptr()),
                    _mm512_loadu_si512(mins.as_ptr().cast()),
                )
            };
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce16(&v)), _mm512_mul_ps(dw, yd), acc);
            acc_min = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dm, yd), acc_min);
        }
        let mut res = [0f32; 16];
        // SAFETY: 16 f32, unaligned store.
        unsafe { _mm512_storeu_ps(res.as_mut_ptr(), _mm512_sub_ps(acc, acc_min)) };
        oc.copy_from_slice(&res[..n]);
    }
}

/// The blocks (`nb`) and weight rows (`n_w`) of a Q4_K tile call, its sizes checked: 1 to 4
/// weight rows and 1 to 4 activation rows; `None` when there are no blocks.
fn q4k_tile_shape(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &[f32]) -> Option<(usize, usize)> {
    let nb = y.len().checked_div(n_act).filter(|&nb| nb > 0)?;
    let n_w = out.len() / n_act;
    assert!(
        (1..=4).contains(&n_act)
            && (1..=4).contains(&n_w)
            && y.len() == nb * n_act
            && out.len() == n_w * n_act,
        "tile: {} activation blocks for {n_act} rows, {} outputs",
        y.len(),
        out.len()
    );
    check(w, n_w * nb, Q4K_BYTES);
    Some((nb, n_w))
}

/// Block `i` of the 4 weight rows and 4 activation rows of a tile (missing rows repeat the
/// last one; their lanes are dropped), and the weight blocks' headers.
///
/// # Safety
/// `(nb, n_w)` is what [`q4k_tile_shape`] returned for these slices, and `i < nb`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4k_tile_blocks<'y>(
    w: &[u8],
    y: &'y [BlockQ8K],
    n_act: usize,
    (nb, n_w): (usize, usize),
    i: usize,
) -> ([*const u8; 4], [&'y BlockQ8K; 4], [Q4kHead; 4]) {
    let rb = nb * Q4K_BYTES;
    // SAFETY: block i of row min(r, n_w-1) lies in w (the caller's contract).
    let wb: [*const u8; 4] =
        std::array::from_fn(|r| unsafe { w.as_ptr().add(r.min(n_w - 1) * rb + i * Q4K_BYTES) });
    let ys: [&BlockQ8K; 4] = std::array::from_fn(|t| &y[t.min(n_act - 1) * nb + i]);
    // SAFETY: each pointer is a whole block.
    let heads: [Q4kHead; 4] = std::array::from_fn(|r| unsafe { q4k_head(wb[r]) });
    (wb, ys, heads)
}

/// Q4_K tile in llama.cpp's gemm order: 1 to 4 weight rows × 1 to 4 activation rows (`y`
/// holds them back to back), `out[r · n_act + t]`; the 16 entries share one register per step
/// (lane order [`SPLIT_J`]).
///
/// # Safety
/// As [`rows_q4_k`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn tile_q4_k(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    let Some((nb, n_w)) = q4k_tile_shape(w, y, n_act, out) else {
        return;
    };
    let zero = _mm512_setzero_si512();
    // Result lane L holds tile entry SPLIT_J[L] = 4r + t (see reduce16_split).
    let r_of = |l: usize| SPLIT_J[l] / 4;
    let t_of = |l: usize| SPLIT_J[l] % 4;
    // SAFETY: 16 i32 each, unaligned loads of constant tables.
    let (sc_idx, min_idx, bs_idx) = unsafe {
        (
            _mm512_loadu_si512(SPLIT_SCALE_IDX.as_ptr().cast()),
            _mm512_loadu_si512(
                std::array::from_fn::<i32, 16, _>(|l| 8 * r_of(l) as i32)
                    .as_ptr()
                    .cast(),
            ),
            _mm512_loadu_si512(
                std::array::from_fn::<i32, 16, _>(|l| 8 * t_of(l) as i32)
                    .as_ptr()
                    .cast(),
            ),
        )
    };
    let mut acc = _mm512_setzero_ps();
    let mut acc_min = _mm512_setzero_ps();
    for i in 0..nb {
        // SAFETY: q4k_tile_shape checked the sizes.
        let (wb, ys, heads) = unsafe { q4k_tile_blocks(w, y, n_act, (nb, n_w), i) };
        let mut scales = [0u8; 32];
        let mut mins = [0u8; 32];
        let mut bs = [0i32; 32];
        for r in 0..4 {
            scales[8 * r..8 * r + 8].copy_from_slice(&heads[r].scales);
            mins[8 * r..8 * r + 8].copy_from_slice(&heads[r].mins);
            bs[8 * r..8 * r + 8].copy_from_slice(&bsums32(ys[r]));
        }
        let mut d = [0f32; 16];
        let mut dm = [0f32; 16];
        for l in 0..16 {
            d[l] = heads[r_of(l)].d * ys[t_of(l)].d;
            dm[l] = heads[r_of(l)].dmin * ys[t_of(l)].d;
        }
        // SAFETY: unaligned loads of local arrays of the sizes read.
        let (d, dm, sc_tab, min_tab, bs_tab) = unsafe {
            let b16 = |a: &[u8; 32], h: usize| _mm_loadu_si128(a.as_ptr().add(16 * h).cast());
            (
                _mm512_loadu_ps(d.as_ptr()),
                _mm512_loadu_ps(dm.as_ptr()),
                [0, 1].map(|h| _mm512_cvtepu8_epi32(b16(&scales, h))),
                [0, 1].map(|h| _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b16(&mins, h)))),
                [0, 1].map(|h| {
                    _mm512_cvtepi32_ps(_mm512_loadu_si512(bs.as_ptr().add(16 * h).cast()))
                }),
            )
        };
        for p in 0..QK_K / 64 {
            // SAFETY: p < 4.
            let a: [__m512i; 4] = std::array::from_fn(|t| unsafe { act64(ys[t], p) });
            let mut v = [zero; 16];
            for r in 0..4 {
                // SAFETY: wb[r] is a whole block, p < 4.
                let q = unsafe { q4k_quants(wb[r], p) };
                for t in 0..4 {
                    v[4 * r + t] = _mm512_dpbusd_epi32(zero, q, a[t]);
                }
            }
            let two_p = _mm512_set1_epi32(2 * p as i32);
            let sc_i = _mm512_add_epi32(sc_idx, two_p);
            let sc = [
                _mm512_permutexvar_epi32(sc_i, sc_tab[0]),
                _mm512_permutexvar_epi32(sc_i, sc_tab[1]),
            ];
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce16_split(&v, sc)), d, acc);
            // Σ min · bsum of the pair, exact in f32 (|each product| < 2^18).
            let (m0, b0) = (
                _mm512_add_epi32(min_idx, two_p),
                _mm512_add_epi32(bs_idx, two_p),
            );
            let one = _mm512_set1_epi32(1);
            let (m1, b1) = (_mm512_add_epi32(m0, one), _mm512_add_epi32(b0, one));
            let pick = |idx, tab: [__m512; 2]| _mm512_permutex2var_ps(tab[0], idx, tab[1]);
            let minsum = _mm512_fmadd_ps(
                pick(m0, min_tab),
                pick(b0, bs_tab),
                _mm512_mul_ps(pick(m1, min_tab), pick(b1, bs_tab)),
            );
            acc_min = _mm512_fmadd_ps(minsum, dm, acc_min);
        }
    }
    let mut res = [0f32; 16];
    // SAFETY: 16 f32, unaligned store.
    unsafe { _mm512_storeu_ps(res.as_mut_ptr(), _mm512_sub_ps(acc, acc_min)) };
    for (l, &x) in res.iter().enumerate() {
        let (r, t) = (r_of(l), t_of(l));
        if r < n_w && t < n_act {
            out[r * n_act + t] = x;
        }
    }
}

/// The tile entry `4r + t` that lane `L` of [`reduce16_split`]'s result holds.
const SPLIT_J: [usize; 16] = {
    let mut j = [0; 16];
    let mut l = 0;
    while l < 16 {
        let (q, k) = (l / 4, l % 4);
        j[l] = 8 * (q >> 1) + 2 * k + (q & 1);
        l += 1;
    }
    j
};

/// For lane `4q + l` of either half-reduced register in [`reduce16_split`]: the index into
/// that register's two rows of 8 sub-block scales (`8 · row + sub-block`, before `+ 2p`).
const SPLIT_SCALE_IDX: [i32; 16] = {
    let mut x = [0; 16];
    let mut i = 0;
    while i < 16 {
        let (q, l) = (i / 4, i % 4);
        x[i] = (8 * (l >> 1) + (q & 1)) as i32;
        i += 1;
    }
    x
};

/// `Σ scale · q · a` per tile entry for one pair of Q4_K sub-blocks: `v[4r + t]` holds the
/// 16 `vpdpbusd` lanes of entry (r, t), lanes 0..8 of sub-block `2p` and 8..16 of `2p + 1`.
/// Each half is summed before its scale multiplies it (two multiplies for all 32 half sums,
/// instead of one per entry and lane); `sc[g]` carries the scales for entries `8g..8g + 8` in
/// the half-reduced lane order. Lane `L` of the result is entry [`SPLIT_J`]`[L]`. Exact.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn reduce16_split(v: &[__m512i; 16], sc: [__m512i; 2]) -> __m512i {
    // x[k]: quarters (v[2k] half A, v[2k] half B, v[2k+1] half A, v[2k+1] half B), 4 lanes each
    let x: [__m512i; 8] = std::array::from_fn(|k| {
        let (a, b) = (v[2 * k], v[2 * k + 1]);
        _mm512_add_epi32(
            _mm512_shuffle_i32x4::<0b10_00_10_00>(a, b),
            _mm512_shuffle_i32x4::<0b11_01_11_01>(a, b),
        )
    });
    // per group of four x: lane l of quarter q = the 4-lane sum of quarter q of x[4g + l]
    let half: [__m512i; 2] = std::array::from_fn(|g| {
        let y = &x[4 * g..4 * g + 4];
        let z: [__m512; 2] = std::array::from_fn(|k| {
            let (a, b) = (y[2 * k], y[2 * k + 1]);
            _mm512_castsi512_ps(_mm512_add_epi32(
                _mm512_unpacklo_epi64(a, b),
                _mm512_unpackhi_epi64(a, b),
            ))
        });
        let sums = _mm512_add_epi32(
            _mm512_castps_si512(_mm512_shuffle_ps::<0b10_00_10_00>(z[0], z[1])),
            _mm512_castps_si512(_mm512_shuffle_ps::<0b11_01_11_01>(z[0], z[1])),
        );
        // scale each half sum, then add the B quarter to the A quarter beside it
        let m = _mm512_mullo_epi32(sums, sc[g]);
        _mm512_add_epi32(m, _mm512_shuffle_i32x4::<0b10_11_00_01>(m, m))
    });
    _mm512_shuffle_i32x4::<0b10_00_10_00>(half[0], half[1])
}

/// [`tile_q4_k`] in the gemv order ([`rows_q4_k`]'s, for activation rows that llama.cpp runs
/// one at a time: decode rows of a batch).
///
/// # Safety
/// As [`rows_q4_k`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn tile_q4_k_gemv(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    // SAFETY: same features.
    unsafe { tile_q4_k_in(w, y, n_act, out) }
}

/// The Q4_K tile in the gemv order: each super-block's integers summed before its one `fma`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_q4_k_in(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    let Some((nb, n_w)) = q4k_tile_shape(w, y, n_act, out) else {
        return;
    };
    let zero = _mm512_setzero_si512();
    let mut acc = _mm512_setzero_ps();
    let mut acc_min = _mm512_setzero_ps();
    for i in 0..nb {
        // SAFETY: q4k_tile_shape checked the sizes.
        let (wb, ys, heads) = unsafe { q4k_tile_blocks(w, y, n_act, (nb, n_w), i) };
        let bs: [[i32; 8]; 4] = std::array::from_fn(|t| bsums32(ys[t]));
        let mut d = [0f32; 16];
        let mut dm = [0f32; 16];
        for r in 0..4 {
            for t in 0..4 {
                d[4 * r + t] = heads[r].d * ys[t].d;
                dm[4 * r + t] = heads[r].dmin * ys[t].d;
            }
        }
        // SAFETY: 16 f32 each, unaligned loads.
        let (d, dm) = unsafe { (_mm512_loadu_ps(d.as_ptr()), _mm512_loadu_ps(dm.as_ptr())) };
        let mut v = [zero; 16];
        for p in 0..QK_K / 64 {
            // SAFETY: p < 4.
            let a: [__m512i; 4] = std::array::from_fn(|t| unsafe { act64(ys[t], p) });
            let mut mins = [0i32; 16];
            for r in 0..4 {
                // SAFETY: wb[r] is a whole block, p < 4.
                let q = unsafe { q4k_quants(wb[r], p) };
                let sc = q4k_scale_pair(&heads[r], p);
                for t in 0..4 {
                    let x = _mm512_mullo_epi32(_mm512_dpbusd_epi32(zero, q, a[t]), sc);
                    v[4 * r + t] = _mm512_add_epi32(v[4 * r + t], x);
                    mins[4 * r + t] = q4k_mins(&heads[r], &bs[t]);
                }
            }
            if p == QK_K / 64 - 1 {
                // SAFETY: 16 i32, unaligned load.
                let mins = unsafe { _mm512_loadu_si512(mins.as_ptr().cast()) };
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce16(&v)), d, acc);
                acc_min = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins), dm, acc_min);
            }
        }
    }
    let mut res = [0f32; 16];
    // SAFETY: 16 f32, unaligned store.
    unsafe { _mm512_storeu_ps(res.as_mut_ptr(), _mm512_sub_ps(acc, acc_min)) };
    for r in 0..n_w {
        for t in 0..n_act {
            out[r * n_act + t] = res[4 * r + t];
        }
    }
}

/// One Q6_K super-block unpacked: 4 registers of 64 unsigned quants (`q + 32`, chunks
/// `2k, 2k + 1`), the scale of each lane's 4 bytes, and `d`.
struct Q6kBlock {
    q: [__m512i; 4],
    sc: [__m512i; 4],
    d: f32,
}

/// Unpacks the Q6_K block at `b` (ql at 0, qh at 128, scales at 192, d at 208).
///
/// # Safety
/// `b` points at a whole block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6k_unpack(b: *const u8) -> Q6kBlock {
    let m4 = _mm256_set1_epi8(0x0f);
    let m3 = _mm256_set1_epi8(0x03);
    let mut chunks = [_mm256_setzero_si256(); 8];
    for j in 0..2 {
        // SAFETY: ql[64j..64j+64] and qh[32j..32j+32] are in bounds.
        let (ql0, ql1, qh) = unsafe {
            (
                _mm256_loadu_si256(b.add(64 * j).cast()),
                _mm256_loadu_si256(b.add(64 * j + 32).cast()),
                _mm256_loadu_si256(b.add(128 + 32 * j).cast()),
            )
        };
        let h = |k: i32| {
            let s = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(k));
            _mm256_slli_epi16::<4>(_mm256_and_si256(s, m3))
        };
        chunks[4 * j] = _mm256_or_si256(_mm256_and_si256(ql0, m4), h(0));
        chunks[4 * j + 1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), h(2));
        chunks[4 * j + 2] =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4), h(4));
        chunks[4 * j + 3] =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4), h(6));
    }
    // SAFETY: the 16 scale bytes and d are in bounds.
    let (sc16, d) = unsafe {
        (
            _mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(192).cast())),
            fp16(rd16(b.add(208))),
        )
    };
    let q = std::array::from_fn(|k| {
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(chunks[2 * k]), chunks[2 * k + 1])
    });
    // Lane l of register k: chunk 2k + l/8, bytes 4(l mod 8)..: scale 4k + l/4.
    let sc = std::array::from_fn(|k| {
        let idx = _mm512_add_epi32(
            _mm512_set1_epi32(4 * k as i32),
            _mm512_srli_epi32::<2>(_mm512_set_epi32(
                15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
            )),
        );
        _mm512_permutexvar_epi32(idx, sc16)
    });
    Q6kBlock { q, sc, d }
}

/// The 8 integer lanes of the reference build's Q6_K kernel for one block against one
/// activation block: lane `l` sums `scale · q · a` (quants `0..64`) over bytes `4l..4l+4` of
/// every 32-value chunk, minus `32 · (scale[2l] · bsums[2l] + scale[2l+1] · bsums[2l+1])`
/// (see `qdot::k_x86::dot_q6_k_x86`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6k_lanes(u: &Q6kBlock, scales: *const i8, yb: &BlockQ8K) -> __m256i {
    let zero = _mm512_setzero_si512();
    let mut sum = zero;
    for k in 0..4 {
        // SAFETY: k < 4.
        let a = unsafe { act64(yb, k) };
        let s = _mm512_dpbusd_epi32(zero, u.q[k], a);
        sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(s, u.sc[k]));
    }
    let lanes = _mm256_add_epi32(
        _mm512_castsi512_si256(sum),
        _mm512_extracti64x4_epi64::<1>(sum),
    );
    // 32 · Σ scale · bsum per pair of 16-value groups: vpmaddwd of the i16 scales and bsums.
    // SAFETY: 16 scale bytes at `scales`; bsums holds 16 i16.
    let (sc16, bs) = unsafe {
        (
            _mm256_cvtepi8_epi16(_mm_loadu_si128(scales.cast())),
            _mm256_loadu_si256(yb.bsums.as_ptr().cast()),
        )
    };
    let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(sc16, bs));
    _mm256_sub_epi32(lanes, off)
}

/// ggml's `hsum_float_8`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn hsum_float_8(x: __m256) -> f32 {
    let mut r = _mm_add_ps(_mm256_extractf128_ps::<1>(x), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// One Q6_K weight row (`nb` blocks at `w`) against `T` activation rows: `out[t]`; each
/// weight block is unpacked once for all of them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6k_row<const T: usize>(w: *const u8, y: &[BlockQ8K], nb: usize, out: &mut [f32]) {
    let mut acc = [_mm256_setzero_ps(); T];
    for i in 0..nb {
        // SAFETY: block i of the row is in bounds (checked by the caller).
        let (u, scales) = unsafe {
            let b = w.add(i * Q6K_BYTES);
            (q6k_unpack(b), b.add(192).cast::<i8>())
        };
        for (t, a) in acc.iter_mut().enumerate() {
            let yb = &y[t * nb + i];
            // SAFETY: the block's 16 scales are at `scales`.
            let lanes = unsafe { q6k_lanes(&u, scales, yb) };
            *a = _mm256_fmadd_ps(_mm256_set1_ps(yb.d * u.d), _mm256_cvtepi32_ps(lanes), *a);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = hsum_float_8(a);
    }
}

/// Q6_K rows against one q8_K activation row in ggml's x86 order: `out[r]`.
///
/// # Safety
/// As [`rows_q4_k`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn rows_q6_k(w: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
    let nb = y.len();
    check(w, out.len() * nb, Q6K_BYTES);
    for (r, o) in out.iter_mut().enumerate() {
        // SAFETY: row r lies in w (checked above).
        unsafe {
            q6k_row::<1>(
                w.as_ptr().add(r * nb * Q6K_BYTES),
                y,
                nb,
                std::slice::from_mut(o),
            )
        };
    }
}

/// Q6_K tile: weight rows × 1 to 4 activation rows (`y` back to back), `out[r · n_act + t]`,
/// each pair bit for bit [`rows_q6_k`].
///
/// # Safety
/// As [`rows_q4_k`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn tile_q6_k(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    // SAFETY: as this function's.
    unsafe { tile_q6k::<false>(w, y, n_act, out) }
}

/// One Q6_K weight row against `T` activation rows in llama.cpp's tiled-matmul order (see
/// `qdot::k_x86::dot_q6_k_tiled`): per block the lanes of [`q6k_lanes`] summed as integers
/// (exact), then `acc = fma(f32(isum) · d_w, d_a, acc)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6k_row_tiled<const T: usize>(w: *const u8, y: &[BlockQ8K], nb: usize, out: &mut [f32]) {
    let mut acc = [0f32; T];
    for i in 0..nb {
        // SAFETY: block i of the row is in bounds (checked by the caller).
        let (u, scales) = unsafe {
            let b = w.add(i * Q6K_BYTES);
            (q6k_unpack(b), b.add(192).cast::<i8>())
        };
        for (t, a) in acc.iter_mut().enumerate() {
            let yb = &y[t * nb + i];
            // SAFETY: the block's 16 scales are at `scales`.
            let lanes = unsafe { q6k_lanes(&u, scales, yb) };
            let s = _mm_add_epi32(
                _mm256_castsi256_si128(lanes),
                _mm256_extracti128_si256::<1>(lanes),
            );
            let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<1>(s));
            let isum = _mm_cvtsi128_si32(s);
            *a = (isum as f32 * u.d).mul_add(yb.d, *a);
        }
    }
    out.copy_from_slice(&acc);
}

/// Q6_K tile in llama.cpp's tiled-matmul order: weight rows × 1 to 4 activation rows,
/// `out[r · n_act + t]`, each pair bit for bit `qdot::k_x86::dot_q6_k_tiled`.
///
/// # Safety
/// As [`rows_q4_k`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn tile_q6_k_tiled(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    // SAFETY: as this function's.
    unsafe { tile_q6k::<true>(w, y, n_act, out) }
}

/// The Q6_K tiles: each weight row against the `n_act` activation rows, in the vec_dot order
/// ([`q6k_row`]) or the tiled-matmul order ([`q6k_row_tiled`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_q6k<const TILED: bool>(w: &[u8], y: &[BlockQ8K], n_act: usize, out: &mut [f32]) {
    let Some(nb) = y.len().checked_div(n_act).filter(|&nb| nb > 0) else {
        return;
    };
    let n_w = out.len() / n_act;
    assert!(
        (1..=4).contains(&n_act) && y.len() == nb * n_act && out.len() == n_w * n_act,
        "tile: {} activation blocks for {n_act} rows, {} outputs",
        y.len(),
        out.len()
    );
    check(w, n_w * nb, Q6K_BYTES);
    for (r, o) in out.chunks_exact_mut(n_act).enumerate() {
        // SAFETY: row r lies in w (checked above).
        let p = unsafe { w.as_ptr().add(r * nb * Q6K_BYTES) };
        // SAFETY: y holds n_act rows of nb blocks.
        unsafe {
            match (TILED, n_act) {
                (false, 1) => q6k_row::<1>(p, y, nb, o),
                (false, 2) => q6k_row::<2>(p, y, nb, o),
                (false, 3) => q6k_row::<3>(p, y, nb, o),
                (false, _) => q6k_row::<4>(p, y, nb, o),
                (true, 1) => q6k_row_tiled::<1>(p, y, nb, o),
                (true, 2) => q6k_row_tiled::<2>(p, y, nb, o),
                (true, 3) => q6k_row_tiled::<3>(p, y, nb, o),
                (true, _) => q6k_row_tiled::<4>(p, y, nb, o),
            }
        }
    }
}

#[cfg(test)]
mod tests;
