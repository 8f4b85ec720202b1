//! AVX-512 VNNI prefill tiles for the q8_0 family (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 weights against
//! q8_0 / q8_1 activations): 1 to 4 weight rows against 1 to [`WIDE_ACTS`] activation rows, two
//! activation rows per 512-bit register.
//!
//! The 256-bit kernels of [`super::q8_family`] spend three instructions per 32 products on
//! signed × signed bytes (two `vpsignb` and a `vpdpbusd`) and one scalar multiply plus a
//! broadcast on the scale. Here each weight block is unpacked once to *unsigned* bytes
//! `q + off` (off = 8 for Q4_0, 16 for Q5_0, 128 for Q8_0; 0 for the types with a min) and
//! copied into both halves of a zmm; a pair of activation rows fills the other operand. One
//! `vpdpbusd` starting from `-off · Σ4 a` (computed once per activation block, shared by all
//! weight rows) then gives 16 lanes, each exactly ggml's lane sum `Σ q·a` of four bytes: lanes
//! 0-7 for the first activation row, 8-15 for the second. Each half is then accumulated as
//! ggml's 256-bit kernels do it (`acc = fma(d_w·d_x, f32(lanes), acc)`, `hsum_float_8` at the
//! end, `Σ m·s` beside), so the result equals the scalar twins bit for bit.

// Lanes, rows and pairs index parallel arrays, as the kernel's description does.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use kestrel_gguf::quant::BlockQ8_0;

use super::avx512::{fp16, hsum_float_8, nibbles, rd16};
use crate::cpu::kernel_table::{Line, PrepBuf};
use crate::cpu::q8_block::BlockQ8_1;

/// Activation rows one call takes at most.
pub(crate) const WIDE_ACTS: usize = 8;

/// Weight rows one call takes at most.
pub(crate) const WIDE_ROWS: usize = 4;

/// A weight block type unpacked to unsigned bytes.
trait Blk {
    /// Block bytes.
    const BS: usize;
    /// Whether the block has a min (`Σ m·s` term; activations are q8_1).
    const MIN: bool;
    /// What was added to each quant to make it unsigned.
    const OFF: u8;
    /// `(d, m, 32 unsigned quant bytes)`; `m` is 0 without a min.
    unsafe fn unpack(b: *const u8) -> (f32, f32, __m256i);
}

/// An activation block: its quants, `d` and (q8_1) `s` as f16 bits.
trait Act {
    fn qs(&self) -> *const u8;
    fn d_bits(&self) -> u16;
    fn s_bits(&self) -> u16;
}

impl Act for BlockQ8_0 {
    #[inline(always)]
    fn qs(&self) -> *const u8 {
        self.qs.as_ptr().cast()
    }
    #[inline(always)]
    fn d_bits(&self) -> u16 {
        self.d.to_bits()
    }
    #[inline(always)]
    fn s_bits(&self) -> u16 {
        0
    }
}

impl Act for BlockQ8_1 {
    #[inline(always)]
    fn qs(&self) -> *const u8 {
        self.qs.as_ptr().cast()
    }
    #[inline(always)]
    fn d_bits(&self) -> u16 {
        self.d.to_bits()
    }
    #[inline(always)]
    fn s_bits(&self) -> u16 {
        self.s.to_bits()
    }
}

/// Declares a weight block type: `$unpack` is the body of [`Blk::unpack`] over the block `b`.
macro_rules! blk {
    ($name:ident, $bs:expr, $min:expr, $off:expr, |$b:ident| $unpack:block) => {
        struct $name;
        impl Blk for $name {
            const BS: usize = $bs;
            const MIN: bool = $min;
            const OFF: u8 = $off;
            #[inline(always)]
            unsafe fn unpack($b: *const u8) -> (f32, f32, __m256i) {
                // SAFETY: the caller keeps the block in bounds and has the CPU features.
                unsafe { $unpack }
            }
        }
    };
}

