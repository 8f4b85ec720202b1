// Attention over the f16 KV cache for steps of a few query tokens (decode, verification).
//
// attention_f16: one CTA of 4-16 warps per (query token, head); the warps split the visible
// keys and each keeps a running max, denominator and output (flash attention's online softmax),
// merged at the end in warp order. The launcher picks 16 warps for steps of up to 8 tokens
// whose heads leave most SMs idle (decode, verification: the same count for each, so a token's
// result does not depend on the step's other tokens), else 4. Causal with an optional sliding
// window (a query at position p sees keys p - window < j <= p; window 0: all j <= p), or
// non-causal (every key below kv_len); scores `scale * q·k`, soft-capped as
// `cap * tanh(s / cap)` when cap > 0; GQA (query head h reads KV head h / (n_head /
// n_kv_head)). Any head_dim up to 256 (lane i holds elements i, i + 32, ...; 64, 80, 96, 128,
// 256 and the synthetic models' 16 all occur). A query that sees no
// key (a negative position) gets zeros.
// Layouts: q and out [n_tokens][n_head][head_dim] f32; k and v [capacity][n_kv_head][head_dim]
// f16. Launch: grid n_tokens * n_head, block (32, warps), warps 1..DEC_MAX_WARPS.
// sinks (both kernels; null: none): gpt-oss's per-head sink logits (attention.cuh's
// softmax_inv). kv_table (both kernels; null: every token reads k and v): token t reads the
// cache of its table entry instead (kv_rows.cuh: each token of a batched decode step its own
// sequence's, contiguous or paged). A token's bits are the same either way. q8out (attention_f16,
// attention_q8_0 and their split forms; null: none; head_dim a multiple of 32): the output also
// as Q8_1 blocks for the next matvec, `q8_1_store_warp`'s bytes (quantize.cu's), each warp that
// writes a head's output holding 32 consecutive values of it, one block.
//
// attention_f16_split (below) computes the same function with the keys split among CTAs.
// attention_q8_0 and attention_q8_0_split: the same over q8_0 caches (kv_rows.cuh; head_dim a
// multiple of 32), each key and value element d·q in f32.
#include "attention.cuh"

#define DEC_MAX_WARPS 16

