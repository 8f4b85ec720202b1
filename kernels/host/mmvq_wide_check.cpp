// The tensor-core matvec for 9-64 activation rows (mmvq_wide.cu) against the matvec of one row
// (mmvq.cu, mmvq_k.cu), bit for bit: each activation row's outputs from one wide launch must be
// the bits the one-row launch gives that row alone, for every weight type, 1, 2 and 4 weight
// rows a CTA (which fix the matvec's order), 8 and 16 activation rows a CTA, weight and
// activation row counts that leave CTAs part-empty, and with and without a residual add. The
// mma here is the host stand-in's (mma.cuh), which follows the PTX ISA's fragment layout.
//
// Built and run by `cargo xtask kernels --check`; exits 1 on a mismatch.
#include "../mmvq.cu"
#include "../mmvq_k.cu"
#include "../mmvq_wide.cu"

#include <cstdio>
#include <cstdlib>
#include <random>

#include "random_blocks.h"


// Any quants and scales: this check compares two kernels, not a kernel against its formula.
static block_q8_1 activation_block() {
    block_q8_1 b;
    for (int i = 0; i < 32; i++) b.qs[i] = (i8)((int)(rng() % 255) - 127);
    b.d = random_half(8, 14);
    b.s = random_half(8, 18);
    return b;
}

typedef void (*Row1)(const void *, const block_q8_1 *, float *, const float *, int, int, int);
typedef void (*Wide)(const void *, const block_q8_1 *, float *, const float *, int, int, int, int);

template <typename B>
static int check(const char *name, int block_len, Row1 one, Wide wide2, Wide wide4, int trials) {
    int bad = 0;
    for (int trial = 0; trial < trials; trial++) {
        const int m = 1 + (int)(rng() % 36), nb = 1 + (int)(rng() % (block_len == 32 ? 70 : 9));
        const int ncols = 1 + (int)(rng() % 24), nb32 = nb * block_len / 32, rpc = 1 << (rng() % 3);
        const int nt = trial % 2 ? 4 : 2;
        const bool residual = rng() % 2;
        const std::vector<B> w = random_blocks<B>(m * nb);
        std::vector<block_q8_1> a(ncols * nb32);
        for (auto &b : a) b = activation_block();
        std::vector<float> add(ncols * m), want(ncols * m, NAN), got(ncols * m, NAN);
        for (auto &v : add) v = (float)((int)(rng() % 2001) - 1000) / 7.0f;
        for (int c = 0; c < ncols; c++)
            launch((m + rpc - 1) / rpc, 1, WARP, MMVQ_WARPS, [&] {
                one(w.data(), a.data() + c * nb32, want.data() + c * m, residual ? add.data() + c * m : nullptr, nb, m, rpc);
            });
        const unsigned gy = (unsigned)((ncols + 8 * nt - 1) / (8 * nt));
        launch((m + WIDE_ROWS - 1) / WIDE_ROWS, gy, WARP, MMVQ_WARPS / rpc, [&] {
            (nt == 4 ? wide4 : wide2)(w.data(), a.data(), got.data(), residual ? add.data() : nullptr, nb, m, ncols, rpc);
        });
        for (int i = 0; i < ncols * m; i++)
            if (std::memcmp(&want[i], &got[i], 4) != 0 && bad++ < 5)
                std::printf("%s: m=%d nb=%d ncols=%d rpc=%d nt=%d: out[%d][%d] = %.9g, alone %.9g\n", name, m, nb, ncols,
                            rpc, nt, i / m, i % m, got[i], want[i]);
    }
    std::printf("mmvq_wide %s: %s\n", name, bad ? "MISMATCH" : "ok");
    return bad;
}

#define CHECK(B, T, LEN, TRIALS) \
    check<B>(#T, LEN, (Row1)mmvq_##T##_1, (Wide)mmvq_wide_##T##_2, (Wide)mmvq_wide_##T##_4, TRIALS)

int main() {
    rng.seed(11);
    int bad = CHECK(block_q4_0, q4_0, 32, 6) + CHECK(block_q4_1, q4_1, 32, 4) + CHECK(block_q5_0, q5_0, 32, 4) +
              CHECK(block_q5_1, q5_1, 32, 4) + CHECK(block_q8_0, q8_0, 32, 4) + CHECK(block_q4_K, q4_K, 256, 6) +
              CHECK(block_q5_K, q5_K, 256, 4) + CHECK(block_q6_K, q6_K, 256, 6);
    return bad ? 1 : 0;
}
