//! aarch64 kernels for the packed q8_0-family layouts (Q4_0x16, Q4_1x16, Q5_0x16, Q5_1x16,
//! Q8_0x16, IQ4_NLx16, MXFP4x16; see `cpu::packed::q8_family`): 16 weight rows against 1 to
//! [`MAX_ACTS`] q8_0 activation rows, at two levels.
//!
//! - [`group_tile_dotprod`] (FEAT_DotProd): a 16-byte slice of a packed chunk holds four
//!   elements of four rows, one row per 32-bit lane, so `sdot` by element (the activation's
//!   dword picked by its lane index) sums four products per row exactly, as `vpdpbusd` does on
//!   x86.
//! - [`group_tile_i8mm`] (FEAT_I8MM): two such slices zipped are two rows × eight elements, and
//!   `smmla` multiplies them with two activation rows' eight elements (2 × 2 outputs, 32
//!   products an instruction: twice `sdot`'s). Activation rows go in pairs, two pairs a pass;
//!   an odd last row takes the dot-product kernel, which sums alike.
//!
//! Both sum each block exactly in integers and finish it with one
//! `fma(f32(sum), d_w · d_x, acc)` per row and activation row (then `fma(m_w, s_x, acc)` for
//! the types with a min): the numerics of `q8_family::tile_scalar`, bit for bit, so an aarch64
//! CPU computes what an x86 one does on the packed path too.
//!
//! Values: the twin's unsigned quants (nibble, nibble plus the fifth bit, table value) with the
//! activation's `-offset · Σ a` as the sum's start, except Q8_0, whose packed `q + 128` does
//! not fit a signed byte: its quants are flipped back to `q` and the sum starts at 0 (the same
//! integer).

use std::arch::aarch64::*;

use crate::cpu::packed::groups::GROUP_ROWS;
use crate::cpu::packed::q8_family::layout::{ActQ8, Kind};

/// Activation rows one call takes at most.
pub(crate) const MAX_ACTS: usize = crate::cpu::packed::groups::MAX_ACTS;