// MAXD: the longest key head (registers and shared memory are sized for it); values are
// `head_dim_v` long, at `v_row` elements a cache row and `v_head` a KV head (their own cache:
// the keys' sizes; DeepSeek's latent cache: the keys' front).
template <bool Q8, int MAXD>
__device__ __forceinline__ void attention_dec(const float *__restrict__ q, const int *__restrict__ positions,
                                              const void *k, const void *v, float *__restrict__ out, int n_head,
                                              int n_kv_head, int head_dim, int head_dim_v, int v_row, int v_head,
                                              int kv_len, float scale, float softcap, int window, int causal,
                                              const unsigned long long *__restrict__ kv_table,
                                              const float *__restrict__ sinks, block_q8_1 *__restrict__ q8out) {
    constexpr int PER = MAXD / WARP;
    __shared__ float s_m[DEC_MAX_WARPS], s_l[DEC_MAX_WARPS], s_f[DEC_MAX_WARPS];
    __shared__ float s_acc[DEC_MAX_WARPS][MAXD];
    const int nwarps = blockDim.y;
    const int token = blockIdx.x / n_head, h = blockIdx.x % n_head;
    const int kvh = h / (n_head / n_kv_head);
    const int lane = threadIdx.x, warp = threadIdx.y;
    const KvLoc loc = kv_loc(kv_table, token, k, v);
    k = loc.k;
    v = loc.v;
    const float *qh = q + (long long)blockIdx.x * head_dim;
    float *oh = out + (long long)blockIdx.x * head_dim_v;

    int lo, hi;
    visible_keys(positions[token], kv_len, window, causal, &lo, &hi);

    float qv[PER], acc[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
        qv[i] = lane + WARP * i < head_dim ? qh[lane + WARP * i] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -__int_as_float(0x7f800000), l = 0.0f;
    const long long row = (long long)n_kv_head * head_dim;
    for (int j = lo + warp; j < hi; j += nwarps) {
        const long long rj = kv_row(loc, j);
        const long long kj = rj * row + (long long)kvh * head_dim;  // the key's first element
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < PER; i++)
            if (lane + WARP * i < head_dim) d = fmaf(qv[i], kv_value<Q8>(k, kj + lane + WARP * i), d);
        float s = warp_sum(d) * scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
        const float p = expf(s - m_new);
        l = l * corr + p;
        const long long vj = rj * v_row + (long long)kvh * v_head;
#pragma unroll
        for (int i = 0; i < PER; i++)
            if (lane + WARP * i < head_dim_v) acc[i] = fmaf(p, kv_value<Q8>(v, vj + lane + WARP * i), acc[i] * corr);
        m = m_new;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < PER; i++)
        if (lane + WARP * i < head_dim_v) s_acc[warp][lane + WARP * i] = acc[i];
    __syncthreads();
    if (warp != 0) return;
    float gm = s_m[0];
    for (int w = 1; w < nwarps; w++) gm = fmaxf(gm, s_m[w]);
    float gl = 0.0f;
    for (int w = 0; w < nwarps; w++) {
        const float f = s_l[w] > 0.0f ? expf(s_m[w] - gm) : 0.0f;
        if (lane == 0) s_f[w] = f;  // each warp's factor, read back below (warp 0 alone)
        gl += s_l[w] * f;
    }
    __syncwarp();
    const float inv = softmax_inv(gl, gm, sinks, h);
    for (int i = lane; i < head_dim_v; i += WARP) {
        float o = 0.0f;
        for (int w = 0; w < nwarps; w++) o += s_acc[w][i] * s_f[w];
        oh[i] = o * inv;
        if (q8out) q8_1_store_warp(o * inv, q8out + ((long long)blockIdx.x * head_dim_v + i - lane) / QK);
    }
}

#define ATTENTION_DEC(NAME, Q8, T)                                                                          \
    extern "C" __global__ void __launch_bounds__(WARP * DEC_MAX_WARPS)                                     \
        NAME(const float *__restrict__ q, const int *__restrict__ positions, const T *k, const T *v,       \
             float *__restrict__ out, int n_head, int n_kv_head, int head_dim, int kv_len, float scale,     \
             float softcap, int window, int causal, const unsigned long long *__restrict__ kv_table,        \
             const float *__restrict__ sinks, block_q8_1 *__restrict__ q8out) { pdl_enter();               \
        attention_dec<Q8, MAX_HEAD_DIM>(q, positions, k, v, out, n_head, n_kv_head, head_dim, head_dim,    \
                                        n_kv_head * head_dim, head_dim, kv_len, scale, softcap, window,    \
                                        causal, kv_table, sinks, q8out);                                   \
    }

ATTENTION_DEC(attention_f16, false, __half)
ATTENTION_DEC(attention_q8_0, true, block_q8_0)

// Keys and values of different head sizes in their own caches (DeepSeek's decompressed form:
// keys of 192, values of 128): attention_kv_f16 / _q8_0, heads of up to MAX_HEAD_DIM, no table.
#define ATTENTION_KV(NAME, Q8, T)                                                                           \
    extern "C" __global__ void __launch_bounds__(WARP * DEC_MAX_WARPS)                                     \
        NAME(const float *__restrict__ q, const int *__restrict__ positions, const T *k, const T *v,       \
             float *__restrict__ out, int n_head, int n_kv_head, int head_dim, int head_dim_v, int kv_len,  \
             float scale, float softcap, int window, int causal, const float *__restrict__ sinks) { pdl_enter(); \
        attention_dec<Q8, MAX_HEAD_DIM>(q, positions, k, v, out, n_head, n_kv_head, head_dim, head_dim_v,  \
                                        n_kv_head * head_dim_v, head_dim_v, kv_len, scale, softcap, window, \
                                        causal, nullptr, sinks, nullptr);                                  \
    }

