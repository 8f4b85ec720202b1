#pragma once
#include "cuda_fp16.h"

// bfloat16 as its bits, and its conversion to float (the top half of an f32), for the kernels
// that read BF16 weights (matvec_float.cu).
struct __nv_bfloat16 {
    uint16_t bits;
};
inline float __bfloat162float(__nv_bfloat16 v) {
    const uint32_t u = (uint32_t)v.bits << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
