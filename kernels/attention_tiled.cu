// Attention over the f16 KV cache for prefill (many query tokens); attention.cu has the rules.
//
// attention_f16_tiled (prefill: many query tokens): the same function, computed a tile at a
// time. A CTA of 4 warps takes TILE_ROWS consecutive query rows of one KV head (row r = token
// r / group, head kvh * group + r % group, group = n_head / n_kv_head), so every K/V tile it
// stages in shared memory (K, then V, in one buffer of half2 rows) serves TILE_ROWS queries
// instead of one. In each warp, lane j scores key j of the 32-key tile against the warp's
// ROWS_PER_WARP rows, the online softmax runs over the tile, then lanes own value-dimension
// pairs and accumulate p_j · v_j. head_dim even (the launcher falls back to attention_f16
// otherwise). `sinks`: as attention.cu's. Launch: grid (ceil(n_tokens * group / TILE_ROWS),
// n_kv_head), block (32, 4), dynamic shared memory (TILE_ROWS * head_dim + TILE_KEYS *
// (head_dim / 2 + 1)) * 4 bytes.
// attention_q8_0_tiled: the same over q8_0 caches (head_dim a multiple of 32): the tile holds
// the quants (exact in f16) and each key's block scales (1 KiB more, static), an element d·q in
// f32 as attention.cu's kernels compute it.
// kv_table (null: k and v): the caches of the entry of the CTA's first token (kv_rows.cuh; a
// paged sequence's prefill step, whose tokens are one sequence's and share one cache).
#include "attention.cuh"

#define ATT_WARPS 4
#define ROWS_PER_WARP 4
#define TILE_ROWS (ATT_WARPS * ROWS_PER_WARP)
#define TILE_KEYS 32
#define MAX_PAIRS_PER_LANE (MAX_HEAD_DIM / 2 / WARP)

// Keys t0 .. t0 + TILE_KEYS of one KV head (its first element `head` in a row of `row_len`
// elements; position p at row kv_row(loc, p)) into the shared tile as half2 rows of hd2 + 1
// words; keys from `end` on as zeros.
// q8_0: the quants, and each key's block scales in `scales` ([TILE_KEYS][MAX_HEAD_DIM / 32]).
// Every thread of the CTA takes part.
template <bool Q8>
__device__ __forceinline__ void load_tile(__half2 *tile, float *scales, const void *cache, const KvLoc &loc,
                                          long long head, long long row_len, int t0, int end, int hd2, int tid) {
    for (int i = tid; i < TILE_KEYS * hd2; i += WARP * ATT_WARPS) {
        const int j = i / hd2, d2 = i % hd2, key = t0 + j;
        __half2 x = __floats2half2_rn(0.0f, 0.0f);
        float sc = 0.0f;
        if (key < end) {  // a page is looked up only for a position the cache holds
            const long long e = head + kv_row(loc, key) * row_len + 2 * d2;
            x = kv_pair<Q8>(cache, e);
            if (Q8 && d2 % 16 == 0) sc = kv_scale<Q8>(cache, e);
        }
        tile[j * (hd2 + 1) + d2] = x;
        if (Q8 && d2 % 16 == 0) scales[j * (MAX_HEAD_DIM / 32) + d2 / 16] = sc;
    }
}