ATTENTION_KV(attention_kv_f16, false, __half)
ATTENTION_KV(attention_kv_q8_0, true, block_q8_0)

// DeepSeek's latent attention (MLA): key heads of up to MLA_MAX_HEAD_DIM (the latent and the
// rotated part, 576), values the first head_dim_v of each key (the latent), read from the key
// cache; no table (its plans run batched steps one sequence at a time).
#define MLA_MAX_HEAD_DIM 576
#define ATTENTION_MLA(NAME, Q8, T)                                                                          \
    extern "C" __global__ void __launch_bounds__(WARP * DEC_MAX_WARPS)                                     \
        NAME(const float *__restrict__ q, const int *__restrict__ positions, const T *k,                     \
             float *__restrict__ out, int n_head, int n_kv_head, int head_dim, int head_dim_v, int kv_len,  \
             float scale, float softcap, int window, int causal) { pdl_enter();                            \
        attention_dec<Q8, MLA_MAX_HEAD_DIM>(q, positions, k, k, out, n_head, n_kv_head, head_dim,           \
                                            head_dim_v, n_kv_head * head_dim, head_dim, kv_len, scale,     \
                                            softcap, window, causal, nullptr, nullptr, nullptr);           \
    }

ATTENTION_MLA(attention_mla_f16, false, __half)
ATTENTION_MLA(attention_mla_q8_0, true, block_q8_0)

// attention_f16_split (decode: up to 8 query tokens whose heads leave most SMs idle): the keys
// a query sees split into ranges of `chunk = max(ceil(n / nsplit), SPLIT_MIN_KEYS)` keys (n =
// hi - lo, nsplit = gridDim.y), `active = ceil(n / chunk)` of them, a CTA of SPLIT_WARPS warps
// per (token, head, range); CTAs past the active ranges return at once. A CTA's warps take two
// keys at a time (two dot products in flight, one softmax update) and merge in warp order. One
// active range (short contexts): its CTA writes the output itself. Several: each writes its
// range's max, denominator and unnormalized output to `part`, and the CTA that finishes a
// (token, head) last (a counter per (token, head), reset by that CTA for the next launch)
// merges the ranges in range order and writes the output. The ranges depend only on the
// query's position and gridDim.y, so the bits do not depend on the step's other tokens, nor on
// which CTA merges. Layouts: part [n_tokens * n_head][nsplit][head_dim_v] f32, then
// [n_tokens * n_head][nsplit][2] (max, denominator); counters [n_tokens * n_head] u32, zero
// between launches. Launch: grid (n_tokens * n_head, nsplit <= SPLIT_MAX), block
// (32, SPLIT_WARPS).
// SPLIT_WARPS and SPLIT_MIN_KEYS may be set smaller by the includer (the host check, whose
// emulated threads are costly); the launcher in src/cuda/attention.rs assumes these.
#ifndef SPLIT_WARPS
#define SPLIT_WARPS 16
#endif
#ifndef SPLIT_MIN_KEYS
#define SPLIT_MIN_KEYS 256
#endif
#define SPLIT_MAX 64

