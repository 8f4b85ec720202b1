// Rotary position embedding, ggml's `rope_ext` (normal: adjacent pairs; NeoX: halves), with
// linear scaling, YaRN (ext_factor, attn_factor, the ramp between the correction dims the host
// computes as ggml_rope_yarn_corr_dims) and per-pair frequency divisors (`ff`, or null). Heads
// are `head_dim` long; dims n_rot..head_dim are left alone (copied when the output is another
// buffer). Every kernel rotates through `rope_head`, so its forms give the same bits.
//
// rope_f32: `x` is [n_tokens][n_head][head_dim], rotated in place, or, with `src` (same shape;
// null: in place), read from `src`. Launch: grid n_tokens * n_head, block n_rot / 2 threads
// (one per pair, n_rot <= 2048).
// rope_qk_append_f16: a decode or prefill step's attention inputs in one launch: the queries
// rotated from `q_src` into `q_out` (times `q_scale`: 1, or a scale node after the RoPE; with
// `norms` bit 0, each query head RMS-normed first with `q_norm_w` and `q_eps`, bit 1 the keys
// with theirs: the per-head norms of Gemma 3 and Qwen 3, the bits of rms_norm_f32 over
// head_dim-long rows, so the block is then exactly the norm's, rms_threads(head_dim), and
// head_dim at most ROPE_NORM_MAX_HEAD), the keys rotated from `k_src` straight into the f16 key
// cache at their positions, and the values appended to the f16 value cache (rounded to f16 as
// kv_append.cu does). Launch: grid (n_tokens, n_head + 2 * n_kv_head), block at least n_rot / 2
// threads (blockIdx.y: query heads, then key heads, then each KV head's slice of the value row;
// `v_row` a multiple of n_kv_head). With `kv_table` (not null), token t's keys and values go
// into the caches of its table entry (kv_rows.cuh: a batched decode step's tokens each their
// sequence's; contiguous or paged).
// rope_qk_append_q8_0: the same into q8_0 caches (head_dim and the value slices multiples of 32;
// the keys rotated into shared memory, then quantized as kv_append2_q8_0 quantizes).
#include "kv_rows.cuh"
#include "norm.cuh"

// Longest head whose RMS norm rope_qk_append_f16 takes in (staged in shared memory).
#define ROPE_NORM_MAX_HEAD 256

// One head: reads `in` (`head_dim` values), writes the rotated head to `out` (f32) and/or
// `out_h` (f16; either may be null). Thread `pair` rotates one pair; all threads copy the
// unrotated dims when the output is not the input. `out` receives every value times
// `out_scale` (1: the rotation alone; else the bits of a scale_f32 launch after it, as Gemma
// scales its queries).
__device__ __forceinline__ void rope_head(const float *in, float *out, __half *out_h, int pos,
                                          const float *__restrict__ ff, int head_dim, int n_rot, int neox,
                                          float freq_base, float freq_scale, float ext_factor,
                                          float attn_factor, float corr0, float corr1, float out_scale) {
    const int pair = threadIdx.x;
    if (in != out || out_scale != 1.0f)
        for (int i = n_rot + pair; i < head_dim; i += blockDim.x) {
            if (out) out[i] = in[i] * out_scale;
            if (out_h) out_h[i] = __float2half(in[i]);
        }
    if (2 * pair >= n_rot) return;
    const int i0 = 2 * pair;
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    const float theta_extrap = (float)pos * powf(theta_scale, (float)pair) / (ff ? ff[pair] : 1.0f);
    const float theta_interp = freq_scale * theta_extrap;
    float theta = theta_interp;
    float mscale = attn_factor;
    if (ext_factor != 0.0f) {
        const float y = ((float)(i0 / 2) - corr0) / fmaxf(0.001f, corr1 - corr0);
        const float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
        const float mix = ramp * ext_factor;
        theta = theta_interp * (1.0f - mix) + theta_extrap * mix;
        mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
    }
    const float c = cosf(theta) * mscale, s = sinf(theta) * mscale;
    const int a = neox ? pair : i0;
    const int b = neox ? pair + n_rot / 2 : i0 + 1;
    const float x0 = in[a], x1 = in[b];
    const float r0 = x0 * c - x1 * s, r1 = x0 * s + x1 * c;
    if (out) {
        out[a] = r0 * out_scale;
        out[b] = r1 * out_scale;
    }
    if (out_h) {
        out_h[a] = __float2half(r0);
        out_h[b] = __float2half(r1);
    }
}

extern "C" __global__ void rope_f32(const float *src, float *x, const int *__restrict__ positions,
                                    const float *__restrict__ ff, int n_head, int head_dim, int n_rot,
                                    int neox, float freq_base, float freq_scale, float ext_factor,
                                    float attn_factor, float corr0, float corr1) {
    pdl_enter();
    const int token = blockIdx.x / n_head;
    float *head = x + (long long)blockIdx.x * head_dim;
    const float *in = src ? src + (long long)blockIdx.x * head_dim : head;
    rope_head(in, head, nullptr, positions[token], ff, head_dim, n_rot, neox, freq_base, freq_scale,
              ext_factor, attn_factor, corr0, corr1, 1.0f);
}

