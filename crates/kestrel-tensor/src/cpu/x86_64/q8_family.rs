//! The one body of the q8_0-family dot kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 weights against
//! q8_0 / q8_1 activations), instantiated per instruction set by `q8_family_kernels!`.
//!
//! Per 32-value block: unpack the weights to 32 bytes, sum the byte products four at a time
//! into 8 i32 lanes (lane `l`: bytes `4l..4l+4`; exact integers), convert the lanes to f32 and
//! `acc = fma(d_w·d_x, lanes, acc)`; at the end ggml's `hsum_float_8`. That is the float order
//! of ggml's x86 kernels and of the scalar twins `cpu::qdot::dot_*_x86`.
//!
//! The macro's caller provides, with its target features:
//! - `sum_i8(x, y)`: lane sums of signed × signed bytes (`x` never holds -128 together with a
//!   -128 in `y`: activations are in ±127),
//! - `sum_u8(x, y)`: lane sums of unsigned (< 128) × signed bytes.

macro_rules! q8_family_kernels {
    ($features:literal, $max_w:literal) => {
        /// Weight rows a prefill tile takes at most here (its accumulators must fit in the
        /// ISA's vector registers: 16 ymm for AVX2, 32 with AVX-512).
        pub(crate) const TILE_ROWS: usize = $max_w;

        use kestrel_gguf::quant::BlockQ8_0;

        use crate::cpu::q8_block::BlockQ8_1;

        /// f16 bits to f32 (exact).
        #[inline]
        #[target_feature(enable = $features)]
        pub(super) fn fp16(bits: u16) -> f32 {
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
        }

        /// Little-endian u16 at `p`.
        #[inline(always)]
        pub(super) unsafe fn rd16(p: *const u8) -> u16 {
            // SAFETY: the caller keeps `p..p+2` in bounds.
            unsafe { u16::from_le_bytes([*p, *p.add(1)]) }
        }

        /// ggml's `hsum_float_8`: lanes `i + 4` and `i`, then `(0 + 2) + (1 + 3)`.
        #[inline]
        #[target_feature(enable = $features)]
        pub(super) fn hsum_float_8(x: __m256) -> f32 {
            let mut r = _mm_add_ps(_mm256_extractf128_ps::<1>(x), _mm256_castps256_ps128(x));
            r = _mm_add_ps(r, _mm_movehl_ps(r, r));
            r = _mm_add_ss(r, _mm_movehdup_ps(r));
            _mm_cvtss_f32(r)
        }

        /// The 16 packed nibbles at `p` as 32 bytes: low nibbles, then high nibbles.
        #[inline]
        #[target_feature(enable = $features)]
        pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
            // SAFETY: the caller keeps `p..p+16` in bounds; the load is unaligned.
            let t = unsafe { _mm_loadu_si128(p.cast()) };
            let both = _mm256_set_m128i(_mm_srli_epi16::<4>(t), t);
            _mm256_and_si256(both, _mm256_set1_epi8(0x0f))
        }

        /// Bit `j` of the 4 bytes at `p` spread to byte `j`: 0xFF if set, else 0.
        #[inline]
        #[target_feature(enable = $features)]
        pub(super) unsafe fn bytes_from_bits_32(p: *const u8) -> __m256i {
            // SAFETY: the caller keeps `p..p+4` in bounds.
            let x32 = unsafe { u32::from_le_bytes([*p, *p.add(1), *p.add(2), *p.add(3)]) };
            let shuf = _mm256_set_epi64x(
                0x0303_0303_0303_0303,
                0x0202_0202_0202_0202,
                0x0101_0101_0101_0101,
                0,
            );
            let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x32 as i32), shuf);
            let bit_mask = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
            _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bit_mask), _mm256_set1_epi64x(-1))
        }

        /// The activation quants of a q8 block.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn act(qs: &[i8; 32]) -> __m256i {
            // SAFETY: 32 bytes, unaligned load.
            unsafe { _mm256_loadu_si256(qs.as_ptr().cast()) }
        }

        /// A weight block type: its size, whether it has a min (and unsigned quants), and the
        /// unpacking of one block: `(d_w, m_w, 32 quant bytes)` (`m_w` is 0 without a min).
        trait Blk {
            const BS: usize;
            const MIN: bool;
            unsafe fn unpack(b: *const u8) -> (f32, f32, __m256i);
        }

        /// Q4_0: `d`, 16 bytes of nibbles (value - 8).
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn blk_q4_0(b: *const u8) -> (f32, f32, __m256i) {
            // SAFETY: the caller keeps the 18-byte block in bounds.
            let (d, bx) = unsafe { (fp16(rd16(b)), nibbles(b.add(2))) };
            (d, 0.0, _mm256_sub_epi8(bx, _mm256_set1_epi8(8)))
        }

        /// Q4_1: `d`, `m`, 16 bytes of nibbles (unsigned).
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn blk_q4_1(b: *const u8) -> (f32, f32, __m256i) {
            // SAFETY: the caller keeps the 20-byte block in bounds.
            let (d, m, bx) = unsafe { (fp16(rd16(b)), fp16(rd16(b.add(2))), nibbles(b.add(4))) };
            (d, m, bx)
        }

        /// Q5_0: `d`, 4 bytes of high bits, 16 bytes of nibbles (value - 16).
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn blk_q5_0(b: *const u8) -> (f32, f32, __m256i) {
            // SAFETY: the caller keeps the 22-byte block in bounds.
            let (d, lo, hi) = unsafe {
                (
                    fp16(rd16(b)),
                    nibbles(b.add(6)),
                    bytes_from_bits_32(b.add(2)),
                )
            };
            // bit clear: nibble - 16 (= nibble | 0xF0 as i8); bit set: the nibble + 16 - 16
            let bx = _mm256_or_si256(lo, _mm256_andnot_si256(hi, _mm256_set1_epi8(0xf0u8 as i8)));
            (d, 0.0, bx)
        }

        /// Q5_1: `d`, `m`, 4 bytes of high bits, 16 bytes of nibbles (unsigned).
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn blk_q5_1(b: *const u8) -> (f32, f32, __m256i) {
            // SAFETY: the caller keeps the 24-byte block in bounds.
            let (d, m, lo, hi) = unsafe {
                (
                    fp16(rd16(b)),
                    fp16(rd16(b.add(2))),
                    nibbles(b.add(8)),
                    bytes_from_bits_32(b.add(4)),
                )
            };
            let bx = _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x10)));
            (d, m, bx)
        }

        /// Q8_0: `d`, 32 signed bytes.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn blk_q8_0(b: *const u8) -> (f32, f32, __m256i) {
            // SAFETY: the caller keeps the 34-byte block in bounds.
            let (d, bx) = unsafe { (fp16(rd16(b)), _mm256_loadu_si256(b.add(2).cast())) };
            (d, 0.0, bx)
        }

        /// An activation block: its quants, `d` and (q8_1) `s`.
        trait Act {
            /// `(quants, d, s)`; `s` is 0 for q8_0.
            unsafe fn parts(&self) -> (__m256i, f32, f32);
        }

        impl Act for BlockQ8_0 {
            #[inline(always)]
            unsafe fn parts(&self) -> (__m256i, f32, f32) {
                // SAFETY: 32 bytes, unaligned load; the caller has the CPU features.
                unsafe { (act(&self.qs), fp16(self.d.to_bits()), 0.0) }
            }
        }

        impl Act for BlockQ8_1 {
            #[inline(always)]
            unsafe fn parts(&self) -> (__m256i, f32, f32) {
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

        /// Blocks of type `B` (no min) widened to Q8_0 blocks: the scale's bits, then the 32
        /// quants as the tile reads them (see `dispatch::Widened`).
        ///
        /// # Panics
        /// `out` not one Q8_0 block per block of `w`.
        // The AVX-512 table multiplies these types with `q8_wide`'s tiles, not widened rows.
        #[allow(dead_code)]
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn widen<B: Blk>(w: &[u8], out: &mut [u8]) {
            let n = w.len() / B::BS;
            assert!(
                !B::MIN && n * B::BS == w.len() && out.len() == n * 34,
                "widen: {} weight bytes, {} out",
                w.len(),
                out.len()
            );
            for i in 0..n {
                // SAFETY: block i lies in `w` and its Q8_0 block in `out` (checked above).
                unsafe {
                    let p = w.as_ptr().add(i * B::BS);
                    let o = out.as_mut_ptr().add(i * 34);
                    std::ptr::copy_nonoverlapping(p, o, 2);
                    _mm256_storeu_si256(o.add(2).cast(), B::unpack(p).2);
                }
            }
        }

        /// Q4_0 rows as Q8_0 blocks.
        #[allow(dead_code)]
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn widen_q4_0(w: &[u8], out: &mut [u8]) {
            // SAFETY: the caller has the CPU features.
            unsafe { widen::<WQ4_0>(w, out) }
        }

        /// Q5_0 rows as Q8_0 blocks.
        #[allow(dead_code)]
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn widen_q5_0(w: &[u8], out: &mut [u8]) {
            // SAFETY: the caller has the CPU features.
            unsafe { widen::<WQ5_0>(w, out) }
        }

        /// Four weight rows against two activation rows for the types without a min, in
        /// llama.cpp's tinyBLAS shape (`gemm4xN<2>`): per block the four weight blocks are
        /// unpacked once, their four scales converted in one instruction and multiplied by each
        /// activation's scale in one vector (the same f32 products as `d * yd`), and the eight
        /// accumulators are named, not indexed, so they stay in registers (the generic tile's
        /// array spilled to the stack with AVX2's 16 registers: a store and a reload around
        /// every multiply-add). Same float order as [`tile`].
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn tile4x2<B: Blk, A: Act>(
            w: *const u8,
            rb: usize,
            y: &[A],
            nb: usize,
            out: &mut [f32],
        ) {
            let z = _mm256_setzero_ps();
            let (mut c00, mut c01, mut c10, mut c11) = (z, z, z, z);
            let (mut c20, mut c21, mut c30, mut c31) = (z, z, z, z);
            for i in 0..nb {
                // SAFETY: block i of rows 0..4 lies in the weights (checked by the caller); the
                // scale is each block's first two bytes.
                let (w0, w1, w2, w3) = unsafe {
                    let p = w.add(i * B::BS);
                    (p, p.add(rb), p.add(2 * rb), p.add(3 * rb))
                };
                let (b0, b1, b2, b3, bits) = unsafe {
                    (
                        B::unpack(w0).2,
                        B::unpack(w1).2,
                        B::unpack(w2).2,
                        B::unpack(w3).2,
                        u64::from(rd16(w0))
                            | u64::from(rd16(w1)) << 16
                            | u64::from(rd16(w2)) << 32
                            | u64::from(rd16(w3)) << 48,
                    )
                };
                let da = _mm_cvtph_ps(_mm_set_epi64x(0, bits as i64));
                // SAFETY: y holds 2 · nb blocks; the caller has the CPU features.
                let ((y0, d0, _), (y1, d1, _)) = unsafe { (y[i].parts(), y[nb + i].parts()) };
                let p0 = _mm_mul_ps(da, _mm_set1_ps(d0));
                let p0 = _mm256_set_m128(p0, p0);
                let p1 = _mm_mul_ps(da, _mm_set1_ps(d1));
                let p1 = _mm256_set_m128(p1, p1);
                let f = |s: __m256i| _mm256_cvtepi32_ps(s);
                c00 = _mm256_fmadd_ps(_mm256_shuffle_ps::<0x00>(p0, p0), f(sum_i8(b0, y0)), c00);
                c10 = _mm256_fmadd_ps(_mm256_shuffle_ps::<0x55>(p0, p0), f(sum_i8(b1, y0)), c10);
                c20 = _mm256_fmadd_ps(_mm256_shuffle_ps::<0xaa>(p0, p0), f(sum_i8(b2, y0)), c20);
                c30 = _mm256_fmadd_ps(_mm256_shuffle_ps::<0xff>(p0, p0), f(sum_i8(b3, y0)), c30);
                c01 = _mm256_fmadd_ps(_mm256_shuffle_ps::<0x00>(p1, p1), f(sum_i8(b0, y1)), c01);
                c11 = _mm256_fmadd_ps(_mm256_shuffle_ps::<0x55>(p1, p1), f(sum_i8(b1, y1)), c11);
                c21 = _mm256_fmadd_ps(_mm256_shuffle_ps::<0xaa>(p1, p1), f(sum_i8(b2, y1)), c21);
                c31 = _mm256_fmadd_ps(_mm256_shuffle_ps::<0xff>(p1, p1), f(sum_i8(b3, y1)), c31);
            }
            for (o, c) in out.iter_mut().zip([c00, c01, c10, c11, c20, c21, c30, c31]) {
                *o = hsum_float_8(c);
            }
        }

        /// One weight row (`nb` blocks at `w`) against `T` activation rows (`y`: `T · nb`
        /// blocks): `out[t]` in ggml's float order (`acc = fma(d_w·d_x, lanes, acc)`, `Σ m·s`
        /// beside when `MIN`). Each weight block is unpacked once for all `T` rows (prefill);
        /// decode calls it with `T = 1`, one row after another (interleaving 4 weight rows
        /// measured 2x slower from DRAM: Gemma's 178 MB output matrix, 38 vs 75 tok/s).
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn tile<B: Blk, A: Act, const W: usize, const T: usize>(
            w: *const u8,
            rb: usize,
            y: &[A],
            nb: usize,
            out: &mut [f32],
        ) {
            if W == 4 && T == 2 && !B::MIN {
                // SAFETY: as this function's.
                return unsafe { tile4x2::<B, A>(w, rb, y, nb, out) };
            }
            let mut acc = [[_mm256_setzero_ps(); T]; W];
            let mut summs = [[0f32; T]; W];
            for i in 0..nb {
                for r in 0..W {
                    // SAFETY: block i of row r lies in the weights (checked by the caller).
                    let (d, m, bx) = unsafe { B::unpack(w.add(r * rb + i * B::BS)) };
                    for t in 0..T {
                        // SAFETY: the caller has the CPU features; y holds T · nb blocks.
                        let (ya, yd, ys) = unsafe { y[t * nb + i].parts() };
                        let s = if B::MIN {
                            sum_u8(bx, ya)
                        } else {
                            sum_i8(bx, ya)
                        };
                        if B::MIN {
                            summs[r][t] = m.mul_add(ys, summs[r][t]);
                        }
                        acc[r][t] = _mm256_fmadd_ps(
                            _mm256_set1_ps(d * yd),
                            _mm256_cvtepi32_ps(s),
                            acc[r][t],
                        );
                    }
                }
            }
            for r in 0..W {
                for t in 0..T {
                    out[r * T + t] = if B::MIN {
                        hsum_float_8(acc[r][t]) + summs[r][t]
                    } else {
                        hsum_float_8(acc[r][t])
                    };
                }
            }
        }

        q8_family_drivers!($features, __m256i);
    };
}
