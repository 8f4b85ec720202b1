// Attention over an f16 KV cache, and the append that fills it.
//
// attention_f16: one CTA of 4 warps per (query token, head); the warps split the visible keys
// and each keeps a running max, denominator and output (flash attention's online softmax),
// merged at the end. Causal with an optional sliding window (a query at position p sees keys
// p - window < j <= p; window 0: all j <= p), or non-causal (every key below kv_len); scores
// `scale * q·k`, soft-capped as `cap * tanh(s / cap)` when cap > 0; GQA (query head h reads KV
// head h / (n_head / n_kv_head)). Any head_dim up to 256 (lane i holds elements i, i + 32, ...;
// 64, 80, 96, 128, 256 and the synthetic models' 16 all occur). A query that sees no
// key (a negative position) gets zeros.
// Layouts: q and out [n_tokens][n_head][head_dim] f32; k and v [capacity][n_kv_head][head_dim]
// f16. Launch: grid n_tokens * n_head, block (32, 4).
//
// kv_append_f16: `cache[positions[t]][i] = half(src[t][i])` for rows of `row` values.
// Launch: grid n_tokens, block 256.
#include "common.cuh"

#define ATT_WARPS 4
#define MAX_HEAD_DIM 256
#define PER_LANE (MAX_HEAD_DIM / WARP)

extern "C" __global__ void __launch_bounds__(WARP * ATT_WARPS)
    attention_f16(const float *__restrict__ q, const int *__restrict__ positions,
                  const __half *__restrict__ k, const __half *__restrict__ v, float *__restrict__ out,
                  int n_head, int n_kv_head, int head_dim, int kv_len, float scale, float softcap,
                  int window, int causal) {
    __shared__ float s_m[ATT_WARPS], s_l[ATT_WARPS];
    __shared__ float s_acc[ATT_WARPS][MAX_HEAD_DIM];
    const int token = blockIdx.x / n_head, h = blockIdx.x % n_head;
    const int kvh = h / (n_head / n_kv_head);
    const int lane = threadIdx.x, warp = threadIdx.y;
    const float *qh = q + (long long)blockIdx.x * head_dim;
    float *oh = out + (long long)blockIdx.x * head_dim;

    int lo = 0, hi = kv_len;
    const int pos = positions[token];
    if (causal) {
        if (pos < 0) {
            hi = 0;
        } else {
            hi = min(pos + 1, kv_len);
            lo = window > 0 ? max(0, pos + 1 - window) : 0;
            lo = min(lo, hi);
        }
    }

    float qv[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        qv[i] = lane + WARP * i < head_dim ? qh[lane + WARP * i] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -__int_as_float(0x7f800000), l = 0.0f;
    const long long row = (long long)n_kv_head * head_dim;
    for (int j = lo + warp; j < hi; j += ATT_WARPS) {
        const __half *kj = k + j * row + (long long)kvh * head_dim;
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++)
            if (lane + WARP * i < head_dim) d = fmaf(qv[i], __half2float(kj[lane + WARP * i]), d);
        float s = warp_sum(d) * scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
        const float p = expf(s - m_new);
        l = l * corr + p;
        const __half *vj = v + j * row + (long long)kvh * head_dim;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++)
            if (lane + WARP * i < head_dim) acc[i] = fmaf(p, __half2float(vj[lane + WARP * i]), acc[i] * corr);
        m = m_new;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < PER_LANE; i++)
        if (lane + WARP * i < head_dim) s_acc[warp][lane + WARP * i] = acc[i];
    __syncthreads();
    if (warp != 0) return;
    float gm = s_m[0];
    for (int w = 1; w < ATT_WARPS; w++) gm = fmaxf(gm, s_m[w]);
    float gl = 0.0f, f[ATT_WARPS];
    for (int w = 0; w < ATT_WARPS; w++) {
        f[w] = s_l[w] > 0.0f ? expf(s_m[w] - gm) : 0.0f;
        gl += s_l[w] * f[w];
    }
    const float inv = gl > 0.0f ? 1.0f / gl : 0.0f;
    for (int i = lane; i < head_dim; i += WARP) {
        float o = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) o += s_acc[w][i] * f[w];
        oh[i] = o * inv;
    }
}

extern "C" __global__ void kv_append_f16(const float *__restrict__ src, const int *__restrict__ positions,
                                         __half *__restrict__ cache, int row) {
    const float *s = src + (long long)blockIdx.x * row;
    __half *d = cache + (long long)positions[blockIdx.x] * row;
    for (int i = threadIdx.x; i < row; i += blockDim.x) d[i] = __float2half(s[i]);
}
