// How each quantized weight type meets the Q8_1 activations in the matvec kernels: a block split
// into LPB slices (one a thread in mmvq.cu / mmvq_k.cu, one a "leaf" in mmvq_wide.cu), each
// slice's integer dot products (PARTS sums of WORDS 4-byte words) and the float math that turns
// them into the slice's contribution. Both kernel families call these, so the contribution of a
// slice is the same float whether `__dp4a` or a tensor-core `mma` made its integer sums (integer
// sums are exact in any order), and the float math is written as explicit roundings
// (`__fmul_rn`, `__fmaf_rn`: never contracted differently in two kernels).
//
// A trait struct per type:
// - `B`: the GGUF block; `LPB` slices a block; `ABLK` Q8_1 blocks of activations a weight block;
// - `R`: the bytes of slice `t` as read (`load(block, t)`: every load of the slice, nothing
//   computed from them), `W`: the slice unpacked (`q[p][i]`: word i of part p, and the slice's
//   scales) by `unpack(r, t)`; `weight(block, t)` is the two at once. The prefetching matvecs
//   (mmvq.cuh) read the next block's `R` before they unpack and use this one's;
// - `act_word(ab, t, p, i)`: the activation word dotted with `q[p][i]` (`ab`: the activation
//   row's first Q8_1 block of this weight block);
// - the slice's contribution from its PARTS integer sums, one part at a time (so a kernel holds
//   one part's sums at once): `v = part(w, ab, t, 0, sum0, 0)`, then `v = part(w, ab, t, p,
//   sum_p, v)` for p = 1.., then `finish(w, ab, t, v)`.
#pragma once
#include "common.cuh"

// `(float)v` for |v| < 2^22, exactly, as an integer add and a float subtraction (full rate,
// where the conversion instruction runs at a quarter of it).
__device__ __forceinline__ float i2f_small(int v) { return __int_as_float(v + 0x4B400000) - 12582912.0f; }

// `v` + scale·da·Σq: one part of a slice, the first (`first`) starting the sum.
__device__ __forceinline__ float part_term(bool first, float scale, const block_q8_1 *ab, int sumi, float v) {
    const float f = __fmul_rn(scale, __half2float(ab->d));
    return first ? __fmul_rn(f, i2f_small(sumi)) : __fmaf_rn(f, i2f_small(sumi), v);
}

// The fifth bits of elements 4i..4i+3 (bits 0..3 of `h`) moved to bit 4 of each byte.
__device__ __forceinline__ int fifth_bits(u32 h) {
    return (int)(((h << 4) & 0x10u) | ((h << 11) & 0x1000u) | ((h << 18) & 0x100000u) |
                 ((h << 25) & 0x10000000u));
}

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: 2 slices a block, slice t taking quant words 2t and 2t+1
// (elements 8t..8t+7 and 16+8t..16+8t+7 for the nibble types; words 2t, 2t+1, 2t+4, 2t+5 for
// Q8_0), dotted with activation words 2t, 2t+1, 2t+4, 2t+5. The block's constant term (`-8d`,
// `-16d` or the min, times the activation block's `s = d·Σq`) belongs to slice 0.
struct SimpleW {
    int q[1][4];  // lo word 2t, lo word 2t+1, hi word 2t, hi word 2t+1
    float d, c;
};
// Words 2t and 2t+1 of `qs` (and 2t+4, 2t+5 for Q8_0), `qh`, `d` and `m` as read.
// `tag()` folds every word read into one (see `after`, common.cuh), `pin(dep)` makes each word
// wait for `dep`: the same values.
struct SimpleR {
    int v[4];
    u32 qh;
    __half d, m;
    __device__ __forceinline__ int tag() const {
        return v[0] ^ v[1] ^ v[2] ^ v[3] ^ (int)qh ^ (int)__half_as_ushort(d) ^ ((int)__half_as_ushort(m) << 16);
    }
    __device__ __forceinline__ void pin(int dep) {
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] = after(v[i], dep);
        qh = (u32)after((int)qh, dep);
        const int dm = after((int)__half_as_ushort(d) | ((int)__half_as_ushort(m) << 16), dep);
        d = __ushort_as_half((u16)(dm & 0xFFFF));
        m = __ushort_as_half((u16)((u32)dm >> 16));
    }
};

