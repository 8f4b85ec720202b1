// K-quant matrices (Q4_K, Q5_K, Q6_K) times 1-8 Q8_1 activation rows: integer dot products of
// the weight's quants with the activation's (`__dp4a`), then the sub-blocks' scales (and, for
// Q4_K/Q5_K, `dmin * m * s` with `s = d·Σq` of the activation block, as ggml-cpu's bsums).
//
// A CTA of MMVQ_WARPS warps per weight row (mmvq.cuh); its threads split each 256-value block
// between them (8 a Q4_K/Q5_K block, 16 a Q6_K block), each a fixed slice (mmvq_types.cuh), so
// the CTA's loads of a row are contiguous (16-byte loads for Q4_K/Q5_K, whose 144/176-byte
// blocks keep `qs` 16-byte aligned), as ggml-cuda's MMVQ splits its blocks. A thread unpacks its
// slice once and `__dp4a`s it with each activation row.
//
// Layout: `w` m rows of `nb` 256-value blocks; `a` NCOLS rows of `8 * nb` Q8_1 blocks;
// `out[c * m + r]` (plus `add[c * m + r]` when `add` is not null, as mmvq.cu). Launch: block
// (32, MMVQ_WARPS), grid ceil(m / rpc).
#include "mmvq.cuh"

MMVQ_ALL(TQ4_K, q4_K)
MMVQ_ALL(TQ5_K, q5_K)
MMVQ_ALL(TQ6_K, q6_K)
MMVQ_MULTI_MIXED(TQ4_K, TQ6_K, q4_K_q6_K)
MMVQ_MULTI_MIXED(TQ5_K, TQ6_K, q5_K_q6_K)