// MAXD / MAXDV: the longest key / value head (registers and shared memory are sized for them);
// values are `head_dim_v` long, at `v_row` elements a cache row and `v_head` a KV head, as in
// attention_dec. The partial results of a (token, head) are head_dim_v long.
template <bool Q8, int MAXD, int MAXDV>
__device__ __forceinline__ void attention_split(const float *__restrict__ q, const int *__restrict__ positions,
                                                const void *k, const void *v, float *__restrict__ out,
                                                float *__restrict__ part, unsigned *__restrict__ counters,
                                                int n_head, int n_kv_head, int head_dim, int head_dim_v, int v_row,
                                                int v_head, int kv_len, float scale, float softcap, int window,
                                                int causal, const unsigned long long *__restrict__ kv_table,
                                                const float *__restrict__ sinks, block_q8_1 *__restrict__ q8out) {
    constexpr int PER_K = MAXD / WARP, PER_V = MAXDV / WARP;
    __shared__ float s_m[SPLIT_WARPS], s_l[SPLIT_WARPS], s_f[SPLIT_MAX];
    __shared__ float s_acc[SPLIT_WARPS][MAXDV];
    __shared__ float s_cm, s_cl, s_inv;
    __shared__ int s_last;
    const int nsplit = gridDim.y, split = blockIdx.y;
    const int bh = blockIdx.x;  // token * n_head + head
    const int token = bh / n_head, h = bh % n_head;
    const int kvh = h / (n_head / n_kv_head);
    const int lane = threadIdx.x, warp = threadIdx.y, tid = warp * WARP + lane;
    const int nthreads = WARP * SPLIT_WARPS;
    const float neg_inf = -__int_as_float(0x7f800000);
    const KvLoc loc = kv_loc(kv_table, token, k, v);
    k = loc.k;
    v = loc.v;

    int lo, hi;
    visible_keys(positions[token], kv_len, window, causal, &lo, &hi);
    const int n = hi - lo;
    const int chunk = max((n + nsplit - 1) / nsplit, SPLIT_MIN_KEYS);
    const int active = max(1, (n + chunk - 1) / chunk);  // range 0 writes zeros when n = 0
    if (split >= active) return;
    const int a = lo + split * chunk, b = min(hi, a + chunk);

    const float *qh = q + (long long)bh * head_dim;
    float qv[PER_K], acc[PER_V];
#pragma unroll
    for (int i = 0; i < PER_K; i++) qv[i] = lane + WARP * i < head_dim ? qh[lane + WARP * i] : 0.0f;
#pragma unroll
    for (int i = 0; i < PER_V; i++) acc[i] = 0.0f;
    float m = neg_inf, l = 0.0f;
    const long long row = (long long)n_kv_head * head_dim;
    const long long hb = (long long)kvh * head_dim;  // the key head's first element in a row
    const long long hv = (long long)kvh * v_head;    // the value head's
    for (int j0 = a + warp; j0 < b; j0 += 2 * SPLIT_WARPS) {
        const int j1 = j0 + SPLIT_WARPS;
        const bool two = j1 < b;  // warp-uniform
        const long long r0 = kv_row(loc, j0), r1 = kv_row(loc, two ? j1 : j0);
        const long long e0 = hb + r0 * row, e1 = hb + r1 * row;
        float d0 = 0.0f, d1 = 0.0f;
#pragma unroll
        for (int i = 0; i < PER_K; i++)
            if (lane + WARP * i < head_dim) {
                d0 = fmaf(qv[i], kv_value<Q8>(k, e0 + lane + WARP * i), d0);
                d1 = fmaf(qv[i], kv_value<Q8>(k, e1 + lane + WARP * i), d1);
            }
        float s0 = warp_sum(d0) * scale, s1 = warp_sum(d1) * scale;
        if (softcap > 0.0f) {
            s0 = softcap * tanhf(s0 / softcap);
            s1 = softcap * tanhf(s1 / softcap);
        }
        if (!two) s1 = neg_inf;
        const float m_new = fmaxf(m, fmaxf(s0, s1));  // finite: s0 is
        const float corr = expf(m - m_new);            // 0 on the first keys (m = -inf)
        const float p0 = expf(s0 - m_new), p1 = expf(s1 - m_new);
        l = l * corr + (p0 + p1);
        const long long v0 = hv + r0 * v_row, v1 = hv + r1 * v_row;
#pragma unroll
        for (int i = 0; i < PER_V; i++)
            if (lane + WARP * i < head_dim_v)
                acc[i] = fmaf(p1, kv_value<Q8>(v, v1 + lane + WARP * i),
                              fmaf(p0, kv_value<Q8>(v, v0 + lane + WARP * i), acc[i] * corr));
        m = m_new;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < PER_V; i++)
        if (lane + WARP * i < head_dim_v) s_acc[warp][lane + WARP * i] = acc[i];
    __syncthreads();
    // This range: its warps merged in warp order.
    if (tid == 0) {
        float cm = s_m[0];
        for (int w = 1; w < SPLIT_WARPS; w++) cm = fmaxf(cm, s_m[w]);
        float cl = 0.0f;
        for (int w = 0; w < SPLIT_WARPS; w++) {
            const float f = s_l[w] > 0.0f ? expf(s_m[w] - cm) : 0.0f;
            s_f[w] = f;
            cl += s_l[w] * f;
        }
        s_cm = cm;
        s_cl = cl;
        s_inv = softmax_inv(cl, cm, active == 1 ? sinks : nullptr, h);
    }
    __syncthreads();
    float *oh = out + (long long)bh * head_dim_v;
    if (active == 1) {
        for (int i = tid; i < head_dim_v; i += nthreads) {
            float o = 0.0f;
            for (int w = 0; w < SPLIT_WARPS; w++) o += s_acc[w][i] * s_f[w];
            oh[i] = o * s_inv;
            if (q8out) q8_1_store_warp(o * s_inv, q8out + ((long long)bh * head_dim_v + i - lane) / QK);
        }
        return;
    }
    const long long slot = (long long)bh * nsplit + split;
    float *pacc = part + slot * head_dim_v;
    float *pml = part + (long long)gridDim.x * nsplit * head_dim_v;
    for (int i = tid; i < head_dim_v; i += nthreads) {
        float o = 0.0f;
        for (int w = 0; w < SPLIT_WARPS; w++) o += s_acc[w][i] * s_f[w];
        pacc[i] = o;
    }
    if (tid == 0) {
        pml[2 * slot] = s_cm;
        pml[2 * slot + 1] = s_cl;
    }
    // The last CTA of this (token, head) merges the ranges.
    __threadfence();
    __syncthreads();
    if (tid == 0) s_last = atomicAdd(&counters[bh], 1u) == (unsigned)active - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    if (warp == 0) {
        float gm = neg_inf;
        for (int s = lane; s < active; s += WARP) {
            const long long o = 2 * ((long long)bh * nsplit + s);
            if (__ldcg(pml + o + 1) > 0.0f) gm = fmaxf(gm, __ldcg(pml + o));
        }
        gm = warp_max(gm);
        float gl = 0.0f;
        for (int s = lane; s < active; s += WARP) {
            const long long o = 2 * ((long long)bh * nsplit + s);
            const float ls = __ldcg(pml + o + 1);
            const float f = ls > 0.0f ? expf(__ldcg(pml + o) - gm) : 0.0f;
            s_f[s] = f;
            gl += ls * f;
        }
        gl = warp_sum(gl);
        if (lane == 0) {
            s_inv = softmax_inv(gl, gm, sinks, h);
            counters[bh] = 0;  // ready for the next launch
        }
    }
    __syncthreads();
    const float *acc0 = part + (long long)bh * nsplit * head_dim_v;
    for (int i = tid; i < head_dim_v; i += nthreads) {
        float o = 0.0f;
        for (int s = 0; s < active; s++)
            if (s_f[s] != 0.0f) o = fmaf(__ldcg(acc0 + (long long)s * head_dim_v + i), s_f[s], o);
        oh[i] = o * s_inv;
        if (q8out) q8_1_store_warp(o * s_inv, q8out + ((long long)bh * head_dim_v + i - lane) / QK);
    }
}