/// Four little-endian f16 at `p` as f32 (`fcvtl`, exact).
///
/// # Safety
/// `p..p + 8` must be readable.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn f16x4(p: *const u8) -> float32x4_t {
    // SAFETY: the caller keeps the 8 bytes readable.
    let h = unsafe { vld1_u8(p) };
    let r: float32x4_t;
    // SAFETY: `fcvtl` (ARMv8.0) touches only the named registers.
    unsafe {
        std::arch::asm!(
            "fcvtl {r:v}.4s, {h:v}.4h",
            h = in(vreg) h,
            r = lateout(vreg) r,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

/// The weight scales of rows `4q..4q + 4` of a block whose scale bytes start at `s`.
///
/// # Safety
/// The block's scale bytes ([`Kind::scale_bytes`]) must be readable at `s`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn d4(kind: Kind, s: *const u8, q: usize) -> float32x4_t {
    if kind == Kind::MXFP4 {
        // ggml's E8M0 half scale: (e - 1) << 23 as f32 bits, 0x0020_0000 << e below 2.
        // SAFETY: 4 of the block's 16 exponent bytes.
        let b = unsafe { s.add(4 * q).cast::<[u8; 4]>().read_unaligned() };
        let e = vmovl_u16(vget_low_u16(vmovl_u8(vcreate_u8(u64::from(
            u32::from_le_bytes(b),
        )))));
        let one = vdupq_n_u32(1);
        let normal = vshlq_n_u32::<23>(vsubq_u32(e, one));
        let small = vshlq_u32(vdupq_n_u32(0x0020_0000), vreinterpretq_s32_u32(e));
        vreinterpretq_f32_u32(vbslq_u32(vcgtq_u32(e, one), normal, small))
    } else {
        // SAFETY: 4 of the block's 16 f16 scales.
        unsafe { f16x4(s.add(8 * q)) }
    }
}

/// The mins of rows `4q..4q + 4` (types with a min).
///
/// # Safety
/// As [`d4`].
#[inline]
#[target_feature(enable = "neon")]
unsafe fn m4(s: *const u8, q: usize) -> float32x4_t {
    // SAFETY: the 16 mins follow the 16 scales.
    unsafe { f16x4(s.add(32 + 8 * q)) }
}

/// 16 bits of a Q5 mask as bytes of `0x10` (bit set) or 0: bit `i` to byte `i`.
#[inline]
#[target_feature(enable = "neon")]
fn fifth_bits(bits: u16) -> uint8x16_t {
    const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: a 16-byte constant.
    let bit = unsafe { vld1q_u8(BIT.as_ptr()) };
    let [lo, hi] = bits.to_le_bytes();
    let b = vcombine_u8(vdup_n_u8(lo), vdup_n_u8(hi));
    vandq_u8(vtstq_u8(b, bit), vdupq_n_u8(0x10))
}

/// The values of rows `4q..4q + 4` (one row per 32-bit lane) at elements `4c..4c + 4` (`.0`)
/// and `16 + 4c..16 + 4c + 4` (`.1`) of a block whose quant bytes start at `qb` (see the module
/// docs for which values); `tbl` is the table of a table type.
///
/// # Safety
/// The block's quant bytes ([`Kind::quant_bytes`]) must be readable at `qb`; `c`, `q` < 4.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn quad(
    kind: Kind,
    qb: *const u8,
    c: usize,
    q: usize,
    tbl: int8x16_t,
) -> (int8x16_t, int8x16_t) {
    if kind == Kind::Q8_0 {
        // Chunks `c` and `4 + c` hold elements 4c.. and 16 + 4c.., as `q + 128`.
        let x80 = vdupq_n_u8(0x80);
        // SAFETY: both 16-byte slices lie in the block's 512 quant bytes.
        let (lo, hi) = unsafe {
            (
                vld1q_u8(qb.add(c * 64 + 16 * q)),
                vld1q_u8(qb.add((4 + c) * 64 + 16 * q)),
            )
        };
        return (
            vreinterpretq_s8_u8(veorq_u8(lo, x80)),
            vreinterpretq_s8_u8(veorq_u8(hi, x80)),
        );
    }
    // SAFETY: the slice lies in the block's 256 nibble bytes.
    let t = unsafe { vld1q_u8(qb.add(c * 64 + 16 * q)) };
    let (mut lo, mut hi) = (vandq_u8(t, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(t));
    match kind {
        Kind::IQ4NL | Kind::MXFP4 => return (vqtbl1q_s8(tbl, lo), vqtbl1q_s8(tbl, hi)),
        Kind::Q5_0 | Kind::Q5_1 => {
            // Mask `v` bit `4r + j`: element 4v + j of row r; rows 4q.. are bits 16q...
            let mask = |v: usize| {
                // SAFETY: the 8 masks follow the 256 nibble bytes.
                let m = unsafe { qb.add(256 + 8 * v).cast::<[u8; 8]>().read_unaligned() };
                (u64::from_le_bytes(m) >> (16 * q)) as u16
            };
            lo = vorrq_u8(lo, fifth_bits(mask(c)));
            hi = vorrq_u8(hi, fifth_bits(mask(4 + c)));
        }
        _ => {}
    }
    (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi))
}

/// The table of a table type (zeros otherwise: unused).
#[inline]
#[target_feature(enable = "neon")]
fn table(kind: Kind) -> int8x16_t {
    match kind.table() {
        // SAFETY: 16 bytes.
        Some(t) => unsafe { vld1q_s8(t.as_ptr()) },
        None => vdupq_n_s8(0),
    }
}

/// What block `i`'s integer sum starts from.
#[inline(always)]
fn start(kind: Kind, act: &ActQ8<'_>, i: usize) -> i32 {
    if kind == Kind::Q8_0 || kind.has_min() {
        0
    } else {
        act.corr[i]
    }
}