// Dynamic shared memory of attention_f16_tiled: the Q rows as f32 ([TILE_ROWS][head_dim]), then
// one K-or-V tile as half2 rows of head_dim / 2 + 1 words (the extra word keeps lanes reading
// different keys' rows on different banks). 32.1 KiB at head_dim 256; the launcher in
// src/cuda/attention.rs computes the same size.
template <bool Q8>
__device__ __forceinline__ void attention_tiled(const float *__restrict__ q, const int *__restrict__ positions,
                                                const void *k, const void *v, float *__restrict__ out,
                                                int n_head, int n_kv_head, int head_dim, int kv_len, float scale,
                                                float softcap, int window, int causal, int n_tokens,
                                                const unsigned long long *__restrict__ kv_table,
                                                const float *__restrict__ sinks) {
    DYNAMIC_SHARED(float, smem);
    __shared__ float s_scale[Q8 ? TILE_KEYS * (MAX_HEAD_DIM / 32) : 1];
    __shared__ int s_lo[TILE_ROWS], s_hi[TILE_ROWS];
    __shared__ int s_range[2];
    const int hd2 = head_dim / 2, stride = hd2 + 1;
    float *qs = smem;                                     // [TILE_ROWS][head_dim]
    __half2 *kvs = (__half2 *)(qs + TILE_ROWS * head_dim);  // [TILE_KEYS][stride]
    const int group = n_head / n_kv_head;
    const int kvh = blockIdx.y;
    const int n_rows = n_tokens * group;
    const int row0 = blockIdx.x * TILE_ROWS;
    const int lane = threadIdx.x, warp = threadIdx.y;
    const int tid = warp * WARP + lane;
    const float neg_inf = -__int_as_float(0x7f800000);
    const KvLoc loc = kv_loc(kv_table, row0 / group, k, v);

    // Each row's visible keys [lo, hi), and the CTA's union.
    if (tid < TILE_ROWS) {
        const int r = row0 + tid;
        int lo = 0, hi = 0;
        if (r < n_rows) visible_keys(causal ? positions[r / group] : 0, kv_len, window, causal, &lo, &hi);
        s_lo[tid] = lo;
        s_hi[tid] = hi;
    }
    // The query rows (zeros past the last row).
    for (int i = tid; i < TILE_ROWS * head_dim; i += WARP * ATT_WARPS) {
        const int rr = i / head_dim, d = i % head_dim, r = row0 + rr;
        float val = 0.0f;
        if (r < n_rows) {
            const int token = r / group, h = kvh * group + r % group;
            val = q[((long long)token * n_head + h) * head_dim + d];
        }
        qs[i] = val;
    }
    __syncthreads();
    if (tid == 0) {
        int lo = 0x7fffffff, hi = 0;
        for (int r = 0; r < TILE_ROWS; r++) {
            if (s_hi[r] > s_lo[r]) {
                lo = min(lo, s_lo[r]);
                hi = max(hi, s_hi[r]);
            }
        }
        s_range[0] = hi > 0 ? lo : 0;
        s_range[1] = hi;
    }
    __syncthreads();
    const int cta_lo = s_range[0], cta_hi = s_range[1];

    const int my0 = warp * ROWS_PER_WARP;  // this warp's first row in the tile
    int lo[ROWS_PER_WARP], hi[ROWS_PER_WARP];
    float m[ROWS_PER_WARP], l[ROWS_PER_WARP], p[ROWS_PER_WARP];
    float2 acc[ROWS_PER_WARP][MAX_PAIRS_PER_LANE];
    int warp_lo = 0x7fffffff, warp_hi = 0;
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; r++) {
        lo[r] = s_lo[my0 + r];
        hi[r] = s_hi[my0 + r];
        if (hi[r] > lo[r]) {
            warp_lo = min(warp_lo, lo[r]);
            warp_hi = max(warp_hi, hi[r]);
        }
        m[r] = neg_inf;
        l[r] = 0.0f;
        p[r] = 0.0f;
#pragma unroll
        for (int i = 0; i < MAX_PAIRS_PER_LANE; i++) acc[r][i] = make_float2(0.0f, 0.0f);
    }
    const long long row_len = (long long)n_kv_head * head_dim;
    const long long head = (long long)kvh * head_dim;  // the head's first element in a row

    for (int t0 = cta_lo; t0 < cta_hi; t0 += TILE_KEYS) {
        // Every warp passes every barrier; a warp none of whose rows see this tile skips the
        // arithmetic only.
        const bool active = t0 < warp_hi && t0 + TILE_KEYS > warp_lo;
        __syncthreads();  // the previous V tile is no longer read
        load_tile<Q8>(kvs, s_scale, loc.k, loc, head, row_len, t0, cta_hi, hd2, tid);
        __syncthreads();
        if (active) {
            // Scores: lane j against key t0 + j, for each of the warp's rows.
            const int key = t0 + lane;
            float s[ROWS_PER_WARP];
#pragma unroll
            for (int r = 0; r < ROWS_PER_WARP; r++) s[r] = 0.0f;
            const __half2 *kr = kvs + lane * stride;
            for (int d2 = 0; d2 < hd2; d2++) {
                float2 kf = __half22float2(kr[d2]);
                if (Q8) {
                    const float sc = s_scale[lane * (MAX_HEAD_DIM / 32) + d2 / 16];
                    kf.x *= sc;
                    kf.y *= sc;
                }
#pragma unroll
                for (int r = 0; r < ROWS_PER_WARP; r++) {
                    const float2 qf = *(const float2 *)(qs + (my0 + r) * head_dim + 2 * d2);
                    s[r] = fmaf(qf.x, kf.x, fmaf(qf.y, kf.y, s[r]));
                }
            }
#pragma unroll
            for (int r = 0; r < ROWS_PER_WARP; r++) {
                const bool visible = key >= lo[r] && key < hi[r];
                float sc = s[r] * scale;
                if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
                sc = visible ? sc : neg_inf;
                const float m_new = fmaxf(m[r], warp_max(sc));  // warp-uniform
                if (m_new == neg_inf) {
                    p[r] = 0.0f;  // nothing visible yet: m, l and acc stay as they are
                } else {
                    const float corr = expf(m[r] - m_new);  // 0 on the first visible tile
                    p[r] = visible ? expf(sc - m_new) : 0.0f;
                    l[r] = l[r] * corr + warp_sum(p[r]);
                    m[r] = m_new;
#pragma unroll
                    for (int i = 0; i < MAX_PAIRS_PER_LANE; i++) {
                        acc[r][i].x *= corr;
                        acc[r][i].y *= corr;
                    }
                }
            }
        }
        __syncthreads();  // the K tile is no longer read
        load_tile<Q8>(kvs, s_scale, loc.v, loc, head, row_len, t0, cta_hi, hd2, tid);
        __syncthreads();
        if (active) {
            // Values: lane owns dimension pairs lane, lane + 32, ...
            for (int j = 0; j < TILE_KEYS; j++) {
                float pj[ROWS_PER_WARP];
#pragma unroll
                for (int r = 0; r < ROWS_PER_WARP; r++) pj[r] = __shfl_sync(0xffffffffu, p[r], j);
                const __half2 *vr = kvs + j * stride;
#pragma unroll
                for (int i = 0; i < MAX_PAIRS_PER_LANE; i++) {
                    const int d2 = lane + WARP * i;
                    if (d2 < hd2) {
                        float2 vf = __half22float2(vr[d2]);
                        if (Q8) {
                            const float sc = s_scale[j * (MAX_HEAD_DIM / 32) + d2 / 16];
                            vf.x *= sc;
                            vf.y *= sc;
                        }
#pragma unroll
                        for (int r = 0; r < ROWS_PER_WARP; r++) {
                            acc[r][i].x = fmaf(pj[r], vf.x, acc[r][i].x);
                            acc[r][i].y = fmaf(pj[r], vf.y, acc[r][i].y);
                        }
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; r++) {
        const int row = row0 + my0 + r;
        if (row >= n_rows) continue;
        const int token = row / group, h = kvh * group + row % group;
        float *o = out + ((long long)token * n_head + h) * head_dim;
        const float inv = softmax_inv(l[r], m[r], sinks, h);
#pragma unroll
        for (int i = 0; i < MAX_PAIRS_PER_LANE; i++) {
            const int d2 = lane + WARP * i;
            if (d2 < hd2) {
                o[2 * d2] = acc[r][i].x * inv;
                o[2 * d2 + 1] = acc[r][i].y * inv;
            }
        }
    }
}

#define ATTENTION_TILED(NAME, Q8, T)                                                                        \
    extern "C" __global__ void __launch_bounds__(WARP * ATT_WARPS)                                         \
        NAME(const float *__restrict__ q, const int *__restrict__ positions, const T *k, const T *v,       \
             float *__restrict__ out, int n_head, int n_kv_head, int head_dim, int kv_len, float scale,     \
             float softcap, int window, int causal, int n_tokens,                                           \
             const unsigned long long *__restrict__ kv_table, const float *__restrict__ sinks) { pdl_enter(); \
        attention_tiled<Q8>(q, positions, k, v, out, n_head, n_kv_head, head_dim, kv_len, scale, softcap,  \
                            window, causal, n_tokens, kv_table, sinks);                                    \
    }

ATTENTION_TILED(attention_f16_tiled, false, __half)
ATTENTION_TILED(attention_q8_0_tiled, true, block_q8_0)
