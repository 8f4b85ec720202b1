// Quantized matrix times 9-64 Q8_1 activation rows (batched decode of many sequences) on tensor
// cores, giving each output the bits the matvec of mmvq.cu / mmvq_k.cu gives it with any number
// of rows: a sequence's logits are the same in a batch of 64 as alone. The `_id` form takes a
// mixture-of-experts layer's (token, slot) pairs grouped by expert into tiles (moe.cu's
// moe_tiles), so a batch reads each chosen expert once per tile instead of once per pair.
//
// The matvec's order, which this kernel keeps: the weight row's `nthreads = (MMVQ_WARPS / rpc)
// * 32` threads each sum, in block order, the contributions of their slice of blocks `tid / LPB`,
// `tid / LPB + nthreads / LPB`, ... (mmvq_types.cuh); each warp adds its 32 lanes' sums through
// the shuffles of warp_sum (lane l with l ^ 16, then with l ^ 8, ... l ^ 1), and the row's warps'
// sums are added in warp order (mmvq_store). Each contribution is a float computed from integer
// dot products, which are exact in any order.
//
// Here a CTA takes 16 weight rows and 8·NT activation rows, with one warp per matvec warp. Warp
// w walks its 32 lanes' slices one lane at a time, in the order that makes warp_sum's pairing a
// left-to-right binary tree (lane order bit-reversed: 0, 16, 8, 24, 4, ...), keeping one partial
// sum per tree level (5 levels). For a lane's slice of one block, `mma.sync` m16n8k16 gives the
// integer sums of all 16 × 8·NT (weight row, activation row) pairs at once, and each thread turns
// its four outputs' sums into contributions with the matvec's float math. The warps' sums meet in
// shared memory and are added in warp order, then the residual (when `add` is not null).
//
// Layout as mmvq.cu: `w` m rows of `nb` blocks; `a` ncols rows of `nb·ABLK` Q8_1 blocks;
// `out[c * m + r]` (+ `add[c * m + r]`). Launch: block (32, MMVQ_WARPS / rpc), grid
// (ceil(m / 16), ceil(ncols / (8·NT))) (the `_id` form: y at least the tiles' count); `rpc` the
// one the matvec of one row would take.
#include "mma.cuh"
#include "mmvq.cuh"

#define WIDE_ROWS 16

// Word `i` of `v` (0 past its end), without indexing a register array by a runtime value.
template <int N> __device__ __forceinline__ int word_at(const int (&v)[N], int i) {
    int r = 0;
#pragma unroll
    for (int j = 0; j < N; j++)
        if (i == j) r = v[j];
    return r;
}

// The lane whose slice is the i-th leaf of warp_sum's tree: i's 5 bits reversed.
__device__ __forceinline__ int tree_lane(int i) {
    return ((i & 1) << 4) | ((i & 2) << 2) | (i & 4) | ((i & 8) >> 2) | ((i & 16) >> 4);
}

// Where a CTA's activation columns `c` (0 .. 8·NT) come from (`act`: an activation row) and
// where their outputs go (`out`: an output row, or -1 for none).
// WideDense: columns c0.. of `ncols` activation rows, each its own output row (columns past the
// end read the last row and store nothing).
struct WideDense {
    int c0, ncols;
    __device__ __forceinline__ int act(int c) const { return min(c0 + c, ncols - 1); }
    __device__ __forceinline__ int out(int c) const { return c0 + c < ncols ? c0 + c : -1; }
};
// WideTile: a tile of (token, slot) pairs of one expert (moe.cu's moe_tiles): column c is pair
// `rows[c]` (-1: none; it reads the tile's first pair and stores nothing), whose activation row
// is its token's (`per` > 0: pair / per) or its own (`per` == 0), and whose output row is the pair.
struct WideTile {
    const int *rows;
    int per;
    __device__ __forceinline__ int act(int c) const {
        const int p = rows[c] < 0 ? rows[0] : rows[c];
        return per > 0 ? p / per : p;
    }
    __device__ __forceinline__ int out(int c) const { return rows[c]; }
};

template <typename T, int NT, typename Cols>
__device__ __forceinline__ void mmvq_wide(const typename T::B *__restrict__ w, const block_q8_1 *__restrict__ a,
                                          float *__restrict__ out, const float *__restrict__ add, int nb, int m,
                                          const Cols cols, int rpc) {
    const int wpr = MMVQ_WARPS / rpc, nthreads = wpr * WARP, step = nthreads / T::LPB;
    const int warp = threadIdx.y, lane = threadIdx.x, g = lane / 4, q = lane % 4;
    const int r0 = blockIdx.x * WIDE_ROWS;
    const long long arow = (long long)nb * T::ABLK;
    // Rows past the matrix read the last one; their results are not stored (columns: `cols`).
    const typename T::B *wa = w + (long long)min(r0 + g, m - 1) * nb;
    const typename T::B *wb = w + (long long)min(r0 + g + 8, m - 1) * nb;
    const block_q8_1 *bcol[NT], *ocol[NT][2];  // this lane's B column; its outputs' columns
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        bcol[nt] = a + (long long)cols.act(8 * nt + g) * arow;
#pragma unroll
        for (int e = 0; e < 2; e++) ocol[nt][e] = a + (long long)cols.act(8 * nt + 2 * q + e) * arow;
    }
    // Outputs e of n-tile nt: weight row g + 8·(e / 2), activation row 8·nt + 2q + e % 2.
    float level[5][NT][4], cur[NT][4];
