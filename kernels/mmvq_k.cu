// K-quant matrices (Q4_K, Q5_K, Q6_K) times 1-8 Q8_1 activation rows: integer dot products of
// the weight's quants with the activation's (`__dp4a`), then the 32-value sub-blocks' scales
// (and, for Q4_K/Q5_K, `dmin * m * s` with `s = d·Σq` of the activation block, as ggml-cpu's
// bsums).
//
// A CTA of MMVQ_WARPS warps per weight row (mmvq.cuh); its threads split each 256-value block
// between them (8 a Q4_K/Q5_K block, 16 a Q6_K block), each a fixed slice, so the CTA's loads of
// a row are contiguous (16-byte loads for Q4_K/Q5_K, whose 144/176-byte blocks keep `qs` 16-byte
// aligned), as ggml-cuda's MMVQ splits its blocks. A thread unpacks its slice once and
// `__dp4a`s it with each activation row.
//
// Layout: `w` m rows of `nb` 256-value blocks; `a` NCOLS rows of `8 * nb` Q8_1 blocks;
// `out[c * m + r]` (plus `add[c * m + r]` when `add` is not null, as mmvq.cu). Launch: block
// (32, MMVQ_WARPS), grid ceil(m / rpc).
#include "mmvq.cuh"

// Σ_i dp4a(w[i], activation words `first + i`) over N words of a Q8_1 block.
template <int N>
__device__ __forceinline__ int dot_a(const int *w, const block_q8_1 *a, int first) {
    int sumi = 0;
#pragma unroll
    for (int i = 0; i < N; i++) sumi = __dp4a(w[i], load_i32_a4(a->qs + 4 * (first + i)), sumi);
    return sumi;
}

// A lane's slice of a Q4_K or Q5_K block: `t` in 0..8 takes elements 16h..16h+15 (h = t % 2) of
// sub-blocks 2n and 2n+1 (n = t / 2), which share the 32 bytes of `qs` at 32n.
struct KSlice {
    int lo[4], hi[4];  // quants of sub-block 2n and 2n+1, 4 to a word
    float dlo, dhi;    // d * scale of each sub-block
    float mlo, mhi;    // dmin * min of each, 0 on the lane with h = 1 (added once a sub-block)
};

__device__ __forceinline__ void k4_scales(const u8 *scales, float d, float dmin, int n, int h, KSlice *s) {
    int sc, m;
    scale_min_k4(2 * n, scales, &sc, &m);
    s->dlo = d * (float)sc;
    s->mlo = h ? 0.0f : dmin * (float)m;
    scale_min_k4(2 * n + 1, scales, &sc, &m);
    s->dhi = d * (float)sc;
    s->mhi = h ? 0.0f : dmin * (float)m;
}

__device__ __forceinline__ void k_slice(const block_q4_K *w, int t, KSlice *s) {
    const int n = t / 2, h = t % 2;
    const int4 q = *(const int4 *)(w->qs + 32 * n + 16 * h);
    const int qv[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s->lo[i] = qv[i] & 0x0F0F0F0F;
        s->hi[i] = (qv[i] >> 4) & 0x0F0F0F0F;
    }
    k4_scales(w->scales, __half2float(w->d), __half2float(w->dmin), n, h, s);
}

__device__ __forceinline__ void k_slice(const block_q5_K *w, int t, KSlice *s) {
    const int n = t / 2, h = t % 2;
    const int4 q = *(const int4 *)(w->qs + 32 * n + 16 * h);
    const int4 qh = *(const int4 *)(w->qh + 16 * h);
    const int qv[4] = {q.x, q.y, q.z, q.w};
    const int hv[4] = {qh.x, qh.y, qh.z, qh.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s->lo[i] = (qv[i] & 0x0F0F0F0F) | (((hv[i] >> (2 * n)) & 0x01010101) << 4);
        s->hi[i] = ((qv[i] >> 4) & 0x0F0F0F0F) | (((hv[i] >> (2 * n + 1)) & 0x01010101) << 4);
    }
    k4_scales(w->scales, __half2float(w->d), __half2float(w->dmin), n, h, s);
}

// Q4_K/Q5_K: `ab` the activation row's first Q8_1 block of this 256-value block.
template <typename B>
__device__ __forceinline__ float slice_dot(const KSlice &s, int t, const block_q8_1 *ab) {
    const int n = t / 2, h = t % 2;
    const block_q8_1 *alo = ab + 2 * n, *ahi = alo + 1;
    return s.dlo * __half2float(alo->d) * (float)dot_a<4>(s.lo, alo, 4 * h) +
           s.dhi * __half2float(ahi->d) * (float)dot_a<4>(s.hi, ahi, 4 * h) -
           s.mlo * __half2float(alo->s) - s.mhi * __half2float(ahi->s);
}

template <typename B, int NCOLS>
__device__ __forceinline__ void mmvq_k45(const B *__restrict__ w, const block_q8_1 *__restrict__ a,
                                         float *__restrict__ out, const float *__restrict__ add, int nb, int m,
                                         const MmvqPlace &p, int rpc) {
    const B *wr = w + (long long)p.row * nb;
    const int nb32 = nb * (QK_K / QK);
    const int t = p.tid % 8, end = p.live ? nb : 0;
    float acc[NCOLS];
#pragma unroll
    for (int c = 0; c < NCOLS; c++) acc[c] = 0.0f;
    for (int ib = p.tid / 8; ib < end; ib += p.nthreads / 8) {
        KSlice s;
        k_slice(wr + ib, t, &s);
#pragma unroll
        for (int c = 0; c < NCOLS; c++) acc[c] += slice_dot<B>(s, t, a + (long long)c * nb32 + 8 * ib);
    }
    mmvq_store<NCOLS>(acc, out, add, m, p, rpc);
}

