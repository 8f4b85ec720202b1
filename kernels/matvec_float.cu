// Float matrices (F32, F16, BF16 weights) times 1-8 f32 activation rows, accumulated in f32.
// Layout and launch as mmvq.cu: `w` m rows of k values, `x` n rows of k, `out[c * m + r]`;
// block (32, 4), grid ceil(m / 4), one warp per weight row.
#include "common.cuh"

#define ROWS_PER_CTA 4
#define MAX_COLS 8

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ void matvec(const T *__restrict__ w, const float *__restrict__ x,
                                       float *__restrict__ out, int k, int m, int n) {
    const int row = blockIdx.x * ROWS_PER_CTA + threadIdx.y;
    if (row >= m) return;
    const T *wr = w + (long long)row * k;
    float acc[MAX_COLS];
#pragma unroll
    for (int c = 0; c < MAX_COLS; c++) acc[c] = 0.0f;
    for (int j = threadIdx.x; j < k; j += WARP) {
        const float wv = to_f32(wr[j]);
#pragma unroll
        for (int c = 0; c < MAX_COLS; c++)
            if (c < n) acc[c] = fmaf(wv, x[(long long)c * k + j], acc[c]);
    }
#pragma unroll
    for (int c = 0; c < MAX_COLS; c++) {
        if (c < n) {
            const float s = warp_sum(acc[c]);
            if (threadIdx.x == 0) out[(long long)c * m + row] = s;
        }
    }
}

extern "C" __global__ void __launch_bounds__(WARP * ROWS_PER_CTA)
    matvec_f32(const float *w, const float *x, float *out, int k, int m, int n) {
    pdl_enter();
    matvec<float>(w, x, out, k, m, n);
}
extern "C" __global__ void __launch_bounds__(WARP * ROWS_PER_CTA)
    matvec_f16(const __half *w, const float *x, float *out, int k, int m, int n) {
    pdl_enter();
    matvec<__half>(w, x, out, k, m, n);
}
extern "C" __global__ void __launch_bounds__(WARP * ROWS_PER_CTA)
    matvec_bf16(const __nv_bfloat16 *w, const float *x, float *out, int k, int m, int n) {
    pdl_enter();
    matvec<__nv_bfloat16>(w, x, out, k, m, n);
}

// The indirect matvec of mixture-of-experts layers (as mmvq.cuh's `mmvq_<type>_id`): CTA row
// `blockIdx.y` is (token, slot) pair p, its weight `experts[ids[p]]` (ids clamped into the
// table), its activation row `p / per` (per > 0: the token's) or `p` (per == 0), its output row
// p; each pair the bits of the one-row matvec of its expert.
#define MATVEC_ID(T, NAME)                                                                                  \
    extern "C" __global__ void __launch_bounds__(WARP * ROWS_PER_CTA)                                      \
        matvec_##NAME##_id(const unsigned long long *experts, const int *ids, int ne, const float *x,       \
                           float *out, int k, int m, int per) { pdl_enter();                                \
        const int pair = blockIdx.y;                                                                        \
        const int e = min(max(ids[pair], 0), ne - 1);                                                       \
        const long long arow = per > 0 ? pair / per : pair;                                                 \
        matvec<T>((const T *)experts[e], x + arow * k, out + (long long)pair * m, k, m, 1);                 \
    }
MATVEC_ID(float, f32)
MATVEC_ID(__half, f16)
MATVEC_ID(__nv_bfloat16, bf16)

// head_matmul_f32: one matrix a head (DeepSeek's absorbed attn_k_b / attn_v_b, uploaded as f32):
// `w` [n_head][m][k], `x` [rows][n_head][k], `out` [rows][n_head][m],
// out[r][h][i] = Σ_j w[h][i][j] · x[r][h][j]; a warp per output value (`total` = rows · n_head
// · m of them). Launch: block (32, ROWS_PER_CTA), grid ceil(total / ROWS_PER_CTA).
extern "C" __global__ void __launch_bounds__(WARP * ROWS_PER_CTA)
    head_matmul_f32(const float *__restrict__ w, const float *__restrict__ x, float *__restrict__ out, int k,
                    int m, int n_head, long long total) {
    pdl_enter();
    const long long o = (long long)blockIdx.x * ROWS_PER_CTA + threadIdx.y;
    if (o >= total) return;  // warp-uniform
    const long long rh = o / m, i = o % m, h = rh % n_head;
    const float *wr = w + (h * m + i) * k;
    const float *xr = x + rh * k;
    float acc = 0.0f;
    for (int j = threadIdx.x; j < k; j += WARP) acc = fmaf(wr[j], xr[j], acc);
    acc = warp_sum(acc);
    if (threadIdx.x == 0) out[o] = acc;
}
