//! AVX-512 f16 vector ops for the f16 flash-attention path (`cpu::attention`), each
//! bit-identical to its scalar twin there and in `cpu::qdot`: ggml's AVX512 `ggml_vec_dot_f16`
//! (four 16-lane f32 accumulators over 64 elements, its reduction order, an f64 tail),
//! `ggml_vec_mad_f16` (`acc = f16(fma(v, s, acc))`), `ggml_vec_scale_f16` (`acc = f16(acc·s)`)
//! and round-to-nearest-even f32 → f16 conversion.

use std::arch::x86_64::*;

use half::f16;

/// The features these functions need.
pub(crate) fn available() -> bool {
    super::has_avx512()
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
unsafe fn load16(p: *const f16) -> __m512 {
    // SAFETY: the caller keeps 16 elements at `p` in bounds.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
unsafe fn store16(p: *mut f16, x: __m512) {
    // SAFETY: the caller keeps 16 elements at `p` in bounds.
    unsafe {
        _mm256_storeu_si256(
            p.cast(),
            _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x),
        )
    }
}

/// `ggml_vec_dot_f16` as an AVX512 build runs it (see `qdot::dot_f16_ggml_x86`).
///
/// # Safety
/// The CPU has the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub(crate) unsafe fn dot_f16(a: &[f16], b: &[f16]) -> f32 {
    let n = a.len().min(b.len());
    let np = n & !63;
    let mut acc = [_mm512_setzero_ps(); 4];
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    for i in (0..np).step_by(64) {
        for (j, accj) in acc.iter_mut().enumerate() {
            // SAFETY: i + 16j + 16 <= np <= n.
            let (x, y) = unsafe { (load16(pa.add(i + 16 * j)), load16(pb.add(i + 16 * j))) };
            // f16 × f16 is exact in f32, so the FMA equals ggml's multiply-then-add.
            *accj = _mm512_fmadd_ps(x, y, *accj);
        }
    }
    let a0 = _mm512_add_ps(acc[0], acc[2]);
    let a1 = _mm512_add_ps(acc[1], acc[3]);
    let a0 = _mm512_add_ps(a0, a1);
    // _mm512_reduce_add_ps: lanes l + 8, then l + 4, then (0 + 2) + (1 + 3).
    let t8 = _mm256_add_ps(_mm512_extractf32x8_ps::<1>(a0), _mm512_castps512_ps256(a0));
    let t4 = _mm_add_ps(_mm256_extractf128_ps::<1>(t8), _mm256_castps256_ps128(t8));
    let mut t = [0f32; 4];
    // SAFETY: 4 floats, unaligned store.
    unsafe { _mm_storeu_ps(t.as_mut_ptr(), t4) };
    let mut sum = ((t[0] + t[2]) + (t[1] + t[3])) as f64;
    for i in np..n {
        sum += (a[i].to_f32() * b[i].to_f32()) as f64;
    }
    sum as f32
}

/// `acc[i] = f16(fma(v[i], s, acc[i]))`.
///
/// # Safety
/// The CPU has the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub(crate) unsafe fn mad_f16(acc: &mut [f16], v: &[f16], s: f32) {
    let n = acc.len().min(v.len());
    let np = n & !15;
    let vs = _mm512_set1_ps(s);
    for i in (0..np).step_by(16) {
        // SAFETY: i + 16 <= np <= n for both slices.
        unsafe {
            let x = _mm512_fmadd_ps(load16(v.as_ptr().add(i)), vs, load16(acc.as_ptr().add(i)));
            store16(acc.as_mut_ptr().add(i), x);
        }
    }
    for i in np..n {
        acc[i] = f16::from_f32(v[i].to_f32().mul_add(s, acc[i].to_f32()));
    }
}

/// `acc[i] = f16(acc[i] · s)`.
///
/// # Safety
/// The CPU has the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub(crate) unsafe fn scale_f16(acc: &mut [f16], s: f32) {
    let n = acc.len();
    let np = n & !15;
    let vs = _mm512_set1_ps(s);
    for i in (0..np).step_by(16) {
        // SAFETY: i + 16 <= np <= n.
        unsafe {
            let x = _mm512_mul_ps(load16(acc.as_ptr().add(i)), vs);
            store16(acc.as_mut_ptr().add(i), x);
        }
    }
    for a in &mut acc[np..n] {
        *a = f16::from_f32(a.to_f32() * s);
    }
}

/// `dst[i] = f16(src[i])` (round to nearest even).
///
/// # Safety
/// The CPU has the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub(crate) unsafe fn to_f16(src: &[f32], dst: &mut [f16]) {
    let n = src.len().min(dst.len());
    let np = n & !15;
    for i in (0..np).step_by(16) {
        // SAFETY: i + 16 <= np <= n for both slices.
        unsafe {
            store16(
                dst.as_mut_ptr().add(i),
                _mm512_loadu_ps(src.as_ptr().add(i)),
            )
        };
    }
    for i in np..n {
        dst[i] = f16::from_f32(src[i]);
    }
}

/// `dst[i] = f32(src[i]) · s`.
///
/// # Safety
/// The CPU has the features of [`available`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c,fma")]
pub(crate) unsafe fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let np = n & !15;
    let vs = _mm512_set1_ps(s);
    for i in (0..np).step_by(16) {
        // SAFETY: i + 16 <= np <= n for both slices.
        unsafe {
            let x = _mm512_mul_ps(load16(src.as_ptr().add(i)), vs);
            _mm512_storeu_ps(dst.as_mut_ptr().add(i), x);
        }
    }
    for i in np..n {
        dst[i] = src[i].to_f32() * s;
    }
}

#[cfg(test)]
mod tests {
    use half::f16;

    use crate::cpu::testutil::{check_f16_ops, F16Ops};

    /// Each op equals its scalar twin bit for bit (see `check_f16_ops`).
    #[test]
    fn f16_ops_equal_scalar_twins() {
        if !super::available() {
            eprintln!("skipped: this CPU lacks AVX-512 F/BW/VL + F16C + FMA");
            return;
        }
        // SAFETY (each): the features were checked above.
        check_f16_ops(
            &F16Ops {
                dot: |a: &[f16], b: &[f16]| unsafe { super::dot_f16(a, b) },
                mad: |acc: &mut [f16], v: &[f16], s: f32| unsafe { super::mad_f16(acc, v, s) },
                scale: |acc: &mut [f16], s: f32| unsafe { super::scale_f16(acc, s) },
                to_f16: |src: &[f32], dst: &mut [f16]| unsafe { super::to_f16(src, dst) },
                to_f32_scaled: |src: &[f16], s: f32, dst: &mut [f32]| unsafe {
                    super::to_f32_scaled(src, s, dst)
                },
            },
            11,
        );
    }
}