// A SimpleR with nothing read yet (the fields a type does not read stay zero).
__device__ __forceinline__ SimpleR simple_r() {
    SimpleR r;
#pragma unroll
    for (int i = 0; i < 4; i++) r.v[i] = 0;
    r.qh = 0;
    r.d = r.m = __ushort_as_half(0);
    return r;
}

// Slice t of a nibble type (Q4_0, Q4_1, Q5_0, Q5_1) unpacked: its low and high nibbles (with
// the fifth bits from `qh` for Q5), `d`, and the block's constant term's factor `c` on slice 0.
template <bool Q5> __device__ __forceinline__ SimpleW nibbles(const SimpleR &r, int t, float c) {
    SimpleW s;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int w = 2 * t + i;
        const int v = r.v[i];
        int lo = v & 0x0F0F0F0F, hi = (v >> 4) & 0x0F0F0F0F;
        if (Q5) {
            lo |= fifth_bits(r.qh >> (4 * w));
            hi |= fifth_bits(r.qh >> (4 * w + 16));
        }
        s.q[0][i] = lo;
        s.q[0][i + 2] = hi;
    }
    s.d = __half2float(r.d);
    s.c = t == 0 ? c : 0.0f;
    return s;
}

// Slice t of a nibble type as read: words 2t and 2t+1 of `qs` (4-byte aligned when A4), `qh`
// (Q5 types; 0 else), `d` and `m` (the _1 types; 0 else).
template <bool A4>
__device__ __forceinline__ SimpleR nibble_words(const u8 *qs, int t, u32 qh, __half d, __half m) {
    SimpleR r = simple_r();
#pragma unroll
    for (int i = 0; i < 2; i++) r.v[i] = A4 ? load_i32_a4(qs + 4 * (2 * t + i)) : load_i32_a2(qs + 4 * (2 * t + i));
    r.qh = qh;
    r.d = d;
    r.m = m;
    return r;
}

template <typename Blk, typename Self> struct SimpleType {
    typedef Blk B;
    typedef SimpleW W;
    typedef SimpleR R;
    static constexpr int LPB = 2, ABLK = 1, PARTS = 1, WORDS = 4;
    __device__ static __forceinline__ W weight(const B *b, int t) { return Self::unpack(Self::load(b, t), t); }
    __device__ static __forceinline__ int act_word(const block_q8_1 *ab, int t, int, int i) {
        return load_i32_a4(ab->qs + 4 * (2 * t + (i & 1) + 4 * (i >> 1)));
    }
    // d·da·Σq + c·s, c the block's constant term's factor.
    __device__ static __forceinline__ float part(const W &w, const block_q8_1 *ab, int, int, int sum, float) {
        return part_term(true, w.d, ab, sum, 0.0f);
    }
    __device__ static __forceinline__ float finish(const W &w, const block_q8_1 *ab, int, float v) {
        return __fmaf_rn(w.c, __half2float(ab->s), v);
    }
};

