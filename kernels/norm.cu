// Row normalizations, each fused with its weight (and bias): one CTA per row of `k` values.
// rms_norm: `x / sqrt(mean(x²) + eps) * w`; layer_norm: `(x - mean) / sqrt(var + eps) * w + b`
// (population variance, two passes). `w` and `b` may be null. Launch: grid rows, block 256.
#include "common.cuh"

extern "C" __global__ void rms_norm_f32(const float *__restrict__ x, const float *__restrict__ w,
                                        float *__restrict__ out, int k, float eps) {
    __shared__ float shared[32];
    const long long base = (long long)blockIdx.x * k;
    float s = 0.0f;
    for (int j = threadIdx.x; j < k; j += blockDim.x) s = fmaf(x[base + j], x[base + j], s);
    s = block_sum(s, shared);
    const float scale = rsqrtf(s / (float)k + eps);
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        const float v = x[base + j] * scale;
        out[base + j] = w ? v * w[j] : v;
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
