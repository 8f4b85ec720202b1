// What the quantized matvec kernels (mmvq.cu, mmvq_k.cu) share: a CTA of MMVQ_WARPS warps that
// takes `rpc` weight rows (1, 2 or 4: the host's setting, 2 by default as measured; more rows a
// CTA leave fewer threads idle on short rows, fewer give long rows more warps in flight, as
// ggml-cuda's MMVQ runs a decode row on 4 warps), and the row's reduction: each warp's sum through shuffles, then the
// row's warps' partial sums added in warp order. The order depends only on the weight's shape,
// so a row's result does not depend on how many activation rows share the launch.
#pragma once
#include "mmvq_types.cuh"

#define MMVQ_WARPS 4
#define MMVQ_THREADS (WARP * MMVQ_WARPS)

// Where a thread works: its weight row, its index among the row's threads and their count.
struct MmvqPlace {
    int row, tid, nthreads;
    bool live;  // row < m (threads of a CTA's last rows past m still reach the barrier)
};

// Where a thread of the CTA working on row group `g` (rows g·rpc ..) works.
__device__ __forceinline__ MmvqPlace mmvq_place_at(int g, int rpc, int m) {
    const int wpr = MMVQ_WARPS / rpc;  // warps per row
    MmvqPlace p;
    p.row = g * rpc + threadIdx.y / wpr;
    p.tid = (threadIdx.y % wpr) * WARP + threadIdx.x;
    p.nthreads = wpr * WARP;
    p.live = p.row < m;
    return p;
}
__device__ __forceinline__ MmvqPlace mmvq_place(int rpc, int m) { return mmvq_place_at(blockIdx.x, rpc, m); }

// Up to three weights of one type and row length that read the same activation row (a layer's
// q/k/v or gate/up projections), launched as one matvec: rows `0..m[0]` are weight 0's, the
// next `m[1]` weight 1's, then weight 2's (`m[2]` may be 0). Passed by value (a kernel
// parameter), laid out as the host's `MmvqSegs` (kestrel-tensor's cuda/engine.rs).
struct MmvqSegs {
    const void *w[3];
    float *out[3];
    int m[3];
};

// Which of `s`'s weights the thread's row belongs to, with `p->row` made that weight's row.
__device__ __forceinline__ int mmvq_segment(const MmvqSegs &s, MmvqPlace *p) {
    if (p->row < s.m[0]) return 0;
    if (p->row < s.m[0] + s.m[1]) {
        p->row -= s.m[0];
        return 1;
    }
    p->row -= s.m[0] + s.m[1];
    return 2;
}

// Writes `out[c * m + row]` = the sum of `acc[c]` over the row's threads (plus `add[c * m + row]`
// when `add` is not null: a residual add fused into the matvec, the same float addition as
// add_f32), for each of the NCOLS activation rows. Every thread of the CTA calls it.
template <int NCOLS>
__device__ __forceinline__ void mmvq_store(const float (&acc)[NCOLS], float *__restrict__ out,
                                           const float *__restrict__ add, int m, const MmvqPlace &p,
                                           int rpc) {
    __shared__ float part[MMVQ_WARPS][NCOLS];
#pragma unroll
    for (int c = 0; c < NCOLS; c++) {
        const float v = warp_sum(acc[c]);
        if (threadIdx.x == 0) part[threadIdx.y][c] = v;
    }
    __syncthreads();
    const int wpr = MMVQ_WARPS / rpc, first = threadIdx.y - threadIdx.y % wpr;
    const int c = p.tid;
    if (p.live && c < NCOLS) {
        float s = part[first][c];
        for (int w = 1; w < wpr; w++) s += part[first + w][c];
        const long long o = (long long)c * m + p.row;
        out[o] = add ? s + add[o] : s;
    }
}