template <bool Q8>
__device__ __forceinline__ void rope_qk_append(const float *q_src, float *q_out, const float *k_src,
                                               const float *__restrict__ v_src, const int *__restrict__ positions,
                                               const float *__restrict__ ff, void *k_cache, void *v_cache,
                                               int n_head, int n_kv_head, int head_dim, int v_row, int n_rot,
                                               int neox, float freq_base, float freq_scale, float ext_factor,
                                               float attn_factor, float corr0, float corr1, float q_scale,
                                               const float *__restrict__ q_norm_w,
                                               const float *__restrict__ k_norm_w, int norms, float q_eps,
                                               float k_eps, const unsigned long long *__restrict__ kv_table) {
    __shared__ float s_head[ROPE_NORM_MAX_HEAD];
    __shared__ float s_rot[Q8 ? ROPE_NORM_MAX_HEAD : 1];
    const int token = blockIdx.x, h = blockIdx.y;
    const int pos = positions[token];
    const KvLoc loc = kv_loc(kv_table, token, k_cache, v_cache);
    k_cache = loc.k;
    v_cache = loc.v;
    if (h < n_head) {
        const long long at = ((long long)token * n_head + h) * head_dim;
        const float *in = q_src + at;
        if (norms & 1) {
            rms_norm_row_at<false, false>(in, nullptr, nullptr, q_norm_w, s_head, nullptr, head_dim, q_eps);
            __syncthreads();
            in = s_head;
        }
        rope_head(in, q_out + at, nullptr, pos, ff, head_dim, n_rot, neox, freq_base, freq_scale, ext_factor,
                  attn_factor, corr0, corr1, q_scale);
    } else if (h < n_head + n_kv_head) {
        const int kh = h - n_head;
        const long long k_row = (long long)n_kv_head * head_dim;
        const float *in = k_src + token * k_row + (long long)kh * head_dim;
        if (norms & 2) {
            rms_norm_row_at<false, false>(in, nullptr, nullptr, k_norm_w, s_head, nullptr, head_dim, k_eps);
            __syncthreads();
            in = s_head;
        }
        const long long at = kv_row(loc, pos) * k_row + (long long)kh * head_dim;
        if (Q8) {
            // Rotated into shared memory, then quantized a block a warp.
            rope_head(in, s_rot, nullptr, pos, ff, head_dim, n_rot, neox, freq_base, freq_scale, ext_factor,
                      attn_factor, corr0, corr1, 1.0f);
            __syncthreads();
            kv_store<true>(k_cache, at, s_rot, head_dim);
        } else {
            rope_head(in, nullptr, (__half *)k_cache + at, pos, ff, head_dim, n_rot, neox, freq_base, freq_scale,
                      ext_factor, attn_factor, corr0, corr1, 1.0f);
        }
    } else {
        // KV head `vh`'s slice of the value row (the row splits evenly among the KV heads).
        const int vh = h - n_head - n_kv_head, chunk = v_row / n_kv_head;
        kv_store<Q8>(v_cache, kv_row(loc, pos) * v_row + (long long)vh * chunk,
                     v_src + (long long)token * v_row + (long long)vh * chunk, chunk);
    }
}

#define ROPE_QK_APPEND(NAME, Q8, T)                                                                          \
    extern "C" __global__ void NAME(const float *q_src, float *q_out, const float *k_src,                  \
                                    const float *__restrict__ v_src, const int *__restrict__ positions,    \
                                    const float *__restrict__ ff, T *k_cache, T *v_cache, int n_head,      \
                                    int n_kv_head, int head_dim, int v_row, int n_rot, int neox,           \
                                    float freq_base, float freq_scale, float ext_factor, float attn_factor, \
                                    float corr0, float corr1, float q_scale,                               \
                                    const float *__restrict__ q_norm_w, const float *__restrict__ k_norm_w, \
                                    int norms, float q_eps, float k_eps,                                   \
                                    const unsigned long long *__restrict__ kv_table) { pdl_enter();        \
        rope_qk_append<Q8>(q_src, q_out, k_src, v_src, positions, ff, k_cache, v_cache, n_head, n_kv_head,   \
                           head_dim, v_row, n_rot, neox, freq_base, freq_scale, ext_factor, attn_factor,    \
                           corr0, corr1, q_scale, q_norm_w, k_norm_w, norms, q_eps, k_eps, kv_table);       \
    }

ROPE_QK_APPEND(rope_qk_append_f16, false, __half)
ROPE_QK_APPEND(rope_qk_append_q8_0, true, block_q8_0)
