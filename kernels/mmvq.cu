// Quantized matrix times 1-8 activation rows (decode and small batches), as ggml-cuda's MMVQ:
// activations in Q8_1 (quantize.cu), integer dot products with `__dp4a`, float scales per
// 32-value block. Every weight row is read once for all activation rows.
//
// A CTA of MMVQ_WARPS warps per weight row (mmvq.cuh); 2 threads share each 32-value block, as
// ggml-cuda's MMVQ for these types, thread t taking quant words 2t and 2t+1 (elements 8t..8t+7
// and 16+8t..16+8t+7 for the nibble types; words 2t, 2t+1, 2t+4, 2t+5 for Q8_0), so the CTA's
// loads of a row are contiguous. A thread unpacks its slice once for all activation rows; the
// block's constant term (`-8d`/`-16d` or the min, times the activation block's `s = d·Σq`) is
// added by thread 0 of the pair alone.
//
// Layout: `w` m rows of `nb` blocks; `a` NCOLS rows of `nb` Q8_1 blocks; `out[c * m + r]`, plus
// `add[c * m + r]` when `add` is not null (a residual add in the epilogue).
// Launch: block (32, MMVQ_WARPS), grid ceil(m / rpc).
#include "mmvq.cuh"

#define LANES_PER_BLOCK 2

__device__ __forceinline__ int a_word(const block_q8_1 *a, int i) { return load_i32_a4(a->qs + 4 * i); }

// The fifth bits of elements 4i..4i+3 (bits 0..3 of `h`) moved to bit 4 of each byte.
__device__ __forceinline__ int fifth_bits(u32 h) {
    return (int)(((h << 4) & 0x10u) | ((h << 11) & 0x1000u) | ((h << 18) & 0x100000u) |
                 ((h << 25) & 0x10000000u));
}

// A thread's slice of one weight block: quant words `lo[i]` and `hi[i]` (dotted with activation
// words 2t+i and 2t+i+4), the block scale, and the constant term's factor (0 except for t = 0).
struct QSlice {
    int lo[2], hi[2];
    float d, c;
};

// Nibble words 2t, 2t+1 of `qs` (4-byte aligned when A4), with fifth bits from `qh` when Q5.
template <bool Q5, bool A4>
__device__ __forceinline__ void nibbles(const u8 *qs, u32 qh, int t, QSlice *s) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int w = 2 * t + i;
        const int v = A4 ? load_i32_a4(qs + 4 * w) : load_i32_a2(qs + 4 * w);
        s->lo[i] = v & 0x0F0F0F0F;
        s->hi[i] = (v >> 4) & 0x0F0F0F0F;
        if (Q5) {
            s->lo[i] |= fifth_bits(qh >> (4 * w));
            s->hi[i] |= fifth_bits(qh >> (4 * w + 16));
        }
    }
}

__device__ __forceinline__ QSlice slice(const block_q4_0 *w, int t) {
    QSlice s;
    nibbles<false, false>(w->qs, 0, t, &s);
    s.d = __half2float(w->d);
    s.c = t == 0 ? -8.0f * s.d : 0.0f;
    return s;
}

__device__ __forceinline__ QSlice slice(const block_q4_1 *w, int t) {
    QSlice s;
    nibbles<false, true>(w->qs, 0, t, &s);
    s.d = __half2float(w->d);
    s.c = t == 0 ? __half2float(w->m) : 0.0f;
    return s;
}

__device__ __forceinline__ QSlice slice(const block_q5_0 *w, int t) {
    QSlice s;
    nibbles<true, false>(w->qs, (u32)load_i32_a2(w->qh), t, &s);
    s.d = __half2float(w->d);
    s.c = t == 0 ? -16.0f * s.d : 0.0f;
    return s;
}

__device__ __forceinline__ QSlice slice(const block_q5_1 *w, int t) {
    QSlice s;
    nibbles<true, true>(w->qs, (u32)load_i32_a4(w->qh), t, &s);
    s.d = __half2float(w->d);
    s.c = t == 0 ? __half2float(w->m) : 0.0f;
    return s;
}

__device__ __forceinline__ QSlice slice(const block_q8_0 *w, int t) {
    QSlice s;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        s.lo[i] = load_i32_a2(w->qs + 4 * (2 * t + i));
        s.hi[i] = load_i32_a2(w->qs + 4 * (2 * t + i + 4));
    }
    s.d = __half2float(w->d);
    s.c = 0.0f;
    return s;
}

template <typename B, int NCOLS>
__device__ __forceinline__ void mmvq(const B *__restrict__ w, const block_q8_1 *__restrict__ a,
                                     float *__restrict__ out, const float *__restrict__ add, int nb, int m,
                                     const MmvqPlace &p, int rpc) {
    const B *wr = w + (long long)p.row * nb;
    const int t = p.tid % LANES_PER_BLOCK, end = p.live ? nb : 0;
    float acc[NCOLS];
#pragma unroll
    for (int c = 0; c < NCOLS; c++) acc[c] = 0.0f;
    for (int ib = p.tid / LANES_PER_BLOCK; ib < end; ib += p.nthreads / LANES_PER_BLOCK) {
        const QSlice s = slice(wr + ib, t);
#pragma unroll
        for (int c = 0; c < NCOLS; c++) {
            const block_q8_1 *ab = a + (long long)c * nb + ib;
            int sumi = 0;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                sumi = __dp4a(s.lo[i], a_word(ab, 2 * t + i), sumi);
                sumi = __dp4a(s.hi[i], a_word(ab, 2 * t + i + 4), sumi);
            }
            acc[c] += s.d * __half2float(ab->d) * (float)sumi + s.c * __half2float(ab->s);
        }
    }
    mmvq_store<NCOLS>(acc, out, add, m, p, rpc);
}

#define MMVQ(T, N)                                                                         \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                      \
        mmvq_##T##_##N(const block_##T *w, const block_q8_1 *a, float *out, const float *add, int nb, int m, int rpc) { \
        mmvq<block_##T, N>(w, a, out, add, nb, m, mmvq_place(rpc, m), rpc);                      \
    }
// Up to three weights sharing one activation row (mmvq.cuh's MmvqSegs): q/k/v, gate/up.
#define MMVQ_MULTI(T)                                                                                  \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                  \
        mmvq_##T##_multi(MmvqSegs s, const block_q8_1 *a, int nb, int rpc) {                            \
        MmvqPlace p = mmvq_place(rpc, s.m[0] + s.m[1] + s.m[2]);                                         \
        const int g = mmvq_segment(s, &p);                                                              \
        mmvq<block_##T, 1>((const block_##T *)s.w[g], a, s.out[g], nullptr, nb, s.m[g], p, rpc);         \
    }
#define MMVQ_ALL(T) MMVQ(T, 1) MMVQ(T, 2) MMVQ(T, 3) MMVQ(T, 4) MMVQ(T, 5) MMVQ(T, 6) MMVQ(T, 7) MMVQ(T, 8) MMVQ_MULTI(T)

MMVQ_ALL(q4_0)
MMVQ_ALL(q4_1)
MMVQ_ALL(q5_0)
MMVQ_ALL(q5_1)
MMVQ_ALL(q8_0)
