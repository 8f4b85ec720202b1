// Shared by the attention kernels (attention.cu: decode; attention_tiled.cu: prefill): their
// limits and which cached keys a query sees.
#pragma once

#include "common.cuh"
#include "kv_rows.cuh"

#define MAX_HEAD_DIM 256

// The keys [lo, hi) a query at `pos` sees: causal, p - window < j <= p (window 0: j <= p),
// none for a negative position; non-causal, every key below kv_len.
__device__ __forceinline__ void visible_keys(int pos, int kv_len, int window, int causal, int *lo, int *hi) {
    *lo = 0;
    *hi = kv_len;
    if (!causal) return;
    if (pos < 0) {
        *hi = 0;
        return;
    }
    *hi = min(pos + 1, kv_len);
    *lo = min(window > 0 ? max(0, pos + 1 - window) : 0, *hi);
}

// gpt-oss's attention sinks: a learned logit per head that joins every query's softmax
// denominator without a value, so a softmax with running max `m` and denominator `l` (over
// the visible keys) divides by `l + e^(sink - m)` instead (the CPU engine's factor
// `1 / (1 + e^(sink - LSE))`). `sinks` null: none. No visible key (l = 0): zeros, as without.
__device__ __forceinline__ float softmax_inv(float l, float m, const float *sinks, int h) {
    if (!(l > 0.0f)) return 0.0f;
    return 1.0f / (sinks ? l + expf(sinks[h] - m) : l);
}
