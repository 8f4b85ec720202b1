// The matvec kernels (mmvq.cu, mmvq_k.cu) run on the CPU through the host stand-in
// (cuda_fp16.h here) against a float64 dot product of the dequantized weights with the Q8_1
// activations: every weight type, 1-8 activation rows, 1, 2 or 4 weight rows a CTA, 1-9 weight
// rows, 1-160 blocks a row (1-24 for the K-quants), so every warp of a CTA has work and some
// threads run past a row's end; every other launch with a residual added in the epilogue. And
// the one-launch matvec over 2-3 weights against a launch per weight, bit for bit. Activation scales are powers of two and quants small, so each
// block's `s = d·Σq` is exact in f16 and the only differences are float rounding: relative error
// ≤ 1e-5 of Σ|w·x|.
//
// Built and run by `cargo xtask kernels --check` (g++ -std=c++20 -I kernels/host); exits 1 on
// a mismatch. Needs no GPU and no CUDA.
#include "../mmvq.cu"
#include "../mmvq_k.cu"

#include <cstdio>
#include <cstdlib>
#include <random>

#include "random_blocks.h"


// Element j of a block, dequantized as ggml does (the K-quants through common.cuh's helpers,
// which the dequant and get_rows kernels share).
static unsigned u32_at(const u8 *p) { return p[0] | p[1] << 8 | p[2] << 16 | (unsigned)p[3] << 24; }
static int nibble(const u8 *qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }
static double value(const block_q4_0 &b, int j) { return __half2float(b.d) * (nibble(b.qs, j) - 8.0); }
static double value(const block_q4_1 &b, int j) { return (double)__half2float(b.d) * nibble(b.qs, j) + __half2float(b.m); }
static double value(const block_q5_0 &b, int j) {
    return __half2float(b.d) * ((nibble(b.qs, j) | ((u32_at(b.qh) >> j) & 1) << 4) - 16.0);
}
static double value(const block_q5_1 &b, int j) {
    return (double)__half2float(b.d) * (nibble(b.qs, j) | ((u32_at(b.qh) >> j) & 1) << 4) + __half2float(b.m);
}
static double value(const block_q8_0 &b, int j) { return (double)__half2float(b.d) * b.qs[j]; }
template <typename B> static double value_k45(const B &b, int j) {
    int sc, m;
    scale_min_k4(j / 32, b.scales, &sc, &m);
    return (double)__half2float(b.d) * sc * k_quant(&b, j / 32, j % 32) - (double)__half2float(b.dmin) * m;
}
static double value(const block_q4_K &b, int j) { return value_k45(b, j); }
static double value(const block_q5_K &b, int j) { return value_k45(b, j); }
static double value(const block_q6_K &b, int j) {
    return (double)__half2float(b.d) * q6_k_scale(&b, j / 32, j % 32) * k_quant(&b, j / 32, j % 32);
}

// A Q8_1 block of quants in [-60, 60] and d = 2^(e-15): s = d·Σq is exact in f16.
static block_q8_1 activation_block() {
    block_q8_1 b;
    int sum = 0;
    for (int i = 0; i < 32; i++) sum += b.qs[i] = (i8)((int)(rng() % 121) - 60);
    const int e = 5 + (int)(rng() % 6);
    b.d = __half{(uint16_t)(e << 10)};
    b.s = __half{0};
    if (sum != 0) {
        const int mag = std::abs(sum);
        int p = 0;
        while ((mag << p) < 1024) p++;
        b.s = __half{(uint16_t)((sum < 0) << 15 | (e - p + 10) << 10 | ((mag << p) & 1023))};
    }
    if ((double)__half2float(b.s) != (double)sum * __half2float(b.d)) {
        std::printf("activation_block: s not exact\n");
        std::exit(2);
    }
    return b;
}

typedef void (*Kernel)(const void *, const block_q8_1 *, float *, const float *, int, int, int);

template <typename B> static int check(const char *name, int block_len, const Kernel *kernels) {
    int bad = 0;
    for (int trial = 0; trial < 4; trial++) {
        const int m = 1 + (int)(rng() % 9), nb = 1 + (int)(rng() % (block_len == 32 ? 160 : 24)), k = nb * block_len, nb32 = k / 32;
        const std::vector<B> w = random_blocks<B>(m * nb);
        for (int ncols = 1; ncols <= 8; ncols++) {
            const int rpc = 1 << (rng() % 3);  // rows per CTA: 1, 2 or 4
            std::vector<block_q8_1> a(ncols * nb32);
            for (auto &b : a) b = activation_block();
            std::vector<float> out(ncols * m, NAN), add(ncols * m);
            for (auto &v : add) v = (float)((int)(rng() % 2001) - 1000);
            const bool residual = rng() % 2;  // every other launch adds a residual in the epilogue
            launch((m + rpc - 1) / rpc, 1, WARP, MMVQ_WARPS, [&] {
                kernels[ncols - 1](w.data(), a.data(), out.data(), residual ? add.data() : nullptr, nb, m, rpc);
            });
            for (int c = 0; c < ncols; c++)
                for (int r = 0; r < m; r++) {
                    double want = residual ? add[c * m + r] : 0, mag = std::fabs(want);
                    for (int j = 0; j < k; j++) {
                        const block_q8_1 &ab = a[c * nb32 + j / 32];
                        const double x = value(w[r * nb + j / block_len], j % block_len) * __half2float(ab.d) * ab.qs[j % 32];
                        want += x;
                        mag += std::fabs(x);
                    }
                    const double got = out[c * m + r];
                    if (!(std::fabs(got - want) <= 1e-5 * mag) && bad++ < 5)
                        std::printf("%s: m=%d nb=%d rows=%d rpc=%d: out[%d][%d] = %g, want %g\n", name, m, nb, ncols, rpc, c, r, got, want);
                }
        }
    }
    std::printf("mmvq %s: %s\n", name, bad ? "MISMATCH" : "ok");
    return bad;
}

