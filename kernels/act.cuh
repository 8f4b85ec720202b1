// The activations of gated FFNs, one definition for every kernel that computes them
// (elementwise.cu's SiLU/GELU/SwiGLU/GeGLU, mmvq_tail.cu's GLU in the gate/up matvec's launch),
// so that all of them give the same bits.
#pragma once
#include "common.cuh"

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// GELU, tanh form (ggml's constants).
__device__ __forceinline__ float gelu(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    const float coef_a = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
}