// The matvec of a weight type `T` (mmvq_types.cuh) with NCOLS activation rows: each thread takes
// slice `tid % LPB` of the blocks `tid / LPB`, `tid / LPB + nthreads / LPB`, ..., unpacks it once
// and adds its contribution to each activation row's sum, in block order; then mmvq_store.
// mmvq_wide.cu adds the same contributions in the same order.
//
// PREFETCH (the `_pf` kernels) keeps more of a thread's reads in flight: a thread reads its blocks
// one after another (2 of an 8B model's 4096-wide Q4_K row, 14 of its FFN-down Q6_K row), and
// in the plain loop each is a DRAM round trip with one block's loads in flight. Reading two
// blocks before using either is not enough: ptxas (sm_90) sinks the second block's loads
// into the branch that uses them, or behind the first block's dot products. The `_pf` loop
// reads a thread's blocks two at a time (`T::load`, into registers; the second clamped into
// the row when there is none, its contribution then dropped by a select, so the loads stay
// unconditional) and makes every word of both depend on a value folded from all of them
// (`tag`/`pin`, `after` in common.cuh), so every load of both blocks is issued before either's
// first dot product (checked in the SASS: docs/gpu.md, session 63); and it asks L2 for the
// next pair's first block (`prefetch_l2`, each of the block's LPB threads its own share of its
// bytes). Each row's sum adds the same contributions in the same order: the same bits.
template <typename T, int NCOLS>
__device__ __forceinline__ void mmvq_block(const typename T::W &s, const block_q8_1 *__restrict__ a, long long arow,
                                           int ib, int t, float (&acc)[NCOLS], bool use = true) {
#pragma unroll
    for (int c = 0; c < NCOLS; c++) {
        const block_q8_1 *ab = a + c * arow + (long long)ib * T::ABLK;
        float x = 0.0f;
#pragma unroll
        for (int q = 0; q < T::PARTS; q++) {
            int sumi = 0;
#pragma unroll
            for (int i = 0; i < T::WORDS; i++) sumi = __dp4a(s.q[q][i], T::act_word(ab, t, q, i), sumi);
            x = T::part(s, ab, t, q, sumi, x);
        }
        const float v = __fadd_rn(acc[c], T::finish(s, ab, t, x));
        acc[c] = use ? v : acc[c];
    }
}

// A thread's sums of its row against each activation row (the loop of `mmvq`, below).
// `next` (prefetching kernels working through several row groups): the weight row this thread
// takes in its CTA's next group, or null; L2 is asked for its first block before this row's
// work, so the next group's first reads overlap this one's.
template <typename T, int NCOLS, bool PREFETCH = false>
__device__ __forceinline__ void mmvq_acc(const typename T::B *__restrict__ w, const block_q8_1 *__restrict__ a,
                                         int nb, const MmvqPlace &p, float (&acc)[NCOLS],
                                         const typename T::B *next = nullptr) {
    const typename T::B *wr = w + (long long)p.row * nb;
    const long long arow = (long long)nb * T::ABLK;  // Q8_1 blocks an activation row
    const int t = p.tid % T::LPB, end = p.live ? nb : 0, step = p.nthreads / T::LPB;
    const int share = t * (int)sizeof(typename T::B) / T::LPB;  // this thread's byte of a block
#pragma unroll
    for (int c = 0; c < NCOLS; c++) acc[c] = 0.0f;
    const int first = p.tid / T::LPB;
    if (PREFETCH && next && first < nb) prefetch_l2((const u8 *)(next + first) + share);
    if (PREFETCH) {
        for (int ib = first; ib < end; ib += 2 * step) {
            if (ib + 2 * step < end) prefetch_l2((const u8 *)(wr + ib + 2 * step) + share);
            const bool two = ib + step < end;
            const int ib1 = two ? ib + step : ib;
            typename T::R r0 = T::load(wr + ib, t), r1 = T::load(wr + ib1, t);
            const int dep = r0.tag() ^ r1.tag();  // every load of both blocks before either's math
            r0.pin(dep);
            r1.pin(dep);
            mmvq_block<T, NCOLS>(T::unpack(r0, t), a, arow, ib, t, acc);
            mmvq_block<T, NCOLS>(T::unpack(r1, t), a, arow, ib1, t, acc, two);
        }
    } else {
        for (int ib = first; ib < end; ib += step) mmvq_block<T, NCOLS>(T::weight(wr + ib, t), a, arow, ib, t, acc);
    }
}

