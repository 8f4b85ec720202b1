// Per-row argmax on the device, so greedy decoding copies back 4 bytes a row instead of the
// logits. As the CPU engine's argmax: ties go to the lowest index, a NaN never wins, except that
// a row whose first value is NaN gives 0 (the CPU starts from element 0 and only `>` replaces it).
// Launch: grid rows, block 256 (a power of two).
#include "common.cuh"

extern "C" __global__ void argmax_f32(const float *__restrict__ x, unsigned int *__restrict__ out, int k) {
    pdl_enter();
    __shared__ float best_v[256];
    __shared__ int best_i[256];
    const float *row = x + (long long)blockIdx.x * k;
    float bv = -__int_as_float(0x7f800000);
    int bi = -1;
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        const float v = row[j];
        if (v > bv || (bi < 0 && !isnan(v))) { bv = v; bi = j; }
    }
    best_v[threadIdx.x] = bv;
    best_i[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            const float ov = best_v[threadIdx.x + s];
            const int oi = best_i[threadIdx.x + s];
            const int mi = best_i[threadIdx.x];
            if (oi >= 0 && (mi < 0 || ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < mi))) {
                best_v[threadIdx.x] = ov;
                best_i[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = (best_i[0] < 0 || isnan(row[0])) ? 0u : (unsigned int)best_i[0];
}
