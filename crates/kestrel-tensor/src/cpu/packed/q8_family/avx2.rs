//! AVX2 kernel for the 4-bit packed layouts without a min: Q4_0x16, IQ4_NLx16 and MXFP4x16
//! (see `cpu::packed::q8_family`), 16 weight rows against 1 to [`MAX_ACTS`] q8_0 activation
//! rows. llama.cpp repacks these three types on AVX2 CPUs too (`ggml_gemv_*_8x8_q8_0`).
//!
//! A 64-byte chunk of a packed block holds four consecutive elements of each of the 16 rows
//! (low nibbles) and the four 16 places later (high nibbles); its two 32-byte halves are rows
//! 0-7 and 8-15, one row per 32-bit lane. Each nibble becomes its signed value through a
//! 16-entry table (`vpshufb`: Q4_0's is `-8..8`), and the signs move onto the broadcast
//! activation dwords (`vpsignb`) so that `vpmaddubsw` + `vpmaddwd` sum four products per lane
//! exactly. Eight such steps sum a block per lane; then one `fma(f32(sum), d_w · d_x, acc)` per
//! block and activation row: the numerics of `q8_family::tile_scalar`, bit for bit (Q4_0's
//! exact block sum equals the twin's `-8 · Σ a + Σ q · a`).

use std::arch::x86_64::*;

use crate::cpu::packed::groups::GROUP_ROWS;
use crate::cpu::packed::q8_family::layout::{ActQ8, Kind};

/// Activation rows one call takes at most.
pub(crate) const MAX_ACTS: usize = 8;

/// Q4_0's table: a nibble `q` is `q - 8`.
const Q4_0_TABLE: [i8; 16] = [-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7];

/// Whether this kernel computes `kind`.
pub(crate) fn handles(kind: Kind) -> bool {
    matches!(kind, Kind::Q4_0 | Kind::IQ4NL | Kind::MXFP4)
}

/// Four bytes at `p` as the dword of a broadcast.
#[inline(always)]
unsafe fn rd32(p: *const i8) -> i32 {
    // SAFETY: the caller keeps `p..p + 4` in bounds; the read is unaligned.
    unsafe { p.cast::<i32>().read_unaligned() }
}

/// The weight scales of rows `8h..8h + 8` of a block whose scale bytes start at `s`.
///
/// # Safety
/// The block's scale bytes ([`Kind::scale_bytes`]) must be readable at `s`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales(kind: Kind, s: *const u8, h: usize) -> __m256 {
    if kind == Kind::MXFP4 {
        // ggml's E8M0 half scale: (e - 1) << 23 as f32 bits, 0x0020_0000 << e below 2.
        // SAFETY: 8 of the block's 16 exponent bytes.
        let e = _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(s.add(8 * h).cast()) });
        let one = _mm256_set1_epi32(1);
        let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, one));
        let small = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
        let bits = _mm256_blendv_epi8(small, normal, _mm256_cmpgt_epi32(e, one));
        _mm256_castsi256_ps(bits)
    } else {
        // SAFETY: 8 of the block's 16 f16 scales.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(s.add(16 * h).cast()) })
    }
}

/// The 16 values of `kind`'s nibbles in both 128-bit lanes, for `vpshufb`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn table(kind: Kind) -> __m256i {
    let values = kind.table().unwrap_or(&Q4_0_TABLE);
    // SAFETY: 16 bytes of a 16-byte table.
    let t = unsafe { _mm_loadu_si128(values.as_ptr().cast()) };
    _mm256_set_m128i(t, t)
}

/// Activation rows `t0..t0 + T` against the halves `h0..h0 + H` (of 2) of a group, into
/// `out[t · 16 + r]`.
///
/// # Safety
/// AVX2, FMA and F16C; the sizes as [`group_tile`] checks them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass<const T: usize, const H: usize>(
    kind: Kind,
    group: &[u8],
    nb: usize,
    act: ActQ8<'_>,
    (t0, h0): (usize, usize),
    out: &mut [f32],
) {
    let table = table(kind);
    let (qb, sb) = (kind.quant_bytes(), kind.scale_bytes());
    let (quants, scale_bytes) = group.split_at(nb * qb);
    let m4 = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); H]; T];
    for b in 0..nb {
        let q = quants.as_ptr().wrapping_add(b * qb);
        if h0 == 0 {
            crate::cpu::prefetch::prefetch_ahead(q, qb);
        }
        let mut sums = [[_mm256_setzero_si256(); H]; T];
        for c in 0..4 {
            for h in 0..H {
                // SAFETY: chunk c's half h0 + h: 32 of the block's 256 quant bytes.
                let raw = unsafe { _mm256_loadu_si256(q.add(64 * c + 32 * (h0 + h)).cast()) };
                let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(raw, m4));
                let hi =
                    _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
                let (alo, ahi) = (_mm256_sign_epi8(lo, lo), _mm256_sign_epi8(hi, hi));
                for (t, s) in sums.iter_mut().enumerate() {
                    let a = act.acts[(t0 + t) * nb + b].qs.as_ptr();
                    // SAFETY: bytes 4c..4c + 4 and 16 + 4c..16 + 4c + 4 of a 32-byte block.
                    let (x0, x1) = unsafe { (rd32(a.add(4 * c)), rd32(a.add(16 + 4 * c))) };
                    let p0 = _mm256_maddubs_epi16(alo, _mm256_sign_epi8(_mm256_set1_epi32(x0), lo));
                    let p1 = _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(_mm256_set1_epi32(x1), hi));
                    let p =
                        _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones));
                    s[h] = _mm256_add_epi32(s[h], p);
                }
            }
        }
        for h in 0..H {
            // SAFETY: block b's scale bytes lie in the group.
            let dw = unsafe { scales(kind, scale_bytes.as_ptr().add(b * sb), h0 + h) };
            for t in 0..T {
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(act.d[(t0 + t) * nb + b]));
                acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[t][h]), d, acc[t][h]);
            }
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        for (h, acc) in acc.iter().enumerate() {
            let o = &mut out[(t0 + t) * GROUP_ROWS + 8 * (h0 + h)..][..8];
            // SAFETY: 8 f32, unaligned store.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), *acc) };
        }
    }
}

