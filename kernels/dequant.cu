// Whole weight matrices (or a range of their rows) to f16 (`dequant_f16_*`, the default) or
// f32 (`dequant_f32_*`: BF16 weights, and every type with KESTREL_CUDA_GEMM=f32) ahead of the
// prefill GEMM (src/cuda/gemm.rs), as ggml-cuda dequantizes to f16 for cuBLAS when its integer
// MMQ path does not apply; `absmax_f32` and `f32_to_f16_scaled` bring the activations into
// f16's range by a power of two (Gemma's can pass 65504).
// `w` points at the first row's first block, `n` values (whole rows) are written to `out`.
// Launch: any grid of 256-thread blocks (grid-stride loop).
#include "dequant.cuh"

template <typename B>
__device__ __forceinline__ void dequant_rows(const B *__restrict__ w, float *__restrict__ out, long long n) {
    const int len = block_len<B>::n;
    GRID_STRIDE(j, n) out[j] = dequant(w + j / len, (int)(j % len));
}

template <typename B>
__device__ __forceinline__ void dequant_rows_f16(const B *__restrict__ w, __half *__restrict__ out, long long n) {
    const int len = block_len<B>::n;
    GRID_STRIDE(j, n) out[j] = __float2half(dequant(w + j / len, (int)(j % len)));
}

#define DEQUANT(T)                                                                               \
    extern "C" __global__ void dequant_f32_##T(const block_##T *w, float *out, long long n) { pdl_enter(); \
        dequant_rows<block_##T>(w, out, n);                                                      \
    }                                                                                            \
    extern "C" __global__ void dequant_f16_##T(const block_##T *w, __half *out, long long n) { pdl_enter(); \
        dequant_rows_f16<block_##T>(w, out, n);                                                  \
    }
DEQUANT(q4_0)
DEQUANT(q4_1)
DEQUANT(q5_0)
DEQUANT(q5_1)
DEQUANT(q8_0)
DEQUANT(q4_K)
DEQUANT(q5_K)
DEQUANT(q6_K)

extern "C" __global__ void dequant_f32_f16(const __half *w, float *out, long long n) {
    pdl_enter();
    GRID_STRIDE(j, n) out[j] = __half2float(w[j]);
}
extern "C" __global__ void dequant_f32_bf16(const __nv_bfloat16 *w, float *out, long long n) {
    pdl_enter();
    GRID_STRIDE(j, n) out[j] = __bfloat162float(w[j]);
}

// The largest |x[j]| of n floats, as its bits, atomically maxed into `*amax` (zeroed by the
// caller): non-negative floats order as their bit patterns. NaNs are passed over (they stay NaN
// in f16 whatever the scale); an infinity makes `*amax` infinite. Launch: any grid of 256-thread
// blocks.
extern "C" __global__ void absmax_f32(const float *x, unsigned *amax, long long n) {
    pdl_enter();
    float m = 0.0f;
    GRID_STRIDE(j, n) m = fmaxf(m, fabsf(x[j]));
    m = warp_max(m);
    if (threadIdx.x % WARP == 0) atomicMax(amax, __float_as_uint(m));
}

// The f16-operand GEMM's activations: `out[j] = x[j] / s` in f16, s the power of two that
// brings `a = *amax` (absmax_f32's) below 2^15, 1 when a is at most 2^15 or not finite (then
// out is x rounded to f16 as it is, bit for bit). Dividing by a power of two is exact, so the
// only rounding is f16's, and no value reaches f16's largest (65504). Block 0's thread 0 writes
// s to `scalars[0]` and 0 to `scalars[1]`: the GEMM's alpha and beta, read on the device, so
// `C = s · (x/s)·Wᵀ` is x·Wᵀ with no pass over C. Launch: any grid of 256-thread blocks.
extern "C" __global__ void f32_to_f16_scaled(const float *x, __half *out, const unsigned *amax, float *scalars,
                                             long long n) {
    pdl_enter();
    const unsigned a = *amax;
    float s = 1.0f;
    // a > 2^15 (bits 0x47000000) and finite: a = 1.f * 2^(e - 127), so s = 2^(e - 127 - 14)
    // leaves a / s = 1.f * 2^14 < 2^15.
    if (a > 0x47000000u && a < 0x7f800000u) s = __uint_as_float(((a >> 23) - 14u) << 23);
    const float inv = 1.0f / s;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        scalars[0] = s;
        scalars[1] = 0.0f;
    }
    GRID_STRIDE(j, n) out[j] = __float2half(x[j] * inv);
}
