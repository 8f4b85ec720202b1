// Embedding lookups: `out` row i = row `ids[i]` of `table` (rows of `k` values) as f32, for every
// weight type the matvec kernels take. Launch: grid `n_ids`, block 256. Ids are checked on the
// host (the engine refuses an id out of range before launching).
#include "common.cuh"

__device__ __forceinline__ float dequant(const block_q4_0 *b, int j) {
    const int q = j < 16 ? (b->qs[j] & 0xF) : (b->qs[j - 16] >> 4);
    return __half2float(b->d) * (float)(q - 8);
}
__device__ __forceinline__ float dequant(const block_q4_1 *b, int j) {
    const int q = j < 16 ? (b->qs[j] & 0xF) : (b->qs[j - 16] >> 4);
    return __half2float(b->d) * (float)q + __half2float(b->m);
}
__device__ __forceinline__ int fifth(const u8 *qh, int j) { return ((qh[j / 8] >> (j % 8)) & 1) << 4; }
__device__ __forceinline__ float dequant(const block_q5_0 *b, int j) {
    const int q = (j < 16 ? (b->qs[j] & 0xF) : (b->qs[j - 16] >> 4)) | fifth(b->qh, j);
    return __half2float(b->d) * (float)(q - 16);
}
__device__ __forceinline__ float dequant(const block_q5_1 *b, int j) {
    const int q = (j < 16 ? (b->qs[j] & 0xF) : (b->qs[j - 16] >> 4)) | fifth(b->qh, j);
    return __half2float(b->d) * (float)q + __half2float(b->m);
}
__device__ __forceinline__ float dequant(const block_q8_0 *b, int j) {
    return __half2float(b->d) * (float)b->qs[j];
}

template <typename B>
__device__ __forceinline__ void get_rows_q(const B *table, const int *ids, float *out, int k) {
    const int nb = k / QK;
    const B *row = table + (long long)ids[blockIdx.x] * nb;
    float *o = out + (long long)blockIdx.x * k;
    for (int j = threadIdx.x; j < k; j += blockDim.x) o[j] = dequant(row + j / QK, j % QK);
}

#define GET_ROWS_Q(T)                                                                        \
    extern "C" __global__ void get_rows_##T(const block_##T *table, const int *ids, float *out, int k) { \
        get_rows_q<block_##T>(table, ids, out, k);                                           \
    }
GET_ROWS_Q(q4_0)
GET_ROWS_Q(q4_1)
GET_ROWS_Q(q5_0)
GET_ROWS_Q(q5_1)
GET_ROWS_Q(q8_0)

extern "C" __global__ void get_rows_f32(const float *table, const int *ids, float *out, int k) {
    const float *row = table + (long long)ids[blockIdx.x] * k;
    for (int j = threadIdx.x; j < k; j += blockDim.x) out[(long long)blockIdx.x * k + j] = row[j];
}
extern "C" __global__ void get_rows_f16(const __half *table, const int *ids, float *out, int k) {
    const __half *row = table + (long long)ids[blockIdx.x] * k;
    for (int j = threadIdx.x; j < k; j += blockDim.x)
        out[(long long)blockIdx.x * k + j] = __half2float(row[j]);
}
extern "C" __global__ void get_rows_bf16(const __nv_bfloat16 *table, const int *ids, float *out, int k) {
    const __nv_bfloat16 *row = table + (long long)ids[blockIdx.x] * k;
    for (int j = threadIdx.x; j < k; j += blockDim.x)
        out[(long long)blockIdx.x * k + j] = __bfloat162float(row[j]);
}
