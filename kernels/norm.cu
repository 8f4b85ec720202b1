// Row normalizations, each fused with its weight (and bias): one CTA per row of `k` values.
// rms_norm: `x / sqrt(mean(x²) + eps) * w`; layer_norm: `(x - mean) / sqrt(var + eps) * w + b`
// (population variance, two passes). `w` and `b` may be null.
// rms_norm_f32: each thread loads its (at most RMS_PER_THREAD) values once, all loads issued
// before the sum, and scales them from registers: a decode step's single row is one round trip
// to memory instead of one per value. Rows longer than RMS_PER_THREAD * blockDim.x take a
// plain loop. Launch: grid rows, block: the launcher's `rms_threads(k)` (a multiple of 32,
// at most 1024). layer_norm_f32: block 256.
#include "common.cuh"

#define RMS_PER_THREAD 8

extern "C" __global__ void rms_norm_f32(const float *__restrict__ x, const float *__restrict__ w,
                                        float *__restrict__ out, int k, float eps) {
    __shared__ float shared[32];
    const long long base = (long long)blockIdx.x * k;
    const float *xr = x + base;
    float *orow = out + base;
    const bool cached = k <= RMS_PER_THREAD * (int)blockDim.x;
    float v[RMS_PER_THREAD];
    float s = 0.0f;
    if (cached) {
#pragma unroll
        for (int i = 0; i < RMS_PER_THREAD; i++) {
            const int j = threadIdx.x + i * blockDim.x;
            v[i] = j < k ? xr[j] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < RMS_PER_THREAD; i++) s = fmaf(v[i], v[i], s);
    } else {
        for (int j = threadIdx.x; j < k; j += blockDim.x) s = fmaf(xr[j], xr[j], s);
    }
    s = block_sum(s, shared);
    const float scale = rsqrtf(s / (float)k + eps);
    if (cached) {
#pragma unroll
        for (int i = 0; i < RMS_PER_THREAD; i++) {
            const int j = threadIdx.x + i * blockDim.x;
            if (j < k) {
                const float y = v[i] * scale;
                orow[j] = w ? y * w[j] : y;
            }
        }
    } else {
        for (int j = threadIdx.x; j < k; j += blockDim.x) {
            const float y = xr[j] * scale;
            orow[j] = w ? y * w[j] : y;
        }
    }
}

extern "C" __global__ void layer_norm_f32(const float *__restrict__ x, const float *__restrict__ w,
                                          const float *__restrict__ b, float *__restrict__ out,
                                          int k, float eps) {
    __shared__ float shared[32];
    const long long base = (long long)blockIdx.x * k;
    float s = 0.0f;
    for (int j = threadIdx.x; j < k; j += blockDim.x) s += x[base + j];
    const float mean = block_sum(s, shared) / (float)k;
    float v2 = 0.0f;
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        const float d = x[base + j] - mean;
        v2 = fmaf(d, d, v2);
    }
    const float scale = rsqrtf(block_sum(v2, shared) / (float)k + eps);
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        float v = (x[base + j] - mean) * scale;
        if (w) v *= w[j];
        if (b) v += b[j];
        out[base + j] = v;
    }
}
