//! The one body of the aarch64 q8_0-family dot kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 weights
//! against q8_0 / q8_1 activations), instantiated per level by `q8_family_kernels!`: the
//! counterpart of `x86_64::q8_family`, giving the scalar twins' results bit for bit.
//!
//! A 32-value block is two 16-byte registers. Per block: unpack the weights, sum the byte
//! products four at a time into 8 i32 lanes (lane `l`: bytes `4l..4l+4`; exact integers; lanes
//! 0-3 from the low register, 4-7 from the high one), convert the lanes to f32 and
//! `acc = fma(d_w·d_x, lanes, acc)`; at the end ggml's `hsum_float_8` (lanes `i + 4` and `i`,
//! then `(0 + 2) + (1 + 3)`). That is the float order of ggml's x86 kernels and of the scalar
//! twins `cpu::qdot::dot_*_x86`, so an aarch64 machine computes what an x86 one does.
//!
//! The macro's caller provides, with its target features, `lane_sums(x, y)`: the 8 lane sums of
//! signed × signed bytes (`x`, `y`: a block as two registers; weights are within ±128,
//! activations within ±127).

macro_rules! q8_family_kernels {
    ($features:literal) => {
        /// Weight rows a prefill tile takes at most here: its accumulators (two registers per
        /// weight row and activation row) must leave room in the 32 vector registers.
        pub(crate) const TILE_ROWS: usize = 2;

        use kestrel_gguf::quant::BlockQ8_0;

        use crate::cpu::aarch64::fp16;
        use crate::cpu::q8_block::BlockQ8_1;

        /// A block's 32 bytes as two registers (bytes 0-15, 16-31).
        #[derive(Clone, Copy)]
        pub(super) struct B32(pub(super) int8x16_t, pub(super) int8x16_t);

        /// Little-endian u16 at `p`.
        #[inline(always)]
        unsafe fn rd16(p: *const u8) -> u16 {
            // SAFETY: the caller keeps `p..p+2` in bounds.
            unsafe { u16::from_le_bytes([*p, *p.add(1)]) }
        }

        /// ggml's `hsum_float_8` over lanes 0-3 (`lo`) and 4-7 (`hi`).
        #[inline]
        #[target_feature(enable = $features)]
        fn hsum_float_8(lo: float32x4_t, hi: float32x4_t) -> f32 {
            let r = vaddq_f32(hi, lo);
            (vgetq_lane_f32::<0>(r) + vgetq_lane_f32::<2>(r))
                + (vgetq_lane_f32::<1>(r) + vgetq_lane_f32::<3>(r))
        }

        /// The 16 packed nibbles at `p` as 32 bytes: low nibbles, then high nibbles.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn nibbles(p: *const u8) -> (uint8x16_t, uint8x16_t) {
            // SAFETY: the caller keeps `p..p+16` in bounds.
            let t = unsafe { vld1q_u8(p) };
            (vandq_u8(t, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(t))
        }

        /// Bit `j` of the 4 bytes at `p` spread to byte `j`: 0xFF if set, else 0.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn bytes_from_bits_32(p: *const u8) -> (uint8x16_t, uint8x16_t) {
            // SAFETY: the caller keeps `p..p+4` in bounds.
            let b = unsafe { [*p, *p.add(1), *p.add(2), *p.add(3)] };
            const BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
            // SAFETY: a 16-byte constant.
            let bits = unsafe { vld1q_u8(BITS.as_ptr()) };
            let lo = vcombine_u8(vdup_n_u8(b[0]), vdup_n_u8(b[1]));
            let hi = vcombine_u8(vdup_n_u8(b[2]), vdup_n_u8(b[3]));
            (vtstq_u8(lo, bits), vtstq_u8(hi, bits))
        }

        /// The activation quants of a q8 block.
        #[inline]
        #[target_feature(enable = $features)]
        fn act(qs: &[i8; 32]) -> B32 {
            // SAFETY: 32 bytes.
            unsafe { B32(vld1q_s8(qs.as_ptr()), vld1q_s8(qs.as_ptr().add(16))) }
        }

        /// A weight block type: its size, whether it has a min (and unsigned quants), and the
        /// unpacking of one block: `(d_w, m_w, 32 quant bytes)` (`m_w` is 0 without a min).
        trait Blk {
            const BS: usize;
            const MIN: bool;
            unsafe fn unpack(b: *const u8) -> (f32, f32, B32);
        }

        /// Q4_0: `d`, 16 bytes of nibbles (value - 8).
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn blk_q4_0(b: *const u8) -> (f32, f32, B32) {
            // SAFETY: the caller keeps the 18-byte block in bounds.
            let (d, (lo, hi)) = unsafe { (fp16(rd16(b)), nibbles(b.add(2))) };
            let eight = vdupq_n_s8(8);
            let q = B32(
                vsubq_s8(vreinterpretq_s8_u8(lo), eight),
                vsubq_s8(vreinterpretq_s8_u8(hi), eight),
            );
            (d, 0.0, q)
        }

        /// Q4_1: `d`, `m`, 16 bytes of nibbles (unsigned).
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn blk_q4_1(b: *const u8) -> (f32, f32, B32) {
            // SAFETY: the caller keeps the 20-byte block in bounds.
            let (d, m, (lo, hi)) =
                unsafe { (fp16(rd16(b)), fp16(rd16(b.add(2))), nibbles(b.add(4))) };
            (d, m, B32(vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi)))
        }

        /// Q5_0: `d`, 4 bytes of high bits, 16 bytes of nibbles (value - 16).
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn blk_q5_0(b: *const u8) -> (f32, f32, B32) {
            // SAFETY: the caller keeps the 22-byte block in bounds.
            let (d, (lo, hi), (m_lo, m_hi)) = unsafe {
                (
                    fp16(rd16(b)),
                    nibbles(b.add(6)),
                    bytes_from_bits_32(b.add(2)),
                )
            };
            // bit clear: nibble - 16 (= nibble | 0xF0 as i8); bit set: the nibble + 16 - 16
            let f0 = vdupq_n_u8(0xf0);
            let q = B32(
                vreinterpretq_s8_u8(vorrq_u8(lo, vbicq_u8(f0, m_lo))),
                vreinterpretq_s8_u8(vorrq_u8(hi, vbicq_u8(f0, m_hi))),
            );
            (d, 0.0, q)
        }

        /// Q5_1: `d`, `m`, 4 bytes of high bits, 16 bytes of nibbles (unsigned).
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn blk_q5_1(b: *const u8) -> (f32, f32, B32) {
            // SAFETY: the caller keeps the 24-byte block in bounds.
            let (d, m, (lo, hi), (m_lo, m_hi)) = unsafe {
                (
                    fp16(rd16(b)),
                    fp16(rd16(b.add(2))),
                    nibbles(b.add(8)),
                    bytes_from_bits_32(b.add(4)),
                )
            };
            let x10 = vdupq_n_u8(0x10);
            let q = B32(
                vreinterpretq_s8_u8(vorrq_u8(lo, vandq_u8(m_lo, x10))),
                vreinterpretq_s8_u8(vorrq_u8(hi, vandq_u8(m_hi, x10))),
            );
            (d, m, q)
        }

        /// Q8_0: `d`, 32 signed bytes.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn blk_q8_0(b: *const u8) -> (f32, f32, B32) {
            // SAFETY: the caller keeps the 34-byte block in bounds.
            unsafe {
                let q = b.add(2).cast::<i8>();
                (fp16(rd16(b)), 0.0, B32(vld1q_s8(q), vld1q_s8(q.add(16))))
            }
        }

        /// An activation block: its quants, `d` and (q8_1) `s`.
        trait Act {
            /// `(quants, d, s)`; `s` is 0 for q8_0.
            unsafe fn parts(&self) -> (B32, f32, f32);
        }

        impl Act for BlockQ8_0 {
            #[inline(always)]
            unsafe fn parts(&self) -> (B32, f32, f32) {
                // SAFETY: the caller has the CPU features.
                unsafe { (act(&self.qs), fp16(self.d.to_bits()), 0.0) }
            }
        }

        impl Act for BlockQ8_1 {
            #[inline(always)]
            unsafe fn parts(&self) -> (B32, f32, f32) {
                // SAFETY: as above.
                unsafe {
                    (
                        act(&self.qs),
                        fp16(self.d.to_bits()),
                        fp16(self.s.to_bits()),
                    )
                }
            }
        }

        /// One weight row (`nb` blocks at `w`) against `T` activation rows (`y`: `T · nb`
        /// blocks): `out[t]` in ggml's float order (`acc = fma(d_w·d_x, lanes, acc)`, `Σ m·s`
        /// beside when `MIN`). Each weight block is unpacked once for all `T` rows.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn tile<B: Blk, A: Act, const W: usize, const T: usize>(
            w: *const u8,
            rb: usize,
            y: &[A],
            nb: usize,
            out: &mut [f32],
        ) {
            let zero = vdupq_n_f32(0.0);
            let mut acc = [[(zero, zero); T]; W];
            let mut summs = [[0f32; T]; W];
            for i in 0..nb {
                for r in 0..W {
                    // SAFETY: block i of row r lies in the weights (checked by the caller).
                    let (d, m, bx) = unsafe { B::unpack(w.add(r * rb + i * B::BS)) };
                    for t in 0..T {
                        // SAFETY: the caller has the CPU features; y holds T · nb blocks.
                        let (ya, yd, ys) = unsafe { y[t * nb + i].parts() };
                        let (s_lo, s_hi) = lane_sums(bx, ya);
                        if B::MIN {
                            summs[r][t] = m.mul_add(ys, summs[r][t]);
                        }
                        let dd = vdupq_n_f32(d * yd);
                        let (a_lo, a_hi) = acc[r][t];
                        acc[r][t] = (
                            vfmaq_f32(a_lo, dd, vcvtq_f32_s32(s_lo)),
                            vfmaq_f32(a_hi, dd, vcvtq_f32_s32(s_hi)),
                        );
                    }
                }
            }
            for r in 0..W {
                for t in 0..T {
                    let (lo, hi) = acc[r][t];
                    out[r * T + t] = if B::MIN {
                        hsum_float_8(lo, hi) + summs[r][t]
                    } else {
                        hsum_float_8(lo, hi)
                    };
                }
            }
        }

        q8_family_drivers!($features, B32);
    };
}