/// `acc + ` per lane the four products of `x`'s lane with `y`'s dword `L` (`sdot` by element).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot_lane<const L: i32>(acc: int32x4_t, x: int8x16_t, y: int8x16_t) -> int32x4_t {
    let mut r = acc;
    // SAFETY: `sdot` reads and writes only these registers; the feature is enabled.
    unsafe {
        std::arch::asm!(
            "sdot {r:v}.4s, {x:v}.16b, {y:v}.4b[{l}]",
            r = inout(vreg) r,
            x = in(vreg) x,
            y = in(vreg) y,
            l = const L,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

/// `acc + x · yᵀ` with `x`, `y` two rows of 8 bytes each (`smmla`): lanes `(x0·y0, x0·y1,
/// x1·y0, x1·y1)`.
#[inline]
#[target_feature(enable = "neon,i8mm")]
fn smmla(acc: int32x4_t, x: int8x16_t, y: int8x16_t) -> int32x4_t {
    let mut r = acc;
    // SAFETY: `smmla` reads and writes only these registers; the feature is enabled.
    unsafe {
        std::arch::asm!(
            "smmla {r:v}.4s, {x:v}.16b, {y:v}.16b",
            r = inout(vreg) r,
            x = in(vreg) x,
            y = in(vreg) y,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

/// Checks a call's shapes: the group's bytes for `nb` blocks, whole activation rows, room in
/// `out`. Returns the activation rows.
fn rows_of(kind: Kind, group: &[u8], nb: usize, act: &ActQ8<'_>, out: &[f32]) -> usize {
    let n_act = act.acts.len().checked_div(nb).unwrap_or(0);
    assert!(
        group.len() >= nb * (kind.quant_bytes() + kind.scale_bytes())
            && act.corr.len() == act.acts.len()
            && act.d.len() == act.acts.len()
            && n_act <= MAX_ACTS
            && out.len() >= n_act * GROUP_ROWS,
        "packed tile: shapes do not match"
    );
    n_act
}

/// One group (`nb` blocks) against 1 to [`MAX_ACTS`] activation rows: `out[t · 16 + r]`, by
/// `sdot`.
///
/// # Safety
/// The CPU must have the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn group_tile_dotprod(
    kind: Kind,
    group: &[u8],
    nb: usize,
    act: ActQ8<'_>,
    out: &mut [f32],
) {
    let n_act = rows_of(kind, group, nb, &act, out);
    let mut t = 0;
    while t + 2 <= n_act {
        // SAFETY: shapes checked; the caller has the features.
        unsafe { tile_dotprod::<2>(kind, group, nb, &act, t, out) };
        t += 2;
    }
    if t < n_act {
        // SAFETY: as above.
        unsafe { tile_dotprod::<1>(kind, group, nb, &act, t, out) };
    }
}

/// One group (`nb` blocks) against 1 to [`MAX_ACTS`] activation rows: `out[t · 16 + r]`, by
/// `smmla` over pairs of rows (an odd last row by `sdot`).
///
/// # Safety
/// The CPU must have the matrix-multiply and dot-product extensions ([`has_i8mm`](crate::cpu::isa::has_i8mm)).
#[target_feature(enable = "neon,dotprod,i8mm")]
pub(crate) unsafe fn group_tile_i8mm(
    kind: Kind,
    group: &[u8],
    nb: usize,
    act: ActQ8<'_>,
    out: &mut [f32],
) {
    let n_act = rows_of(kind, group, nb, &act, out);
    let mut t = 0;
    while t + 4 <= n_act {
        // SAFETY: shapes checked; the caller has the features.
        unsafe { tile_i8mm::<2>(kind, group, nb, &act, t, out) };
        t += 4;
    }
    if t + 2 <= n_act {
        // SAFETY: as above.
        unsafe { tile_i8mm::<1>(kind, group, nb, &act, t, out) };
        t += 2;
    }
    if t < n_act {
        // SAFETY: as above.
        unsafe { tile_dotprod::<1>(kind, group, nb, &act, t, out) };
    }
}

/// Activation rows `t0..t0 + T` of a checked call, by `sdot`: per block, 32 `sdot` a row
/// (4 chunks × 4 quads of rows × low and high elements), then the block's float step.
// Indexing several per-row arrays in step reads plainer than zipped iterators here.
#[allow(clippy::needless_range_loop)]
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn tile_dotprod<const T: usize>(
    kind: Kind,
    group: &[u8],
    nb: usize,
    act: &ActQ8<'_>,
    t0: usize,
    out: &mut [f32],
) {
    let (qb, sb) = (kind.quant_bytes(), kind.scale_bytes());
    let (quants, scales) = group.split_at(nb * qb);
    let tbl = table(kind);
    let zero = vdupq_n_f32(0.0);
    let mut acc = [[zero; 4]; T];
    for b in 0..nb {
        // SAFETY: block b's bytes lie in the group (checked by the caller).
        let (qp, sp) = unsafe { (quants.as_ptr().add(b * qb), scales.as_ptr().add(b * sb)) };
        let mut ya = [(vdupq_n_s8(0), vdupq_n_s8(0)); T];
        let mut sums = [[vdupq_n_s32(0); 4]; T];
        for t in 0..T {
            let i = (t0 + t) * nb + b;
            let a = act.acts[i].qs.as_ptr();
            // SAFETY: 32 quant bytes.
            ya[t] = unsafe { (vld1q_s8(a), vld1q_s8(a.add(16))) };
            sums[t] = [vdupq_n_s32(start(kind, act, i)); 4];
        }
        macro_rules! chunk {
            ($c:literal) => {
                for q in 0..4 {
                    // SAFETY: c, q < 4 within the block's quant bytes.
                    let (lo, hi) = unsafe { quad(kind, qp, $c, q, tbl) };
                    for t in 0..T {
                        sums[t][q] = sdot_lane::<$c>(sums[t][q], lo, ya[t].0);
                        sums[t][q] = sdot_lane::<$c>(sums[t][q], hi, ya[t].1);
                    }
                }
            };
        }
        chunk!(0);
        chunk!(1);
        chunk!(2);
        chunk!(3);
        for q in 0..4 {
            // SAFETY: the block's scale bytes.
            let dw = unsafe { d4(kind, sp, q) };
            // SAFETY: as above (read only for the types with a min).
            let mw = if kind.has_min() {
                unsafe { m4(sp, q) }
            } else {
                zero
            };
            for t in 0..T {
                let i = (t0 + t) * nb + b;
                let dd = vmulq_n_f32(dw, act.d[i]);
                acc[t][q] = vfmaq_f32(acc[t][q], vcvtq_f32_s32(sums[t][q]), dd);
                if kind.has_min() {
                    acc[t][q] = vfmaq_n_f32(acc[t][q], mw, act.s(i));
                }
            }
        }
    }
    for t in 0..T {
        let o = &mut out[(t0 + t) * GROUP_ROWS..(t0 + t + 1) * GROUP_ROWS];
        for q in 0..4 {
            // SAFETY: 4 floats of the row's 16.
            unsafe { vst1q_f32(o.as_mut_ptr().add(4 * q), acc[t][q]) };
        }
    }
}

/// Activation rows `t0..t0 + 2P` of a checked call, in `P` pairs, by `smmla`: per block and
/// pair, 32 `smmla` (4 quads of rows × 2 halves × low and high elements × 2 row pairs).
#[allow(clippy::needless_range_loop)]
#[inline]
#[target_feature(enable = "neon,dotprod,i8mm")]
unsafe fn tile_i8mm<const P: usize>(
    kind: Kind,
    group: &[u8],
    nb: usize,
    act: &ActQ8<'_>,
    t0: usize,
    out: &mut [f32],
) {
    let (qb, sb) = (kind.quant_bytes(), kind.scale_bytes());
    let (quants, scales) = group.split_at(nb * qb);
    let tbl = table(kind);
    let zero = vdupq_n_f32(0.0);
    // [pair][quad][rows 4q, 4q + 1 | rows 4q + 2, 4q + 3], lanes (r, t), (r, t + 1), (r + 1, t),
    // (r + 1, t + 1).
    let mut acc = [[[zero; 2]; 4]; P];
    let lanes = |a: f32, b: f32| {
        let v = [a, b, a, b];
        // SAFETY: 4 floats.
        unsafe { vld1q_f32(v.as_ptr()) }
    };
    for b in 0..nb {
        // SAFETY: block b's bytes lie in the group (checked by the caller).
        let (qp, sp) = unsafe { (quants.as_ptr().add(b * qb), scales.as_ptr().add(b * sb)) };
        // Per pair: eight-element slices j of both rows ([row t, row t + 1]), the sums' start,
        // `d_x` and `s_x` in the lanes' order.
        let mut ys = [[vdupq_n_s8(0); 4]; P];
        let mut st = [vdupq_n_s32(0); P];
        let (mut dx, mut sx) = ([zero; P], [zero; P]);
        for p in 0..P {
            let (i0, i1) = ((t0 + 2 * p) * nb + b, (t0 + 2 * p + 1) * nb + b);
            let (a0, a1) = (act.acts[i0].qs.as_ptr(), act.acts[i1].qs.as_ptr());
            for h in 0..2 {
                // SAFETY: 16 of each row's 32 quant bytes.
                let (x0, x1) = unsafe {
                    (
                        vreinterpretq_s64_s8(vld1q_s8(a0.add(16 * h))),
                        vreinterpretq_s64_s8(vld1q_s8(a1.add(16 * h))),
                    )
                };
                ys[p][2 * h] = vreinterpretq_s8_s64(vzip1q_s64(x0, x1));
                ys[p][2 * h + 1] = vreinterpretq_s8_s64(vzip2q_s64(x0, x1));
            }
            let (s0, s1) = (start(kind, act, i0), start(kind, act, i1));
            let s = [s0, s1, s0, s1];
            // SAFETY: 4 integers.
            st[p] = unsafe { vld1q_s32(s.as_ptr()) };
            dx[p] = lanes(act.d[i0], act.d[i1]);
            if kind.has_min() {
                sx[p] = lanes(act.s(i0), act.s(i1));
            }
        }
        for q in 0..4 {
            let mut sums = [[vdupq_n_s32(0); 2]; P];
            for p in 0..P {
                sums[p] = [st[p]; 2];
            }
            for half in 0..2 {
                // SAFETY: chunks 2·half and 2·half + 1 of the block's quant bytes.
                let ((l0, h0), (l1, h1)) = unsafe {
                    (
                        quad(kind, qp, 2 * half, q, tbl),
                        quad(kind, qp, 2 * half + 1, q, tbl),
                    )
                };
                // Rows (4q, 4q + 1) and (4q + 2, 4q + 3), eight elements each: 8·half.. (low)
                // and 16 + 8·half.. (high).
                let zip = |a: int8x16_t, b: int8x16_t| {
                    let (a, b) = (vreinterpretq_s32_s8(a), vreinterpretq_s32_s8(b));
                    (
                        vreinterpretq_s8_s32(vzip1q_s32(a, b)),
                        vreinterpretq_s8_s32(vzip2q_s32(a, b)),
                    )
                };
                let (l01, l23) = zip(l0, l1);
                let (h01, h23) = zip(h0, h1);
                for p in 0..P {
                    let (ylo, yhi) = (ys[p][half], ys[p][2 + half]);
                    sums[p][0] = smmla(sums[p][0], l01, ylo);
                    sums[p][1] = smmla(sums[p][1], l23, ylo);
                    sums[p][0] = smmla(sums[p][0], h01, yhi);
                    sums[p][1] = smmla(sums[p][1], h23, yhi);
                }
            }
            // SAFETY: the block's scale bytes.
            let dw = unsafe { d4(kind, sp, q) };
            let dws = [vzip1q_f32(dw, dw), vzip2q_f32(dw, dw)];
            let mws = if kind.has_min() {
                // SAFETY: as above.
                let mw = unsafe { m4(sp, q) };
                [vzip1q_f32(mw, mw), vzip2q_f32(mw, mw)]
            } else {
                [zero; 2]
            };
            for p in 0..P {
                for h in 0..2 {
                    let dd = vmulq_f32(dws[h], dx[p]);
                    let a = vfmaq_f32(acc[p][q][h], vcvtq_f32_s32(sums[p][h]), dd);
                    acc[p][q][h] = if kind.has_min() {
                        vfmaq_f32(a, mws[h], sx[p])
                    } else {
                        a
                    };
                }
            }
        }
    }
    for p in 0..P {
        let t = t0 + 2 * p;
        for q in 0..4 {
            let [a, b] = acc[p][q];
            // SAFETY: 4 floats of rows t and t + 1 (16 each, in `out`: checked).
            unsafe {
                vst1q_f32(
                    out.as_mut_ptr().add(t * GROUP_ROWS + 4 * q),
                    vuzp1q_f32(a, b),
                );
                vst1q_f32(
                    out.as_mut_ptr().add((t + 1) * GROUP_ROWS + 4 * q),
                    vuzp2q_f32(a, b),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::cpu::isa::has_i8mm;
    use kestrel_gguf::quant::mxfp4::e8m0_to_f32_half;

    use super::*;
    use crate::cpu::packed::q8_family::{prepare, tile_scalar};
    use crate::cpu::packed::PackedWeight;
    use crate::cpu::scratch::MatmulScratch;
    use crate::cpu::testutil::{quantized_rows, Rng};
    use crate::DType;

    /// A packed group kernel.
    type GroupTile = unsafe fn(Kind, &[u8], usize, ActQ8<'_>, &mut [f32]);

    #[test]
    fn mxfp4_scales_are_ggml_half_scales_for_every_exponent() {
        for first in (0..=255u8).step_by(16) {
            let e: Vec<u8> = (0..16).map(|i| first.wrapping_add(i)).collect();
            for q in 0..4 {
                let mut got = [0f32; 4];
                // SAFETY: NEON is baseline; 16 readable bytes.
                unsafe { vst1q_f32(got.as_mut_ptr(), d4(Kind::MXFP4, e.as_ptr(), q)) };
                for (i, g) in got.iter().enumerate() {
                    let want = e8m0_to_f32_half(e[4 * q + i]);
                    assert_eq!(g.to_bits(), want.to_bits(), "exponent {}", e[4 * q + i]);
                }
            }
        }
    }

    /// Every type, every activation row count 1..=8, odd block counts: both kernels equal the
    /// scalar twin bit for bit, group by group (each where the CPU has it; qemu's default CPU
    /// has both).
    #[test]
    fn kernels_equal_the_scalar_twin_for_every_tile() {
        let levels: [(&str, bool, GroupTile); 2] = [
            (
                "dotprod",
                crate::cpu::isa::has_dotprod(),
                group_tile_dotprod,
            ),
            ("i8mm", has_i8mm(), group_tile_i8mm),
        ];
        let mut rng = Rng::new(5);
        for (dtype, kind) in [
            (DType::Q4_0, Kind::Q4_0),
            (DType::Q4_1, Kind::Q4_1),
            (DType::Q5_0, Kind::Q5_0),
            (DType::Q5_1, Kind::Q5_1),
            (DType::Q8_0, Kind::Q8_0),
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
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        for (name, have, kernel) in levels {
                            if !have {
                                continue;
                            }
                            let mut got = vec![f32::NAN; n * GROUP_ROWS];
                            // SAFETY: the level's features were detected.
                            unsafe { kernel(kind, group, nb, act, &mut got) };
                            assert_eq!(
                                bits(&want),
                                bits(&got),
                                "{name} {dtype:?} k {k} n {n} group {g}"
                            );
                        }
                    }
                }
            }
        }
        for (name, have, _) in levels {
            if !have {
                eprintln!("SKIPPED the {name} packed kernels: this CPU lacks the extension");
            }
        }
    }
}
