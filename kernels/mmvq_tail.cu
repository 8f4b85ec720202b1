// One-row quantized matvecs (mmvq.cuh) whose last CTA to finish (mmvq_last_cta) also runs the
// row op that follows them in a decoder layer, one launch where there were two (issue 24:
// decode of small models is bound by launches):
//
// - the RMS norm after the output and down projections (`mmvq_<type>_1_norm`): llama's norm
//   of the sum the epilogue's residual add wrote (`out = rms_norm(product + add) * w2`), or
//   Gemma's sandwich, the post-norm of the product, the residual add and the next norm
//   (`normed = rms_norm(product) * w1`, `sum = x + normed`, `out = rms_norm(sum) * w2`). The
//   norm is computed by the same float operations in the same order as norm.cu's kernels
//   (rms_norm_row_at) with `threads` (the host's rms_threads(k)) threads: each of those
//   threads' fmaf chain, each of their warps' butterfly, the butterfly of the warps' sums. Here
//   the CTA's MMVQ_WARPS warps take those warps in turn, so the fused launch gives the bits of
//   the launches it replaces;
// - the gated activation after the gate/up matvec (`mmvq_<type>_multi_glu`): `out = act(gate)
//   * up`, each value as elementwise.cu's GLU kernels compute it (act.cuh).
//
// Both leave the Q8_1 blocks of `out` for the next matvec when `q` is set (32 consecutive
// values in one warp, as quantize.cu's rule).
//
// Launch: as mmvq_<type>_1 / mmvq_<type>_multi (and their _pf forms), plus the tail struct;
// the norm kernels with `k` floats of dynamic shared memory (the last CTA keeps the row there:
// one round trip to L2 for it, not one a pass), the GLU kernels with 2 `n` (both rows).
//
// The tail runs on one CTA's 128 threads, up to 16 values a thread: its global loads are
// issued a batch at a time (the row staged in shared memory, or loops unrolled where the loads
// are `__restrict__`), while the loops that run the Q8_1 warp reductions are not unrolled:
// unrolled, they cost the whole kernel registers (ptxas: 8 more in most kernels, spills in
// the Q5_K prefetching ones) and doubled the PTX.
#include "act.cuh"
#include "mmvq.cuh"

// The host's `MmvqNormTail` (kestrel-tensor's cuda/matvec_tail.rs), passed by value.
struct MmvqNormTail {
    float *normed;    // the sandwich's first norm (null: no sandwich)
    const float *w1;  // its weight (null: none)
    const float *x;   // the sandwich's residual
    float *sum;       // x + normed
    const float *w2;  // the norm's weight (null: none)
    float *out;       // the normed row
    block_q8_1 *q;    // its Q8_1 blocks (null: none; `k` a multiple of 32 otherwise)
    unsigned *counter;
    int threads;  // the block size norm.cu runs a row of `k` with
    float eps1, eps2;
};

// The sum of squares of a row of `k` values as rms_norm_row_at sums it with `threads` threads
// (a multiple of 32, at most 1024): thread t's fmaf chain over j = t, t + threads, ... (the
// values past `k` it adds as zeros change nothing), then block_sum; the values from `row`
// (shared memory). Every thread of the CTA calls it and gets the sum.
__device__ __forceinline__ float tail_sum_sq(const float *row, int k, int threads, float *wsum) {
    const int lane = threadIdx.x, nvw = threads / WARP;
    for (int vw = threadIdx.y; vw < nvw; vw += MMVQ_WARPS) {
        float s = 0.0f;
        for (int j = vw * WARP + lane; j < k; j += threads) s = fmaf(row[j], row[j], s);
        s = warp_sum(s);
        if (lane == 0) wsum[vw] = s;
    }
    __syncthreads();
    const float total = warp_sum(lane < nvw ? wsum[lane] : 0.0f);
    __syncthreads();  // wsum free for the next sum
    return total;
}

// The first norm of the sandwich: `normed = rms_norm(row) * w1`, `sum = x + normed`, the sum
// also left in `row`.
__device__ __forceinline__ void tail_sandwich(float *row, const float *__restrict__ w1, const float *__restrict__ x,
                                              float *__restrict__ normed, float *__restrict__ sum, int k,
                                              float scale) {
#pragma unroll 4
    for (int j = threadIdx.y * WARP + threadIdx.x; j < k; j += MMVQ_THREADS) {
        const float y0 = row[j] * scale;
        const float y = w1 ? y0 * w1[j] : y0;
        normed[j] = y;
        const float v = __fadd_rn(x[j], y);  // add_f32's addition, never contracted with the product
        sum[j] = v;
        row[j] = v;
    }
}