#define ATTENTION_SPLIT(NAME, Q8, T)                                                                        \
    extern "C" __global__ void __launch_bounds__(WARP * SPLIT_WARPS)                                       \
        NAME(const float *__restrict__ q, const int *__restrict__ positions, const T *k, const T *v,       \
             float *__restrict__ out, float *__restrict__ part, unsigned *__restrict__ counters, int n_head, \
             int n_kv_head, int head_dim, int kv_len, float scale, float softcap, int window, int causal,   \
             const unsigned long long *__restrict__ kv_table, const float *__restrict__ sinks,              \
             block_q8_1 *__restrict__ q8out) { pdl_enter();                                                 \
        attention_split<Q8, MAX_HEAD_DIM, MAX_HEAD_DIM>(q, positions, k, v, out, part, counters, n_head,   \
                                                        n_kv_head, head_dim, head_dim, n_kv_head * head_dim, \
                                                        head_dim, kv_len, scale, softcap, window, causal,  \
                                                        kv_table, sinks, q8out);                           \
    }

ATTENTION_SPLIT(attention_f16_split, false, __half)
ATTENTION_SPLIT(attention_q8_0_split, true, block_q8_0)

// The split forms of the two kernels above whose values have their own head size (a
// sequence's own caches, no table): attention_kv_*_split (keys and values of different sizes
// in their own caches; partial results head_dim_v long) and attention_mla_*_split (DeepSeek's
// latent attention: key heads of up to 576 values, each key's first head_dim_v, at most
// MLA_MAX_HEAD_DIM_V, its value). Launch as attention_f16_split.
#define MLA_MAX_HEAD_DIM_V 512
#define ATTENTION_KV_SPLIT(NAME, Q8, T)                                                                     \
    extern "C" __global__ void __launch_bounds__(WARP * SPLIT_WARPS)                                       \
        NAME(const float *__restrict__ q, const int *__restrict__ positions, const T *k, const T *v,       \
             float *__restrict__ out, float *__restrict__ part, unsigned *__restrict__ counters, int n_head, \
             int n_kv_head, int head_dim, int head_dim_v, int kv_len, float scale, float softcap, int window, \
             int causal, const float *__restrict__ sinks) { pdl_enter();                                    \
        attention_split<Q8, MAX_HEAD_DIM, MAX_HEAD_DIM>(q, positions, k, v, out, part, counters, n_head,   \
                                                        n_kv_head, head_dim, head_dim_v,                   \
                                                        n_kv_head * head_dim_v, head_dim_v, kv_len, scale, \
                                                        softcap, window, causal, nullptr, sinks, nullptr); \
    }

