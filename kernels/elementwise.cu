// Elementwise ops over `n` f32 values (grid-stride loops; launch with 256 threads and any grid):
// add/mul with `b` of `b_len` values repeated (a row broadcast when `b_len` is a row, plain
// when `b_len == n`), scale, soft cap (`cap * tanh(x / cap)`), SiLU, GELU (tanh form, ggml's
// constants), exact GELU (erf), SwiGLU and GeGLU (also with the Q8_1 quantization fused in),
// the per-token attention temperature, the one-input ops of other architectures (squared ReLU,
// sigmoid, clamp), a row times its own scalar, and a column slice of each row.
#include "act.cuh"

extern "C" __global__ void add_f32(const float *a, const float *b, float *out, long long n, long long b_len) {
    pdl_enter();
    GRID_STRIDE(i, n) out[i] = a[i] + b[i % b_len];
}

extern "C" __global__ void mul_f32(const float *a, const float *b, float *out, long long n, long long b_len) {
    pdl_enter();
    GRID_STRIDE(i, n) out[i] = a[i] * b[i % b_len];
}

extern "C" __global__ void scale_f32(float *x, long long n, float s) {
    pdl_enter();
    GRID_STRIDE(i, n) x[i] *= s;
}

extern "C" __global__ void silu_f32(float *x, long long n) {
    pdl_enter();
    GRID_STRIDE(i, n) x[i] = silu(x[i]);
}

extern "C" __global__ void gelu_f32(float *x, long long n) {
    pdl_enter();
    GRID_STRIDE(i, n) x[i] = gelu(x[i]);
}

extern "C" __global__ void swiglu_f32(const float *gate, const float *up, float *out, long long n) {
    pdl_enter();
    GRID_STRIDE(i, n) out[i] = silu(gate[i]) * up[i];
}

extern "C" __global__ void geglu_f32(const float *gate, const float *up, float *out, long long n) {
    pdl_enter();
    GRID_STRIDE(i, n) out[i] = gelu(gate[i]) * up[i];
}

extern "C" __global__ void softcap_f32(float *x, long long n, float cap) {
    pdl_enter();
    GRID_STRIDE(i, n) x[i] = cap * tanhf(x[i] / cap);
}

extern "C" __global__ void gelu_erf_f32(float *x, long long n) {
    pdl_enter();
    GRID_STRIDE(i, n) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752440f));
}

// SwiGLU / GeGLU that also leave the result as Q8_1 in `q` (the down projection's input): one
// warp per block of 32 values (`nblocks * 32` values, rows a multiple of 32 long), each value
// computed as swiglu_f32 / geglu_f32 do and quantized as quantize_q8_1. Launch: 256 threads,
// grid ceil(nblocks / 8).
template <bool GELU>
__device__ __forceinline__ void glu_q8_1(const float *__restrict__ gate, const float *__restrict__ up,
                                         float *__restrict__ out, block_q8_1 *__restrict__ q, int nblocks) {
    const int b = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (b >= nblocks) return;  // the whole warp leaves together
    const long long i = (long long)b * QK + threadIdx.x % WARP;
    const float y = (GELU ? gelu(gate[i]) : silu(gate[i])) * up[i];
    out[i] = y;
    q8_1_store_warp(y, q + b);
}

extern "C" __global__ void swiglu_q8_1_f32(const float *gate, const float *up, float *out, block_q8_1 *q, int nblocks) {
    pdl_enter();
    glu_q8_1<false>(gate, up, out, q, nblocks);
}

extern "C" __global__ void geglu_q8_1_f32(const float *gate, const float *up, float *out, block_q8_1 *q, int nblocks) {
    pdl_enter();
    glu_q8_1<true>(gate, up, out, q, nblocks);
}

// Scale, soft cap and exact GELU reading `src` and writing `out` (a copy ahead of the in-place
// forms saved: the plan's nodes each own their buffer), the same float operations as
// scale_f32, softcap_f32 and gelu_erf_f32.
extern "C" __global__ void scale_from_f32(const float *__restrict__ src, float *__restrict__ out, long long n, float s) {
    pdl_enter();
    GRID_STRIDE(i, n) out[i] = src[i] * s;
}

extern "C" __global__ void softcap_from_f32(const float *__restrict__ src, float *__restrict__ out, long long n,
                                            float cap) {
    pdl_enter();
    GRID_STRIDE(i, n) out[i] = cap * tanhf(src[i] / cap);
}

extern "C" __global__ void gelu_erf_from_f32(const float *__restrict__ src, float *__restrict__ out, long long n) {
    pdl_enter();
    GRID_STRIDE(i, n) out[i] = 0.5f * src[i] * (1.0f + erff(src[i] * 0.70710678118654752440f));
}

// Llama 4's attention temperature (Ministral 3's long context): each token's row of `width`
// values times ln(floor((pos + offset) / floor_scale) + 1) * scale + 1, the division in f32 and
// the rest in f64 rounded to f32, as the CPU engine computes it; the positions are the device
// buffer the plan writes each step (a CUDA graph replays it).
extern "C" __global__ void attn_temp_from_f32(const float *__restrict__ src, float *__restrict__ out,
                                              const int *__restrict__ positions, long long n, long long width,
                                              float floor_scale, float scale, float offset) {
    pdl_enter();
    GRID_STRIDE(i, n) {
        const float steps = floorf(((float)positions[i / width] + offset) / floor_scale);
        const float f = (float)(log((double)steps + 1.0) * (double)scale + 1.0);
        out[i] = src[i] * f;
    }
}