blk!(WQ4_0, 18, false, 8, |b| {
    (fp16(rd16(b)), 0.0, nibbles(b.add(2)))
});
blk!(WQ4_1, 20, true, 0, |b| {
    (fp16(rd16(b)), fp16(rd16(b.add(2))), nibbles(b.add(4)))
});
/// Byte `j` is 0x10 where bit `j` of the 4 bytes at `p` is set: the fifth bits of a Q5 block,
/// as one masked move (AVX-512BW) instead of a shuffle, an or, a compare and an and.
///
/// # Safety
/// `p..p + 4` is in bounds; the CPU has AVX-512BW/VL.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn fifth_bits(p: *const u8) -> __m256i {
    // SAFETY: the caller keeps `p..p+4` in bounds; the read is unaligned.
    let bits = unsafe { p.cast::<u32>().read_unaligned() };
    _mm256_maskz_mov_epi8(u32::from_le(bits), _mm256_set1_epi8(0x10))
}

blk!(WQ5_0, 22, false, 16, |b| {
    let hi = fifth_bits(b.add(2));
    (fp16(rd16(b)), 0.0, _mm256_or_si256(nibbles(b.add(6)), hi))
});
blk!(WQ5_1, 24, true, 0, |b| {
    let hi = fifth_bits(b.add(4));
    (
        fp16(rd16(b)),
        fp16(rd16(b.add(2))),
        _mm256_or_si256(nibbles(b.add(8)), hi),
    )
});
blk!(WQ8_0, 34, false, 128, |b| {
    let q = _mm256_loadu_si256(b.add(2).cast());
    (
        fp16(rd16(b)),
        0.0,
        _mm256_xor_si256(q, _mm256_set1_epi8(0x80u8 as i8)),
    )
});

/// The upper 8 f32 lanes of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn hi256(v: __m512) -> __m256 {
    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)))
}

/// The activation side of block `i` for `P` pairs of the `n_act` rows of `y` (`nb` blocks
/// each; an odd last row is paired with itself): per pair the two rows' quants, their
/// `-off · Σ4 a` lanes and their scales, and the 8 rows' q8_1 sums.
#[inline(always)]
unsafe fn act_block<B: Blk, A: Act, const P: usize>(
    y: &[A],
    nb: usize,
    n_act: usize,
    i: usize,
) -> ([__m512i; P], [__m512i; P], [__m512; P], __m256) {
    // Activation row of lane group `g` (0..2P): rows past the last repeat it.
    let row = |g: usize| g.min(n_act - 1);
    let zero = _mm512_setzero_si512();
    let off = _mm512_set1_epi8(B::OFF as i8);
    let mut d_bits = [0u16; 8];
    let mut s_bits = [0u16; 8];
    let mut av = [zero; P];
    let mut cv = [zero; P];
    for p in 0..P {
        let (ya, yb) = (&y[row(2 * p) * nb + i], &y[row(2 * p + 1) * nb + i]);
        d_bits[2 * p] = ya.d_bits();
        d_bits[2 * p + 1] = yb.d_bits();
        s_bits[2 * p] = ya.s_bits();
        s_bits[2 * p + 1] = yb.s_bits();
        // SAFETY: 32 bytes of quants each, unaligned loads.
        av[p] = unsafe {
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_loadu_si256(ya.qs().cast())),
                _mm256_loadu_si256(yb.qs().cast()),
            )
        };
        if B::OFF != 0 {
            cv[p] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, av[p]));
        }
    }
    // SAFETY: 16 bytes each, unaligned loads.
    let (d8, s8) = unsafe {
        (
            _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(d_bits.as_ptr().cast()))),
            _mm256_cvtph_ps(_mm_loadu_si128(s_bits.as_ptr().cast())),
        )
    };
    // Lanes 2p and 2p + 1 of d8 to the halves of pair p (a loop, not a closure: closures do
    // not inherit the caller's target features, and the intrinsics would become calls).
    let mut dv = [_mm512_setzero_ps(); P];
    for (p, v) in dv.iter_mut().enumerate() {
        let idx = _mm512_inserti64x4::<1>(
            _mm512_set1_epi32(2 * p as i32),
            _mm256_set1_epi32(2 * p as i32 + 1),
        );
        *v = _mm512_permutexvar_ps(idx, d8);
    }
    (av, cv, dv, s8)
}

