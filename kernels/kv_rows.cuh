// How the kernels reach a KV cache: its element types, and where a token's cache lives.
//
// Element types: f16 (one __half a value) or q8_0 (`Q8`: blocks of 32 values, an f16 scale d
// and 32 int8 q, value d·q, as ggml's q8_0 and the CPU engine's q8_0 cache; a head is whole
// blocks, so head_dim is a multiple of 32). A cache is `[capacity][row]` values; element `e`
// counts values from its start.
//
// Where a token's cache lives (`KvLoc`): its key and value caches' first elements, and its page
// table. Without one, position p is row p of the cache. With one (a paged cache: rows are
// pages of 2^shift positions anywhere in a pool shared by many sequences, as vLLM's paged
// attention), position p is row pages[p >> shift] * 2^shift + p % 2^shift of the pool.
//
// A kernel is given the caches of one sequence (no table), or a device table with an entry per
// token of the step: KV_ENTRY words ([0]: keys, [1]: values, [2]: the page table's address or
// 0, [3]: the page shift), one layer's, written by the host before each step (kestrel-tensor's
// `KvTable`). A batched decode step's tokens each reach their own sequence's cache so; a
// paged sequence's prefill step repeats its entry for each token. A token's bits are the same
// whichever way its cache is reached.
#pragma once

#include "common.cuh"

#define KV_ENTRY 4

struct KvLoc {
    void *k, *v;
    const int *pages;
    int shift;
};

// Token `token`'s cache: its entry of `table`, or the given caches when there is no table.
__device__ __forceinline__ KvLoc kv_loc(const unsigned long long *table, int token, const void *k, const void *v) {
    KvLoc l;
    if (table) {
        const unsigned long long *e = table + (long long)KV_ENTRY * token;
        l.k = reinterpret_cast<void *>(e[0]);
        l.v = reinterpret_cast<void *>(e[1]);
        l.pages = reinterpret_cast<const int *>(e[2]);
        l.shift = (int)e[3];
    } else {
        l.k = const_cast<void *>(k);
        l.v = const_cast<void *>(v);
        l.pages = nullptr;
        l.shift = 0;
    }
    return l;
}

// The cache row of position `pos` (a position the token's cache holds: its page is mapped).
__device__ __forceinline__ long long kv_row(const KvLoc &l, int pos) {
    if (!l.pages) return pos;
    return ((long long)l.pages[pos >> l.shift] << l.shift) | (long long)(pos & ((1 << l.shift) - 1));
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