// One-input ops reading `src` and writing `out` (n values), chosen by `op` (the host's
// `Unary`): 0 SiLU, 1 GELU (tanh form, as gelu_f32), 2 squared ReLU (`max(x, 0)²`), 3 the
// logistic sigmoid (`1 / (1 + e^-x)`), 4 clamp to [-a, a] (NaN stays NaN, as Rust's clamp).
// The op is uniform across the launch, so the branch costs nothing.
extern "C" __global__ void unary_from_f32(const float *__restrict__ src, float *__restrict__ out, long long n, int op,
                                          float a) {
    pdl_enter();
    GRID_STRIDE(i, n) {
        const float x = src[i];
        float y;
        switch (op) {
        case 0: y = silu(x); break;
        case 1: y = gelu(x); break;
        case 2: {
            const float r = fmaxf(x, 0.0f);
            y = r * r;
            break;
        }
        case 3: y = 1.0f / (1.0f + expf(-x)); break;
        default: y = x != x ? x : fminf(fmaxf(x, -a), a); break;
        }
        out[i] = y;
    }
}

// Each row of `a` (`width` values) times its own scalar: out[i] = a[i] * s[i / width] (a
// sigmoid gate of a shared expert, one value a token).
extern "C" __global__ void mul_row_scalar_f32(const float *__restrict__ a, const float *__restrict__ s,
                                              float *__restrict__ out, long long n, long long width) {
    pdl_enter();
    GRID_STRIDE(i, n) out[i] = a[i] * s[i / width];
}

// Columns `offset .. offset + width` of each row of `src` (rows of `in_width`): a fused
// projection's part (q/k/v of one qkv matrix, gate/up of one).
extern "C" __global__ void slice_cols_f32(const float *__restrict__ src, float *__restrict__ out, long long rows,
                                          long long in_width, long long width, long long offset) {
    pdl_enter();
    GRID_STRIDE(i, rows * width) out[i] = src[(i / width) * in_width + offset + i % width];
}

// head_slice_f32: values offset .. offset + w of each of the n_head heads of head_in values in a
// row (an output row: n_head * w values; DeepSeek's and Jamba's head parts).
// head_concat_f32: output head h = head h % ha of `a` (wa values) then head h % hb of `b` (wb
// values); an input of one head gives every head the same values (ggml_repeat + ggml_concat).
extern "C" __global__ void head_slice_f32(const float *__restrict__ src, float *__restrict__ out, long long rows,
                                          long long n_head, long long head_in, long long offset, long long w) {
    pdl_enter();
    GRID_STRIDE(i, rows * n_head * w) {
        const long long r = i / (n_head * w), k = i % (n_head * w), h = k / w, j = k % w;
        out[i] = src[r * n_head * head_in + h * head_in + offset + j];
    }
}

extern "C" __global__ void head_concat_f32(const float *__restrict__ a, const float *__restrict__ b,
                                           float *__restrict__ out, long long rows, long long n_head, long long ha,
                                           long long hb, long long wa, long long wb) {
    pdl_enter();
    const long long hw = wa + wb;
    GRID_STRIDE(i, rows * n_head * hw) {
        const long long r = i / (n_head * hw), k = i % (n_head * hw), h = k / hw, j = k % hw;
        out[i] = j < wa ? a[r * ha * wa + (h % ha) * wa + j] : b[r * hb * wb + (h % hb) * wb + (j - wa)];
    }
}

// Mixture-of-experts pieces (the plan routes on the host and runs each chosen expert over the
// rows that chose it):
// swiglu_oai_f32: gpt-oss's clamped SwiGLU, as ggml's swiglu_oai: x = min(g, 7), y =
// clamp(u, -7, 7), out = x / (1 + e^(-1.702 x)) * (y + 1).
extern "C" __global__ void swiglu_oai_f32(const float *__restrict__ gate, const float *__restrict__ up,
                                          float *__restrict__ out, long long n) {
    pdl_enter();
    GRID_STRIDE(i, n) {
        const float x = fminf(gate[i], 7.0f);
        const float y = fminf(fmaxf(up[i], -7.0f), 7.0f);
        out[i] = x / (1.0f + expf(1.702f * -x)) * (y + 1.0f);
    }
}

// scatter_rows_scaled_f32: row i of `src` (n rows of `width`) times w[i] into row dst_rows[i]
// of `dst` (each expert's output rows into their (token, slot) rows, weighted).
extern "C" __global__ void scatter_rows_scaled_f32(const float *__restrict__ src, const int *__restrict__ dst_rows,
                                                   const float *__restrict__ w, float *__restrict__ dst, long long n,
                                                   long long width) {
    pdl_enter();
    GRID_STRIDE(i, n * width) {
        const long long r = i / width;
        dst[(long long)dst_rows[r] * width + i % width] = src[i] * w[r];
    }
}

// sum_slots_f32: out[r] = outs[r * k] + outs[r * k + 1] + ... (rows of `width`), added in slot
// order, as the CPU engine sums a token's chosen experts.
extern "C" __global__ void sum_slots_f32(const float *__restrict__ outs, float *__restrict__ out, long long rows,
                                         int k, long long width) {
    pdl_enter();
    GRID_STRIDE(i, rows * width) {
        const long long r = i / width, j = i % width;
        const float *o = outs + r * k * width + j;
        float s = o[0];
        for (int slot = 1; slot < k; slot++) s += o[(long long)slot * width];
        out[i] = s;
    }
}
