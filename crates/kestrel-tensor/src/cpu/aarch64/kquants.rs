//! The integer halves of the aarch64 K-quant kernels (Q4_K in llama.cpp's repacked gemv/gemm
//! orders, Q6_K in ggml's x86 `vec_dot` order and b11434's tiled order), instantiated per level
//! by `kquant_kernels!`. Each kernel is its scalar twin's float code
//! (`qdot_k_x86::dot_*_with`) over integers computed here with 16-byte vectors: the integers
//! are exact, so the results are the twins' bits.
//!
//! The caller provides, with its target features, `quad_sums(x, y)`: the 4 lane sums of four
//! signed × signed byte products each (lane `l`: bytes `4l..4l+4`).

macro_rules! kquant_kernels {
    ($features:literal) => {
        use kestrel_gguf::quant::{BlockQ4K, BlockQ6K, BlockQ8K};

        use crate::cpu::qdot::k4_scales;
        use crate::cpu::qdot_k_x86::{
            dot_q4_k_8x8_gemm_with, dot_q4_k_8x8_gemv_with, dot_q6_k_tiled_with, dot_q6_k_x86_with,
            q6k_offset,
        };

        /// `Σ x · y` over 32 bytes (`x`, `y`: two 16-byte halves each), exact.
        #[inline]
        #[target_feature(enable = $features)]
        fn dot32(x: (int8x16_t, int8x16_t), y: (int8x16_t, int8x16_t)) -> i32 {
            vaddvq_s32(vaddq_s32(quad_sums(x.0, y.0), quad_sums(x.1, y.1)))
        }

        /// 32 activation quants at `qs[o..o + 32]`.
        #[inline]
        #[target_feature(enable = $features)]
        fn act32(qs: &[i8; 256], o: usize) -> (int8x16_t, int8x16_t) {
            let a = &qs[o..o + 32];
            // SAFETY: 32 bytes.
            unsafe { (vld1q_s8(a.as_ptr()), vld1q_s8(a.as_ptr().add(16))) }
        }

        /// Q4_K's integers per pair of sub-blocks (`qdot_k_x86::q4k_pairs`).
        #[inline]
        #[target_feature(enable = $features)]
        fn q4k_pairs(x: &BlockQ4K, yb: &BlockQ8K) -> ([i32; 4], [i32; 4]) {
            let (scales, mins) = k4_scales(&x.scales);
            let nib = vdupq_n_u8(0x0f);
            let mut val = [0i32; 4];
            let mut min = [0i32; 4];
            for p in 0..4 {
                let q = &x.qs[32 * p..32 * p + 32];
                // SAFETY: 32 bytes.
                let (q0, q1) = unsafe { (vld1q_u8(q.as_ptr()), vld1q_u8(q.as_ptr().add(16))) };
                let lo = (
                    vreinterpretq_s8_u8(vandq_u8(q0, nib)),
                    vreinterpretq_s8_u8(vandq_u8(q1, nib)),
                );
                let hi = (
                    vreinterpretq_s8_u8(vshrq_n_u8::<4>(q0)),
                    vreinterpretq_s8_u8(vshrq_n_u8::<4>(q1)),
                );
                let l = dot32(lo, act32(&yb.qs, 64 * p));
                let h = dot32(hi, act32(&yb.qs, 64 * p + 32));
                val[p] = i32::from(scales[2 * p]) * l + i32::from(scales[2 * p + 1]) * h;
                let bs = |j: usize| i32::from(yb.bsums[2 * j]) + i32::from(yb.bsums[2 * j + 1]);
                min[p] =
                    bs(2 * p) * i32::from(mins[2 * p]) + bs(2 * p + 1) * i32::from(mins[2 * p + 1]);
            }
            (val, min)
        }

        /// Q6_K's 8 integer lanes in the x86 arrangement (`qdot_k_x86::q6k_lanes`): lanes
        /// 0-3 from each chunk's first 16 bytes (its first scale), 4-7 from the rest.
        #[inline]
        #[target_feature(enable = $features)]
        fn q6k_lanes(x: &BlockQ6K, yb: &BlockQ8K) -> [i32; 8] {
            let nib = vdupq_n_u8(0x0f);
            let three = vdupq_n_u8(3);
            let mut lo_lanes = vdupq_n_s32(0);
            let mut hi_lanes = vdupq_n_s32(0);
            for c in 0..8 {
                let (j, k) = (c / 4, c % 4);
                let ql = &x.ql[64 * j + 32 * (k % 2)..64 * j + 32 * (k % 2) + 32];
                let qh = &x.qh[32 * j..32 * j + 32];
                // SAFETY: 32 bytes each.
                let (l0, l1, h0, h1) = unsafe {
                    (
                        vld1q_u8(ql.as_ptr()),
                        vld1q_u8(ql.as_ptr().add(16)),
                        vld1q_u8(qh.as_ptr()),
                        vld1q_u8(qh.as_ptr().add(16)),
                    )
                };
                let low = |v: uint8x16_t| {
                    if k / 2 == 0 {
                        vandq_u8(v, nib)
                    } else {
                        vshrq_n_u8::<4>(v)
                    }
                };
                let high = |v: uint8x16_t| {
                    let s = match k {
                        0 => v,
                        1 => vshrq_n_u8::<2>(v),
                        2 => vshrq_n_u8::<4>(v),
                        _ => vshrq_n_u8::<6>(v),
                    };
                    vshlq_n_u8::<4>(vandq_u8(s, three))
                };
                let q0 = vreinterpretq_s8_u8(vorrq_u8(low(l0), high(h0)));
                let q1 = vreinterpretq_s8_u8(vorrq_u8(low(l1), high(h1)));
                let (a0, a1) = act32(&yb.qs, 32 * c);
                lo_lanes = vmlaq_n_s32(lo_lanes, quad_sums(q0, a0), i32::from(x.scales[2 * c]));
                hi_lanes = vmlaq_n_s32(hi_lanes, quad_sums(q1, a1), i32::from(x.scales[2 * c + 1]));
            }
            let mut sumi = [0i32; 8];
            // SAFETY: 8 i32.
            unsafe {
                vst1q_s32(sumi.as_mut_ptr(), lo_lanes);
                vst1q_s32(sumi.as_mut_ptr().add(4), hi_lanes);
            }
            q6k_offset(&mut sumi, x, yb);
            sumi
        }

        /// Q4_K in the repacked gemv order (decode, single rows).
        #[target_feature(enable = $features)]
        pub(crate) fn dot_q4_k_gemv(w: &[u8], y: &[BlockQ8K]) -> f32 {
            // The closure inherits this function's features.
            dot_q4_k_8x8_gemv_with(w, y, |x, yb| q4k_pairs(x, yb))
        }

        /// Q4_K in the repacked gemm order (groups of activation rows).
        #[target_feature(enable = $features)]
        pub(crate) fn dot_q4_k_gemm(w: &[u8], y: &[BlockQ8K]) -> f32 {
            // The closure inherits this function's features.
            dot_q4_k_8x8_gemm_with(w, y, |x, yb| q4k_pairs(x, yb))
        }

        /// Q6_K in ggml's x86 `vec_dot` order.
        #[target_feature(enable = $features)]
        pub(crate) fn dot_q6_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
            // The closure inherits this function's features.
            dot_q6_k_x86_with(w, y, |x, yb| q6k_lanes(x, yb))
        }

        /// Q6_K in b11434's tiled order (8 or more activation rows).
        #[target_feature(enable = $features)]
        pub(crate) fn dot_q6_k_tiled(w: &[u8], y: &[BlockQ8K]) -> f32 {
            // The closure inherits this function's features.
            dot_q6_k_tiled_with(w, y, |x, yb| q6k_lanes(x, yb).iter().sum())
        }
    };
}
