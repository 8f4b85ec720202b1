// Quantized matrix times 1-8 activation rows (decode and small batches), as ggml-cuda's MMVQ:
// activations in Q8_1 (quantize.cu), integer dot products with `__dp4a`, float scales per
// 32-value block. Every weight row is read once for all activation rows. This file: the
// 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0); mmvq_k.cu the K-quants.
//
// A CTA of MMVQ_WARPS warps per weight row (mmvq.cuh); 2 threads share each 32-value block, as
// ggml-cuda's MMVQ for these types, thread t taking quant words 2t and 2t+1 (mmvq_types.cuh),
// so the CTA's loads of a row are contiguous. A thread unpacks its slice once for all
// activation rows; the block's constant term (`-8d`/`-16d` or the min, times the activation
// block's `s = d·Σq`) is added by thread 0 of the pair alone.
//
// Layout: `w` m rows of `nb` blocks; `a` NCOLS rows of `nb` Q8_1 blocks; `out[c * m + r]`, plus
// `add[c * m + r]` when `add` is not null (a residual add in the epilogue).
// Launch: block (32, MMVQ_WARPS), grid ceil(m / rpc).
#include "mmvq.cuh"

MMVQ_ALL(TQ4_0, q4_0)
MMVQ_ALL(TQ4_1, q4_1)
MMVQ_ALL(TQ5_0, q5_0)
MMVQ_ALL(TQ5_1, q5_1)
MMVQ_ALL(TQ8_0, q8_0)
MMVQ_MULTI_MIXED(TQ5_0, TQ8_0, q5_0_q8_0)
