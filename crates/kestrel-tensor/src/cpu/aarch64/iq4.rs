//! IQ4_NL and MXFP4 (against q8_0 activations) and IQ4_XS (against q8_K), the 4-bit table types:
//! each 16-byte group of nibbles looked up in the type's 16-entry table with `tbl`, the
//! looked-up bytes times the activations summed per 4-byte lane by the level's `quad_sums`
//! (`smull` + pairwise adds, or `sdot`): the 8 exact lane sums of a 32-value group that ggml's
//! AVX2 kernels form, then the scalar twins' float order (`cpu::qdot::table_x86`: lane-wise
//! FMAs, IQ4_NL's and MXFP4's blocks in pairs into two accumulators and an odd last block alone,
//! `hsum_float_8` at the end), so each equals its twin, and an x86-64 machine's result, bit
//! for bit. One body for both levels (`iq4_kernels!`).

/// The three dots, for the features `$features` (`quad_sums` must be in scope).
macro_rules! iq4_kernels {
    ($features:literal) => {
        /// `hsum_float_8` of lanes 0..3 in `lo` and 4..7 in `hi`.
        #[inline]
        #[target_feature(enable = $features)]
        fn hsum_lanes(lo: float32x4_t, hi: float32x4_t) -> f32 {
            let r = vaddq_f32(hi, lo);
            (vgetq_lane_f32::<0>(r) + vgetq_lane_f32::<2>(r))
                + (vgetq_lane_f32::<1>(r) + vgetq_lane_f32::<3>(r))
        }

        /// The 8 lane sums (lanes 0..3, 4..7) of a 32-value group of IQ4 codes `qs` (byte `j`:
        /// value `j` in the low nibble, `j + 16` in the high) with 32 activations at `y`.
        #[inline]
        #[target_feature(enable = $features)]
        fn iq4_lanes(table: int8x16_t, qs: &[u8], y: &[i8]) -> (int32x4_t, int32x4_t) {
            // SAFETY: 16 code bytes and 32 activations (the callers' slices are that long).
            let (q, y0, y1) = unsafe {
                (
                    vld1q_u8(qs[..16].as_ptr()),
                    vld1q_s8(y[..16].as_ptr()),
                    vld1q_s8(y[16..32].as_ptr()),
                )
            };
            let lo = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0xf)));
            let hi = vqtbl1q_s8(table, vshrq_n_u8::<4>(q));
            (quad_sums(lo, y0), quad_sums(hi, y1))
        }

        /// `dot_pairs` of `qdot::table_x86` (IQ4_NL and MXFP4 against q8_0): blocks in pairs into
        /// two accumulators, an odd last block alone; `d` a block's scale, `qs` its codes.
        #[inline]
        #[target_feature(enable = $features)]
        fn table_pairs<B: bytemuck::Pod>(
            w: &[u8],
            y: &[kestrel_gguf::quant::BlockQ8_0],
            values: &[i8; 16],
            d: impl Fn(&B) -> f32,
            qs: impl Fn(&B) -> &[u8; 16],
        ) -> f32 {
            // SAFETY: the table is 16 bytes.
            let table = unsafe { vld1q_s8(values.as_ptr()) };
            let nb = w.len() / std::mem::size_of::<B>();
            let z = vdupq_n_f32(0.0);
            let mut acc = [[z, z], [z, z]];
            let mut tail = None;
            crate::cpu::qdot::common::for_each_block(w, |i, x: &B| {
                let yb = &y[i];
                let scale = crate::cpu::qdot::common::h(yb.d) * d(x);
                let (s0, s1) = iq4_lanes(table, qs(x), &yb.qs);
                if i + 1 == nb && nb % 2 == 1 {
                    tail = Some((scale, vaddvq_s32(vaddq_s32(s0, s1))));
                    return;
                }
                let a = &mut acc[i % 2];
                let sv = vdupq_n_f32(scale);
                a[0] = vfmaq_f32(a[0], sv, vcvtq_f32_s32(s0));
                a[1] = vfmaq_f32(a[1], sv, vcvtq_f32_s32(s1));
            });
            let sumf = hsum_lanes(
                vaddq_f32(acc[0][0], acc[1][0]),
                vaddq_f32(acc[0][1], acc[1][1]),
            );
            match tail {
                Some((scale, s)) => scale.mul_add(s as f32, sumf),
                None => sumf,
            }
        }

        /// `dot_iq4_nl_x86`: a row of IQ4_NL blocks against q8_0 activations.
        ///
        /// # Safety
        /// The CPU must have `$features`.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn dot_iq4_nl(w: &[u8], y: &[kestrel_gguf::quant::BlockQ8_0]) -> f32 {
            use kestrel_gguf::quant::iq4_nl::KVALUES_IQ4NL;
            use kestrel_gguf::quant::BlockIQ4NL;
            table_pairs(
                w,
                y,
                &KVALUES_IQ4NL,
                |x: &BlockIQ4NL| crate::cpu::qdot::common::h(x.d),
                |x: &BlockIQ4NL| &x.qs,
            )
        }

        /// `dot_mxfp4_x86`: a row of MXFP4 blocks against q8_0 activations (the E2M1 table
        /// doubled and half the E8M0 scale, as ggml's).
        ///
        /// # Safety
        /// The CPU must have `$features`.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn dot_mxfp4(w: &[u8], y: &[kestrel_gguf::quant::BlockQ8_0]) -> f32 {
            use kestrel_gguf::quant::mxfp4::{e8m0_to_f32_half, KVALUES_MXFP4};
            use kestrel_gguf::quant::BlockMXFP4;
            table_pairs(
                w,
                y,
                &KVALUES_MXFP4,
                |x: &BlockMXFP4| e8m0_to_f32_half(x.e),
                |x: &BlockMXFP4| &x.qs,
            )
        }

        /// `dot_iq4_xs_x86`: a row of IQ4_XS blocks against q8_K activations.
        ///
        /// # Safety
        /// The CPU must have `$features`.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn dot_iq4_xs(w: &[u8], y: &[kestrel_gguf::quant::BlockQ8K]) -> f32 {
            use crate::cpu::qdot::table_x86::iq4_xs_scale;
            use kestrel_gguf::quant::iq4_nl::KVALUES_IQ4NL;
            use kestrel_gguf::quant::BlockIQ4XS;
            // SAFETY: the table is 16 bytes.
            let table = unsafe { vld1q_s8(KVALUES_IQ4NL.as_ptr()) };
            let z = vdupq_n_f32(0.0);
            let mut acc = [z, z];
            crate::cpu::qdot::common::for_each_block(w, |ibl, x: &BlockIQ4XS| {
                let yb = &y[ibl];
                let mut sumi = [vdupq_n_s32(0); 2];
                for g in 0..8 {
                    let (s0, s1) = iq4_lanes(table, &x.qs[16 * g..], &yb.qs[32 * g..]);
                    let ls = iq4_xs_scale(x, g);
                    sumi[0] = vmlaq_n_s32(sumi[0], s0, ls);
                    sumi[1] = vmlaq_n_s32(sumi[1], s1, ls);
                }
                let d = vdupq_n_f32(crate::cpu::qdot::common::h(x.d) * yb.d);
                acc[0] = vfmaq_f32(acc[0], d, vcvtq_f32_s32(sumi[0]));
                acc[1] = vfmaq_f32(acc[1], d, vcvtq_f32_s32(sumi[1]));
            });
            hsum_lanes(acc[0], acc[1])
        }
    };
}
