// Rotary position embedding in place, ggml's `rope_ext` (normal: adjacent pairs; NeoX: halves),
// with linear scaling, YaRN (ext_factor, attn_factor, the ramp between the correction dims the
// host computes as ggml_rope_yarn_corr_dims) and per-pair frequency divisors (`ff`, or null).
// `x` is [n_tokens][n_head][head_dim]; dims n_rot..head_dim are left alone. With `src` (same
// shape; null: in place) the rotation reads `src` and writes `x`, copying the unrotated dims, so
// a plan needs no copy ahead of it.
// Launch: grid n_tokens * n_head, block n_rot / 2 threads (one per pair, n_rot <= 2048).
#include "common.cuh"

extern "C" __global__ void rope_f32(const float *src, float *x, const int *__restrict__ positions,
                                    const float *__restrict__ ff, int n_head, int head_dim, int n_rot,
                                    int neox, float freq_base, float freq_scale, float ext_factor,
                                    float attn_factor, float corr0, float corr1) {
    const int pair = threadIdx.x;
    const int token = blockIdx.x / n_head;
    float *head = x + (long long)blockIdx.x * head_dim;
    const float *in = src ? src + (long long)blockIdx.x * head_dim : head;
    if (src)
        for (int i = n_rot + pair; i < head_dim; i += blockDim.x) head[i] = in[i];
    if (2 * pair >= n_rot) return;
    const int i0 = 2 * pair;
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    const float theta_extrap = (float)positions[token] * powf(theta_scale, (float)pair) / (ff ? ff[pair] : 1.0f);
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
    head[a] = x0 * c - x1 * s;
    head[b] = x0 * s + x1 * c;
}
