//! The integer halves of the aarch64 K-quant kernels (Q2_K and Q3_K in ggml's x86 `vec_dot`
//! order, Q4_K in llama.cpp's repacked gemv/gemm orders, Q5_K in ggml's generic order, Q6_K in
//! ggml's x86 `vec_dot` order and b11434's tiled order), instantiated per level by `kquant_kernels!`. Each kernel is its scalar twin's float
//! code (`qdot::k_x86::dot_*_with`, `qdot::dot_q5_k_with`) over integers computed here with
//! 16-byte vectors: the integers are exact, so the results are the twins' bits.
//!
//! The caller provides, with its target features, `quad_sums(x, y)`: the 4 lane sums of four
//! signed × signed byte products each (lane `l`: bytes `4l..4l+4`).

macro_rules! kquant_kernels {
    ($features:literal) => {
        use kestrel_gguf::quant::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};

        use crate::cpu::qdot::k_x86::{
            dot_q2_k_x86_with, dot_q3_k_x86_with, dot_q4_k_8x8_gemm_with, dot_q4_k_8x8_gemv_with,
            dot_q6_k_tiled_with, dot_q6_k_x86_with, q6k_offset,
        };
        use crate::cpu::qdot::{dot_q5_k_with, k4_scales};

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

        /// Q4_K's integers per pair of sub-blocks (`qdot::k_x86::q4k_pairs`).
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

        /// The x86 lane arrangement of Q2_K and Q3_K (`qdot::k_x86::q2k_lanes`): chunk `c`'s 32
        /// quants (`quants(c)`, two 16-byte halves) times the activation's, bytes `4l..4l+4`
        /// into lane `l`, the first half's lanes times `scale(2c)`, the second's `scale(2c + 1)`.
        #[inline]
        #[target_feature(enable = $features)]
        fn x86_lanes(
            yb: &BlockQ8K,
            quants: impl Fn(usize) -> (int8x16_t, int8x16_t),
            scale: impl Fn(usize) -> i32,
        ) -> [i32; 8] {
            let mut lo = vdupq_n_s32(0);
            let mut hi = vdupq_n_s32(0);
            for c in 0..8 {
                let (q0, q1) = quants(c);
                let (a0, a1) = act32(&yb.qs, 32 * c);
                lo = vmlaq_n_s32(lo, quad_sums(q0, a0), scale(2 * c));
                hi = vmlaq_n_s32(hi, quad_sums(q1, a1), scale(2 * c + 1));
            }
            let mut sumi = [0i32; 8];
            // SAFETY: 8 i32.
            unsafe {
                vst1q_s32(sumi.as_mut_ptr(), lo);
                vst1q_s32(sumi.as_mut_ptr().add(4), hi);
            }
            sumi
        }

        /// 2-bit field `k` (bits `2k..2k+2`) of each byte.
        #[inline]
        #[target_feature(enable = $features)]
        fn crumbs(v: uint8x16_t, k: usize) -> uint8x16_t {
            let s = match k {
                0 => v,
                1 => vshrq_n_u8::<2>(v),
                2 => vshrq_n_u8::<4>(v),
                _ => vshrq_n_u8::<6>(v),
            };
            vandq_u8(s, vdupq_n_u8(3))
        }

        /// Q2_K's 8 integer lanes (`qdot::k_x86::q2k_lanes`).
        #[inline]
        #[target_feature(enable = $features)]
        fn q2k_lanes(x: &BlockQ2K, yb: &BlockQ8K) -> [i32; 8] {
            // SAFETY: 64 bytes.
            let q = unsafe {
                [
                    vld1q_u8(x.qs.as_ptr()),
                    vld1q_u8(x.qs.as_ptr().add(16)),
                    vld1q_u8(x.qs.as_ptr().add(32)),
                    vld1q_u8(x.qs.as_ptr().add(48)),
                ]
            };
            let quants = |c: usize| {
                let (j, k) = (c / 4, c % 4);
                (
                    vreinterpretq_s8_u8(crumbs(q[2 * j], k)),
                    vreinterpretq_s8_u8(crumbs(q[2 * j + 1], k)),
                )
            };
            x86_lanes(yb, quants, |i| i32::from(x.scales[i] & 0xf))
        }

        /// Q3_K's 8 integer lanes (`qdot::k_x86::q3k_lanes`): the 2-bit field minus 4 where
        /// bit `c` of `hmask` is clear.
        #[inline]
        #[target_feature(enable = $features)]
        fn q3k_lanes(x: &BlockQ3K, yb: &BlockQ8K, scales: &[i8; 16]) -> [i32; 8] {
            // SAFETY: 64 and 32 bytes.
            let (q, h) = unsafe {
                (
                    [
                        vld1q_u8(x.qs.as_ptr()),
                        vld1q_u8(x.qs.as_ptr().add(16)),
                        vld1q_u8(x.qs.as_ptr().add(32)),
                        vld1q_u8(x.qs.as_ptr().add(48)),
                    ],
                    [
                        vld1q_u8(x.hmask.as_ptr()),
                        vld1q_u8(x.hmask.as_ptr().add(16)),
                    ],
                )
            };
            let four = vdupq_n_u8(4);
            let quants = |c: usize| {
                let (j, k) = (c / 4, c % 4);
                let bit = vdupq_n_u8(1 << c);
                let q3 = |v: uint8x16_t, hm: uint8x16_t| {
                    let minus = vbicq_u8(four, vtstq_u8(hm, bit));
                    vsubq_s8(
                        vreinterpretq_s8_u8(crumbs(v, k)),
                        vreinterpretq_s8_u8(minus),
                    )
                };
                (q3(q[2 * j], h[0]), q3(q[2 * j + 1], h[1]))
            };
            x86_lanes(yb, quants, |i| i32::from(scales[i]))
        }

        /// Q5_K's 8 integer lanes in the generic arrangement (`qdot::q5k_lanes`: lane `l` sums
        /// `scale · q8 · q` over the values whose index is `l` mod 8): per 32-value sub-block,
        /// the four 8-byte groups' widening products added in i16 (|4 · 128 · 31| < 2^15), then
        /// times the scale into i32.
        #[inline]
        #[target_feature(enable = $features)]
        fn q5k_lanes(x: &BlockQ5K, yb: &BlockQ8K, scales: &[u8; 8]) -> [i32; 8] {
            let nib = vdupq_n_u8(0x0f);
            let fifth = vdupq_n_u8(0x10);
            // SAFETY: 32 bytes.
            let (h0, h1) = unsafe { (vld1q_u8(x.qh.as_ptr()), vld1q_u8(x.qh.as_ptr().add(16))) };
            let mut lo = vdupq_n_s32(0);
            let mut hi = vdupq_n_s32(0);
            for p in 0..4 {
                let q = &x.qs[32 * p..32 * p + 32];
                // SAFETY: 32 bytes.
                let (q0, q1) = unsafe { (vld1q_u8(q.as_ptr()), vld1q_u8(q.as_ptr().add(16))) };
                for half in 0..2 {
                    let j = 2 * p + half;
                    let bit = vdupq_n_u8(1 << j);
                    let quant = |v: uint8x16_t, h: uint8x16_t| {
                        let n = if half == 0 {
                            vandq_u8(v, nib)
                        } else {
                            vshrq_n_u8::<4>(v)
                        };
                        vreinterpretq_s8_u8(vorrq_u8(n, vandq_u8(vtstq_u8(h, bit), fifth)))
                    };
                    let (a0, a1) = (quant(q0, h0), quant(q1, h1));
                    let (y0, y1) = act32(&yb.qs, 32 * j);
                    let mut s = vmull_s8(vget_low_s8(y0), vget_low_s8(a0));
                    s = vmlal_high_s8(s, y0, a0);
                    s = vmlal_s8(s, vget_low_s8(y1), vget_low_s8(a1));
                    s = vmlal_high_s8(s, y1, a1);
                    let sc = i16::from(scales[j]);
                    lo = vmlal_n_s16(lo, vget_low_s16(s), sc);
                    hi = vmlal_high_n_s16(hi, s, sc);
                }
            }
            let mut aux32 = [0i32; 8];
            // SAFETY: 8 i32.
            unsafe {
                vst1q_s32(aux32.as_mut_ptr(), lo);
                vst1q_s32(aux32.as_mut_ptr().add(4), hi);
            }
            aux32
        }

        /// Q6_K's 8 integer lanes in the x86 arrangement (`qdot::k_x86::q6k_lanes`): lanes
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

        /// Q2_K in ggml's x86 `vec_dot` order (the scalar table's).
        #[target_feature(enable = $features)]
        pub(crate) fn dot_q2_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
            // The closure inherits this function's features.
            dot_q2_k_x86_with(w, y, |x, yb| q2k_lanes(x, yb))
        }

        /// Q3_K in ggml's x86 `vec_dot` order (the scalar table's).
        #[target_feature(enable = $features)]
        pub(crate) fn dot_q3_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
            // The closure inherits this function's features.
            dot_q3_k_x86_with(w, y, |x, yb, scales| q3k_lanes(x, yb, scales))
        }

        /// Q5_K in ggml's generic order (the scalar table's).
        #[target_feature(enable = $features)]
        pub(crate) fn dot_q5_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
            // The closure inherits this function's features.
            dot_q5_k_with(w, y, |x, yb, scales| q5k_lanes(x, yb, scales))
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
