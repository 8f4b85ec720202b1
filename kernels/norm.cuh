// The RMS norm of one row as every kernel computes it (norm.cu's row kernels, and rope.cu's
// per-head norms fused into the RoPE launch), so that all of them give the same bits: the
// thread-to-value mapping and the reduction depend only on the row length and blockDim.x.
// mmvq_tail.cu replays this order on a 4-warp CTA (`tail_sum_sq`, the norm after a matvec in
// its launch): change both together (the `cuda_tail` tests check they agree bit for bit).
#pragma once
#include "common.cuh"

#define RMS_PER_THREAD 8

// The row's values: `x` alone, or `x + r` (the residual add fused in) also written to `sum`.
template <bool ADD>
__device__ __forceinline__ float rms_in(const float *xr, const float *rr, float *sr, int j) {
    if (!ADD) return xr[j];
    const float v = xr[j] + rr[j];
    sr[j] = v;
    return v;
}

// One row: optional residual add, the norm and weight, and (Q8) the normed row as Q8_1 blocks
// into `qr` (each warp's 32 consecutive values are one block: `k` and blockDim.x multiples of
// 32, so `j < k` is the same for a whole warp). Each value is computed by the same float
// operations as the unfused kernels (add_f32, rms_norm_f32, quantize_q8_1): the fused forms
// give the same bits.
template <bool ADD, bool Q8>
__device__ __forceinline__ void rms_norm_row_at(const float *__restrict__ xr, const float *__restrict__ rr,
                                                float *__restrict__ sr, const float *__restrict__ w,
                                                float *__restrict__ orow, block_q8_1 *__restrict__ qr,
                                                int k, float eps) {
    __shared__ float shared[32];
    const bool cached = k <= RMS_PER_THREAD * (int)blockDim.x;
    float v[RMS_PER_THREAD];
    float s = 0.0f;
    if (cached) {
#pragma unroll
        for (int i = 0; i < RMS_PER_THREAD; i++) {
            const int j = threadIdx.x + i * blockDim.x;
            v[i] = j < k ? rms_in<ADD>(xr, rr, sr, j) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < RMS_PER_THREAD; i++) s = fmaf(v[i], v[i], s);
    } else {
        for (int j = threadIdx.x; j < k; j += blockDim.x) {
            const float a = rms_in<ADD>(xr, rr, sr, j);
            s = fmaf(a, a, s);
        }
    }
    s = block_sum(s, shared);
    const float scale = rsqrtf(s / (float)k + eps);
    if (cached) {
#pragma unroll
        for (int i = 0; i < RMS_PER_THREAD; i++) {
            const int j = threadIdx.x + i * blockDim.x;
            if (j < k) {
                const float y0 = v[i] * scale;
                const float y = w ? y0 * w[j] : y0;
                orow[j] = y;
                if (Q8) q8_1_store_warp(y, qr + j / QK);
            }
        }
    } else {
        // ADD: this thread wrote `sr[j]` above, so it reads its own value back.
        for (int j = threadIdx.x; j < k; j += blockDim.x) {
            const float y0 = (ADD ? sr[j] : xr[j]) * scale;
            const float y = w ? y0 * w[j] : y0;
            orow[j] = y;
            if (Q8) q8_1_store_warp(y, qr + j / QK);
        }
    }
}

// Row blockIdx.x of x (and r, sum, out, q).
template <bool ADD, bool Q8>
__device__ __forceinline__ void rms_norm_row(const float *__restrict__ x, const float *__restrict__ r,
                                             float *__restrict__ sum, const float *__restrict__ w,
                                             float *__restrict__ out, block_q8_1 *__restrict__ q,
                                             int k, float eps) {
    const long long base = (long long)blockIdx.x * k;
    rms_norm_row_at<ADD, Q8>(x + base, ADD ? r + base : nullptr, ADD ? sum + base : nullptr, w, out + base,
                             Q8 ? q + (long long)blockIdx.x * (k / QK) : nullptr, k, eps);
}