// Q6_K: lane `t` in 0..16 takes elements 4j..4j+3 (j = t % 8) of sub-blocks 4n..4n+3 (n = t / 8):
// the words of `ql` at 64n + 4j and 64n + 32 + 4j and of `qh` at 32n + 4j (210-byte blocks are
// only 2-byte aligned: two 16-bit loads a word).
template <int NCOLS>
__device__ __forceinline__ void mmvq_q6k(const block_q6_K *__restrict__ w, const block_q8_1 *__restrict__ a,
                                         float *__restrict__ out, const float *__restrict__ add, int nb, int m,
                                         const MmvqPlace &p, int rpc) {
    const block_q6_K *wr = w + (long long)p.row * nb;
    const int nb32 = nb * (QK_K / QK);
    const int t = p.tid % 16, n = t / 8, j = t % 8, end = p.live ? nb : 0;
    float acc[NCOLS];
#pragma unroll
    for (int c = 0; c < NCOLS; c++) acc[c] = 0.0f;
    for (int ib = p.tid / 16; ib < end; ib += p.nthreads / 16) {
        const block_q6_K *blk = wr + ib;
        const int qa = load_i32_a2(blk->ql + 64 * n + 4 * j);
        const int qb = load_i32_a2(blk->ql + 64 * n + 32 + 4 * j);
        const int qh = load_i32_a2(blk->qh + 32 * n + 4 * j);
        int q[4];
        q[0] = (qa & 0x0F0F0F0F) | ((qh & 0x03030303) << 4);
        q[1] = (qb & 0x0F0F0F0F) | (((qh >> 2) & 0x03030303) << 4);
        q[2] = ((qa >> 4) & 0x0F0F0F0F) | (((qh >> 4) & 0x03030303) << 4);
        q[3] = ((qb >> 4) & 0x0F0F0F0F) | (((qh >> 6) & 0x03030303) << 4);
        const float d = __half2float(blk->d);
        float ds[4];
#pragma unroll
        for (int g = 0; g < 4; g++) {
            q[g] = (int)__vsub4((u32)q[g], 0x20202020u);  // q - 32 in each byte
            ds[g] = d * (float)blk->scales[8 * n + 2 * g + j / 4];
        }
#pragma unroll
        for (int c = 0; c < NCOLS; c++) {
            const block_q8_1 *ab = a + (long long)c * nb32 + 8 * ib + 4 * n;
            float v = 0.0f;
#pragma unroll
            for (int g = 0; g < 4; g++)
                v += ds[g] * __half2float(ab[g].d) * (float)__dp4a(q[g], load_i32_a4(ab[g].qs + 4 * j), 0);
            acc[c] += v;
        }
    }
    mmvq_store<NCOLS>(acc, out, add, m, p, rpc);
}

#define MMVQ_K(T, N)                                                                          \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                         \
        mmvq_##T##_##N(const block_##T *w, const block_q8_1 *a, float *out, const float *add, int nb, int m, int rpc) { \
        mmvq_k45<block_##T, N>(w, a, out, add, nb, m, mmvq_place(rpc, m), rpc);                       \
    }
#define MMVQ_Q6K(N)                                                                           \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                         \
        mmvq_q6_K_##N(const block_q6_K *w, const block_q8_1 *a, float *out, const float *add, int nb, int m, int rpc) { \
        mmvq_q6k<N>(w, a, out, add, nb, m, mmvq_place(rpc, m), rpc);                                   \
    }
// Up to three weights sharing one activation row (mmvq.cuh's MmvqSegs): q/k/v, gate/up.
#define MMVQ_K_MULTI(T, BODY)                                                                          \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                  \
        mmvq_##T##_multi(MmvqSegs s, const block_q8_1 *a, int nb, int rpc) {                            \
        MmvqPlace p = mmvq_place(rpc, s.m[0] + s.m[1] + s.m[2]);                                         \
        const int g = mmvq_segment(s, &p);                                                              \
        BODY((const block_##T *)s.w[g], a, s.out[g], nullptr, nb, s.m[g], p, rpc);                       \
    }
#define MMVQ_K_ALL(T) MMVQ_K(T, 1) MMVQ_K(T, 2) MMVQ_K(T, 3) MMVQ_K(T, 4) MMVQ_K(T, 5) MMVQ_K(T, 6) MMVQ_K(T, 7) MMVQ_K(T, 8)

MMVQ_K_ALL(q4_K)
MMVQ_K_ALL(q5_K)
MMVQ_Q6K(1) MMVQ_Q6K(2) MMVQ_Q6K(3) MMVQ_Q6K(4) MMVQ_Q6K(5) MMVQ_Q6K(6) MMVQ_Q6K(7) MMVQ_Q6K(8)
MMVQ_K_MULTI(q4_K, (mmvq_k45<block_q4_K, 1>))
MMVQ_K_MULTI(q5_K, (mmvq_k45<block_q5_K, 1>))
MMVQ_K_MULTI(q6_K, mmvq_q6k<1>)
