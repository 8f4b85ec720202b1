// Embedding lookups: `out` row i = row `ids[i]` of `table` (rows of `k` values) as f32, for every
// weight type the matvec kernels take (the q8_0 family, Q4_K, Q5_K, Q6_K, F32, F16, BF16). Launch: grid `n_ids`, block 256. Ids are checked on the
// host (the engine refuses an id out of range before launching).
#include "dequant.cuh"

template <typename B>
__device__ __forceinline__ void get_rows_q(const B *table, const int *ids, float *out, int k) {
    const int len = block_len<B>::n;
    const B *row = table + (long long)ids[blockIdx.x] * (k / len);
    float *o = out + (long long)blockIdx.x * k;
    for (int j = threadIdx.x; j < k; j += blockDim.x) o[j] = dequant(row + j / len, j % len);
}

#define GET_ROWS_Q(T)                                                                        \
    extern "C" __global__ void get_rows_##T(const block_##T *table, const int *ids, float *out, int k) { pdl_enter(); \
        get_rows_q<block_##T>(table, ids, out, k);                                           \
    }
GET_ROWS_Q(q4_0)
GET_ROWS_Q(q4_1)
GET_ROWS_Q(q5_0)
GET_ROWS_Q(q5_1)
GET_ROWS_Q(q8_0)
GET_ROWS_Q(q4_K)
GET_ROWS_Q(q5_K)
GET_ROWS_Q(q6_K)

extern "C" __global__ void get_rows_f32(const float *table, const int *ids, float *out, int k) {
    pdl_enter();
    const float *row = table + (long long)ids[blockIdx.x] * k;
    for (int j = threadIdx.x; j < k; j += blockDim.x) out[(long long)blockIdx.x * k + j] = row[j];
}
extern "C" __global__ void get_rows_f16(const __half *table, const int *ids, float *out, int k) {
    pdl_enter();
    const __half *row = table + (long long)ids[blockIdx.x] * k;
    for (int j = threadIdx.x; j < k; j += blockDim.x)
        out[(long long)blockIdx.x * k + j] = __half2float(row[j]);
}
extern "C" __global__ void get_rows_bf16(const __nv_bfloat16 *table, const int *ids, float *out, int k) {
    pdl_enter();
    const __nv_bfloat16 *row = table + (long long)ids[blockIdx.x] * k;
    for (int j = threadIdx.x; j < k; j += blockDim.x)
        out[(long long)blockIdx.x * k + j] = __bfloat162float(row[j]);
}
