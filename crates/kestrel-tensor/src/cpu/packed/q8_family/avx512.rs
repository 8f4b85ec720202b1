//! AVX-512 VNNI kernel for the q8_0-family weights packed 16 rows at a time (Q4_0x16, Q4_1x16,
//! Q5_0x16, Q5_1x16, Q8_0x16; see `cpu::packed::q8_family`): 16 weight rows against 1 to
//! [`MAX_ACTS`] q8_0 activation rows, one 512-bit accumulator per activation row whose 16 lanes
//! are the 16 weight rows.
//!
//! Each block of a group gives eight vectors of unsigned quant bytes, vector `v` holding
//! elements `4v..4v + 4` of row `r` in lane `r` (nibbles split by an and and a shift; Q5's fifth
//! bits added under a 64-bit mask; Q8_0's bytes loaded as stored). Eight `vpdpbusd` against
//! broadcast activation dwords then sum a whole block per lane, exactly (starting from the
//! activation block's `-off · Σ a`, which makes the unsigned quants signed), and one `fma(f32(sum),
//! d_w · d_x, acc)` per block and activation row (and `fma(m_w, s_x, acc)` for the types with
//! a min) finishes 16 outputs: the numerics of `q8_family::tile_scalar`, bit for bit.

use std::arch::x86_64::*;

use crate::cpu::packed::groups::GROUP_ROWS;
use crate::cpu::packed::q8_family::layout::{ActQ8, Kind};

/// Activation rows one call takes at most.
pub(crate) const MAX_ACTS: usize = 8;

/// Four bytes at `p` as the dword of a broadcast.
#[inline(always)]
unsafe fn rd32(p: *const i8) -> i32 {
    // SAFETY: the caller keeps `p..p + 4` in bounds; the read is unaligned.
    unsafe { p.cast::<i32>().read_unaligned() }
}

/// A packed block type: how its quant bytes become the eight unsigned vectors.
trait Layout {
    const KIND: Kind;
    /// The eight vectors of the block whose quant bytes start at `q`.
    unsafe fn unsigned(q: *const u8) -> [__m512i; 8];
}

/// The low and high nibbles of the four 64-byte chunks at `q`: vectors 0-3 and 4-7.
#[inline(always)]
unsafe fn nibbles(q: *const u8) -> [__m512i; 8] {
    let m4 = _mm512_set1_epi8(0x0F);
    let mut u = [_mm512_setzero_si512(); 8];
    // Loops, not `map` closures: closures do not inherit the target features.
    for c in 0..4 {
        // SAFETY: the caller keeps 256 bytes at `q` in bounds; unaligned loads.
        let v = unsafe { _mm512_loadu_si512(q.add(64 * c).cast()) };
        u[c] = _mm512_and_si512(v, m4);
        u[4 + c] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
    }
    u
}

/// The Q4 nibbles at `q` with the fifth bits of the 8 masks after them added (`+ 0x10`).
#[inline(always)]
unsafe fn fives(q: *const u8) -> [__m512i; 8] {
    // SAFETY: the caller keeps 256 + 64 bytes at `q` in bounds.
    let mut u = unsafe { nibbles(q) };
    let sixteen = _mm512_set1_epi8(0x10);
    for (v, u) in u.iter_mut().enumerate() {
        // SAFETY: mask v lies in the 64 bytes after the nibbles; unaligned read.
        let k = unsafe { q.add(256 + 8 * v).cast::<u64>().read_unaligned() };
        *u = _mm512_mask_add_epi8(*u, u64::from_le(k), *u, sixteen);
    }
    u
}

/// Declares a layout whose vectors come from `$f`.
macro_rules! layout {
    ($name:ident, $kind:ident, $f:ident) => {
        struct $name;
        impl Layout for $name {
            const KIND: Kind = Kind::$kind;
            #[inline(always)]
            unsafe fn unsigned(q: *const u8) -> [__m512i; 8] {
                // SAFETY: the caller keeps the block's quant bytes in bounds.
                unsafe { $f(q) }
            }
        }
    };
}

/// Q8_0's eight stored chunks.
#[inline(always)]
unsafe fn bytes(q: *const u8) -> [__m512i; 8] {
    let mut u = [_mm512_setzero_si512(); 8];
    for (v, u) in u.iter_mut().enumerate() {
        // SAFETY: the caller keeps 512 bytes at `q` in bounds; unaligned loads.
        *u = unsafe { _mm512_loadu_si512(q.add(64 * v).cast()) };
    }
    u
}

layout!(L4_0, Q4_0, nibbles);
layout!(L4_1, Q4_1, nibbles);
layout!(L5_0, Q5_0, fives);
layout!(L5_1, Q5_1, fives);
layout!(L8_0, Q8_0, bytes);