typedef void (*MultiKernel)(MmvqSegs, const block_q8_1 *, int, int);

// The one-launch matvec over 2-3 weights (q/k/v, gate/up) against one launch per weight, bit
// for bit: every row of the shared launch belongs to one weight and reduces as alone.
template <typename B> static int check_multi(const char *name, int block_len, Kernel single, MultiKernel multi) {
    int bad = 0;
    for (int trial = 0; trial < 3; trial++) {
        const int nw = 2 + (int)(rng() % 2), nb = 1 + (int)(rng() % (block_len == 32 ? 40 : 6));
        const int nb32 = nb * block_len / 32, rpc = 1 << (rng() % 3);
        std::vector<block_q8_1> a(nb32);
        for (auto &b : a) b = activation_block();
        std::vector<std::vector<B>> w(nw);
        std::vector<std::vector<float>> want(nw), got(nw);
        MmvqSegs segs{};
        for (int i = 0; i < nw; i++) {
            const int m = 1 + (int)(rng() % 7);
            w[i] = random_blocks<B>(m * nb);
            want[i].assign(m, NAN);
            got[i].assign(m, NAN);
            launch((m + rpc - 1) / rpc, 1, WARP, MMVQ_WARPS,
                   [&] { single(w[i].data(), a.data(), want[i].data(), nullptr, nb, m, rpc); });
            segs.w[i] = w[i].data();
            segs.out[i] = got[i].data();
            segs.m[i] = m;
        }
        const int total = segs.m[0] + segs.m[1] + segs.m[2];
        launch((total + rpc - 1) / rpc, 1, WARP, MMVQ_WARPS, [&] { multi(segs, a.data(), nb, rpc); });
        for (int i = 0; i < nw; i++)
            if (std::memcmp(want[i].data(), got[i].data(), want[i].size() * 4) != 0 && bad++ < 3)
                std::printf("%s multi: weight %d of %d (rpc %d) differs from its own launch\n", name, i, nw, rpc);
    }
    std::printf("mmvq %s multi: %s\n", name, bad ? "MISMATCH" : "ok");
    return bad;
}

#define KERNELS(T)                                                                                  \
    const Kernel k_##T[8] = {(Kernel)mmvq_##T##_1, (Kernel)mmvq_##T##_2, (Kernel)mmvq_##T##_3,       \
                             (Kernel)mmvq_##T##_4, (Kernel)mmvq_##T##_5, (Kernel)mmvq_##T##_6,       \
                             (Kernel)mmvq_##T##_7, (Kernel)mmvq_##T##_8};

int main() {
    KERNELS(q4_0) KERNELS(q4_1) KERNELS(q5_0) KERNELS(q5_1) KERNELS(q8_0) KERNELS(q4_K) KERNELS(q5_K) KERNELS(q6_K)
    int bad = check<block_q4_0>("q4_0", 32, k_q4_0) + check<block_q4_1>("q4_1", 32, k_q4_1) +
              check<block_q5_0>("q5_0", 32, k_q5_0) + check<block_q5_1>("q5_1", 32, k_q5_1) +
              check<block_q8_0>("q8_0", 32, k_q8_0) + check<block_q4_K>("q4_K", 256, k_q4_K) +
              check<block_q5_K>("q5_K", 256, k_q5_K) + check<block_q6_K>("q6_K", 256, k_q6_K);
    bad += check_multi<block_q4_0>("q4_0", 32, k_q4_0[0], mmvq_q4_0_multi) +
           check_multi<block_q4_1>("q4_1", 32, k_q4_1[0], mmvq_q4_1_multi) +
           check_multi<block_q5_0>("q5_0", 32, k_q5_0[0], mmvq_q5_0_multi) +
           check_multi<block_q5_1>("q5_1", 32, k_q5_1[0], mmvq_q5_1_multi) +
           check_multi<block_q8_0>("q8_0", 32, k_q8_0[0], mmvq_q8_0_multi) +
           check_multi<block_q4_K>("q4_K", 256, k_q4_K[0], mmvq_q4_K_multi) +
           check_multi<block_q5_K>("q5_K", 256, k_q5_K[0], mmvq_q5_K_multi) +
           check_multi<block_q6_K>("q6_K", 256, k_q6_K[0], mmvq_q6_K_multi);
    return bad ? 1 : 0;
}