/// `W` weight rows (`rb` bytes apart at `w`, `nb` blocks each) against `n_act` activation rows
/// (`y`: `n_act · nb` blocks, row after row) taken as `P` pairs (an odd last row is paired
/// with itself): `out[r · n_act + t]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn wide<B: Blk, A: Act, const W: usize, const P: usize>(
    w: *const u8,
    rb: usize,
    y: &[A],
    nb: usize,
    n_act: usize,
    out: &mut [f32],
) {
    debug_assert!(n_act.div_ceil(2) == P && y.len() == n_act * nb && out.len() == W * n_act);
    let mut acc = [[_mm512_setzero_ps(); P]; W];
    let mut summs = [_mm256_setzero_ps(); W];
    for i in 0..nb {
        // SAFETY: block i of each row lies in `y` (checked by the caller).
        let (av, cv, dv, s8) = unsafe { act_block::<B, A, P>(y, nb, n_act, i) };
        let s8 = if B::MIN { s8 } else { _mm256_setzero_ps() };
        for r in 0..W {
            // W rows stream side by side, which the hardware prefetchers follow badly.
            super::prefetch_ahead(w.wrapping_add(r * rb + i * B::BS), B::BS);
            // SAFETY: block i of row r lies in the weights (checked by the caller).
            let (d, m, q) = unsafe { B::unpack(w.add(r * rb + i * B::BS)) };
            let q2 = _mm512_broadcast_i64x4(q);
            let dw = _mm512_set1_ps(d);
            for p in 0..P {
                let s = _mm512_dpbusd_epi32(cv[p], q2, av[p]);
                acc[r][p] =
                    _mm512_fmadd_ps(_mm512_mul_ps(dw, dv[p]), _mm512_cvtepi32_ps(s), acc[r][p]);
            }
            if B::MIN {
                summs[r] = _mm256_fmadd_ps(_mm256_set1_ps(m), s8, summs[r]);
            }
        }
    }
    finish::<B, W, P>(&acc, &summs, n_act, out);
}

/// Vectors per (block, pair) in a prepared activation side: quants, `-off · Σ4 a` lanes,
/// scales (and, at pair 0, the q8_1 sums of the block's 8 rows).
const SLOTS: usize = 4;

/// Prepares the activation side of [`wide`] for `n_act` rows (`P` pairs) of `nb` blocks into
/// `buf`: per block and pair, the vectors `wide` builds at the top of each block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn prep<B: Blk, A: Act, const P: usize>(y: &[A], nb: usize, n_act: usize, buf: &mut [Line]) {
    assert!(
        buf.len() >= nb * P * SLOTS && y.len() == n_act * nb && n_act.div_ceil(2) == P,
        "prep: {} lines for {nb} blocks of {n_act} rows",
        buf.len()
    );
    let out = buf.as_mut_ptr().cast::<__m512i>();
    for i in 0..nb {
        // SAFETY: block i of each row lies in `y` (checked above).
        let (av, cv, dv, s8) = unsafe { act_block::<B, A, P>(y, nb, n_act, i) };
        // SAFETY: lines i·P·SLOTS.. lie in `buf` (checked above); 64-byte aligned stores.
        unsafe {
            let at = out.add(i * P * SLOTS);
            for p in 0..P {
                _mm512_store_si512(at.add(p * SLOTS), av[p]);
                _mm512_store_si512(at.add(p * SLOTS + 1), cv[p]);
                _mm512_store_ps(at.add(p * SLOTS + 2).cast(), dv[p]);
            }
            _mm512_store_ps(at.add(3).cast(), _mm512_castps256_ps512(s8));
        }
    }
}

