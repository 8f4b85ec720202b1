//! AVX-512 VNNI kernels for Q6_K weights packed as Q6_Kx16 (see `cpu::packed::q6_k`): 16
//! weight rows per 512-bit vector, one lane per row, in both of llama.cpp's summation orders.
//!
//! Per group of 4 values, one `vpdpbusd` of the unsigned 6-bit weights against the broadcast
//! activation dword gives each row's exact `Σ q·a`; a `vpmulld` by the rows' sub-block scales
//! weighs it. The *tiled* order starts each sub-block's sum from `-32 · bsum` (making the
//! weights signed), adds the 16 weighted sub-blocks into one exact integer per row and
//! finishes with `fma(f32(isum) · d_w, d_x, acc)`. The *lanes* order keeps ggml's 8 integer
//! lanes per row (groups `gi ≡ l mod 8`, the `-32` term by the lane's pair of bsums), each
//! with its own float accumulator, summed at the end as `hsum_float_8` does. Both are the
//! scalar twins' bits (`packed::q6_k::tile_scalar`).

use std::arch::x86_64::*;

use crate::cpu::packed::groups::GROUP_ROWS;
use crate::cpu::packed::q6_k::layout::{ActQ8K, QH_AT, QUANT_BYTES, SCALE_BYTES};

/// Four bytes at `p` as the dword of a broadcast.
#[inline(always)]
unsafe fn rd32(p: *const i8) -> i32 {
    // SAFETY: the caller keeps `p..p + 4` in bounds; the read is unaligned.
    unsafe { p.cast::<i32>().read_unaligned() }
}

/// The weights of groups `p`, `p + 16`, `p + 32`, `p + 48` (16 rows × 4 values each, unsigned
/// bytes 0..63) from a super-block's packed quants at `q`.
#[inline(always)]
unsafe fn unpack4(q: *const u8, p: usize) -> [__m512i; 4] {
    let m4 = _mm512_set1_epi8(0x0F);
    let m30 = _mm512_set1_epi8(0x30);
    // SAFETY: the caller keeps the super-block's QUANT_BYTES at `q`; p < 16.
    let (a, b, h) = unsafe {
        (
            _mm512_loadu_si512(q.add(p * 64).cast()),
            _mm512_loadu_si512(q.add((p + 16) * 64).cast()),
            _mm512_loadu_si512(q.add(QH_AT + p * 64).cast()),
        )
    };
    let hi = |v: __m512i| _mm512_and_si512(v, m30);
    [
        _mm512_or_si512(_mm512_and_si512(a, m4), hi(h)),
        _mm512_or_si512(_mm512_and_si512(b, m4), hi(_mm512_srli_epi16::<2>(h))),
        _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16::<4>(a), m4),
            hi(_mm512_slli_epi16::<4>(h)),
        ),
        _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16::<4>(b), m4),
            hi(_mm512_slli_epi16::<2>(h)),
        ),
    ]
}

/// The 16 rows' scales of sub-block `sb` as i32 lanes.
#[inline(always)]
unsafe fn scales(s: *const u8, sb: usize) -> __m512i {
    // SAFETY: the caller keeps the super-block's SCALE_BYTES at `s`; sb < 16.
    unsafe { _mm512_cvtepi8_epi32(_mm_loadu_si128(s.add(sb * GROUP_ROWS).cast())) }
}

/// The 16 rows' scales of sub-block `sb`, each in both i16 halves of its lane (for
/// `vpdpwssd`).
#[inline(always)]
unsafe fn scales_dup(s: *const u8, sb: usize) -> __m512i {
    // SAFETY: the caller keeps the super-block's SCALE_BYTES at `s`; sb < 16.
    let s16 = unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(s.add(sb * GROUP_ROWS).cast())) };
    let idx = _mm512_set_epi16(
        15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8, 7, 7, 6, 6, 5, 5, 4, 4, 3, 3,
        2, 2, 1, 1, 0, 0,
    );
    _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(s16))
}

