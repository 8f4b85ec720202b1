// K-quant matrices (Q4_K, Q5_K, Q6_K) times 1-8 Q8_1 activation rows: per 32-value activation
// block, the integer dot product of the weight's quants and the activation's, then the block's
// scales (and, for Q4_K/Q5_K, `dmin * m * s` with `s = d·Σq` of the activation block, as
// ggml-cpu's bsums). Each lane of a warp takes whole 32-value sub-blocks, unpacks the weight's
// quants into packed words once (word loads and masks), then `__dp4a`s them with each
// activation row.
//
// Layout: `w` m rows of `nb` 256-value blocks; `a` NCOLS rows of `8 * nb` Q8_1 blocks;
// `out[c * m + r]`. Launch: block (32, 4), grid ceil(m / 4).
#include "common.cuh"

#define ROWS_PER_CTA 4

// The 32 integer quants of sub-block `b`, packed 4 to a word as signed bytes (decoded once
// and reused for every activation row): whole words loaded and masked, as ggml-cuda's vec_dot
// functions do (Q4_K/Q5_K blocks are 144/176 bytes, so 4-byte aligned; Q6_K's 210 are not).
__device__ __forceinline__ void k_words(const block_q4_K *w, int b, int *words) {
    const u8 *q = w->qs + 32 * (b / 2);
    const int sh = 4 * (b % 2);
#pragma unroll
    for (int v = 0; v < 8; v++) words[v] = (load_i32_a4(q + 4 * v) >> sh) & 0x0F0F0F0F;
}
__device__ __forceinline__ void k_words(const block_q5_K *w, int b, int *words) {
    const u8 *q = w->qs + 32 * (b / 2);
    const int sh = 4 * (b % 2);
#pragma unroll
    for (int v = 0; v < 8; v++) {
        const int lo = (load_i32_a4(q + 4 * v) >> sh) & 0x0F0F0F0F;
        const int hi = ((load_i32_a4(w->qh + 4 * v) >> b) & 0x01010101) << 4;
        words[v] = lo | hi;
    }
}
__device__ __forceinline__ void k_words(const block_q6_K *w, int b, int *words) {
    const int n = b / 4, g = b % 4;
    const u8 *ql = w->ql + 64 * n + 32 * (g & 1);
    const u8 *qh = w->qh + 32 * n;
    const int nsh = 4 * (g >> 1), hsh = 2 * g;
#pragma unroll
    for (int v = 0; v < 8; v++) {
        const int lo = (load_i32_a2(ql + 4 * v) >> nsh) & 0x0F0F0F0F;
        const int hi = ((load_i32_a2(qh + 4 * v) >> hsh) & 0x03030303) << 4;
        words[v] = (int)__vsub4((u32)(lo | hi), 0x20202020u);  // q - 32 in each byte
    }
}

__device__ __forceinline__ int dot_words(const int *words, const block_q8_1 *a, int from, int to) {
    int sumi = 0;
#pragma unroll
    for (int v = from; v < to; v++) sumi = __dp4a(words[v], load_i32_a4(a->qs + 4 * v), sumi);
    return sumi;
}

__device__ __forceinline__ float dot_sub(const block_q4_K *w, int b, const int *words, const block_q8_1 *a) {
    int sc, m;
    scale_min_k4(b, w->scales, &sc, &m);
    return __half2float(w->d) * (float)sc * __half2float(a->d) * (float)dot_words(words, a, 0, 8) -
           __half2float(w->dmin) * (float)m * __half2float(a->s);
}

__device__ __forceinline__ float dot_sub(const block_q5_K *w, int b, const int *words, const block_q8_1 *a) {
    int sc, m;
    scale_min_k4(b, w->scales, &sc, &m);
    return __half2float(w->d) * (float)sc * __half2float(a->d) * (float)dot_words(words, a, 0, 8) -
           __half2float(w->dmin) * (float)m * __half2float(a->s);
}

__device__ __forceinline__ float dot_sub(const block_q6_K *w, int b, const int *words, const block_q8_1 *a) {
    const int sumi = q6_k_scale(w, b, 0) * dot_words(words, a, 0, 4) + q6_k_scale(w, b, 16) * dot_words(words, a, 4, 8);
    return __half2float(w->d) * __half2float(a->d) * (float)sumi;
}

template <typename B, int NCOLS>
__device__ __forceinline__ void mmvq_k(const B *__restrict__ w, const block_q8_1 *__restrict__ a,
                                       float *__restrict__ out, int nb, int m) {
    const int row = blockIdx.x * ROWS_PER_CTA + threadIdx.y;
    if (row >= m) return;
    const B *wr = w + (long long)row * nb;
    const int nb32 = nb * (QK_K / QK);
    float acc[NCOLS];
#pragma unroll
    for (int c = 0; c < NCOLS; c++) acc[c] = 0.0f;
    for (int ib = threadIdx.x; ib < nb32; ib += WARP) {
        const B *blk = wr + ib / 8;
        int words[8];
        k_words(blk, ib % 8, words);
#pragma unroll
        for (int c = 0; c < NCOLS; c++) acc[c] += dot_sub(blk, ib % 8, words, a + (long long)c * nb32 + ib);
    }
#pragma unroll
    for (int c = 0; c < NCOLS; c++) {
        const float s = warp_sum(acc[c]);
        if (threadIdx.x == 0) out[(long long)c * m + row] = s;
    }
}

#define MMVQ_K(T, N)                                                                          \
    extern "C" __global__ void __launch_bounds__(WARP * ROWS_PER_CTA)                         \
        mmvq_##T##_##N(const block_##T *w, const block_q8_1 *a, float *out, int nb, int m) {    \
        mmvq_k<block_##T, N>(w, a, out, nb, m);                                               \
    }
#define MMVQ_K_ALL(T) MMVQ_K(T, 1) MMVQ_K(T, 2) MMVQ_K(T, 3) MMVQ_K(T, 4) MMVQ_K(T, 5) MMVQ_K(T, 6) MMVQ_K(T, 7) MMVQ_K(T, 8)

MMVQ_K_ALL(q4_K)
MMVQ_K_ALL(q5_K)
MMVQ_K_ALL(q6_K)
