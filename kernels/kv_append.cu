// Appending a step's keys and values to the f16 KV cache (`[capacity][row]`, rows at the
// tokens' positions), rounding to f16 as the CPU cache does.
//
// kv_append_f16: `cache[positions[t]][i] = half(src[t][i])` for rows of `row` values.
// Launch: grid n_tokens, block 256.
// kv_append2_f16: the keys and the values of a step in one launch (blockIdx.y 0: keys, 1:
// values; their rows may differ). Launch: grid (n_tokens, 2), block 256. With `kv_table` (not
// null), token t writes into its own caches kv_table[2t] and kv_table[2t + 1] (kv_rows.cuh).
#include "kv_rows.cuh"

extern "C" __global__ void kv_append_f16(const float *__restrict__ src, const int *__restrict__ positions,
                                         __half *__restrict__ cache, int row) {
    const float *s = src + (long long)blockIdx.x * row;
    __half *d = cache + (long long)positions[blockIdx.x] * row;
    for (int i = threadIdx.x; i < row; i += blockDim.x) d[i] = __float2half(s[i]);
}

extern "C" __global__ void kv_append2_f16(const float *__restrict__ k_src, const float *__restrict__ v_src,
                                          const int *__restrict__ positions, __half *__restrict__ k_cache,
                                          __half *__restrict__ v_cache, int k_row, int v_row,
                                          const unsigned long long *__restrict__ kv_table) {
    const bool v = blockIdx.y == 1;
    const int row = v ? v_row : k_row;
    const float *s = (v ? v_src : k_src) + (long long)blockIdx.x * row;
    __half *base = kv_base(kv_table, 2 * blockIdx.x + (v ? 1 : 0), v ? v_cache : k_cache);
    __half *d = base + (long long)positions[blockIdx.x] * row;
    for (int i = threadIdx.x; i < row; i += blockDim.x) d[i] = __float2half(s[i]);
}
