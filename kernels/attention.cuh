// Shared by the attention kernels (attention.cu: decode; attention_tiled.cu: prefill): their
// limits and which cached keys a query sees.
#pragma once

#include "common.cuh"
#include "kv_rows.cuh"

#define MAX_HEAD_DIM 256
#define PER_LANE (MAX_HEAD_DIM / WARP)

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

