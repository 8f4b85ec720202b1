// Embedding lookups: `out` row i = row `ids[i]` of `table` (rows of `k` values) as f32, for every
// weight type the matvec kernels take (the q8_0 family, Q4_K, Q5_K, Q6_K, F32, F16, BF16). Launch: grid `n_ids`, block 256. Ids are checked on the
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

__device__ __forceinline__ float dequant(const block_q4_K *b, int j) {
    int sc, m;
    scale_min_k4(j / QK, b->scales, &sc, &m);
    return __half2float(b->d) * (float)sc * (float)k_quant(b, j / QK, j % QK) - __half2float(b->dmin) * (float)m;
}
__device__ __forceinline__ float dequant(const block_q5_K *b, int j) {
    int sc, m;
    scale_min_k4(j / QK, b->scales, &sc, &m);
    return __half2float(b->d) * (float)sc * (float)k_quant(b, j / QK, j % QK) - __half2float(b->dmin) * (float)m;
}
__device__ __forceinline__ float dequant(const block_q6_K *b, int j) {
    return __half2float(b->d) * (float)q6_k_scale(b, j / QK, j % QK) * (float)k_quant(b, j / QK, j % QK);
}

// Values per block of each type.
template <typename B> struct block_len { static const int n = QK; };
template <> struct block_len<block_q4_K> { static const int n = QK_K; };
template <> struct block_len<block_q5_K> { static const int n = QK_K; };
template <> struct block_len<block_q6_K> { static const int n = QK_K; };

template <typename B>
__device__ __forceinline__ void get_rows_q(const B *table, const int *ids, float *out, int k) {
    const int len = block_len<B>::n;
    const B *row = table + (long long)ids[blockIdx.x] * (k / len);
    float *o = out + (long long)blockIdx.x * k;
    for (int j = threadIdx.x; j < k; j += blockDim.x) o[j] = dequant(row + j / len, j % len);
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
GET_ROWS_Q(q4_K)
GET_ROWS_Q(q5_K)
GET_ROWS_Q(q6_K)

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
