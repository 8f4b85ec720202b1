// Mixture-of-experts routing and combining on the device, so a decode step's MoE layers need no
// copy back to the host (and can be captured in a CUDA graph). With the indirect matvec
// (`mmvq_<type>_id`, mmvq.cuh), which reads each (token, slot) pair's expert from `ids`:
//
// moe_route_f32: one warp a row of router logits, the CPU plan's rule (kestrel-graph's
//   `moe::route`): the router bias added; softmax, sigmoid, or the logits as they are (softmax
//   of the chosen weights after); the selection bias added for the choice only; expert groups
//   (each scored by the sum of its two best scores, only the `groups_used` best kept); the top
//   `k` scores, larger first, equal scores the lower expert first; the chosen weights
//   normalised (sum clamped to f16's smallest normal) and scaled. A NaN score ranks as -inf
//   (the CPU's total order places it by its sign bit; only broken logits have one). Sums are warp trees,
//   not the CPU's sequential f64 sums, so weights may differ from the CPU's in the last bits.
//   Launch: grid rows, block 32. `ne <= MOE_MAX_EXPERTS`, `k <= 32`, `groups <= 32`.
// moe_scale_bias_f32: each pair's expert scale and bias, as the host path's scale_f32 then
//   add_f32 (two roundings).
// moe_combine_f32: out[r] = down[r·k]·w[r·k] + down[r·k + 1]·w[r·k + 1] + ..., in slot order,
//   each product and sum rounded alone: the bits of scatter_rows_scaled_f32 then sum_slots_f32.
// moe_tiles: the pairs grouped by expert into tiles of `tn` for the grouped matvec
//   (mmvq_wide.cu's `_id` form): expert e's pairs in pair order fill tiles first[e] ..
//   first[e + 1] (`tile_rows`, -1 past its last pair), `tile_expert` names each tile's expert and
//   `*n_tiles` counts them, at most ceil(pairs / tn) + min(ne, pairs). One CTA (any size);
//   `pairs <= MOE_MAX_PAIRS`.
#include "common.cuh"

#define MOE_MAX_EXPERTS 512
#define MOE_NEG_INF (-__int_as_float(0x7f800000))

// Whether candidate (v, i) beats (bv, bi): a higher score, or an equal one of a lower index; an
// index below 0 is no candidate.
__device__ __forceinline__ void moe_better(float &bv, int &bi, float v, int i) {
    if (i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi))) {
        bv = v;
        bi = i;
    }
}

// The warp's best candidate, in every lane (a total order: the same answer whatever the lane).
__device__ __forceinline__ void moe_warp_best(float &bv, int &bi) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, bv, o);
        const int i = __shfl_xor_sync(0xffffffffu, bi, o);
        moe_better(bv, bi, v, i);
    }
}

