// Shared by every kernel file: GGUF block layouts (as ggml defines them, byte for byte, with
// size checks), warp reductions, and unaligned 32-bit loads of quant bytes.
//
// Compiled by NVRTC (`cargo xtask kernels`): no host code, no standard library headers beyond
// cuda_fp16.h / cuda_bf16.h / stdint.h from the CUDA runtime's include folder.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;

#define WARP 32
#define QK 32

// A kernel's dynamic shared memory as the array `name` of T (the host stand-in gives a static
// array instead).
#ifndef DYNAMIC_SHARED
#define DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

// Q4_0: 32 values `d * (q - 8)`, q the nibbles (element j low nibble of qs[j], j + 16 high).
struct block_q4_0 { __half d; u8 qs[QK / 2]; };
// Q4_1: `d * q + m`.
struct block_q4_1 { __half d; __half m; u8 qs[QK / 2]; };
// Q5_0: `d * (q - 16)`, the fifth bit of element j in bit j of qh.
struct block_q5_0 { __half d; u8 qh[4]; u8 qs[QK / 2]; };
// Q5_1: `d * q + m`, qh as Q5_0.
struct block_q5_1 { __half d; __half m; u8 qh[4]; u8 qs[QK / 2]; };
// Q8_0: `d * q`, q signed.
struct block_q8_0 { __half d; i8 qs[QK]; };
// Q8_1 (activations): `d * q`, and `s = sum(x)` of the 32 source values, as ggml-cuda writes it.
struct block_q8_1 { __half d; __half s; i8 qs[QK]; };

#define QK_K 256
// Q4_K: 8 sub-blocks of 32, `d * sc * q - dmin * m`, 6-bit sc and m packed in `scales`.
struct block_q4_K { __half d; __half dmin; u8 scales[12]; u8 qs[QK_K / 2]; };
// Q5_K: as Q4_K with a fifth bit per value (sub-block b's in bit b of `qh[i]`).
struct block_q5_K { __half d; __half dmin; u8 scales[12]; u8 qh[QK_K / 8]; u8 qs[QK_K / 2]; };
// Q6_K: 16 sub-blocks of 16, `d * sc * (q - 32)`, q split in 4 low bits (`ql`) and 2 high (`qh`).
struct block_q6_K { u8 ql[QK_K / 2]; u8 qh[QK_K / 4]; i8 scales[QK_K / 16]; __half d; };

static_assert(sizeof(block_q4_K) == 144, "block_q4_K is 144 bytes");
static_assert(sizeof(block_q5_K) == 176, "block_q5_K is 176 bytes");
static_assert(sizeof(block_q6_K) == 210, "block_q6_K is 210 bytes");
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 is 18 bytes");
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 is 20 bytes");
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 is 22 bytes");
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 is 24 bytes");
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 is 34 bytes");
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 is 36 bytes");

// A grid-stride loop over `n` elements (any grid of any block size).
#define GRID_STRIDE(i, n) \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

#ifndef KESTREL_HOST_STANDIN
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
#else
// The same butterflies in one exchange (the host stand-in's `warp_butterfly`: the same
// additions in the same order, so the same bits).
inline float warp_sum(float v) { return warp_butterfly(v, [](float a, float b) { return a + b; }); }
inline float warp_max(float v) { return warp_butterfly(v, [](float a, float b) { return fmaxf(a, b); }); }
#endif

// Sum over a block of up to 1024 threads (blockDim.x a multiple of 32); every thread gets it.
// `shared` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float *shared) {
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    const int nwarps = blockDim.x / WARP;
    v = lane < nwarps ? shared[lane] : 0.0f;
    return warp_sum(v);
}

// One warp's 32 consecutive values (lane i holds value i, warp-uniform call) into the Q8_1
// block `y`: `d = amax / 127`, `q = round(x / d)`, `s = d * sum(q)` (quantize.cu's rule, shared by
// the kernels that fuse the quantization into their output, so either path gives the same bytes).
__device__ __forceinline__ void q8_1_store_warp(float v, block_q8_1 *y) {
    const int lane = threadIdx.x % WARP;
    const float amax = warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const int q = amax == 0.0f ? 0 : (int)roundf(v / d);
    const float sum = d * warp_sum((float)q);  // |sum(q)| <= 4064: exact in f32
    y->qs[lane] = (i8)q;
    if (lane == 0) {
        y->d = __float2half(d);
        y->s = __float2half(sum);
    }
}

