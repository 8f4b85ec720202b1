// How the kernels reach a KV cache: its element types, and where a token's cache lives.
//
// Element types: f16 (one __half a value) or q8_0 (`Q8`: blocks of 32 values, an f16 scale d
// and 32 int8 q, value d·q, as ggml's q8_0 and the CPU engine's q8_0 cache; a head is whole
// blocks, so head_dim is a multiple of 32). A cache is `[capacity][row]` values; element `e`
// counts values from its start.
//
// Batched decode over separate caches: a device table of cache addresses, two per token of the
// step ([2t]: the token's key cache, [2t + 1]: its value cache, one layer's), written by the host
// before each step (kestrel-tensor's `KvTable`). Each token writes and reads its own sequence's
// cache, so the sequences of a step need not share one allocation. A null table: every token
// uses the caches the kernel was given (one sequence a step).
#pragma once

#include "common.cuh"

// Token cache `slot` of `table` (2t: keys, 2t + 1: values), or `given` when there is no table.
template <typename T>
__device__ __forceinline__ T *kv_base(const unsigned long long *table, int slot, T *given) {
    return table ? reinterpret_cast<T *>(table[slot]) : given;
}

// Element `e` of a cache as f32 (q8_0: d·q, exact in f32).
template <bool Q8>
__device__ __forceinline__ float kv_value(const void *cache, long long e) {
    if (Q8) {
        const block_q8_0 *b = (const block_q8_0 *)cache + (e >> 5);
        return __half2float(b->d) * (float)b->qs[e & 31];
    }
    return __half2float(((const __half *)cache)[e]);
}

// Elements e and e + 1 (e even) as an f16 pair: f16 values as stored, q8_0 quants unscaled
// (int8 values are exact in f16); kv_scale gives the factor.
template <bool Q8>
__device__ __forceinline__ __half2 kv_pair(const void *cache, long long e) {
    if (Q8) {
        const block_q8_0 *b = (const block_q8_0 *)cache + (e >> 5);
        const int i = (int)(e & 31);
        return __floats2half2_rn((float)b->qs[i], (float)b->qs[i + 1]);
    }
    return *(const __half2 *)((const __half *)cache + e);
}

// The factor of kv_pair's values at element e: q8_0's block scale d, 1 for f16.
template <bool Q8>
__device__ __forceinline__ float kv_scale(const void *cache, long long e) {
    return Q8 ? __half2float(((const block_q8_0 *)cache + (e >> 5))->d) : 1.0f;
}

// Writes the `n` values of `src` at element `e0` of a cache with every thread of a
// one-dimensional CTA: f16, rounded as the CPU cache rounds; q8_0 (e0 and n multiples of 32),
// quantized as ggml's quantize_row_q8_0 (d = amax / 127, q = round(x / d), the CPU cache's
// bytes for the same values), a warp a block (the threads of a last partial warp idle).
template <bool Q8>
__device__ __forceinline__ void kv_store(void *cache, long long e0, const float *src, int n) {
    const int tid = threadIdx.x;
    if (!Q8) {
        __half *d = (__half *)cache + e0;
        for (int i = tid; i < n; i += blockDim.x) d[i] = __float2half(src[i]);
        return;
    }
    const int nw = blockDim.x / WARP, w = tid / WARP, lane = tid % WARP;
    if (w >= nw) return;
    block_q8_0 *b = (block_q8_0 *)cache + (e0 >> 5);
    for (int i = w; i < n / QK; i += nw) {
        const float x = src[QK * i + lane];
        const float amax = warp_max(fabsf(x));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].qs[lane] = (i8)roundf(x * id);
        if (lane == 0) b[i].d = __float2half(d);
    }
}
