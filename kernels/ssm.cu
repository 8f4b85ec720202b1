// State-space layers (Mamba, Mamba-2 and the hybrids built on them): the causal depthwise
// convolution and the selective scan of one sequence's step, each carrying the sequence's
// recurrent state in device memory from step to step. The CPU engine's `cpu::ssm_conv` and
// `cpu::ssm_scan` (ggml's `ssm_conv` and `ssm_scan`) define them; summation orders differ only
// where noted.
//
// ssm_conv_f32: a thread per channel, the step's tokens in order. `x` and `out` are
// `[n_t][channels]`, `w` `[channels][d_conv]` (oldest tap first), `bias` `[channels]` or null,
// `state` `[channels][d_conv - 1]` (the channel's previous inputs, oldest first).
// `out[t][c] = Σ_i win_c[t + i] · w[c][i] + bias[c]` over the window `win_c` (the state, then the
// inputs) from its oldest value, as the CPU; the state then keeps the window's last d_conv - 1
// values. Launch: grid ceil(channels / 256), block 256.
//
// ssm_scan_f32: a warp per channel `c` (head `h = c / head_dim`, group `g = h / (n_head /
// n_group)`), lane `l` owning state values l, l + 32, ... (d_state at most SSM_MAX_STATE), kept
// in registers over the step's tokens: `Δ = softplus(dt[t][h])`, `s_k = s_k · exp(Δ · A) +
// B[g][k] · x · Δ`, `y[t][c] = Σ_k s_k · C[g][k] + x · D[h]` (A per head and state index when
// `a_per_state`, else per head). The sum over k is the warp's tree, not the CPU's sequence.
// Layouts: `x`, `y` `[n_t][channels]`; `dt` `[n_t][n_head]` (biased); `bc` `[n_t][2 · n_group ·
// d_state]` (B's groups, then C's); `state` `[channels][d_state]`. Launch: grid
// ceil(channels / 4), block (32, 4).
#include "common.cuh"

#define SSM_MAX_STATE 256
#define SSM_PER_LANE (SSM_MAX_STATE / WARP)

extern "C" __global__ void ssm_conv_f32(const float *__restrict__ x, const float *__restrict__ w,
                                        const float *__restrict__ bias, float *__restrict__ state,
                                        float *__restrict__ out, int n_t, int channels, int d_conv) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    const int hist = d_conv - 1;
    float *s = state + (long long)c * hist;
    const float *wc = w + (long long)c * d_conv;
    const float b = bias ? bias[c] : 0.0f;
    for (int t = 0; t < n_t; t++) {
        float sum = 0.0f;
        for (int i = 0; i < d_conv; i++) {
            const int j = t + i;
            const float v = j < hist ? s[j] : x[(long long)(j - hist) * channels + c];
            sum += v * wc[i];
        }
        out[(long long)t * channels + c] = sum + b;
    }
    // The window's last `hist` values; s[n_t + j] is read before any write reaches it.
    for (int j = 0; j < hist; j++) {
        const int src = n_t + j;
        s[j] = src < hist ? s[src] : x[(long long)(src - hist) * channels + c];
    }
}

// ln(1 + e^x), as ggml (x itself above 20).
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

extern "C" __global__ void ssm_scan_f32(float *__restrict__ state, const float *__restrict__ x,
                                        const float *__restrict__ dt, const float *__restrict__ a,
                                        const float *__restrict__ bc, const float *__restrict__ d,
                                        float *__restrict__ y, int n_t, int d_state, int n_head, int head_dim,
                                        int n_group, int a_per_state) {
    pdl_enter();
    const int channels = n_head * head_dim;
    const int c = blockIdx.x * blockDim.y + threadIdx.y;
    if (c >= channels) return;  // warp-uniform
    const int lane = threadIdx.x;
    const int h = c / head_dim, g = h / (n_head / n_group);
    const int bc_row = 2 * n_group * d_state;
    float *sc = state + (long long)c * d_state;
    float s[SSM_PER_LANE];
#pragma unroll
    for (int i = 0; i < SSM_PER_LANE; i++) {
        const int k = lane + WARP * i;
        s[i] = k < d_state ? sc[k] : 0.0f;
    }
    for (int t = 0; t < n_t; t++) {
        const float delta = softplus(dt[(long long)t * n_head + h]);
        const float xv = x[(long long)t * channels + c];
        const float x_dt = xv * delta;
        const float *bv = bc + (long long)t * bc_row + (long long)g * d_state;
        const float *cv = bc + (long long)t * bc_row + (long long)(n_group + g) * d_state;
        const float da = a_per_state ? 0.0f : expf(delta * a[h]);
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < SSM_PER_LANE; i++) {
            const int k = lane + WARP * i;
            if (k < d_state) {
                const float decay = a_per_state ? expf(delta * a[(long long)h * d_state + k]) : da;
                const float v = s[i] * decay + bv[k] * x_dt;
                sum += v * cv[k];
                s[i] = v;
            }
        }
        sum = warp_sum(sum);
        if (lane == 0) y[(long long)t * channels + c] = sum + xv * d[h];
    }
#pragma unroll
    for (int i = 0; i < SSM_PER_LANE; i++) {
        const int k = lane + WARP * i;
        if (k < d_state) sc[k] = s[i];
    }
}