/// [`wide`] over an activation side made by [`prep`]: the same operations on the same values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn wide_prepped<B: Blk, const W: usize, const P: usize>(
    w: *const u8,
    rb: usize,
    buf: &[Line],
    nb: usize,
    n_act: usize,
    out: &mut [f32],
) {
    assert!(
        buf.len() >= nb * P * SLOTS && out.len() == W * n_act && n_act.div_ceil(2) == P,
        "wide_prepped: {} lines for {nb} blocks of {n_act} rows",
        buf.len()
    );
    let base = buf.as_ptr().cast::<__m512i>();
    let mut acc = [[_mm512_setzero_ps(); P]; W];
    let mut summs = [_mm256_setzero_ps(); W];
    for i in 0..nb {
        // SAFETY: lines of block i lie in `buf` (checked above); aligned loads.
        let at = |p: usize, slot: usize| unsafe { base.add((i * P + p) * SLOTS + slot) };
        let s8 = if B::MIN {
            // SAFETY: as above.
            unsafe { _mm256_load_ps(at(0, 3).cast()) }
        } else {
            _mm256_setzero_ps()
        };
        for r in 0..W {
            // W rows stream side by side, which the hardware prefetchers follow badly.
            super::prefetch_ahead(w.wrapping_add(r * rb + i * B::BS), B::BS);
            // SAFETY: block i of row r lies in the weights (checked by the caller).
            let (d, m, q) = unsafe { B::unpack(w.add(r * rb + i * B::BS)) };
            let q2 = _mm512_broadcast_i64x4(q);
            let dw = _mm512_set1_ps(d);
            for p in 0..P {
                // SAFETY: as above.
                let (av, cv, dv) = unsafe {
                    (
                        _mm512_load_si512(at(p, 0)),
                        _mm512_load_si512(at(p, 1)),
                        _mm512_load_ps(at(p, 2).cast()),
                    )
                };
                let s = _mm512_dpbusd_epi32(cv, q2, av);
                acc[r][p] =
                    _mm512_fmadd_ps(_mm512_mul_ps(dw, dv), _mm512_cvtepi32_ps(s), acc[r][p]);
            }
            if B::MIN {
                summs[r] = _mm256_fmadd_ps(_mm256_set1_ps(m), s8, summs[r]);
            }
        }
    }
    finish::<B, W, P>(&acc, &summs, n_act, out);
}

/// Sums each accumulator's halves as ggml does and adds the `Σ m·s` terms: `out[r · n_act + t]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn finish<B: Blk, const W: usize, const P: usize>(
    acc: &[[__m512; P]; W],
    summs: &[__m256; W],
    n_act: usize,
    out: &mut [f32],
) {
    for r in 0..W {
        let mut sm = [0f32; 8];
        // SAFETY: 8 f32, unaligned store.
        unsafe { _mm256_storeu_ps(sm.as_mut_ptr(), summs[r]) };
        for p in 0..P {
            let halves = [_mm512_castps512_ps256(acc[r][p]), hi256(acc[r][p])];
            for (h, half) in halves.into_iter().enumerate() {
                let t = 2 * p + h;
                if t < n_act {
                    let v = hsum_float_8(half);
                    out[r * n_act + t] = if B::MIN { v + sm[t] } else { v };
                }
            }
        }
    }
}

