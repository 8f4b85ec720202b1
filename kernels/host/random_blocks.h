// What the matvec host checks share: one random generator, random f16 scales, and weight
// blocks of random bytes with normal scales (any quants: the checks compare kernels with each
// other or with float64, so every bit pattern is fair input). Include after the kernel files.
#pragma once
#include <random>

// Seeded the same in every check; a check that wants another sequence reseeds it in main.
inline std::mt19937 rng(7);

// A random normal f16 with exponent field in [lo, hi].
inline __half random_half(int lo, int hi) {
    const int e = lo + (int)(rng() % (hi - lo + 1));
    return __half{(uint16_t)(((rng() & 1) << 15) | (e << 10) | (rng() & 1023))};
}

template <typename B> void fill(B &b) {
    for (size_t i = 0; i < sizeof(B); i++) ((u8 *)&b)[i] = (u8)rng();
}
inline void fix_scales(block_q4_0 &b) { b.d = random_half(10, 16); }
inline void fix_scales(block_q4_1 &b) { b.d = random_half(10, 16); b.m = random_half(10, 16); }
inline void fix_scales(block_q5_0 &b) { b.d = random_half(10, 16); }
inline void fix_scales(block_q5_1 &b) { b.d = random_half(10, 16); b.m = random_half(10, 16); }
inline void fix_scales(block_q8_0 &b) { b.d = random_half(10, 16); }
inline void fix_scales(block_q4_K &b) { b.d = random_half(10, 16); b.dmin = random_half(10, 16); }
inline void fix_scales(block_q5_K &b) { b.d = random_half(10, 16); b.dmin = random_half(10, 16); }
inline void fix_scales(block_q6_K &b) { b.d = random_half(10, 16); }

// `n` weight blocks: random bytes, normal scales.
template <typename B> std::vector<B> random_blocks(size_t n) {
    std::vector<B> w(n);
    for (auto &b : w) {
        fill(b);
        fix_scales(b);
    }
    return w;
}
