// Per-row top-k on the device, so top-k sampling copies back k (id, logit) pairs a row instead
// of the logits (Gemma 3: 40 pairs against 1 MiB). The pairs are the sampler's own top-k
// candidates (kestrel-sampling's `Candidates::fill` then `top_k::apply`), in its order: NaN and
// -inf are never candidates; larger logits first in f32's total order (`total_cmp`: +0 above
// -0); equal logits by lower id. The host sampler then goes on from there (typical, top-p,
// min-p, temperature, the draw) and draws what it would have drawn from the whole row.
//
// One CTA a row. Each candidate gets a 64-bit key, unique and larger for earlier candidates
// (the logit's total-order bits, then the id's complement); a radix select over the keys, a
// byte a pass from the top, finds the k-th largest key; the candidates at or above it (exactly
// min(k, candidates)) are gathered and ranked in shared memory.
//
// Histogram counts are added once per warp and digit (`__match_any_sync`): most logits share
// their top bytes, and shared-memory atomics on one address serialize.
//
// Layout: `x` rows of `n` logits; `out` rows of 1 + 2k words: the row's candidate count c
// (min(k, candidates)), then k ids, then k logits (f32 bits), the first c of each set (one
// buffer, so one copy brings a step's rows back). Launch: grid rows, block (TOPK_THREADS, 1)
// (a multiple of 32), 1 <= k <= TOPK_MAX.
#include "common.cuh"

#define TOPK_THREADS 1024
#define TOPK_MAX 256

// `v`'s bits reordered so unsigned order is f32::total_cmp's.
__device__ __forceinline__ u32 total_order_bits(float v) {
    const u32 b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ bool is_candidate(float v) { return !isnan(v) && v != -__int_as_float(0x7f800000); }

// Larger for candidates the sampler puts first.
__device__ __forceinline__ unsigned long long topk_key(float v, int id) {
    return ((unsigned long long)total_order_bits(v) << 32) | (0xFFFFFFFFu - (u32)id);
}

extern "C" __global__ void __launch_bounds__(TOPK_THREADS)
    topk_f32(const float *__restrict__ x, int n, int k, unsigned int *__restrict__ out) {
    pdl_enter();
    __shared__ unsigned int hist[256];
    __shared__ unsigned long long s_prefix, s_mask;
    __shared__ int s_need, s_total;
    __shared__ unsigned int s_found;
    __shared__ unsigned long long keys[TOPK_MAX];
    const int tid = threadIdx.x;
    const float *row = x + (long long)blockIdx.x * n;
    if (tid == 0) {
        s_prefix = 0;
        s_mask = 0;
        s_need = k;
        s_total = 0;
        s_found = 0;
    }
    // Radix select: after the pass over byte `shift / 8`, the keys matching `prefix` on `mask`
    // hold the k-th largest, and `need` of them are at or above it.
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        const unsigned long long prefix = s_prefix, mask = s_mask;
        for (int base = 0; base < n; base += blockDim.x) {  // the same trips for every lane
            const int j = base + tid;
            int digit = -1;
            if (j < n) {
                const float v = row[j];
                const unsigned long long key = topk_key(v, j);
                if (is_candidate(v) && (key & mask) == prefix) digit = (int)((key >> shift) & 255);
            }
            const unsigned same = __match_any_sync(0xffffffffu, digit);
            if (digit >= 0 && tid % WARP == __ffs(same) - 1) atomicAdd(&hist[digit], (unsigned)__popc(same));
        }
        __syncthreads();
        if (tid == 0) {
            if (shift == 56) {  // every candidate matches the empty prefix: their count
                int total = 0;
                for (int d = 0; d < 256; d++) total += (int)hist[d];
                s_total = total;
                if (s_need > total) s_need = total;
            }
            int need = s_need, d = 255;
            if (need > 0) {
                while (d > 0 && (int)hist[d] < need) need -= (int)hist[d--];
                s_need = need;
                s_prefix |= (unsigned long long)d << shift;
                s_mask |= 255ull << shift;
            }
        }
        __syncthreads();
    }
    const int kk = min(k, s_total);
    // `s_prefix` is the kk-th largest key (unique keys): gather the kk keys at or above it.
    if (kk > 0) {
        const unsigned long long kth = s_prefix;
        for (int j = tid; j < n; j += blockDim.x) {
            const float v = row[j];
            if (!is_candidate(v)) continue;
            const unsigned long long key = topk_key(v, j);
            if (key >= kth) keys[atomicAdd(&s_found, 1u)] = key;
        }
    }
    __syncthreads();
    // Each key's rank: how many gathered keys are larger.
    unsigned int *o = out + (long long)blockIdx.x * (1 + 2 * k);
    for (int i = tid; i < kk; i += blockDim.x) {
        const unsigned long long key = keys[i];
        int rank = 0;
        for (int j = 0; j < kk; j++) rank += keys[j] > key;
        const u32 id = 0xFFFFFFFFu - (u32)(key & 0xFFFFFFFFull);
        o[1 + rank] = id;
        o[1 + k + rank] = __float_as_uint(row[id]);
    }
    if (tid == 0) o[0] = (unsigned)kk;
}
