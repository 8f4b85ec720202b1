// Appending a step's keys and values to the KV cache (`[capacity][row]`, rows at the tokens'
// positions): f16, rounded as the CPU cache rounds, or q8_0, quantized as the CPU cache
// quantizes (kv_rows.cuh's kv_store).
//
// kv_append_f16: `cache[positions[t]][i] = half(src[t][i])` for rows of `row` values.
// Launch: grid n_tokens, block 256.
// kv_append2_f16 / kv_append2_q8_0: the keys and the values of a step in one launch
// (blockIdx.y 0: keys, 1: values; their rows may differ; q8_0 rows are multiples of 32).
// Launch: grid (n_tokens, 2), block 256. With `kv_table` (not null), token t writes into the
// caches of its table entry (kv_rows.cuh: its sequence's, contiguous or paged).
#include "kv_rows.cuh"

extern "C" __global__ void kv_append_f16(const float *__restrict__ src, const int *__restrict__ positions,
                                         __half *__restrict__ cache, int row) {
    pdl_enter();
    kv_store<false>(cache, (long long)positions[blockIdx.x] * row, src + (long long)blockIdx.x * row, row);
}

template <bool Q8>
__device__ __forceinline__ void kv_append2(const float *__restrict__ k_src, const float *__restrict__ v_src,
                                           const int *__restrict__ positions, void *k_cache, void *v_cache,
                                           int k_row, int v_row, const unsigned long long *__restrict__ kv_table) {
    const bool v = blockIdx.y == 1;
    const int row = v ? v_row : k_row;
    const float *s = (v ? v_src : k_src) + (long long)blockIdx.x * row;
    const KvLoc loc = kv_loc(kv_table, blockIdx.x, k_cache, v_cache);
    kv_store<Q8>(v ? loc.v : loc.k, kv_row(loc, positions[blockIdx.x]) * row, s, row);
}

extern "C" __global__ void kv_append2_f16(const float *__restrict__ k_src, const float *__restrict__ v_src,
                                          const int *__restrict__ positions, __half *k_cache, __half *v_cache,
                                          int k_row, int v_row, const unsigned long long *__restrict__ kv_table) {
    pdl_enter();
    kv_append2<false>(k_src, v_src, positions, k_cache, v_cache, k_row, v_row, kv_table);
}

extern "C" __global__ void kv_append2_q8_0(const float *__restrict__ k_src, const float *__restrict__ v_src,
                                           const int *__restrict__ positions, block_q8_0 *k_cache,
                                           block_q8_0 *v_cache, int k_row, int v_row,
                                           const unsigned long long *__restrict__ kv_table) {
    pdl_enter();
    kv_append2<true>(k_src, v_src, positions, k_cache, v_cache, k_row, v_row, kv_table);
}