// The whole matvec: mmvq_acc, then mmvq_store (every thread of the CTA).
template <typename T, int NCOLS, bool PREFETCH = false>
__device__ __forceinline__ void mmvq(const typename T::B *__restrict__ w, const block_q8_1 *__restrict__ a,
                                     float *__restrict__ out, const float *__restrict__ add, int nb, int m,
                                     const MmvqPlace &p, int rpc, const typename T::B *next = nullptr) {
    float acc[NCOLS];
    mmvq_acc<T, NCOLS, PREFETCH>(w, a, nb, p, acc, next);
    mmvq_store<NCOLS>(acc, out, add, m, p, rpc);
}

// Whether this CTA is the last of its launch to get here (every thread of every CTA calls it
// once its rows are written): each CTA counts itself on `counter` after a fence, and the one
// that completes the count (true for all its threads) sees every other CTA's writes (read
// them through L2: `__ldcg`) and resets the counter for the next launch (mmvq_tail.cu).
__device__ __forceinline__ bool mmvq_last_cta(unsigned *counter) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return false;
    __threadfence();
    if (threadIdx.x == 0 && threadIdx.y == 0) *counter = 0;  // ready for the next launch
    return true;
}

// The prefetching kernels take row groups `blockIdx.x`, `blockIdx.x + gridDim.x`, ... (the host
// launches one CTA a group, as for the plain kernels, or at most `KESTREL_CUDA_MMVQ_CTAS` CTAs
// an SM, each then working through several groups: fewer CTAs to start and retire, where short
// rows make a CTA's work a single round trip). The barrier after each group keeps the next
// group's partial sums out of mmvq_store's shared array until every row has read this one's.
#define MMVQ_GROUPS(CALL)                                                                                  \
    for (int g = blockIdx.x; (long long)g * rpc < total; g += gridDim.x) {                                \
        const int gn = g + gridDim.x; /* the CTA's next group */                                          \
        CALL;                                                                                              \
        __syncthreads();                                                                                   \
    }

// The weight row of the thread's place in group `g` of a `total`-row launch over `w` (rows of
// `nb` blocks), or null past the end.
template <typename T>
__device__ __forceinline__ const typename T::B *mmvq_row_at(const typename T::B *w, int nb, int g, int rpc, int total) {
    const MmvqPlace p = mmvq_place_at(g, rpc, total);
    return (long long)g * rpc < total && p.live ? w + (long long)p.row * nb : nullptr;
}

// Asks L2 for the first weight block a thread at `p` reads of `row` (null: nothing). The
// prefetching kernels call it before `pdl_enter`: launched programmatically (launch.rs), a
// kernel reaches that point while the previous kernel still runs, so its first weight reads
// overlap that kernel's tail instead of following it. Weights are written once, at upload,
// never by a kernel, so reading them before the wait is safe.
template <typename T>
__device__ __forceinline__ void mmvq_warm(const typename T::B *row, const MmvqPlace &p, int nb) {
    const int first = p.tid / T::LPB, t = p.tid % T::LPB;
    if (row && p.live && first < nb) prefetch_l2((const u8 *)(row + first) + t * (int)sizeof(typename T::B) / T::LPB);
}

// The matvec of N activation rows, named `mmvq_<NAME>_<N>`, and its prefetching form
// `mmvq_<NAME>_<N>_pf`.
#define MMVQ(T, NAME, N)                                                                                   \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                            \
        mmvq_##NAME##_##N(const T::B *w, const block_q8_1 *a, float *out, const float *add, int nb, int m,   \
                          int rpc) { pdl_enter();                                                         \
        mmvq<T, N, false>(w, a, out, add, nb, m, mmvq_place(rpc, m), rpc);                                 \
    }
#define MMVQ_PF(T, NAME, N)                                                                                \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                            \
        mmvq_##NAME##_##N##_pf(const T::B *w, const block_q8_1 *a, float *out, const float *add, int nb,     \
                               int m, int rpc) {                                                          \
        mmvq_warm<T>(mmvq_row_at<T>(w, nb, blockIdx.x, rpc, m), mmvq_place(rpc, m), nb);                   \
        pdl_enter();                                                                                       \
        const int total = m;                                                                               \
        MMVQ_GROUPS((mmvq<T, N, true>(w, a, out, add, nb, m, mmvq_place_at(g, rpc, m), rpc,                 \
                                      mmvq_row_at<T>(w, nb, gn, rpc, m))))                                  \
    }