struct TQ4_0 : SimpleType<block_q4_0, TQ4_0> {
    __device__ static __forceinline__ R load(const B *b, int t) {
        return nibble_words<false>(b->qs, t, 0, b->d, __ushort_as_half(0));
    }
    __device__ static __forceinline__ W unpack(const R &r, int t) {
        return nibbles<false>(r, t, -8.0f * __half2float(r.d));
    }
};
struct TQ4_1 : SimpleType<block_q4_1, TQ4_1> {
    __device__ static __forceinline__ R load(const B *b, int t) { return nibble_words<true>(b->qs, t, 0, b->d, b->m); }
    __device__ static __forceinline__ W unpack(const R &r, int t) { return nibbles<false>(r, t, __half2float(r.m)); }
};
struct TQ5_0 : SimpleType<block_q5_0, TQ5_0> {
    __device__ static __forceinline__ R load(const B *b, int t) {
        return nibble_words<false>(b->qs, t, (u32)load_i32_a2(b->qh), b->d, __ushort_as_half(0));
    }
    __device__ static __forceinline__ W unpack(const R &r, int t) {
        return nibbles<true>(r, t, -16.0f * __half2float(r.d));
    }
};
struct TQ5_1 : SimpleType<block_q5_1, TQ5_1> {
    __device__ static __forceinline__ R load(const B *b, int t) {
        return nibble_words<true>(b->qs, t, (u32)load_i32_a4(b->qh), b->d, b->m);
    }
    __device__ static __forceinline__ W unpack(const R &r, int t) { return nibbles<true>(r, t, __half2float(r.m)); }
};
struct TQ8_0 : SimpleType<block_q8_0, TQ8_0> {
    __device__ static __forceinline__ R load(const B *b, int t) {
        R r = simple_r();
#pragma unroll
        for (int i = 0; i < 2; i++) {
            r.v[i] = load_i32_a2(b->qs + 4 * (2 * t + i));
            r.v[i + 2] = load_i32_a2(b->qs + 4 * (2 * t + i + 4));
        }
        r.d = b->d;
        return r;
    }
    __device__ static __forceinline__ W unpack(const R &r, int) {
        W s;
#pragma unroll
        for (int i = 0; i < 4; i++) s.q[0][i] = r.v[i];
        s.d = __half2float(r.d);
        s.c = 0.0f;
        return s;
    }
};

// Q4_K, Q5_K: 8 slices a 256-value block, slice t taking elements 16h..16h+15 (h = t % 2) of
// sub-blocks 2n and 2n+1 (n = t / 2), which share the 32 bytes of `qs` at 32n: part 0 the
// low nibbles (sub-block 2n), part 1 the high (2n+1), each dotted with activation words
// 4h..4h+3 of its sub-block's Q8_1 block. `dmin · m · s` is taken once a sub-block (h = 0).
struct K45W {
    int q[2][4];
    float dlo, dhi;  // d * scale of each sub-block
    float mlo, mhi;  // dmin * min of each, 0 on the slice with h = 1
};

// The first 16 bytes of a Q4_K/Q5_K block as one load: `d` and `dmin` in `x`, `scales` in `y`,
// `z` and `w` (both block sizes are multiples of 16 bytes, and `qs` is read 16 bytes at a time
// already, so the block starts 16-byte aligned).
__device__ __forceinline__ int4 k45_head(const void *b) { return *(const int4 *)b; }

// scale_min_k4 (common.cuh) from `scales` held as three words: byte k of `scales` is byte k % 4
// of word k / 4. The same integers.
__device__ __forceinline__ void scale_min_k4_words(int j, u32 s0, u32 s1, u32 s2, int *sc, int *m) {
    const int sh = 8 * (j & 3);
    const int a = (int)((s0 >> sh) & 0xFF), b = (int)((s1 >> sh) & 0xFF), c = (int)((s2 >> sh) & 0xFF);
    if (j < 4) {
        *sc = a & 63;
        *m = b & 63;
    } else {
        *sc = (c & 0xF) | ((a >> 6) << 4);
        *m = (c >> 4) | ((b >> 6) << 4);
    }
}

__device__ __forceinline__ void k4_scales(const int4 &head, int n, int h, K45W *s) {
    const float d = __half2float(__ushort_as_half((u16)((u32)head.x & 0xFFFF)));
    const float dmin = __half2float(__ushort_as_half((u16)((u32)head.x >> 16)));
    const u32 s0 = (u32)head.y, s1 = (u32)head.z, s2 = (u32)head.w;
    int sc, m;
    scale_min_k4_words(2 * n, s0, s1, s2, &sc, &m);
    s->dlo = d * (float)sc;
    s->mlo = h ? 0.0f : dmin * (float)m;
    scale_min_k4_words(2 * n + 1, s0, s1, s2, &sc, &m);
    s->dhi = d * (float)sc;
    s->mhi = h ? 0.0f : dmin * (float)m;
}

