//! The IQ grid types against q8_K activations (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): per
//! 16 values, two grid entries' magnitudes (8 bytes each; IQ3's two 4-value entries per 8) in
//! one register, their sign bits spread to bytes (`tst`) and applied by `(m ^ s) - s`, the
//! products with the activations summed per 4-byte lane by the level's `quad_sums` (`smull` +
//! pairwise adds, or `sdot`), the lanes times the group's scale (`1 + 2s`) accumulated in
//! integers. The block's sum is exact, so it is the scalar twin's (`cpu::qdot::iq::isum_*`), and
//! the float part is the twin's own `dot_grid`: each equals its twin bit for bit. One body for
//! both levels (`iq_grid_kernels!`).

/// The five dots, for the features `$features` (`quad_sums` and `BlockQ8K` must be in scope).
macro_rules! iq_grid_kernels {
    ($features:literal) => {
        use kestrel_gguf::quant::iq_grids::{
            IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
        };
        use kestrel_gguf::quant::{
            BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS, QK_K,
        };

        use crate::cpu::qdot::common::h;
        use crate::cpu::qdot::iq::dot_grid;

        /// The 4-byte lane sums of 16 values: magnitudes `g0`, `g1` (8 bytes each, value `j` in
        /// byte `j`) negated where bit `j` of `s0`, `s1` is set, times the 16 quants at `q`.
        ///
        /// # Safety
        /// `q..q + 16` must be readable.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn signed16(g0: u64, g1: u64, s0: u8, s1: u8, q: *const i8) -> int32x4_t {
            const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
            // SAFETY: a 16-byte constant; the caller keeps 16 quants readable.
            let (bit, y) = unsafe { (vld1q_u8(BIT.as_ptr()), vld1q_s8(q)) };
            let m = vreinterpretq_s8_u64(vcombine_u64(vcreate_u64(g0), vcreate_u64(g1)));
            let s = vreinterpretq_s8_u8(vtstq_u8(vcombine_u8(vdup_n_u8(s0), vdup_n_u8(s1)), bit));
            // Magnitudes ≤ 62: the negation never wraps.
            quad_sums(vsubq_s8(veorq_s8(m, s), s), y)
        }

        /// Two 4-value grid entries as one 8-value entry.
        #[inline(always)]
        fn pair4(a: u32, b: u32) -> u64 {
            u64::from(a) | u64::from(b) << 32
        }

        /// `acc + ` one 32-value group's lane sums times its scale: grid entries `g`, sign
        /// bytes `sg`, the group's 32 quants `q`.
        #[inline]
        #[target_feature(enable = $features)]
        fn group32(acc: int32x4_t, ls: i32, g: [u64; 4], sg: [u8; 4], q: &[i8]) -> int32x4_t {
            let q = &q[..32];
            // SAFETY: 32 quants.
            let s = unsafe {
                vaddq_s32(
                    signed16(g[0], g[1], sg[0], sg[1], q.as_ptr()),
                    signed16(g[2], g[3], sg[2], sg[3], q.as_ptr().add(16)),
                )
            };
            vmlaq_n_s32(acc, s, ls)
        }

        /// [`group32`] with a scale per 16 values (`ls[0]` for the first half).
        #[inline]
        #[target_feature(enable = $features)]
        fn group16(acc: int32x4_t, ls: [i32; 2], g: [u64; 4], sg: [u8; 4], q: &[i8]) -> int32x4_t {
            let q = &q[..32];
            // SAFETY: 32 quants.
            let (a, b) = unsafe {
                (
                    signed16(g[0], g[1], sg[0], sg[1], q.as_ptr()),
                    signed16(g[2], g[3], sg[2], sg[3], q.as_ptr().add(16)),
                )
            };
            vmlaq_n_s32(vmlaq_n_s32(acc, a, ls[0]), b, ls[1])
        }

        /// The two 4-bit scales `1 + 2s` of a byte (low nibble first).
        #[inline(always)]
        fn scales16(sc: u8) -> [i32; 2] {
            [2 * (sc & 0xf) as i32 + 1, 2 * (sc >> 4) as i32 + 1]
        }

        /// `isum_iq2_xxs`: 8 groups of 32, a 4-bit scale and four 7-bit sign fields each.
        #[inline]
        #[target_feature(enable = $features)]
        fn isum_iq2_xxs(x: &BlockIQ2XXS, q8: &[i8; QK_K]) -> i32 {
            let mut acc = vdupq_n_s32(0);
            for ib32 in 0..QK_K / 32 {
                let q = &x.qs[4 * ib32..4 * ib32 + 4];
                let aux0 = q[0] as u32 | (q[1] as u32) << 16;
                let aux1 = q[2] as u32 | (q[3] as u32) << 16;
                let idx = aux0.to_le_bytes();
                let g = std::array::from_fn(|l| IQ2XXS_GRID[idx[l] as usize]);
                let sg = std::array::from_fn(|l| KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize]);
                let ls = 2 * (aux1 >> 28) as i32 + 1;
                acc = group32(acc, ls, g, sg, &q8[32 * ib32..]);
            }
            vaddvq_s32(acc)
        }

        /// `isum_iq2_xs`: 9-bit indices with 7 sign bits, a scale per 16 values.
        #[inline]
        #[target_feature(enable = $features)]
        fn isum_iq2_xs(x: &BlockIQ2XS, q8: &[i8; QK_K]) -> i32 {
            let mut acc = vdupq_n_s32(0);
            for ib32 in 0..QK_K / 32 {
                let q = |l: usize| x.qs[4 * ib32 + l];
                let g = std::array::from_fn(|l| IQ2XS_GRID[(q(l) & 511) as usize]);
                let sg = std::array::from_fn(|l| KSIGNS_IQ2XS[(q(l) >> 9) as usize]);
                acc = group16(acc, scales16(x.scales[ib32]), g, sg, &q8[32 * ib32..]);
            }
            vaddvq_s32(acc)
        }

        /// `isum_iq2_s`: 10-bit indices, explicit sign bytes, a scale per 16 values.
        #[inline]
        #[target_feature(enable = $features)]
        fn isum_iq2_s(x: &BlockIQ2S, q8: &[i8; QK_K]) -> i32 {
            let (qs, signs) = x.qs.split_at(QK_K / 8);
            let mut acc = vdupq_n_s32(0);
            for ib32 in 0..QK_K / 32 {
                let qh = x.qh[ib32] as usize;
                let g = std::array::from_fn(|l| {
                    IQ2S_GRID[qs[4 * ib32 + l] as usize | (qh << (8 - 2 * l)) & 0x300]
                });
                let sg = std::array::from_fn(|l| signs[4 * ib32 + l]);
                acc = group16(acc, scales16(x.scales[ib32]), g, sg, &q8[32 * ib32..]);
            }
            vaddvq_s32(acc)
        }

        /// `isum_iq3_xxs`: two 4-value entries per 8 values, 7-bit sign fields.
        #[inline]
        #[target_feature(enable = $features)]
        fn isum_iq3_xxs(x: &BlockIQ3XXS, q8: &[i8; QK_K]) -> i32 {
            let (qs, gas) = x.qs.split_at(QK_K / 4);
            let mut acc = vdupq_n_s32(0);
            for ib32 in 0..QK_K / 32 {
                let ga = &gas[4 * ib32..4 * ib32 + 4];
                let aux = u32::from_le_bytes([ga[0], ga[1], ga[2], ga[3]]);
                let g = std::array::from_fn(|l| {
                    let q = &qs[8 * ib32 + 2 * l..8 * ib32 + 2 * l + 2];
                    pair4(IQ3XXS_GRID[q[0] as usize], IQ3XXS_GRID[q[1] as usize])
                });
                let sg = std::array::from_fn(|l| KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize]);
                let ls = 2 * (aux >> 28) as i32 + 1;
                acc = group32(acc, ls, g, sg, &q8[32 * ib32..]);
            }
            vaddvq_s32(acc)
        }

        /// `isum_iq3_s`: 9-bit indices, explicit sign bytes, a scale per 32 values.
        #[inline]
        #[target_feature(enable = $features)]
        fn isum_iq3_s(x: &BlockIQ3S, q8: &[i8; QK_K]) -> i32 {
            let mut acc = vdupq_n_s32(0);
            for ib32 in 0..QK_K / 32 {
                let qh = x.qh[ib32] as usize;
                let g = std::array::from_fn(|l| {
                    let q = &x.qs[8 * ib32 + 2 * l..8 * ib32 + 2 * l + 2];
                    let i1 = q[0] as usize | ((qh << (8 - 2 * l)) & 256);
                    let i2 = q[1] as usize | ((qh << (7 - 2 * l)) & 256);
                    pair4(IQ3S_GRID[i1], IQ3S_GRID[i2])
                });
                let sg = std::array::from_fn(|l| x.signs[4 * ib32 + l]);
                let ls = scales16(x.scales[ib32 / 2])[ib32 % 2];
                acc = group32(acc, ls, g, sg, &q8[32 * ib32..]);
            }
            vaddvq_s32(acc)
        }

        macro_rules! grid_dot {
            ($name:ident, $block:ty, $scale:expr, $isum:ident) => {
                /// The twin's `dot_grid` over this level's exact block sums.
                ///
                /// # Safety
                /// The CPU must have `$features`.
                #[target_feature(enable = $features)]
                pub(crate) unsafe fn $name(w: &[u8], y: &[BlockQ8K]) -> f32 {
                    dot_grid(w, y, $scale, |x: &$block| h(x.d), |x, q| $isum(x, q))
                }
            };
        }
        grid_dot!(dot_iq2_xxs, BlockIQ2XXS, 0.125, isum_iq2_xxs);
        grid_dot!(dot_iq2_xs, BlockIQ2XS, 0.125, isum_iq2_xs);
        grid_dot!(dot_iq2_s, BlockIQ2S, 0.125, isum_iq2_s);
        grid_dot!(dot_iq3_xxs, BlockIQ3XXS, 0.25, isum_iq3_xxs);
        grid_dot!(dot_iq3_s, BlockIQ3S, 1.0, isum_iq3_s);
    };
}