extern "C" __global__ void __launch_bounds__(WARP)
    moe_route_f32(const float *__restrict__ logits, const float *__restrict__ router_bias,
                  const float *__restrict__ sel_bias, int *__restrict__ ids, float *__restrict__ weights, int ne,
                  int k, int gating, int groups, int groups_used, int norm, float wscale) {
    pdl_enter();
    __shared__ float prob[MOE_MAX_EXPERTS], score[MOE_MAX_EXPERTS];
    __shared__ u8 taken[MOE_MAX_EXPERTS];
    const int lane = threadIdx.x, row = blockIdx.x;
    const float *l = logits + (long long)row * ne;
    float lmax = MOE_NEG_INF;
    for (int e = lane; e < ne; e += WARP) {
        const float v = router_bias ? l[e] + router_bias[e] : l[e];
        prob[e] = v;
        lmax = fmaxf(lmax, v);
    }
    if (gating == 0) {  // softmax
        const float m = warp_max(lmax);
        float part = 0.0f;
        for (int e = lane; e < ne; e += WARP) part += expf(prob[e] - m);
        const float inv = 1.0f / warp_sum(part);
        for (int e = lane; e < ne; e += WARP) prob[e] = expf(prob[e] - m) * inv;
    } else if (gating == 1) {  // sigmoid
        for (int e = lane; e < ne; e += WARP) prob[e] = 1.0f / (1.0f + expf(-prob[e]));
    }
    for (int e = lane; e < ne; e += WARP) {
        const float s = sel_bias ? prob[e] + sel_bias[e] : prob[e];
        score[e] = isnan(s) ? MOE_NEG_INF : s;
        taken[e] = 0;
    }
    __syncwarp();
    if (groups > 0) {
        // Lane g scores group g by its two best; the `groups_used` best groups stay.
        const int per = ne / groups;
        float gs = MOE_NEG_INF;
        if (lane < groups) {
            float a = MOE_NEG_INF, b = MOE_NEG_INF;
            for (int j = 0; j < per; j++) {
                const float v = score[lane * per + j];
                if (v > a) {
                    b = a;
                    a = v;
                } else if (v > b) {
                    b = v;
                }
            }
            gs = a + b;
        }
        bool keep = false;
        for (int u = 0; u < groups_used; u++) {
            float bv = gs;
            int bi = (lane < groups && !keep) ? lane : -1;
            moe_warp_best(bv, bi);
            if (bi == lane) keep = true;
        }
        if (lane < groups && !keep)
            for (int j = 0; j < per; j++) score[lane * per + j] = MOE_NEG_INF;
        __syncwarp();
    }
    // The top k, one a pass; lane `slot` keeps the slot's expert and weight.
    int my_id = 0;
    float my_w = 0.0f;
    for (int slot = 0; slot < k; slot++) {
        float bv = MOE_NEG_INF;
        int bi = -1;
        for (int e = lane; e < ne; e += WARP)
            if (!taken[e]) moe_better(bv, bi, score[e], e);
        moe_warp_best(bv, bi);
        if (lane == slot) {
            my_id = bi;
            my_w = prob[bi];
        }
        __syncwarp();
        if (lane == 0) taken[bi] = 1;
        __syncwarp();
    }
    const bool live = lane < k;
    if (gating == 2) {  // softmax of the chosen logits
        const float m = warp_max(live ? my_w : MOE_NEG_INF);
        const float x = live ? expf(my_w - m) : 0.0f;
        const float inv = 1.0f / warp_sum(x);
        my_w = x * inv;
    }
    if (norm) {
        const float sum = fmaxf(warp_sum(live ? my_w : 0.0f), 6.103515625e-5f);
        my_w = my_w / sum;
    }
    if (wscale != 0.0f && wscale != 1.0f) my_w *= wscale;
    if (live) {
        ids[(long long)row * k + lane] = my_id;
        weights[(long long)row * k + lane] = my_w;
    }
}

extern "C" __global__ void moe_scale_bias_f32(float *__restrict__ out, const int *__restrict__ ids, int ne,
                                              const float *__restrict__ scales, const float *__restrict__ bias,
                                              long long pairs, long long m) {
    pdl_enter();
    GRID_STRIDE(i, pairs * m) {
        const int e = min(max(ids[i / m], 0), ne - 1);
        float v = out[i];
        if (scales) v = __fmul_rn(v, scales[e]);
        if (bias) v = __fadd_rn(v, bias[(long long)e * m + i % m]);
        out[i] = v;
    }
}

extern "C" __global__ void moe_combine_f32(const float *__restrict__ down, const float *__restrict__ w,
                                           float *__restrict__ out, long long rows, int k, long long width) {
    pdl_enter();
    GRID_STRIDE(i, rows * width) {
        const long long r = i / width, j = i % width;
        const float *o = down + r * k * width + j;
        const float *wr = w + r * k;
        float s = __fmul_rn(o[0], wr[0]);
        for (int slot = 1; slot < k; slot++) s = __fadd_rn(s, __fmul_rn(o[(long long)slot * width], wr[slot]));
        out[i] = s;
    }
}

#define MOE_MAX_PAIRS 4096

extern "C" __global__ void moe_tiles(const int *__restrict__ ids, int pairs, int ne, int tn,
                                     int *__restrict__ tile_expert, int *__restrict__ tile_rows,
                                     int *__restrict__ n_tiles) {
    pdl_enter();
    __shared__ int s_ids[MOE_MAX_PAIRS];
    __shared__ int first[MOE_MAX_EXPERTS + 1];
    for (int i = threadIdx.x; i < pairs; i += blockDim.x) s_ids[i] = min(max(ids[i], 0), ne - 1);
    __syncthreads();
    for (int e = threadIdx.x; e < ne; e += blockDim.x) {
        int c = 0;
        for (int i = 0; i < pairs; i++) c += s_ids[i] == e;
        first[e + 1] = (c + tn - 1) / tn;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        first[0] = 0;
        for (int e = 0; e < ne; e++) first[e + 1] += first[e];
        *n_tiles = first[ne];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < ne; e += blockDim.x) {
        long long t = (long long)first[e] * tn;
        const long long end = (long long)first[e + 1] * tn;
        for (int i = 0; i < pairs; i++)
            if (s_ids[i] == e) tile_rows[t++] = i;
        for (; t < end; t++) tile_rows[t] = -1;
        for (int x = first[e]; x < first[e + 1]; x++) tile_expert[x] = e;
    }
}
