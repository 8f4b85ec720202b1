// Batched decode over separate caches: a device table of cache addresses, two per token of the
// step ([2t]: the token's key cache, [2t + 1]: its value cache, one layer's), written by the host
// before each step (kestrel-tensor's `KvTable`). Each token writes and reads its own sequence's
// cache, so the sequences of a step need not share one allocation. A null table: every token
// uses the caches the kernel was given (one sequence a step).
#pragma once

#include "common.cuh"

// Token cache `slot` of `table` (2t: keys, 2t + 1: values), or `given` when there is no table.
template <typename T>
__device__ __forceinline__ T *kv_base(const unsigned long long *table, int slot, T *given) {
    return table ? reinterpret_cast<T *>(table[slot]) : given;
}
