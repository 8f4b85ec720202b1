// Row normalizations, each fused with its weight (and bias): one CTA per row of `k` values.
// rms_norm: `x / sqrt(mean(x²) + eps) * w`; layer_norm: `(x - mean) / sqrt(var + eps) * w + b`
// (population variance, two passes). `w` and `b` may be null. The RMS norm also comes with the
// residual add before it and/or the Q8_1 quantization after it fused in (decode steps: one
// launch where there were two or three).
// rms_norm_f32: each thread loads its (at most RMS_PER_THREAD) values once, all loads issued
// before the sum, and scales them from registers: a decode step's single row is one round trip
// to memory instead of one per value. Rows longer than RMS_PER_THREAD * blockDim.x take a
// plain loop. Launch: grid rows, block: the launcher's `rms_threads(k)` (a multiple of 32,
// at most 1024). layer_norm_f32: block 256.
#include "norm.cuh"

// `out = x / sqrt(mean(x²) + eps) * w`.
extern "C" __global__ void rms_norm_f32(const float *__restrict__ x, const float *__restrict__ w,
                                        float *__restrict__ out, int k, float eps) {
    pdl_enter();
    rms_norm_row<false, false>(x, nullptr, nullptr, w, out, nullptr, k, eps);
}

// rms_norm_f32 that also leaves `out` as Q8_1 in `q` (the next matvec's input).
extern "C" __global__ void rms_norm_q8_1_f32(const float *__restrict__ x, const float *__restrict__ w,
                                             float *__restrict__ out, block_q8_1 *__restrict__ q,
                                             int k, float eps) {
    pdl_enter();
    rms_norm_row<false, true>(x, nullptr, nullptr, w, out, q, k, eps);
}

// `sum = x + r`, then rms_norm_f32 of `sum` (a residual add and the next norm in one launch).
extern "C" __global__ void add_rms_norm_f32(const float *__restrict__ x, const float *__restrict__ r,
                                            float *__restrict__ sum, const float *__restrict__ w,
                                            float *__restrict__ out, int k, float eps) {
    pdl_enter();
    rms_norm_row<true, false>(x, r, sum, w, out, nullptr, k, eps);
}

// add_rms_norm_f32 that also leaves `out` as Q8_1 in `q`.
extern "C" __global__ void add_rms_norm_q8_1_f32(const float *__restrict__ x, const float *__restrict__ r,
                                                 float *__restrict__ sum, const float *__restrict__ w,
                                                 float *__restrict__ out, block_q8_1 *__restrict__ q,
                                                 int k, float eps) {
    pdl_enter();
    rms_norm_row<true, true>(x, r, sum, w, out, q, k, eps);
}

// A sandwich norm and the residual add and norm after it (Gemma's post-attention and post-FFN
// norms): `normed = rms_norm(o, w1)`, then add_rms_norm of `x` and `normed` (`sum = x +
// normed`, `out = rms_norm(sum, w2)`), one launch where there were two. Each thread reads back
// only the normed values it wrote itself (both norms map values to threads alike), so the two
// steps give the bits of rms_norm_f32 and add_rms_norm_f32.
template <bool Q8>
__device__ __forceinline__ void norm_add_rms_norm(const float *__restrict__ o, const float *__restrict__ w1,
                                                  float *normed, const float *__restrict__ x,
                                                  float *__restrict__ sum, const float *__restrict__ w2,
                                                  float *__restrict__ out, block_q8_1 *__restrict__ q, int k,
                                                  float eps1, float eps2) {
    rms_norm_row<false, false>(o, nullptr, nullptr, w1, normed, nullptr, k, eps1);
    __syncthreads();
    rms_norm_row<true, Q8>(x, normed, sum, w2, out, q, k, eps2);
}

extern "C" __global__ void norm_add_rms_norm_f32(const float *__restrict__ o, const float *__restrict__ w1,
                                                 float *normed, const float *__restrict__ x,
                                                 float *__restrict__ sum, const float *__restrict__ w2,
                                                 float *__restrict__ out, int k, float eps1, float eps2) {
    pdl_enter();
    norm_add_rms_norm<false>(o, w1, normed, x, sum, w2, out, nullptr, k, eps1, eps2);
}

// norm_add_rms_norm_f32 that also leaves `out` as Q8_1 in `q`.
extern "C" __global__ void norm_add_rms_norm_q8_1_f32(const float *__restrict__ o, const float *__restrict__ w1,
                                                      float *normed, const float *__restrict__ x,
                                                      float *__restrict__ sum, const float *__restrict__ w2,
                                                      float *__restrict__ out, block_q8_1 *__restrict__ q, int k,
                                                      float eps1, float eps2) {
    pdl_enter();
    norm_add_rms_norm<true>(o, w1, normed, x, sum, w2, out, q, k, eps1, eps2);
}

extern "C" __global__ void layer_norm_f32(const float *__restrict__ x, const float *__restrict__ w,
                                          const float *__restrict__ b, float *__restrict__ out,
                                          int k, float eps) {
    pdl_enter();
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
