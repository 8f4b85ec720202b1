// Tensor-core primitives (PTX `mma.sync`, sm_80 and later), with a host form for the host
// stand-in (kernels/host/cuda_fp16.h) that computes the same integers through the warp's
// exchange slots, so the host checks run kernels that use them.
#pragma once
#include "common.cuh"

// `d` = A·B for one m16n8k16 tile of signed 8-bit values, as a warp: lane l (g = l / 4,
// q = l % 4) gives `a0` (4 values of A row g, columns 4q..4q+3), `a1` (the same of row g + 8)
// and `b0` (4 values of B column g, rows 4q..4q+3), and gets d[0..3] = C(g, 2q), C(g, 2q+1),
// C(g+8, 2q), C(g+8, 2q+1) (the PTX ISA's fragment layout; llama.cpp's ggml-cuda mma.cuh uses
// the same). Every lane of the warp must call it.
#ifndef KESTREL_HOST_STANDIN
__device__ __forceinline__ void mma_s8_16816(int (&d)[4], int a0, int a1, int b0) {
    d[0] = d[1] = d[2] = d[3] = 0;
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
}
#else
inline void mma_s8_16816(int (&d)[4], int a0, int a1, int b0) {
    const int lane = simt::lane(), g = lane / 4, q = lane % 4;
    WarpExchange &w = simt::warp();
    w.islot[0][lane] = a0;
    w.islot[1][lane] = a1;
    w.islot[2][lane] = b0;
    w.bar.arrive_and_wait();
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e / 2), col = 2 * q + e % 2;
        int sum = 0;
        for (int k = 0; k < 4; k++)  // A row `row` words k, from lane (row % 8) * 4 + k
            sum = __dp4a(w.islot[row / 8][(row % 8) * 4 + k], w.islot[2][col * 4 + k], sum);
        d[e] = sum;
    }
    w.bar.arrive_and_wait();
}
#endif
