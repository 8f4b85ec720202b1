//! F16 and BF16 weights against f16/bf16 activations, as ggml's portable
//! `ggml_vec_dot_f16` / `ggml_vec_dot_bf16`, and the f16 dot of ggml's x86 flash attention.

use half::f16;

/// `ggml_vec_dot_f16` without SIMD: exact f32 products summed in f64.
pub(crate) fn dot_f16(w: &[u8], y: &[u16]) -> f32 {
    let mut sum = 0f64;
    for (b, &yv) in w.chunks_exact(2).zip(y) {
        let wv = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
        sum += (wv * f16::from_bits(yv).to_f32()) as f64;
    }
    sum as f32
}

/// `ggml_vec_dot_bf16` without SIMD: exact f32 products summed in f64.
pub(crate) fn dot_bf16(w: &[u8], y: &[u16]) -> f32 {
    let mut sum = 0f64;
    for (b, &yv) in w.chunks_exact(2).zip(y) {
        let wv = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
        sum += (wv * f32::from_bits((yv as u32) << 16)) as f64;
    }
    sum as f32
}

/// `ggml_vec_dot_f16` as the x86 AVX512 build computes it (`GGML_F16_STEP` 64, 4 accumulators
/// of 16 lanes): each f16×f16 product is exact in f32, so only the order of the f32 additions
/// matters. Lane `l` of accumulator `j` sums elements `i ≡ 16j + l (mod 64)` in order; then
/// `acc0 += acc2`, `acc1 += acc3`, `acc0 += acc1`, and `_mm512_reduce_add_ps` adds halves
/// (lanes `l + 8`, then `l + 4`, then `(0 + 2) + (1 + 3)`); the tail past a multiple of 64 is
/// added in f64. Bit-identical to the installed libggml-cpu on random vectors (n = 64..256).
/// llama.cpp's CPU flash attention dots f16 keys with the f16-rounded query this way.
pub(crate) fn dot_f16_ggml_x86(a: &[f16], b: &[f16]) -> f32 {
    let n = a.len().min(b.len());
    let np = n & !63;
    let mut acc = [[0f32; 16]; 4];
    for i in (0..np).step_by(64) {
        for (j, accj) in acc.iter_mut().enumerate() {
            for (l, s) in accj.iter_mut().enumerate() {
                let idx = i + 16 * j + l;
                *s += a[idx].to_f32() * b[idx].to_f32();
            }
        }
    }
    let [mut a0, mut a1, a2, a3] = acc;
    for l in 0..16 {
        a0[l] += a2[l];
        a1[l] += a3[l];
    }
    for l in 0..16 {
        a0[l] += a1[l];
    }
    let mut t8 = [0f32; 8];
    for l in 0..8 {
        t8[l] = a0[l + 8] + a0[l];
    }
    let mut t4 = [0f32; 4];
    for l in 0..4 {
        t4[l] = t8[l + 4] + t8[l];
    }
    let mut sum = ((t4[0] + t4[2]) + (t4[1] + t4[3])) as f64;
    for i in np..n {
        sum += (a[i].to_f32() * b[i].to_f32()) as f64;
    }
    sum as f32
}
