//! AVX-512 VNNI kernel for Q4_K weights packed as Q4_Kx16 (see `cpu::packed::q4_k`): 16 weight
//! rows per 512-bit vector, one lane per row, in llama.cpp's repacked gemm and gemv orders.
//!
//! Each 64-byte quant vector holds 4 values of 16 rows for two sub-blocks (low and high
//! nibbles); one `vpdpbusd` per nibble half against the broadcast activation dword sums them
//! exactly per row. Per pair of sub-blocks, `vpmulld` by the rows' scales gives `val_p`, and
//! by the rows' mins against the activation's 32-value sums `min_p`; the gemm order adds each
//! pair to its float accumulator, the gemv order sums the four pairs first. Bit for bit the
//! scalar twin `packed::q4_k::tile_scalar`.

use std::arch::x86_64::*;

use crate::cpu::packed::groups::GROUP_ROWS;
use crate::cpu::packed::q4_k::layout::{ActQ4K, D_AT, MINS_AT, QUANT_BYTES, SCALE_BYTES};

/// Four bytes at `p` as the dword of a broadcast.
#[inline(always)]
unsafe fn rd32(p: *const i8) -> i32 {
    // SAFETY: the caller keeps `p..p + 4` in bounds; the read is unaligned.
    unsafe { p.cast::<i32>().read_unaligned() }
}

/// 16 rows' bytes at `p` (scales or mins of one sub-block) as i32 lanes.
#[inline(always)]
unsafe fn bytes16(p: *const u8) -> __m512i {
    // SAFETY: the caller keeps `p..p + 16` in bounds.
    unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast())) }
}

/// `T` activation rows against one group, gemm order if `GEMM` else gemv.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile<const T: usize, const GEMM: bool>(
    group: &[u8],
    nb: usize,
    act: ActQ4K<'_>,
    out: &mut [f32],
) {
    assert!(
        group.len() == nb * (QUANT_BYTES + SCALE_BYTES)
            && act.acts.len() == T * nb
            && act.bs.len() == 8 * T * nb
            && out.len() == T * GROUP_ROWS,
        "q4_kx16 tile: sizes do not match {nb} blocks and {T} activation rows"
    );
    let (quants, scale_base) = (group.as_ptr(), group[nb * QUANT_BYTES..].as_ptr());
    let m4 = _mm512_set1_epi8(0x0F);
    let zero = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); T];
    let mut acc_min = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        crate::cpu::prefetch::prefetch_ahead(quants.wrapping_add(b * QUANT_BYTES), QUANT_BYTES);
        // SAFETY: super-block b's quants and scales lie in the group (checked above).
        let (q, s) = unsafe { (quants.add(b * QUANT_BYTES), scale_base.add(b * SCALE_BYTES)) };
        // SAFETY: the 16 f16 `d` and 16 f16 `dmin`.
        let (dw, dminw) = unsafe {
            (
                _mm512_cvtph_ps(_mm256_loadu_si256(s.add(D_AT).cast())),
                _mm512_cvtph_ps(_mm256_loadu_si256(s.add(D_AT + 2 * GROUP_ROWS).cast())),
            )
        };
        let mut v = [zero; T];
        let mut mn = [zero; T];
        for p in 0..4 {
            let mut lo = [zero; T];
            let mut hi = [zero; T];
            for c in 0..8 {
                // SAFETY: vector 8p + c of the super-block.
                let wv = unsafe { _mm512_loadu_si512(q.add((8 * p + c) * 64).cast()) };
                let (wl, wh) = (
                    _mm512_and_si512(wv, m4),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(wv), m4),
                );
                for t in 0..T {
                    let a = act.acts[t * nb + b].qs.as_ptr();
                    // SAFETY: values 64p + 4c.. and 64p + 32 + 4c.. of a 256-value block.
                    let (xl, xh) = unsafe {
                        (
                            rd32(a.add(64 * p + 4 * c)),
                            rd32(a.add(64 * p + 32 + 4 * c)),
                        )
                    };
                    lo[t] = _mm512_dpbusd_epi32(lo[t], wl, _mm512_set1_epi32(xl));
                    hi[t] = _mm512_dpbusd_epi32(hi[t], wh, _mm512_set1_epi32(xh));
                }
            }
            // SAFETY: scales and mins of sub-blocks 2p, 2p + 1.
            let (s0, s1, m0, m1) = unsafe {
                (
                    bytes16(s.add(2 * p * GROUP_ROWS)),
                    bytes16(s.add((2 * p + 1) * GROUP_ROWS)),
                    bytes16(s.add(MINS_AT + 2 * p * GROUP_ROWS)),
                    bytes16(s.add(MINS_AT + (2 * p + 1) * GROUP_ROWS)),
                )
            };
            for t in 0..T {
                let i = t * nb + b;
                let bs = &act.bs[8 * i..8 * i + 8];
                let val =
                    _mm512_add_epi32(_mm512_mullo_epi32(s0, lo[t]), _mm512_mullo_epi32(s1, hi[t]));
                let min = _mm512_add_epi32(
                    _mm512_mullo_epi32(_mm512_set1_epi32(bs[2 * p]), m0),
                    _mm512_mullo_epi32(_mm512_set1_epi32(bs[2 * p + 1]), m1),
                );
                if GEMM {
                    let da = _mm512_set1_ps(act.acts[i].d);
                    acc[t] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(val), _mm512_mul_ps(dw, da), acc[t]);
                    acc_min[t] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(min),
                        _mm512_mul_ps(dminw, da),
                        acc_min[t],
                    );
                } else {
                    v[t] = _mm512_add_epi32(v[t], val);
                    mn[t] = _mm512_add_epi32(mn[t], min);
                }
            }
        }
        if !GEMM {
            for t in 0..T {
                let da = _mm512_set1_ps(act.acts[t * nb + b].d);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v[t]), _mm512_mul_ps(dw, da), acc[t]);
                acc_min[t] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(mn[t]),
                    _mm512_mul_ps(dminw, da),
                    acc_min[t],
                );
            }
        }
    }
    for (t, o) in out.chunks_exact_mut(GROUP_ROWS).enumerate() {
        // SAFETY: 16 f32, unaligned store.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), _mm512_sub_ps(acc[t], acc_min[t])) };
    }
}

/// One group (16 rows, `nb` super-blocks, packed) against 1 to 8 activation rows: `out[t · 16
/// + r]`, in the gemm or the gemv order.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn group_tile(
    group: &[u8],
    nb: usize,
    act: ActQ4K<'_>,
    gemm: bool,
    out: &mut [f32],
) {
    let t = act.acts.len().checked_div(nb).unwrap_or(0);
    // Four activation rows at most per pass: more accumulators than that spill.
    let mut t0 = 0;
    while t0 < t {
        let tn = (t - t0).min(4);
        let a = act.rows(t0, t0 + tn, nb);
        let o = &mut out[t0 * GROUP_ROWS..(t0 + tn) * GROUP_ROWS];
        // SAFETY: the caller has the CPU features; `tile` checks the sizes.
        unsafe {
            match (tn, gemm) {
                (1, true) => tile::<1, true>(group, nb, a, o),
                (2, true) => tile::<2, true>(group, nb, a, o),
                (3, true) => tile::<3, true>(group, nb, a, o),
                (_, true) => tile::<4, true>(group, nb, a, o),
                (1, false) => tile::<1, false>(group, nb, a, o),
                (2, false) => tile::<2, false>(group, nb, a, o),
                (3, false) => tile::<3, false>(group, nb, a, o),
                (_, false) => tile::<4, false>(group, nb, a, o),
            }
        }
        t0 += tn;
    }
}