template <typename Blk, typename Self> struct K45Type {
    typedef Blk B;
    typedef K45W W;
    static constexpr int LPB = 8, ABLK = QK_K / QK, PARTS = 2, WORDS = 4;
    __device__ static __forceinline__ W weight(const B *b, int t) { return Self::unpack(Self::load(b, t), t); }
    __device__ static __forceinline__ int act_word(const block_q8_1 *ab, int t, int p, int i) {
        return load_i32_a4(ab[2 * (t / 2) + p].qs + 4 * (4 * (t % 2) + i));
    }
    // dlo·da·Σq + dhi·da'·Σq' − mlo·s − mhi·s'.
    __device__ static __forceinline__ float part(const W &w, const block_q8_1 *ab, int t, int p, int sum, float v) {
        return part_term(p == 0, p == 0 ? w.dlo : w.dhi, ab + 2 * (t / 2) + p, sum, v);
    }
    __device__ static __forceinline__ float finish(const W &w, const block_q8_1 *ab, int t, float v) {
        const block_q8_1 *alo = ab + 2 * (t / 2), *ahi = alo + 1;
        v = __fmaf_rn(-w.mlo, __half2float(alo->s), v);
        return __fmaf_rn(-w.mhi, __half2float(ahi->s), v);
    }
};

// Slice t's 16 bytes of `qs` (and of `qh` for Q5_K) and the block's first 16 bytes, as read.
__device__ __forceinline__ int tag4(const int4 &v) { return v.x ^ v.y ^ v.z ^ v.w; }
__device__ __forceinline__ void pin4(int4 *v, int dep) {
    v->x = after(v->x, dep);
    v->y = after(v->y, dep);
    v->z = after(v->z, dep);
    v->w = after(v->w, dep);
}
struct K4R {
    int4 q, head;
    __device__ __forceinline__ int tag() const { return tag4(q) ^ tag4(head); }
    __device__ __forceinline__ void pin(int dep) {
        pin4(&q, dep);
        pin4(&head, dep);
    }
};
struct K5R {
    int4 q, qh, head;
    __device__ __forceinline__ int tag() const { return tag4(q) ^ tag4(qh) ^ tag4(head); }
    __device__ __forceinline__ void pin(int dep) {
        pin4(&q, dep);
        pin4(&qh, dep);
        pin4(&head, dep);
    }
};