// The Q8_1 blocks of the `n` values in `row` (`n` a multiple of 32: warp w takes 32 consecutive
// values, so `j < n` is the same for the warp), each thread the values it wrote into `row`
// itself. Apart from the loops that compute the values: those are unrolled so their global
// loads are in flight together (the tail runs on one CTA, up to 16 values a thread), this one
// is not (four copies of its warp reductions would cost the whole kernel registers).
__device__ __forceinline__ void tail_q8(const float *row, block_q8_1 *__restrict__ q, int n) {
#pragma unroll 1
    for (int j = threadIdx.y * WARP + threadIdx.x; j < n; j += MMVQ_THREADS) q8_1_store_warp(row[j], q + j / QK);
}

// `out = rms_norm(row) * w2`, also left in `row`, and its Q8_1 blocks (`q` null: none), as
// rms_norm_row_at.
__device__ __forceinline__ void tail_norm_out(float *row, const float *__restrict__ w2, float *__restrict__ out,
                                              block_q8_1 *__restrict__ q, int k, float scale) {
#pragma unroll 4
    for (int j = threadIdx.y * WARP + threadIdx.x; j < k; j += MMVQ_THREADS) {
        const float y0 = row[j] * scale;
        const float y = w2 ? y0 * w2[j] : y0;
        out[j] = y;
        row[j] = y;
    }
    if (q) tail_q8(row, q, k);
}

// Every thread of the CTA, after the matvec has written its rows of `p` (`k` values; the launch
// gives the CTA `k` floats of dynamic shared memory).
__device__ __forceinline__ void mmvq_norm_tail(const float *p, int k, const MmvqNormTail &t) {
    DYNAMIC_SHARED(float, row);
    __shared__ float wsum[32];
    if (!mmvq_last_cta(t.counter)) return;
    const int tid = threadIdx.y * WARP + threadIdx.x;
    // The whole product row, through L2 (other CTAs wrote it), its loads independent.
#pragma unroll 4
    for (int j = tid; j < k; j += MMVQ_THREADS) row[j] = __ldcg(p + j);
    __syncthreads();
    float scale = rsqrtf(tail_sum_sq(row, k, t.threads, wsum) / (float)k + (t.normed ? t.eps1 : t.eps2));
    if (t.normed) {
        tail_sandwich(row, t.w1, t.x, t.normed, t.sum, k, scale);
        __syncthreads();
        scale = rsqrtf(tail_sum_sq(row, k, t.threads, wsum) / (float)k + t.eps2);
    }
    tail_norm_out(row, t.w2, t.out, t.q, k, scale);
}

// `mmvq_<NAME>_1_norm` and its prefetching form `mmvq_<NAME>_1_norm_pf` (mmvq.cuh's MMVQ and
// MMVQ_PF for one row, then the tail).
#define MMVQ_NORM(T, NAME)                                                                                 \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                            \
        mmvq_##NAME##_1_norm(const T::B *w, const block_q8_1 *a, float *out, const float *add, int nb,       \
                             int m, int rpc, MmvqNormTail tail) {                                         \
        pdl_enter();                                                                                       \
        mmvq<T, 1, false>(w, a, out, add, nb, m, mmvq_place(rpc, m), rpc);                                 \
        mmvq_norm_tail(out, m, tail);                                                                      \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                            \
        mmvq_##NAME##_1_norm_pf(const T::B *w, const block_q8_1 *a, float *out, const float *add, int nb,    \
                                int m, int rpc, MmvqNormTail tail) {                                      \
        mmvq_warm<T>(mmvq_row_at<T>(w, nb, blockIdx.x, rpc, m), mmvq_place(rpc, m), nb);                   \
        pdl_enter();                                                                                       \
        const int total = m;                                                                               \
        MMVQ_GROUPS((mmvq<T, 1, true>(w, a, out, add, nb, m, mmvq_place_at(g, rpc, m), rpc,                 \
                                      mmvq_row_at<T>(w, nb, gn, rpc, m))))                                  \
        mmvq_norm_tail(out, m, tail);                                                                      \
    }