#pragma unroll 1
    for (int i = 0; i < WARP; i++) {
        const int tid = warp * WARP + tree_lane(i), t = tid % T::LPB;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) cur[nt][e] = 0.0f;
        for (int ib = tid / T::LPB; ib < nb; ib += step) {
            const typename T::W sa = T::weight(wa + ib, t), sb = T::weight(wb + ib, t);
            const long long ao = (long long)ib * T::ABLK;
            float x[NT][4] = {};
#pragma unroll
            for (int p = 0; p < T::PARTS; p++) {
                const int a0 = word_at(sa.q[p], q), a1 = word_at(sb.q[p], q);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const int b0 = q < T::WORDS ? T::act_word(bcol[nt] + ao, t, p, q) : 0;
                    int d[4];
                    mma_s8_16816(d, a0, a1, b0);
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        x[nt][e] = T::part(e < 2 ? sa : sb, ocol[nt][e % 2] + ao, t, p, d[e], x[nt][e]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    cur[nt][e] = __fadd_rn(cur[nt][e], T::finish(e < 2 ? sa : sb, ocol[nt][e % 2] + ao, t, x[nt][e]));
        }
        // Into the tree: while the leaf count's low bits are set, add the finished sum of the
        // level below (as warp_sum adds lane l's value and lane l ^ 2^(4-b)'s), then keep the
        // result at the first level left open. (The levels are indexed by constants only, so
        // they stay in registers.)
        bool open = true;
#pragma unroll
        for (int b = 0; b < 5; b++) {
            if (!open) continue;
            const bool carry = (i >> b) & 1;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    if (carry)
                        cur[nt][e] = __fadd_rn(level[b][nt][e], cur[nt][e]);
                    else
                        level[b][nt][e] = cur[nt][e];
                }
            open = carry;
        }
    }
    // `cur` is the warp's sum (leaf 31 closed every level). The warps' sums in warp order.
    __shared__ float part[MMVQ_WARPS][WIDE_ROWS][8 * NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) part[warp][g + 8 * (e / 2)][8 * nt + 2 * q + e % 2] = cur[nt][e];
    __syncthreads();
    for (int o = warp * WARP + lane; o < WIDE_ROWS * 8 * NT; o += nthreads) {
        const int r = o / (8 * NT), c = o % (8 * NT), row = r0 + r, col = cols.out(c);
        float s = part[0][r][c];
        for (int x = 1; x < wpr; x++) s += part[x][r][c];
        if (row < m && col >= 0) {
            const long long oi = (long long)col * m + row;
            out[oi] = add ? s + add[oi] : s;
        }
    }
}

#define MMVQ_WIDE(T, NAME, NT)                                                                             \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS)                                            \
        mmvq_wide_##NAME##_##NT(const T::B *w, const block_q8_1 *a, float *out, const float *add, int nb, int m, \
                                int ncols, int rpc) { pdl_enter();                                        \
        mmvq_wide<T, NT>(w, a, out, add, nb, m, WideDense{(int)blockIdx.y * 8 * NT, ncols}, rpc);          \
    }
// The grouped MoE form: CTA row y is tile y of moe_tiles' tiles (those past `*n_tiles` return at
// once), its weight the tile's expert in the table of addresses, its columns the tile's pairs.
// Each pair's output has the bits of its expert's one-row matvec, as the indirect matvec's.
#define MMVQ_WIDE_ID(T, NAME, NT)                                                                          \
    extern "C" __global__ void __launch_bounds__(MMVQ_THREADS) mmvq_wide_##NAME##_##NT##_id(                 \
        const unsigned long long *experts, const int *tile_expert, const int *tile_rows, const int *n_tiles, \
        int ne, const block_q8_1 *a, float *out, int nb, int m, int per, int rpc) { pdl_enter();             \
        const int tile = blockIdx.y;                                                                       \
        if (tile >= *n_tiles) return;                                                                      \
        const int e = min(max(tile_expert[tile], 0), ne - 1);                                              \
        const WideTile cols{tile_rows + (long long)tile * 8 * NT, per};                                     \
        mmvq_wide<T, NT>((const T::B *)experts[e], a, out, nullptr, nb, m, cols, rpc);                     \
    }
#define MMVQ_WIDE_ALL(T, NAME) \
    MMVQ_WIDE(T, NAME, 2) MMVQ_WIDE(T, NAME, 4) MMVQ_WIDE_ID(T, NAME, 2) MMVQ_WIDE_ID(T, NAME, 4)

MMVQ_WIDE_ALL(TQ4_0, q4_0)
MMVQ_WIDE_ALL(TQ4_1, q4_1)
MMVQ_WIDE_ALL(TQ5_0, q5_0)
MMVQ_WIDE_ALL(TQ5_1, q5_1)
MMVQ_WIDE_ALL(TQ8_0, q8_0)
MMVQ_WIDE_ALL(TQ4_K, q4_K)
MMVQ_WIDE_ALL(TQ5_K, q5_K)
MMVQ_WIDE_ALL(TQ6_K, q6_K)