ATTENTION_KV_SPLIT(attention_kv_f16_split, false, __half)
ATTENTION_KV_SPLIT(attention_kv_q8_0_split, true, block_q8_0)

#define ATTENTION_MLA_SPLIT(NAME, Q8, T)                                                                    \
    extern "C" __global__ void __launch_bounds__(WARP * SPLIT_WARPS)                                       \
        NAME(const float *__restrict__ q, const int *__restrict__ positions, const T *k,                     \
             float *__restrict__ out, float *__restrict__ part, unsigned *__restrict__ counters, int n_head, \
             int n_kv_head, int head_dim, int head_dim_v, int kv_len, float scale, float softcap, int window, \
             int causal) { pdl_enter();                                                                     \
        attention_split<Q8, MLA_MAX_HEAD_DIM, MLA_MAX_HEAD_DIM_V>(                                           \
            q, positions, k, k, out, part, counters, n_head, n_kv_head, head_dim, head_dim_v,              \
            n_kv_head * head_dim, head_dim, kv_len, scale, softcap, window, causal, nullptr, nullptr,      \
            nullptr);                                                                                       \
    }

ATTENTION_MLA_SPLIT(attention_mla_f16_split, false, __half)
ATTENTION_MLA_SPLIT(attention_mla_q8_0_split, true, block_q8_0)
