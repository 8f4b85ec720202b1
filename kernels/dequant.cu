// Whole weight matrices (or a range of their rows) to f32, ahead of the prefill GEMM: cuBLAS
// multiplies the f32 copy by the activation rows (TF32 tensor cores), as ggml-cuda dequantizes
// to f16 for cuBLAS when its integer MMQ path does not apply. f32 rather than f16 keeps
// activations that overflow f16 (Gemma's) exact on the way in. The `dequant_f16_*` twins and
// `f32_to_f16` serve the f16-operand GEMM (`KESTREL_CUDA_GEMM=f16`, src/cuda/gemm.rs).
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
    extern "C" __global__ void dequant_f32_##T(const block_##T *w, float *out, long long n) { \
        dequant_rows<block_##T>(w, out, n);                                                      \
    }                                                                                            \
    extern "C" __global__ void dequant_f16_##T(const block_##T *w, __half *out, long long n) { \
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
    GRID_STRIDE(j, n) out[j] = __half2float(w[j]);
}
extern "C" __global__ void dequant_f32_bf16(const __nv_bfloat16 *w, float *out, long long n) {
    GRID_STRIDE(j, n) out[j] = __bfloat162float(w[j]);
}
extern "C" __global__ void dequant_f16_bf16(const __nv_bfloat16 *w, __half *out, long long n) {
    GRID_STRIDE(j, n) out[j] = __float2half(__bfloat162float(w[j]));
}
extern "C" __global__ void f32_to_f16(const float *x, __half *out, long long n) {
    GRID_STRIDE(j, n) out[j] = __float2half(x[j]);
}
