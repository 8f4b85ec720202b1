//! AVX-512 VNNI kernel for Q4_0 weights repacked as Q4_0x16 (see `cpu::packed`): 16 weight
//! rows against 1 to [`MAX_ACTS`] q8_0 activation rows, one 512-bit accumulator per activation
//! row whose 16 lanes are the 16 weight rows.
//!
//! The packed layout puts bytes `4c..4c + 4` of the 16 rows' blocks side by side, so one
//! 64-byte load holds, in lane `r`, elements `4c..4c + 4` of row `r` (low nibbles) and elements
//! `16 + 4c..16 + 4c + 4` (high nibbles). Eight `vpdpbusd` against broadcast activation dwords
//! then sum a whole block per lane, exactly (starting from the activation block's `-8 · Σ a`,
//! which makes the unsigned nibbles signed), and one `fma(f32(sum), d_w · d_x, acc)` per block
//! and activation row finishes 16 outputs: the numerics of `packed::tile_scalar`, bit for bit,
//! and of llama.cpp's repacked Q4_0 GEMM.

use std::arch::x86_64::*;

use crate::cpu::packed::q4_0::{ActQ8_0, GROUP_BLOCK_BYTES};
use crate::cpu::packed::GROUP_ROWS;

/// Activation rows one call takes at most.
pub(crate) const MAX_ACTS: usize = 8;

/// Four bytes at `p` as the dword of a broadcast.
#[inline(always)]
unsafe fn rd32(p: *const i8) -> i32 {
    // SAFETY: the caller keeps `p..p + 4` in bounds; the read is unaligned.
    unsafe { p.cast::<i32>().read_unaligned() }
}

/// `T` activation rows against one group.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile<const T: usize>(group: &[u8], nb: usize, act: ActQ8_0<'_>, out: &mut [f32]) {
    let (quants, scales) = group.split_at(nb * GROUP_BLOCK_BYTES);
    assert!(
        scales.len() == nb * GROUP_ROWS * 2
            && act.acts.len() == T * nb
            && act.corr.len() == T * nb
            && act.d.len() == T * nb
            && out.len() == T * GROUP_ROWS,
        "q4_0x16 tile: sizes do not match {nb} blocks and {T} activation rows"
    );
    let m4 = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY: block b's 256 quant bytes and 32 scale bytes lie in `group` (checked above);
        // unaligned loads.
        let (v, dw) = unsafe {
            let q = quants.as_ptr().add(b * GROUP_BLOCK_BYTES);
            (
                [
                    _mm512_loadu_si512(q.cast()),
                    _mm512_loadu_si512(q.add(64).cast()),
                    _mm512_loadu_si512(q.add(128).cast()),
                    _mm512_loadu_si512(q.add(192).cast()),
                ],
                _mm512_cvtph_ps(_mm256_loadu_si256(scales.as_ptr().add(b * 32).cast())),
            )
        };
        // Loops, not `map` closures: closures do not inherit the target features.
        let mut lo = [_mm512_setzero_si512(); 4];
        let mut hi = [_mm512_setzero_si512(); 4];
        for c in 0..4 {
            lo[c] = _mm512_and_si512(v[c], m4);
            hi[c] = _mm512_and_si512(_mm512_srli_epi16::<4>(v[c]), m4);
        }
        for (t, acc) in acc.iter_mut().enumerate() {
            let i = t * nb + b;
            let a = act.acts[i].qs.as_ptr();
            let mut s0 = _mm512_set1_epi32(act.corr[i]);
            let mut s1 = _mm512_setzero_si512();
            for c in 0..4 {
                // SAFETY: bytes 4c..4c + 4 and 16 + 4c..16 + 4c + 4 of a 32-byte block.
                let (x0, x1) = unsafe { (rd32(a.add(4 * c)), rd32(a.add(16 + 4 * c))) };
                s0 = _mm512_dpbusd_epi32(s0, lo[c], _mm512_set1_epi32(x0));
                s1 = _mm512_dpbusd_epi32(s1, hi[c], _mm512_set1_epi32(x1));
            }
            let s = _mm512_add_epi32(s0, s1);
            let d = _mm512_mul_ps(dw, _mm512_set1_ps(act.d[i]));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, *acc);
        }
    }
    for (t, o) in out.chunks_exact_mut(GROUP_ROWS).enumerate() {
        // SAFETY: 16 f32, unaligned store.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), acc[t]) };
    }
}

/// One group (16 rows, `nb` blocks, packed) against 1 to [`MAX_ACTS`] activation rows:
/// `out[t · 16 + r]`.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn group_tile(group: &[u8], nb: usize, act: ActQ8_0<'_>, out: &mut [f32]) {
    // SAFETY: the caller has the CPU features; `tile` checks the sizes.
    unsafe {
        match act.acts.len().checked_div(nb).unwrap_or(0) {
            1 => tile::<1>(group, nb, act, out),
            2 => tile::<2>(group, nb, act, out),
            3 => tile::<3>(group, nb, act, out),
            4 => tile::<4>(group, nb, act, out),
            5 => tile::<5>(group, nb, act, out),
            6 => tile::<6>(group, nb, act, out),
            7 => tile::<7>(group, nb, act, out),
            8 => tile::<8>(group, nb, act, out),
            t => panic!("q4_0x16 tile: {t} activation rows (1 to {MAX_ACTS})"),
        }
    }
}
