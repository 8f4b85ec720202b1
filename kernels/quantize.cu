// Activation quantization for the integer matvec (mmvq.cu): f32 rows to Q8_1 blocks, as
// ggml-cuda's `quantize_q8_1`: `d = amax / 127`, `q = round(x / d)`, and
// `s = d * sum(q)` (f16 both) as ggml-cpu's `quantize_row_q8_1` (ggml-cuda stores `sum(x)`
// instead, which leaves each block's rounding error times the weight's offset in Q4_0/Q4_1/
// Q5_x/Q4_K/Q5_K dot products: 5-20x the CPU engine's error on random rows).
#include "common.cuh"

// One warp per block of 32 values; `x` holds `nblocks * 32` values, rows back to back (a row's
// length is a multiple of 32, so blocks never straddle rows).
extern "C" __global__ void quantize_q8_1(const float *__restrict__ x, block_q8_1 *__restrict__ y,
                                         int nblocks) {
    pdl_enter();
    const int b = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (b >= nblocks) return;  // the whole warp leaves together
    q8_1_store_warp(x[(long long)b * QK + threadIdx.x % WARP], y + b);
}
