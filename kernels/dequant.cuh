// One value of a quantized block as f32 (`dequant(block, j)`), for every weight type the
// matvec kernels take, and each type's values per block (`block_len<B>::n`): shared by the
// embedding lookup (get_rows.cu) and the dequantization ahead of the prefill GEMM (dequant.cu).
#pragma once
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
