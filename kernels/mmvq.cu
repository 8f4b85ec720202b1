// Quantized matrix times 1-8 activation rows (decode and small batches), as ggml-cuda's MMVQ:
// activations in Q8_1 (quantize.cu), integer dot products per 32-value block with `__dp4a`,
// one float multiply-add per block. Every weight row is read once for all activation rows.
//
// Layout: `w` m rows of `nb` blocks; `a` NCOLS rows of `nb` Q8_1 blocks; `out[c * m + r]`.
// Launch: block (32, ROWS_PER_CTA), grid ceil(m / ROWS_PER_CTA); one warp per weight row, its
// lanes striding over the row's blocks.
#include "common.cuh"

#define ROWS_PER_CTA 4

__device__ __forceinline__ int a_word(const block_q8_1 *a, int i) { return load_i32_a4(a->qs + 4 * i); }

// The fifth bits of elements 4i..4i+3 (bits 0..3 of `h`) moved to bit 4 of each byte.
__device__ __forceinline__ int fifth_bits(u32 h) {
    return (int)(((h << 4) & 0x10u) | ((h << 11) & 0x1000u) | ((h << 18) & 0x100000u) |
                 ((h << 25) & 0x10000000u));
}

// Σ over the block of (weight quant as stored, unsigned for Q4/Q5) × activation quant. `A4`:
// `qs` is 4-byte aligned (Q4_1's and Q5_1's 20- and 24-byte blocks), read a word at a time.
template <bool A4>
__device__ __forceinline__ int nibble_dot(const u8 *qs, u32 qh, bool has_qh, const block_q8_1 *a) {
    int sumi = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int v = A4 ? load_i32_a4(qs + 4 * i) : load_i32_a2(qs + 4 * i);
        int lo = v & 0x0F0F0F0F;
        int hi = (v >> 4) & 0x0F0F0F0F;
        if (has_qh) {
            lo |= fifth_bits(qh >> (4 * i));
            hi |= fifth_bits(qh >> (4 * i + 16));
        }
        sumi = __dp4a(lo, a_word(a, i), sumi);
        sumi = __dp4a(hi, a_word(a, i + 4), sumi);
    }
    return sumi;
}

__device__ __forceinline__ float dot_block(const block_q4_0 *w, const block_q8_1 *a) {
    const int sumi = nibble_dot<false>(w->qs, 0, false, a);
    return __half2float(w->d) * (__half2float(a->d) * (float)sumi - 8.0f * __half2float(a->s));
}

__device__ __forceinline__ float dot_block(const block_q4_1 *w, const block_q8_1 *a) {
    const int sumi = nibble_dot<true>(w->qs, 0, false, a);
    return __half2float(w->d) * __half2float(a->d) * (float)sumi +
           __half2float(w->m) * __half2float(a->s);
}

__device__ __forceinline__ float dot_block(const block_q5_0 *w, const block_q8_1 *a) {
    const int sumi = nibble_dot<false>(w->qs, (u32)load_i32_a2(w->qh), true, a);
    return __half2float(w->d) * (__half2float(a->d) * (float)sumi - 16.0f * __half2float(a->s));
}

__device__ __forceinline__ float dot_block(const block_q5_1 *w, const block_q8_1 *a) {
    const int sumi = nibble_dot<true>(w->qs, (u32)load_i32_a4(w->qh), true, a);
    return __half2float(w->d) * __half2float(a->d) * (float)sumi +
           __half2float(w->m) * __half2float(a->s);
}

__device__ __forceinline__ float dot_block(const block_q8_0 *w, const block_q8_1 *a) {
    int sumi = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) sumi = __dp4a(load_i32_a2(w->qs + 4 * i), a_word(a, i), sumi);
    return __half2float(w->d) * __half2float(a->d) * (float)sumi;
}

template <typename B, int NCOLS>
__device__ __forceinline__ void mmvq(const B *__restrict__ w, const block_q8_1 *__restrict__ a,
                                     float *__restrict__ out, int nb, int m) {
    const int row = blockIdx.x * ROWS_PER_CTA + threadIdx.y;
    if (row >= m) return;
    const B *wr = w + (long long)row * nb;
    float acc[NCOLS];
#pragma unroll
    for (int c = 0; c < NCOLS; c++) acc[c] = 0.0f;
    for (int ib = threadIdx.x; ib < nb; ib += WARP) {
#pragma unroll
        for (int c = 0; c < NCOLS; c++) acc[c] += dot_block(wr + ib, a + (long long)c * nb + ib);
    }
#pragma unroll
    for (int c = 0; c < NCOLS; c++) {
        const float s = warp_sum(acc[c]);
        if (threadIdx.x == 0) out[(long long)c * m + row] = s;
    }
}

#define MMVQ(T, N)                                                                         \
    extern "C" __global__ void __launch_bounds__(WARP * ROWS_PER_CTA)                      \
        mmvq_##T##_##N(const block_##T *w, const block_q8_1 *a, float *out, int nb, int m) { \
        mmvq<block_##T, N>(w, a, out, nb, m);                                              \
    }
#define MMVQ_ALL(T) MMVQ(T, 1) MMVQ(T, 2) MMVQ(T, 3) MMVQ(T, 4) MMVQ(T, 5) MMVQ(T, 6) MMVQ(T, 7) MMVQ(T, 8)

MMVQ_ALL(q4_0)
MMVQ_ALL(q4_1)
MMVQ_ALL(q5_0)
MMVQ_ALL(q5_1)
MMVQ_ALL(q8_0)