/// Checks a call's sizes; returns (quants, scales) of the group.
fn split(
    group: &[u8],
    nb: usize,
    act: &ActQ8K<'_>,
    t: usize,
    out: &[f32],
) -> (*const u8, *const u8) {
    assert!(
        group.len() == nb * (QUANT_BYTES + SCALE_BYTES)
            && act.acts.len() == t * nb
            && act.corr.len() == 16 * t * nb
            && out.len() == t * GROUP_ROWS,
        "q6_kx16 tile: sizes do not match {nb} blocks and {t} activation rows"
    );
    (group.as_ptr(), group[nb * QUANT_BYTES..].as_ptr())
}

/// Tiled order, `T` activation rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tiled_rows<const T: usize>(group: &[u8], nb: usize, act: ActQ8K<'_>, out: &mut [f32]) {
    let (quants, scale_base) = split(group, nb, &act, T, out);
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        crate::cpu::prefetch::prefetch_ahead(quants.wrapping_add(b * QUANT_BYTES), QUANT_BYTES);
        // SAFETY: super-block b's quants and scales lie in the group (checked by `split`).
        let (q, s) = unsafe { (quants.add(b * QUANT_BYTES), scale_base.add(b * SCALE_BYTES)) };
        let mut iacc = [_mm512_setzero_si512(); T];
        for qq in 0..4 {
            // Sub-blocks qq, qq + 4, qq + 8, qq + 12: groups 4qq + pi + 16i.
            // SAFETY: as above.
            let (sc, w) = unsafe {
                (
                    [
                        scales(s, qq),
                        scales(s, qq + 4),
                        scales(s, qq + 8),
                        scales(s, qq + 12),
                    ],
                    [
                        unpack4(q, 4 * qq),
                        unpack4(q, 4 * qq + 1),
                        unpack4(q, 4 * qq + 2),
                        unpack4(q, 4 * qq + 3),
                    ],
                )
            };
            for (t, ia) in iacc.iter_mut().enumerate() {
                let i = t * nb + b;
                let a = act.acts[i].qs.as_ptr();
                let corr = &act.corr[16 * i..16 * i + 16];
                for (si, &sc) in sc.iter().enumerate() {
                    let sb = qq + 4 * si;
                    let mut x = _mm512_set1_epi32(corr[sb]);
                    for (pi, wp) in w.iter().enumerate() {
                        // SAFETY: group 4sb + pi's 4 activation bytes.
                        let av = unsafe { rd32(a.add(4 * (4 * sb + pi))) };
                        x = _mm512_dpbusd_epi32(x, wp[si], _mm512_set1_epi32(av));
                    }
                    *ia = _mm512_add_epi32(*ia, _mm512_mullo_epi32(x, sc));
                }
            }
        }
        // SAFETY: the 16 f16 `d` after the scales.
        let dw = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(s.add(16 * GROUP_ROWS).cast())) };
        for (t, a) in acc.iter_mut().enumerate() {
            let p = _mm512_mul_ps(_mm512_cvtepi32_ps(iacc[t]), dw);
            *a = _mm512_fmadd_ps(p, _mm512_set1_ps(act.acts[t * nb + b].d), *a);
        }
    }
    for (o, a) in out.chunks_exact_mut(GROUP_ROWS).zip(acc) {
        // SAFETY: 16 f32, unaligned store.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
}

