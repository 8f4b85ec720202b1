// Host stand-in for the CUDA headers (cuda_fp16.h; cuda_bf16.h includes it), so that kernel
// files compile with g++ and run on the CPU for `mmvq_check.cpp`: the CUDA keywords, __half,
// int4, the integer SIMD intrinsics the kernels use, and a SIMT emulation of one CTA (simt.h:
// each thread a fiber, warp shuffles through a per-warp barrier). Not CUDA: it checks the
// kernels' index arithmetic and numerics without a GPU, not their speed or memory model.
#pragma once
// The kernel headers give device-only code (inline PTX) a host form when this is defined.
#define KESTREL_HOST_STANDIN 1
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <math.h>
#include <memory>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>
#include "simt.h"

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(x)
// An OS thread runs one CTA at a time (simt.h), so a function-local thread_local is that CTA's
// shared memory.
#define __shared__ static thread_local
// Dynamic shared memory (common.cuh): 227 KiB (an sm_90 CTA's most), one block per OS thread
// for every kernel (kept out of the thread_local image, which holds every kernel's statics).
// The emulated driver sets `launch_dynamic_shared` to the bytes a launch asked for, and the
// kernel's memory then ends where those bytes end, at an inaccessible page: a kernel reading or
// writing past what its host code gave it faults (as compute-sanitizer would report on a GPU)
// instead of passing here. Host checks that run kernels directly leave it -1: all 227 KiB.
namespace simt {
inline std::atomic<long> launch_dynamic_shared{-1};
inline void *dynamic_shared() {
    constexpr std::size_t CAP = 232448;
    static thread_local unsigned char *block = nullptr;
    static thread_local std::size_t span = 0;
    if (!block) {  // never freed
        const std::size_t page = (std::size_t)sysconf(_SC_PAGESIZE);
        span = (CAP + page - 1) / page * page;
        void *p = mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED || mprotect(static_cast<unsigned char *>(p) + span, page, PROT_NONE) != 0) std::abort();
        block = static_cast<unsigned char *>(p);
    }
    const long asked = launch_dynamic_shared.load();
    if (asked < 0 || (std::size_t)asked > CAP) return block;
    return block + span - ((std::size_t)asked + 15) / 16 * 16;
}
}  // namespace simt
#define DYNAMIC_SHARED(T, name) T *const name = static_cast<T *>(simt::dynamic_shared())

struct __half {
    uint16_t x;
};
inline __half __ushort_as_half(unsigned short v) { return __half{v}; }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline float __half2float(__half h) {
    const uint32_t s = (h.x >> 15) & 1, e = (h.x >> 10) & 31, m = h.x & 1023;
    float v;
    if (e == 0) v = (float)m * 0x1p-24f;  // exact: a power of two times a small integer
    else if (e == 31) v = m ? NAN : INFINITY;
    else {
        const uint32_t bits = ((e + 112) << 23) | (m << 13);  // the same value as an f32
        std::memcpy(&v, &bits, 4);
    }
    return s ? -v : v;
}

// f32 to f16, rounding to nearest even (as the device's __float2half).
inline __half __float2half(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u) return __half{(uint16_t)(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0))};
    if (ax >= 0x477FF000u) return __half{(uint16_t)(sign | 0x7C00u)};  // rounds past 65504
    if (ax < 0x38800000u) {  // subnormal f16 (or zero): value / 2^-24, rounded to nearest even
        const float v = std::fabs(f) * 0x1p24f;  // exact: no overflow below 2^-14
        return __half{(uint16_t)(sign | (uint32_t)std::nearbyint(v))};
    }
    const uint32_t e = (ax >> 23) - 112, m = ax & 0x7FFFFFu;
    uint32_t h = (e << 10) | (m >> 13);
    const uint32_t rest = m & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
    return __half{(uint16_t)(sign | h)};
}

struct __half2 {
    __half x, y;
};
struct float2 {
    float x, y;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__float2half(a), __float2half(b)}; }