/// `T` activation rows against one group.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile<L: Layout, const T: usize>(
    group: &[u8],
    nb: usize,
    act: ActQ8<'_>,
    out: &mut [f32],
) {
    let (qb, sb) = (L::KIND.quant_bytes(), L::KIND.scale_bytes());
    let min = L::KIND.has_min();
    let (quants, scales) = group.split_at(nb * qb);
    assert!(
        quants.len() == nb * qb
            && scales.len() == nb * sb
            && act.acts.len() == T * nb
            && act.corr.len() == T * nb
            && act.d.len() == T * nb
            && out.len() == T * GROUP_ROWS,
        "q8-family x16 tile: sizes do not match {nb} blocks and {T} activation rows"
    );
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        crate::cpu::prefetch::prefetch_ahead(quants.as_ptr().wrapping_add(b * qb), qb);
        // SAFETY: block b's quant and scale bytes lie in `group` (checked above); unaligned
        // loads.
        let (u, dw, mw) = unsafe {
            let s = scales.as_ptr().add(b * sb);
            let mw = if min {
                _mm512_cvtph_ps(_mm256_loadu_si256(s.add(32).cast()))
            } else {
                _mm512_setzero_ps()
            };
            (
                L::unsigned(quants.as_ptr().add(b * qb)),
                _mm512_cvtph_ps(_mm256_loadu_si256(s.cast())),
                mw,
            )
        };
        for (t, acc) in acc.iter_mut().enumerate() {
            let i = t * nb + b;
            let a = act.acts[i].qs.as_ptr();
            let mut s0 = _mm512_set1_epi32(if min { 0 } else { act.corr[i] });
            let mut s1 = _mm512_setzero_si512();
            for c in 0..4 {
                // SAFETY: bytes 4c..4c + 4 and 16 + 4c..16 + 4c + 4 of a 32-byte block.
                let (x0, x1) = unsafe { (rd32(a.add(4 * c)), rd32(a.add(16 + 4 * c))) };
                s0 = _mm512_dpbusd_epi32(s0, u[c], _mm512_set1_epi32(x0));
                s1 = _mm512_dpbusd_epi32(s1, u[4 + c], _mm512_set1_epi32(x1));
            }
            let s = _mm512_add_epi32(s0, s1);
            let dx = act.d[i];
            let d = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, *acc);
            if min {
                *acc = _mm512_fmadd_ps(mw, _mm512_set1_ps(act.s(i)), *acc);
            }
        }
    }
    for (t, o) in out.chunks_exact_mut(GROUP_ROWS).enumerate() {
        // SAFETY: 16 f32, unaligned store.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), acc[t]) };
    }
}

/// [`tile`] for the activation row count of `act`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn by_rows<L: Layout>(group: &[u8], nb: usize, act: ActQ8<'_>, out: &mut [f32]) {
    // SAFETY: the caller has the CPU features; `tile` checks the sizes.
    unsafe {
        match act.acts.len().checked_div(nb).unwrap_or(0) {
            1 => tile::<L, 1>(group, nb, act, out),
            2 => tile::<L, 2>(group, nb, act, out),
            3 => tile::<L, 3>(group, nb, act, out),
            4 => tile::<L, 4>(group, nb, act, out),
            5 => tile::<L, 5>(group, nb, act, out),
            6 => tile::<L, 6>(group, nb, act, out),
            7 => tile::<L, 7>(group, nb, act, out),
            8 => tile::<L, 8>(group, nb, act, out),
            t => panic!("q8-family x16 tile: {t} activation rows (1 to {MAX_ACTS})"),
        }
    }
}

/// One group (16 rows of `kind`, `nb` blocks, packed) against 1 to [`MAX_ACTS`] activation
/// rows: `out[t · 16 + r]`.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn group_tile(
    kind: Kind,
    group: &[u8],
    nb: usize,
    act: ActQ8<'_>,
    out: &mut [f32],
) {
    // SAFETY: the caller has the CPU features.
    unsafe {
        match kind {
            Kind::Q4_0 => by_rows::<L4_0>(group, nb, act, out),
            Kind::Q4_1 => by_rows::<L4_1>(group, nb, act, out),
            Kind::Q5_0 => by_rows::<L5_0>(group, nb, act, out),
            Kind::Q5_1 => by_rows::<L5_1>(group, nb, act, out),
            Kind::Q8_0 => by_rows::<L8_0>(group, nb, act, out),
            Kind::IQ4NL | Kind::MXFP4 => panic!("{kind:?}: the AVX2 kernel computes it"),
        }
    }
}