/// [`tile`] with the activation side prepared in `prep` when `fresh` (see
/// `dispatch::PreppedTileFn`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_prepped<B: Blk, A: Act>(
    w: &[u8],
    y: &[A],
    n_act: usize,
    out: &mut [f32],
    prep_buf: &mut PrepBuf,
    fresh: bool,
) {
    let t = n_act;
    let ok_t = (1..=WIDE_ACTS).contains(&t) && y.len().is_multiple_of(t);
    let nb = if ok_t { y.len() / t } else { 0 };
    let rb = nb * B::BS;
    let pairs = t.div_ceil(2);
    let lines = nb * pairs * SLOTS;
    if fresh && ok_t && nb > 0 {
        if prep_buf.len() < lines {
            prep_buf.resize(lines, Line([0; 64]));
        }
        // SAFETY: the caller has the CPU features; `prep` checks the sizes.
        unsafe {
            match pairs {
                1 => prep::<B, A, 1>(y, nb, t, prep_buf),
                2 => prep::<B, A, 2>(y, nb, t, prep_buf),
                3 => prep::<B, A, 3>(y, nb, t, prep_buf),
                _ => prep::<B, A, 4>(y, nb, t, prep_buf),
            }
        }
    }
    let n_w = w.len().checked_div(rb).unwrap_or(0);
    assert!(
        ok_t && rb > 0
            && (1..=WIDE_ROWS).contains(&n_w)
            && n_w * rb == w.len()
            && out.len() == n_w * t
            && prep_buf.len() >= lines,
        "wide tile: {} weight bytes, {} activation blocks in {t} rows, {} outputs",
        w.len(),
        y.len(),
        out.len()
    );
    // Rows `r0..r0 + $w` into `out[r0 · t..]`.
    macro_rules! run {
        ($w:literal, $r0:expr) => {{
            let (p, o) = (w.as_ptr().add($r0 * rb), &mut out[$r0 * t..($r0 + $w) * t]);
            match pairs {
                1 => wide_prepped::<B, $w, 1>(p, rb, prep_buf, nb, t, o),
                2 => wide_prepped::<B, $w, 2>(p, rb, prep_buf, nb, t, o),
                3 => wide_prepped::<B, $w, 3>(p, rb, prep_buf, nb, t, o),
                _ => wide_prepped::<B, $w, 4>(p, rb, prep_buf, nb, t, o),
            }
        }};
    }
    // SAFETY: sizes checked above (rows r0..r0 + $w lie in `w`); the caller has the CPU
    // features.
    unsafe {
        match n_w {
            1 => run!(1, 0),
            2 => run!(2, 0),
            // Types with a min take four rows of many activation rows in two passes of two
            // (see `tile`).
            3 if B::MIN && t > 4 => {
                run!(2, 0);
                run!(1, 2);
            }
            3 => run!(3, 0),
            _ if B::MIN && t > 4 => {
                run!(2, 0);
                run!(2, 2);
            }
            _ => run!(4, 0),
        }
    }
}

/// Blocks per row up to which [`rows`] prepares the activation side on the stack (k <= 4096);
/// longer rows take the one-row [`tile`].
const ROWS_MAX_BLOCKS: usize = 128;