// 4 bytes at a 2-byte aligned address (quant blocks are 2-byte aligned).
__device__ __forceinline__ int load_i32_a2(const void *p) {
    const u16 *h = (const u16 *)p;
    return (int)((u32)h[0] | ((u32)h[1] << 16));
}

// 4 bytes at a 4-byte aligned address.
__device__ __forceinline__ int load_i32_a4(const void *p) { return *(const int *)p; }

// `x`, once `dep` is known: a byte permute that keeps `x`'s bytes (selector 0x3210) but that ptxas
// cannot see through, so the loads `dep` was computed from are issued before any use of the
// result (the prefetching matvecs in mmvq.cuh: ptxas otherwise places a thread's second
// block's loads after the first's dot products, one DRAM round trip after the other). The
// same value; one instruction (the identity on the host stand-in).
#ifndef KESTREL_HOST_STANDIN
__device__ __forceinline__ int after(int x, int dep) {
    int r;
    asm volatile("prmt.b32 %0, %1, %2, 0x3210;" : "=r"(r) : "r"(x), "r"(dep));
    return r;
}
#else
inline int after(int x, int) { return x; }
#endif

// Asks for the 32-byte sector at `p` to be fetched into L2 now, so that a later read of it
// waits for L2, not DRAM (`prefetch.global.L2`; nothing on the host stand-in).
#ifndef KESTREL_HOST_STANDIN
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
#else
inline void prefetch_l2(const void *) {}
#endif

// The first statement of every kernel: programmatic dependent launch (sm_90). When the host
// launches a kernel with the programmatic-serialization attribute (`KESTREL_CUDA_PDL=1`,
// cuda/launch.rs), the driver may start it before the previous kernel in the stream has
// finished; `griddepcontrol.wait` then holds every thread until that kernel has completed and
// its writes are visible, so nothing is read or written early. `launch_dependents` lets the
// next kernel be launched as soon as every CTA of this one has started (it in turn waits at
// its own top for this one to finish): launch latency overlaps this kernel's work. Without the
// attribute both are no-ops; the compute_80 PTX and the host stand-in leave them out.
#if !defined(KESTREL_HOST_STANDIN) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void pdl_enter() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
#elif !defined(KESTREL_HOST_STANDIN)
__device__ __forceinline__ void pdl_enter() {}
#else
inline void pdl_enter() {}
#endif

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block `j` (0..7) of a Q4_K/Q5_K block.
__device__ __forceinline__ void scale_min_k4(int j, const u8 *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Value `i` (0..31) of 32-value sub-block `b` (0..7) of a K-quant block as its integer quant,
// with the sub-block's integer scale(s) and min. Q6_K's 32 values span two 16-value scales:
// `sc` for i < 16, `sc2` for i >= 16.
__device__ __forceinline__ int k_quant(const block_q4_K *w, int b, int i) {
    return (w->qs[32 * (b / 2) + i] >> (4 * (b % 2))) & 0xF;
}
__device__ __forceinline__ int k_quant(const block_q5_K *w, int b, int i) {
    return ((w->qs[32 * (b / 2) + i] >> (4 * (b % 2))) & 0xF) | (((w->qh[i] >> b) & 1) << 4);
}
__device__ __forceinline__ int k_quant(const block_q6_K *w, int b, int i) {
    const int n = b / 4, g = b % 4;
    const u8 *ql = w->ql + 64 * n;
    const u8 *qh = w->qh + 32 * n;
    const int lo = (g & 1) ? ql[i + 32] : ql[i];
    const int q = ((g < 2) ? (lo & 0xF) : (lo >> 4)) | (((qh[i] >> (2 * g)) & 3) << 4);
    return q - 32;
}
// Q6_K sub-block scale for value i of 32-block b.
__device__ __forceinline__ int q6_k_scale(const block_q6_K *w, int b, int i) {
    const int n = b / 4, g = b % 4;
    return w->scales[8 * n + i / 16 + 2 * g];
}