MMVQ_NORM(TQ4_0, q4_0)
MMVQ_NORM(TQ4_1, q4_1)
MMVQ_NORM(TQ5_0, q5_0)
MMVQ_NORM(TQ5_1, q5_1)
MMVQ_NORM(TQ8_0, q8_0)
MMVQ_NORM(TQ4_K, q4_K)
MMVQ_NORM(TQ5_K, q5_K)
MMVQ_NORM(TQ6_K, q6_K)

// The host's `MmvqGluTail`, passed by value: `out = act(gate) * up` over `n` values (`gelu`:
// GELU, else SiLU), and its Q8_1 blocks into `q` (null: none; `n` a multiple of 32 otherwise).
struct MmvqGluTail {
    const float *gate;
    const float *up;
    float *out;
    block_q8_1 *q;
    unsigned *counter;
    int n, gelu;
};

// `out = act(gate) * up` over `n` values (`use_gelu`: GELU, else SiLU) and its Q8_1 blocks (`q`
// null: none), `sh` 2 `n` floats of shared memory: both rows are staged there first, their
// loads all in flight together, so the loop that computes (not unrolled: four copies of the
// activation and of the Q8_1 reductions would cost the whole kernel registers) reads them
// without a round trip to L2 each.
__device__ __forceinline__ void tail_glu(const float *__restrict__ gate, const float *__restrict__ up,
                                         float *__restrict__ out, float *sh, block_q8_1 *__restrict__ q, int n,
                                         int use_gelu) {
    const int tid = threadIdx.y * WARP + threadIdx.x;
#pragma unroll 4
    for (int j = tid; j < n; j += MMVQ_THREADS) {
        sh[j] = __ldcg(gate + j);
        sh[n + j] = __ldcg(up + j);
    }
    // Each thread reads back only what it staged: no barrier. Warp w takes 32 consecutive
    // values (a Q8_1 block: `j < n` is the same for the warp).
#pragma unroll 1
    for (int j = tid; j < n; j += MMVQ_THREADS) {
        const float g = sh[j];
        const float y = (use_gelu ? gelu(g) : silu(g)) * sh[n + j];
        out[j] = y;
        if (q) q8_1_store_warp(y, q + j / QK);
    }
}

// Every thread of the CTA, after the gate/up matvec has written its rows (the launch gives the
// CTA 2 `n` floats of dynamic shared memory).
__device__ __forceinline__ void mmvq_glu_tail(const MmvqGluTail &t) {
    DYNAMIC_SHARED(float, sh);
    if (!mmvq_last_cta(t.counter)) return;
    tail_glu(t.gate, t.up, t.out, sh, t.q, t.n, t.gelu);
}

// `mmvq_<NAME>_multi_glu` and `mmvq_<NAME>_multi_glu_pf` (mmvq.cuh's MMVQ_MULTI, then the tail).
#define MMVQ_MULTI_GLU(T, NAME)                                                                            \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                            \
        mmvq_##NAME##_multi_glu(MmvqSegs s, const block_q8_1 *a, int nb, int rpc, MmvqGluTail tail) {      \
        pdl_enter();                                                                                       \
        mmvq_multi<T, false>(s, a, nb, rpc, blockIdx.x);                                                   \
        mmvq_glu_tail(tail);                                                                               \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                            \
        mmvq_##NAME##_multi_glu_pf(MmvqSegs s, const block_q8_1 *a, int nb, int rpc, MmvqGluTail tail) {   \
        mmvq_segs_warm<T, T>(s, nb, rpc, blockIdx.x);                                                      \
        pdl_enter();                                                                                       \
        const int total = s.m[0] + s.m[1] + s.m[2];                                                        \
        MMVQ_GROUPS((mmvq_multi<T, true>(s, a, nb, rpc, g, gn)))                                           \
        mmvq_glu_tail(tail);                                                                               \
    }

MMVQ_MULTI_GLU(TQ4_0, q4_0)
MMVQ_MULTI_GLU(TQ4_1, q4_1)
MMVQ_MULTI_GLU(TQ5_0, q5_0)
MMVQ_MULTI_GLU(TQ5_1, q5_1)
MMVQ_MULTI_GLU(TQ8_0, q8_0)
MMVQ_MULTI_GLU(TQ4_K, q4_K)
MMVQ_MULTI_GLU(TQ5_K, q5_K)
MMVQ_MULTI_GLU(TQ6_K, q6_K)