inline float2 __half22float2(__half2 h) { return float2{__half2float(h.x), __half2float(h.y)}; }

// The device's reciprocal square root (approximate there; exact here: the checks compare fused
// and unfused kernels run through this same function).
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

struct int4 {
    int x, y, z, w;
};

inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
inline unsigned __vsub4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (((a >> (8 * i)) - (b >> (8 * i))) & 0xFFu) << (8 * i);
    return r;
}

inline void __syncthreads() { simt::block().arrive_and_wait(); }
// CTAs run on several OS threads: real atomics, and a fence for `__threadfence`.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned atomicAdd(unsigned *p, unsigned v) {
    return std::atomic_ref<unsigned>(*p).fetch_add(v);
}
inline unsigned atomicMax(unsigned *p, unsigned v) {
    std::atomic_ref<unsigned> a(*p);
    unsigned old = a.load();
    while (old < v && !a.compare_exchange_weak(old, v)) {
    }
    return old;
}
inline float __ldcg(const float *p) { return *p; }
// Explicitly rounded float operations: one rounding each, never fused (the host checks build
// with -ffp-contract=off, so plain `*` and `+` are single roundings too).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fmaf(a, b, c); }
inline unsigned __float_as_uint(float f) {
    unsigned u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float __uint_as_float(unsigned u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
using std::max;
using std::min;

inline void __syncwarp(unsigned = 0xffffffffu) { simt::warp().bar.arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned, float v, int o) {
    const int lane = simt::lane();
    float *slots = simt::warp().fslot[simt::next_phase()];
    slots[lane] = v;
    simt::warp().bar.arrive_and_wait();
    return slots[lane ^ o];
}

inline int __shfl_xor_sync(unsigned, int v, int o) {
    const int lane = simt::lane();
    int *slots = simt::warp().ishf[simt::next_phase()];
    slots[lane] = v;
    simt::warp().bar.arrive_and_wait();
    return slots[lane ^ o];
}

// A warp's xor butterfly `for (o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(.., v, o))`
// through one exchange instead of five: the first lane past the barrier runs the five rounds
// for all 32 lanes (after offsets 16..o a lane holds op(its own after 16..2o, lane ^ o's after
// 16..2o)), with the same operations in the same order, so the same bits; each lane reads its own.
template <class Op>
inline float warp_butterfly(float v, Op op) {
    const int lane = simt::lane();
    const unsigned p = simt::next_phase();
    WarpExchange &w = simt::warp();
    w.fslot[p][lane] = v;
    w.fready[p] = false;
    w.bar.arrive_and_wait();
    if (!w.fready[p]) {
        float cur[32], next[32];
        for (int l = 0; l < 32; l++) cur[l] = w.fslot[p][l];
        for (int o = 16; o > 0; o >>= 1) {
            for (int l = 0; l < 32; l++) next[l] = op(cur[l], cur[l ^ o]);
            for (int l = 0; l < 32; l++) cur[l] = next[l];
        }
        for (int l = 0; l < 32; l++) w.fout[p][l] = cur[l];
        w.fready[p] = true;
    }
    return w.fout[p][lane];
}

// The lanes whose `v` equals this lane's, as a mask (every lane of the warp must call it).
inline unsigned __match_any_sync(unsigned, int v) {
    const int lane = simt::lane();
    simt::warp().islot[0][lane] = v;
    simt::warp().bar.arrive_and_wait();
    unsigned m = 0;
    for (int l = 0; l < 32; l++)
        if (simt::warp().islot[0][l] == v) m |= 1u << l;
    simt::warp().bar.arrive_and_wait();
    return m;
}
inline int __ffs(unsigned x) { return x ? __builtin_ctz(x) + 1 : 0; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }

inline float __shfl_sync(unsigned, float v, int src) {
    const int lane = simt::lane();
    float *slots = simt::warp().fslot[simt::next_phase()];
    slots[lane] = v;
    simt::warp().bar.arrive_and_wait();
    return slots[src];
}