// Up to three weights sharing one activation row (MmvqSegs): q/k/v, gate/up; `mmvq_<NAME>_multi`
// and `mmvq_<NAME>_multi_pf`.
// `v[i]` by selects: indexing the by-value parameter `MmvqSegs` with a runtime index twice made
// NVVM copy it to local memory, and the weight loads through its pointers generic (`LD`, not
// `LDG`).
template <typename V> __device__ __forceinline__ V pick3(const V (&v)[3], int i) {
    return i == 0 ? v[0] : i == 1 ? v[1] : v[2];
}

// `gn`: the CTA's next row group (prefetching kernels; its row's first block is asked of L2).
template <typename T, bool PF>
__device__ __forceinline__ void mmvq_multi(const MmvqSegs &s, const block_q8_1 *a, int nb, int rpc, int g,
                                           int gn = -1) {
    const int total = s.m[0] + s.m[1] + s.m[2];
    MmvqPlace p = mmvq_place_at(g, rpc, total);
    const int seg = mmvq_segment(s, &p);
    const typename T::B *next = nullptr;
    if (PF && gn >= 0 && (long long)gn * rpc < total) {
        MmvqPlace q = mmvq_place_at(gn, rpc, total);
        const int nseg = mmvq_segment(s, &q);
        if (q.live) next = (const typename T::B *)pick3(s.w, nseg) + (long long)q.row * nb;
    }
    mmvq<T, 1, PF>((const typename T::B *)pick3(s.w, seg), a, pick3(s.out, seg), nullptr, nb, pick3(s.m, seg), p,
                   rpc, next);
}
// Whether two types are one (no standard library under NVRTC).
template <typename A, typename B> struct SameType { enum { value = 0 }; };
template <typename A> struct SameType<A, A> { enum { value = 1 }; };

// mmvq_warm for the thread's row in group `g` of a MmvqSegs launch whose segments 0 and 1
// hold weights of type TA and segment 2 of TB (TA for all three in the one-type kernels, which
// then have no branch).
template <typename TA, typename TB>
__device__ __forceinline__ void mmvq_segs_warm(const MmvqSegs &s, int nb, int rpc, int g) {
    const int total = s.m[0] + s.m[1] + s.m[2];
    MmvqPlace p = mmvq_place_at(g, rpc, total);
    const int seg = mmvq_segment(s, &p);
    if (SameType<TA, TB>::value || seg < 2)
        mmvq_warm<TA>((const typename TA::B *)pick3(s.w, seg) + (long long)p.row * nb, p, nb);
    else mmvq_warm<TB>((const typename TB::B *)pick3(s.w, seg) + (long long)p.row * nb, p, nb);
}
#define MMVQ_MULTI(T, NAME)                                                                                \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                            \
        mmvq_##NAME##_multi(MmvqSegs s, const block_q8_1 *a, int nb, int rpc) { pdl_enter();              \
        mmvq_multi<T, false>(s, a, nb, rpc, blockIdx.x);                                                   \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                            \
        mmvq_##NAME##_multi_pf(MmvqSegs s, const block_q8_1 *a, int nb, int rpc) {                        \
        mmvq_segs_warm<T, T>(s, nb, rpc, blockIdx.x);                                                      \
        pdl_enter();                                                                                       \
        const int total = s.m[0] + s.m[1] + s.m[2];                                                        \
        MMVQ_GROUPS((mmvq_multi<T, true>(s, a, nb, rpc, g, gn)))                                           \
    }