/// Lanes order, `T` activation rows (each weight vector unpacked once for them).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn lanes<const T: usize>(group: &[u8], nb: usize, act: ActQ8K<'_>, out: &mut [f32]) {
    let (quants, scale_base) = split(group, nb, &act, T, out);
    let zero = _mm512_setzero_si512();
    let mut acc = [[_mm512_setzero_ps(); 8]; T];
    for b in 0..nb {
        crate::cpu::prefetch::prefetch_ahead(quants.wrapping_add(b * QUANT_BYTES), QUANT_BYTES);
        // SAFETY: super-block b's quants and scales lie in the group (checked by `split`).
        let (q, s) = unsafe { (quants.add(b * QUANT_BYTES), scale_base.add(b * SCALE_BYTES)) };
        let mut v = [[zero; 8]; T];
        for qq in 0..4 {
            // SAFETY: as above.
            let sc = unsafe {
                [
                    scales_dup(s, qq),
                    scales_dup(s, qq + 4),
                    scales_dup(s, qq + 8),
                    scales_dup(s, qq + 12),
                ]
            };
            for p in 4 * qq..4 * qq + 4 {
                // SAFETY: as above.
                let w = unsafe { unpack4(q, p) };
                for (t, vt) in v.iter_mut().enumerate() {
                    let a = act.acts[t * nb + b].qs.as_ptr();
                    for (i, (&wi, &sci)) in w.iter().zip(&sc).enumerate() {
                        let gi = p + 16 * i;
                        // SAFETY: group gi's 4 activation bytes.
                        let av = unsafe { rd32(a.add(4 * gi)) };
                        // Pairs of products in i16 (|q·a + q·a| <= 2·63·128, no saturation),
                        // then both pairs of the dword times the row's scale into the lane:
                        // exact.
                        let x = _mm512_maddubs_epi16(wi, _mm512_set1_epi32(av));
                        vt[gi % 8] = _mm512_dpwssd_epi32(vt[gi % 8], x, sci);
                    }
                }
            }
        }
        // SAFETY: the 16 f16 `d` after the scales.
        let dw = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(s.add(16 * GROUP_ROWS).cast())) };
        for l in 0..8 {
            // SAFETY: as above.
            let (s0, s1) = unsafe { (scales(s, 2 * l), scales(s, 2 * l + 1)) };
            for (t, (acc, vt)) in acc.iter_mut().zip(&v).enumerate() {
                let i = t * nb + b;
                let corr = &act.corr[16 * i..16 * i + 16];
                let off = _mm512_add_epi32(
                    _mm512_mullo_epi32(s0, _mm512_set1_epi32(corr[2 * l])),
                    _mm512_mullo_epi32(s1, _mm512_set1_epi32(corr[2 * l + 1])),
                );
                let d = _mm512_mul_ps(_mm512_set1_ps(act.acts[i].d), dw);
                let lane = _mm512_cvtepi32_ps(_mm512_add_epi32(vt[l], off));
                acc[l] = _mm512_fmadd_ps(d, lane, acc[l]);
            }
        }
    }
    for (o, acc) in out.chunks_exact_mut(GROUP_ROWS).zip(&acc) {
        let r = _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
            _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])),
        );
        // SAFETY: 16 f32, unaligned store.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), r) };
    }
}

/// One group (16 rows, `nb` super-blocks, packed) against 1 to 8 activation rows: `out[t · 16
/// + r]`, in the tiled or the lanes order.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn group_tile(
    group: &[u8],
    nb: usize,
    act: ActQ8K<'_>,
    tiled: bool,
    out: &mut [f32],
) {
    let t = act.acts.len().checked_div(nb).unwrap_or(0);
    if !tiled {
        // Two activation rows at most per pass: 8 integer lanes each.
        let mut t0 = 0;
        while t0 < t {
            let tn = (t - t0).min(2);
            let a = act.rows(t0, t0 + tn, nb);
            let o = &mut out[t0 * GROUP_ROWS..(t0 + tn) * GROUP_ROWS];
            // SAFETY: the caller has the CPU features; `lanes` checks the sizes.
            unsafe {
                match tn {
                    1 => lanes::<1>(group, nb, a, o),
                    _ => lanes::<2>(group, nb, a, o),
                }
            }
            t0 += tn;
        }
        return;
    }
    // Four activation rows at most per pass: more accumulators than that spill.
    let mut t0 = 0;
    while t0 < t {
        let tn = (t - t0).min(4);
        let (a, o) = (
            act.rows(t0, t0 + tn, nb),
            &mut out[t0 * GROUP_ROWS..(t0 + tn) * GROUP_ROWS],
        );
        // SAFETY: the caller has the CPU features; `tiled_rows` checks the sizes.
        unsafe {
            match tn {
                1 => tiled_rows::<1>(group, nb, a, o),
                2 => tiled_rows::<2>(group, nb, a, o),
                3 => tiled_rows::<3>(group, nb, a, o),
                _ => tiled_rows::<4>(group, nb, a, o),
            }
        }
        t0 += tn;
    }
}