/// Decode: `out[r] = dot(weight row r, y)` for the consecutive weight rows in `w`, one row
/// after another (rows stream from memory in order: interleaving rows, as a tile does, defeats
/// the hardware prefetchers). Per block one `vpdpbusd` of the unsigned weight bytes with the
/// activation bytes, starting from the activation block's `-off · Σ4 a` lanes, then ggml's
/// `acc = fma(d_w·d_x, f32(lanes), acc)` (`Σ m·s` beside): the float order of the scalar
/// twins. The activation side (those lanes, `d_x`, `s_x`) is prepared once per call instead of
/// once per row, and the sign trick of the 256-bit kernels (two `vpsignb` per block) is gone.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn rows<B: Blk, A: Act>(w: &[u8], y: &[A], out: &mut [f32]) {
    let nb = y.len();
    let rb = nb * B::BS;
    assert!(
        out.len().checked_mul(rb) == Some(w.len()),
        "rows: {} weight bytes for {} rows of {nb} blocks",
        w.len(),
        out.len()
    );
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    if nb > ROWS_MAX_BLOCKS {
        for (o, wr) in out.iter_mut().zip(w.chunks_exact(rb)) {
            // SAFETY: one whole row; the caller has the CPU features.
            unsafe { tile::<B, A>(wr, y, 1, std::slice::from_mut(o)) };
        }
        return;
    }
    let zero = _mm256_setzero_si256();
    let off = _mm256_set1_epi8(B::OFF as i8);
    let mut cv = [zero; ROWS_MAX_BLOCKS];
    let mut dx = [0f32; ROWS_MAX_BLOCKS];
    let mut sx = [0f32; ROWS_MAX_BLOCKS];
    for (i, b) in y.iter().enumerate() {
        if B::OFF != 0 {
            // SAFETY: 32 bytes of quants, unaligned load.
            let a = unsafe { _mm256_loadu_si256(b.qs().cast()) };
            cv[i] = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, off, a));
        }
        dx[i] = fp16(b.d_bits());
        sx[i] = fp16(b.s_bits());
    }
    let base = w.as_ptr();
    for (r, o) in out.iter_mut().enumerate() {
        // The row PREFETCH_AHEAD bytes on, as the packed kernels do: without it this loop ran
        // at 4 GB/s on a Sapphire Rapids VM (SmolLM2 decode 0.74x llama.cpp).
        super::prefetch_ahead(base.wrapping_add(r * rb), rb);
        let mut acc = _mm256_setzero_ps();
        let mut summ = 0f32;
        for i in 0..nb {
            // SAFETY: block i of row r lies in `w` (checked above); 32 bytes of activation
            // quants, unaligned load.
            let (d, m, q, a) = unsafe {
                let (d, m, q) = B::unpack(base.add(r * rb + i * B::BS));
                (d, m, q, _mm256_loadu_si256(y[i].qs().cast()))
            };
            let s = _mm256_dpbusd_epi32(cv[i], q, a);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * dx[i]), _mm256_cvtepi32_ps(s), acc);
            if B::MIN {
                summ = m.mul_add(sx[i], summ);
            }
        }
        let v = hsum_float_8(acc);
        *o = if B::MIN { v + summ } else { v };
    }
}

/// Checks the sizes and calls [`wide`] with the const row and pair counts.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile<B: Blk, A: Act>(w: &[u8], y: &[A], n_act: usize, out: &mut [f32]) {
    let t = n_act;
    let ok_t = (1..=WIDE_ACTS).contains(&t) && y.len().is_multiple_of(t);
    let nb = if ok_t { y.len() / t } else { 0 };
    let rb = nb * B::BS;
    let n_w = w.len().checked_div(rb).unwrap_or(0);
    assert!(
        ok_t && rb > 0
            && (1..=WIDE_ROWS).contains(&n_w)
            && n_w * rb == w.len()
            && out.len() == n_w * t,
        "wide tile: {} weight bytes, {} activation blocks in {t} rows, {} outputs",
        w.len(),
        y.len(),
        out.len()
    );
    let p = w.as_ptr();
    macro_rules! by_pairs {
        ($w:literal) => {
            match t.div_ceil(2) {
                1 => wide::<B, A, $w, 1>(p, rb, y, nb, t, out),
                2 => wide::<B, A, $w, 2>(p, rb, y, nb, t, out),
                3 => wide::<B, A, $w, 3>(p, rb, y, nb, t, out),
                _ => wide::<B, A, $w, 4>(p, rb, y, nb, t, out),
            }
        };
    }
    if B::MIN && t > 4 && n_w > 2 {
        // Four rows of six or eight activation rows with a min term need more than the 32
        // vector registers (the accumulators, the activation pairs and their scales, the
        // `Σ m·s` sums): the spills cost more than a second pass over the activations.
        let (w_a, w_b) = w.split_at(2 * rb);
        let (o_a, o_b) = out.split_at_mut(2 * t);
        // SAFETY: two whole rows, and the rest, of the checked sizes.
        unsafe {
            tile::<B, A>(w_a, y, t, o_a);
            tile::<B, A>(w_b, y, t, o_b);
        }
        return;
    }
    // SAFETY: sizes checked above; the caller has the CPU features.
    unsafe {
        match n_w {
            1 => by_pairs!(1),
            2 => by_pairs!(2),
            3 => by_pairs!(3),
            _ => by_pairs!(4),
        }
    }
}