// q/k/v where v's type differs from q's and k's (llama.cpp's _M mixes give some layers' v more
// bits: Gemma 3 270M Q4_K_M has q/k in Q5_0 and v in Q8_0 in half its layers, 8B Q4_K_M q/k
// Q4_K and v Q6_K): segments 0 and 1 of type TA, segment 2 of TB (the same block size), one
// launch where two were. A row reduces as in its own type's matvec (mmvq_acc, mmvq_store): the
// same bits. The type is chosen per row, so a CTA may hold rows of both; mmvq_store, the one
// barrier, is outside the branch. `mmvq_<NAME>_multi` and `mmvq_<NAME>_multi_pf` (each
// group's next group's first block asked of L2, as mmvq_multi does).
template <typename TA, typename TB, bool PF>
__device__ __forceinline__ void mmvq_multi_mixed(const MmvqSegs &s, const block_q8_1 *a, int nb, int rpc, int g,
                                                 int gn = -1) {
    const int total = s.m[0] + s.m[1] + s.m[2];
    MmvqPlace p = mmvq_place_at(g, rpc, total);
    const int seg = mmvq_segment(s, &p);
    if (PF && gn >= 0 && (long long)gn * rpc < total) mmvq_segs_warm<TA, TB>(s, nb, rpc, gn);
    float acc[1];
    if (seg < 2) mmvq_acc<TA, 1, PF>((const typename TA::B *)pick3(s.w, seg), a, nb, p, acc);
    else mmvq_acc<TB, 1, PF>((const typename TB::B *)pick3(s.w, seg), a, nb, p, acc);
    mmvq_store<1>(acc, pick3(s.out, seg), nullptr, pick3(s.m, seg), p, rpc);
}
#define MMVQ_MULTI_MIXED(TA, TB, NAME)                                                                     \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                            \
        mmvq_##NAME##_multi(MmvqSegs s, const block_q8_1 *a, int nb, int rpc) {                            \
        pdl_enter();                                                                                       \
        mmvq_multi_mixed<TA, TB, false>(s, a, nb, rpc, blockIdx.x);                                        \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                            \
        mmvq_##NAME##_multi_pf(MmvqSegs s, const block_q8_1 *a, int nb, int rpc) {                         \
        mmvq_segs_warm<TA, TB>(s, nb, rpc, blockIdx.x);                                                    \
        pdl_enter();                                                                                       \
        const int total = s.m[0] + s.m[1] + s.m[2];                                                        \
        MMVQ_GROUPS((mmvq_multi_mixed<TA, TB, true>(s, a, nb, rpc, g, gn)))                                \
    }
// The indirect matvec of mixture-of-experts layers (ggml's mul_mat_id for a decode step): CTA
// row `blockIdx.y` is (token, slot) pair p, whose expert is `ids[p]` (clamped into the table),
// whose weight is `experts[ids[p]]` (a table of the experts' device addresses, one matrix of m
// rows of nb blocks each), whose activation row is `p / k` (k > 0: the token's own row, shared
// by its slots) or `p` (k == 0: the pair's own row, the down projection's), and whose output row
// is p. Each pair reduces as the one-row matvec of its expert alone: the same bits.
#define MMVQ_ID(T, NAME)                                                                                   \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                            \
        mmvq_##NAME##_id(const unsigned long long *experts, const int *ids, int ne, const block_q8_1 *a,     \
                         float *out, int nb, int m, int rpc, int k) { pdl_enter();                          \
        const int pair = blockIdx.y;                                                                       \
        const int e = min(max(ids[pair], 0), ne - 1);                                                      \
        const long long arow = k > 0 ? pair / k : pair;                                                    \
        mmvq<T, 1>((const T::B *)experts[e], a + arow * nb * T::ABLK, out + (long long)pair * m, nullptr,   \
                   nb, m, mmvq_place(rpc, m), rpc);                                                         \
    }
#define MMVQ_ALL(T, NAME)                                                                                  \
    MMVQ(T, NAME, 1) MMVQ(T, NAME, 2) MMVQ(T, NAME, 3) MMVQ(T, NAME, 4) MMVQ(T, NAME, 5) MMVQ(T, NAME, 6) \
    MMVQ(T, NAME, 7) MMVQ(T, NAME, 8) MMVQ_MULTI(T, NAME) MMVQ_ID(T, NAME) MMVQ_PF(T, NAME, 1)