/// One group (16 rows of `kind`, `nb` blocks, packed) against 1 to [`MAX_ACTS`] activation
/// rows: `out[t · 16 + r]`. One or two activation rows take both halves of the group in one
/// pass; more take the halves in turn, four activation rows at a time (the accumulators stay
/// in registers).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `kind` is one this kernel [`handles`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn group_tile(
    kind: Kind,
    group: &[u8],
    nb: usize,
    act: ActQ8<'_>,
    out: &mut [f32],
) {
    let n = act.acts.len().checked_div(nb).unwrap_or(0);
    assert!(
        handles(kind)
            && group.len() == nb * (kind.quant_bytes() + kind.scale_bytes())
            && (1..=MAX_ACTS).contains(&n)
            && act.acts.len() == n * nb
            && act.d.len() == n * nb
            && out.len() == n * GROUP_ROWS,
        "4-bit x16 tile: sizes do not match {nb} blocks and {n} activation rows"
    );
    // SAFETY (every call): the caller's CPU features; sizes checked above.
    unsafe {
        match n {
            1 => pass::<1, 2>(kind, group, nb, act, (0, 0), out),
            2 => pass::<2, 2>(kind, group, nb, act, (0, 0), out),
            _ => {
                let mut t0 = 0;
                while t0 < n {
                    let left = n - t0;
                    for h in 0..2 {
                        match left {
                            1 => pass::<1, 1>(kind, group, nb, act, (t0, h), out),
                            2 => pass::<2, 1>(kind, group, nb, act, (t0, h), out),
                            3 => pass::<3, 1>(kind, group, nb, act, (t0, h), out),
                            _ => pass::<4, 1>(kind, group, nb, act, (t0, h), out),
                        }
                    }
                    t0 += left.min(4);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::packed::q8_family::{prepare, tile_scalar};
    use crate::cpu::packed::PackedWeight;
    use crate::cpu::scratch::MatmulScratch;
    use crate::cpu::testutil::{quantized_rows, Rng};
    use crate::DType;
    use kestrel_gguf::quant::mxfp4::e8m0_to_f32_half;

    fn has_avx2() -> bool {
        let ok = crate::cpu::isa::has_avx2();
        if !ok {
            eprintln!("skipped: this CPU lacks AVX2/FMA/F16C");
        }
        ok
    }

    #[test]
    fn mxfp4_scales_are_ggml_half_scales_for_every_exponent() {
        if !has_avx2() {
            return;
        }
        for first in (0..=255u8).step_by(16) {
            let e: Vec<u8> = (0..16).map(|i| first.wrapping_add(i)).collect();
            for h in 0..2 {
                let mut got = [0f32; 8];
                // SAFETY: AVX2 checked; 16 readable bytes.
                unsafe { _mm256_storeu_ps(got.as_mut_ptr(), scales(Kind::MXFP4, e.as_ptr(), h)) };
                for (i, g) in got.iter().enumerate() {
                    let want = e8m0_to_f32_half(e[8 * h + i]);
                    assert_eq!(g.to_bits(), want.to_bits(), "exponent {}", e[8 * h + i]);
                }
            }
        }
    }

    /// Every activation row count 1..=8, odd block counts: the kernel equals the scalar twin
    /// bit for bit, group by group.
    #[test]
    fn kernel_equals_the_scalar_twin_for_every_tile() {
        if !has_avx2() {
            return;
        }
        let mut rng = Rng::new(5);
        for (dtype, kind) in [
            (DType::Q4_0, Kind::Q4_0),
            (DType::IQ4NL, Kind::IQ4NL),
            (DType::MXFP4, Kind::MXFP4),
        ] {
            for k in [32usize, 96, 576] {
                let m = 32;
                let (w, _) = quantized_rows(&mut rng, dtype, m, k);
                let p = PackedWeight::pack_for_test(&w, dtype, m, k).expect("packs");
                let nb = k / 32;
                let gb = p.nbytes() / (m / GROUP_ROWS);
                for n in 1..=MAX_ACTS {
                    let x = rng.vec(n * k, 3.0);
                    let mut s = MatmulScratch::new();
                    let act = prepare(kind, &x, n, k, &mut s);
                    for g in 0..m / GROUP_ROWS {
                        let group = &p.bytes()[g * gb..(g + 1) * gb];
                        let mut want = vec![0f32; n * GROUP_ROWS];
                        tile_scalar(kind, group, nb, act, &mut want);
                        let mut got = vec![0f32; n * GROUP_ROWS];
                        // SAFETY: AVX2 checked; `kind` is handled.
                        unsafe { group_tile(kind, group, nb, act, &mut got) };
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&want), bits(&got), "{dtype:?} k {k} n {n} group {g}");
                    }
                }
            }
        }
    }
}