macro_rules! entry {
    ($name:ident, $blk:ident, $act:ty, $doc:literal) => {
        #[doc = $doc]
        #[doc = ""]
        #[doc = "1 to 4 weight rows against 1 to 8 activation rows (back to back in `y`): `out[r · n_act + t]`."]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(crate) unsafe fn $name(w: &[u8], y: &[$act], n_act: usize, out: &mut [f32]) {
            // SAFETY: the caller has the CPU features.
            unsafe { tile::<$blk, $act>(w, y, n_act, out) }
        }
    };
}

macro_rules! entry_rows {
    ($name:ident, $blk:ident, $act:ty, $doc:literal) => {
        #[doc = $doc]
        #[doc = ""]
        #[doc = "Decode: `out[r]` for each of the consecutive weight rows in `w` (see `rows`)."]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(crate) unsafe fn $name(w: &[u8], y: &[$act], out: &mut [f32]) {
            // SAFETY: the caller has the CPU features.
            unsafe { rows::<$blk, $act>(w, y, out) }
        }
    };
}

entry_rows!(rows_q4_0, WQ4_0, BlockQ8_0, "Q4_0 · q8_0.");
entry_rows!(rows_q4_1, WQ4_1, BlockQ8_1, "Q4_1 · q8_1.");
entry_rows!(rows_q5_0, WQ5_0, BlockQ8_0, "Q5_0 · q8_0.");
entry_rows!(rows_q5_1, WQ5_1, BlockQ8_1, "Q5_1 · q8_1.");
entry_rows!(rows_q8_0, WQ8_0, BlockQ8_0, "Q8_0 · q8_0.");

macro_rules! entry_prepped {
    ($name:ident, $blk:ident, $act:ty, $doc:literal) => {
        #[doc = $doc]
        #[doc = ""]
        #[doc = "The tile with its activation side prepared once per activation group (see `tile_prepped`)."]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(crate) unsafe fn $name(
            w: &[u8],
            y: &[$act],
            n_act: usize,
            out: &mut [f32],
            prep: &mut PrepBuf,
            fresh: bool,
        ) {
            // SAFETY: the caller has the CPU features.
            unsafe { tile_prepped::<$blk, $act>(w, y, n_act, out, prep, fresh) }
        }
    };
}

entry_prepped!(prepped_q4_0, WQ4_0, BlockQ8_0, "Q4_0 · q8_0.");
entry_prepped!(prepped_q4_1, WQ4_1, BlockQ8_1, "Q4_1 · q8_1.");
entry_prepped!(prepped_q5_0, WQ5_0, BlockQ8_0, "Q5_0 · q8_0.");
entry_prepped!(prepped_q5_1, WQ5_1, BlockQ8_1, "Q5_1 · q8_1.");
entry_prepped!(prepped_q8_0, WQ8_0, BlockQ8_0, "Q8_0 · q8_0.");

entry!(tile_q4_0, WQ4_0, BlockQ8_0, "Q4_0 · q8_0.");
entry!(tile_q4_1, WQ4_1, BlockQ8_1, "Q4_1 · q8_1.");
entry!(tile_q5_0, WQ5_0, BlockQ8_0, "Q5_0 · q8_0.");
entry!(tile_q5_1, WQ5_1, BlockQ8_1, "Q5_1 · q8_1.");
entry!(tile_q8_0, WQ8_0, BlockQ8_0, "Q8_0 · q8_0.");