struct TQ4_K : K45Type<block_q4_K, TQ4_K> {
    typedef K4R R;
    __device__ static __forceinline__ R load(const B *b, int t) {
        R r;
        r.q = *(const int4 *)(b->qs + 32 * (t / 2) + 16 * (t % 2));
        r.head = k45_head(b);
        return r;
    }
    __device__ static __forceinline__ W unpack(const R &r, int t) {
        const int n = t / 2, h = t % 2;
        const int qv[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
        W s;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s.q[0][i] = qv[i] & 0x0F0F0F0F;
            s.q[1][i] = (qv[i] >> 4) & 0x0F0F0F0F;
        }
        k4_scales(r.head, n, h, &s);
        return s;
    }
};
struct TQ5_K : K45Type<block_q5_K, TQ5_K> {
    typedef K5R R;
    __device__ static __forceinline__ R load(const B *b, int t) {
        R r;
        r.q = *(const int4 *)(b->qs + 32 * (t / 2) + 16 * (t % 2));
        r.qh = *(const int4 *)(b->qh + 16 * (t % 2));
        r.head = k45_head(b);
        return r;
    }
    __device__ static __forceinline__ W unpack(const R &r, int t) {
        const int n = t / 2, h = t % 2;
        const int qv[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
        const int hv[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
        W s;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s.q[0][i] = (qv[i] & 0x0F0F0F0F) | (((hv[i] >> (2 * n)) & 0x01010101) << 4);
            s.q[1][i] = ((qv[i] >> 4) & 0x0F0F0F0F) | (((hv[i] >> (2 * n + 1)) & 0x01010101) << 4);
        }
        k4_scales(r.head, n, h, &s);
        return s;
    }
};

// Q6_K: 16 slices a block, slice t taking elements 4j..4j+3 (j = t % 8) of the Q8_1 blocks
// 4n..4n+3 (n = t / 8): the words of `ql` at 64n + 4j and 64n + 32 + 4j and of `qh` at 32n + 4j
// (210-byte blocks are only 2-byte aligned: two 16-bit loads a word). Part g is one word, with
// its 16-value sub-block's scale.
struct Q6W {
    int q[4][1];
    float ds[4];  // d * scale of each part
};

// Slice t's words of `ql` and `qh`, its four scales and `d`, as read.
struct Q6R {
    int qa, qb, qh;
    int sc[4];
    __half d;
    __device__ __forceinline__ int tag() const {
        return qa ^ qb ^ qh ^ sc[0] ^ sc[1] ^ sc[2] ^ sc[3] ^ (int)__half_as_ushort(d);
    }
    __device__ __forceinline__ void pin(int dep) {
        qa = after(qa, dep);
        qb = after(qb, dep);
        qh = after(qh, dep);
#pragma unroll
        for (int g = 0; g < 4; g++) sc[g] = after(sc[g], dep);
        d = __ushort_as_half((u16)after((int)__half_as_ushort(d), dep));
    }
};

struct TQ6_K {
    typedef block_q6_K B;
    typedef Q6W W;
    typedef Q6R R;
    static constexpr int LPB = 16, ABLK = QK_K / QK, PARTS = 4, WORDS = 1;
    __device__ static __forceinline__ R load(const B *b, int t) {
        const int n = t / 8, j = t % 8;
        R r;
        r.qa = load_i32_a2(b->ql + 64 * n + 4 * j);
        r.qb = load_i32_a2(b->ql + 64 * n + 32 + 4 * j);
        r.qh = load_i32_a2(b->qh + 32 * n + 4 * j);
#pragma unroll
        for (int g = 0; g < 4; g++) r.sc[g] = b->scales[8 * n + 2 * g + j / 4];
        r.d = b->d;
        return r;
    }
    __device__ static __forceinline__ W unpack(const R &r, int) {
        int q[4];
        q[0] = (r.qa & 0x0F0F0F0F) | ((r.qh & 0x03030303) << 4);
        q[1] = (r.qb & 0x0F0F0F0F) | (((r.qh >> 2) & 0x03030303) << 4);
        q[2] = ((r.qa >> 4) & 0x0F0F0F0F) | (((r.qh >> 4) & 0x03030303) << 4);
        q[3] = ((r.qb >> 4) & 0x0F0F0F0F) | (((r.qh >> 6) & 0x03030303) << 4);
        const float d = __half2float(r.d);
        W s;
#pragma unroll
        for (int g = 0; g < 4; g++) {
            s.q[g][0] = (int)__vsub4((u32)q[g], 0x20202020u);  // q - 32 in each byte
            s.ds[g] = d * (float)r.sc[g];
        }
        return s;
    }
    __device__ static __forceinline__ W weight(const B *b, int t) { return unpack(load(b, t), t); }
    __device__ static __forceinline__ int act_word(const block_q8_1 *ab, int t, int p, int) {
        return load_i32_a4(ab[4 * (t / 8) + p].qs + 4 * (t % 8));
    }
    // Σ_g ds_g·da_g·Σq_g.
    __device__ static __forceinline__ float part(const W &w, const block_q8_1 *ab, int t, int p, int sum, float v) {
        return part_term(p == 0, w.ds[p], ab + 4 * (t / 8) + p, sum, v);
    }
    __device__ static __forceinline__ float finish(const W &, const block_q8_1 *, int, float v) { return v; }
};
