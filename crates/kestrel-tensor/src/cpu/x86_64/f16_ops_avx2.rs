//! AVX2 + F16C versions of the f16 flash-attention ops in [`super::f16_ops`], for CPUs without
//! AVX-512: the same roundings in the same order, so each is bit for bit its scalar twin (and
//! the AVX-512 op). A 16-lane accumulator of ggml's AVX512 `ggml_vec_dot_f16` is two 8-lane
//! halves here; lane-wise adds and FMAs are the same operations on the same values.

use std::arch::x86_64::*;

use half::f16;

/// The features these functions need.
pub(crate) fn available() -> bool {
    super::has_avx2()
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8(p: *const f16) -> __m256 {
    // SAFETY: the caller keeps 8 elements at `p` in bounds.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn store8(p: *mut f16, x: __m256) {
    // SAFETY: the caller keeps 8 elements at `p` in bounds.
    unsafe { _mm_storeu_si128(p.cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)) }
}

/// `ggml_vec_dot_f16` in an AVX512 build's order (see `qdot::dot_f16_ggml_x86`): four 16-lane
/// accumulators, each as (lanes 0..8, lanes 8..16).
///
/// # Safety
/// The CPU has the features of [`available`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f16(a: &[f16], b: &[f16]) -> f32 {
    let n = a.len().min(b.len());
    let np = n & !63;
    let mut lo = [_mm256_setzero_ps(); 4];
    let mut hi = [_mm256_setzero_ps(); 4];
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    for i in (0..np).step_by(64) {
        for j in 0..4 {
            let at = i + 16 * j;
            // SAFETY: at + 16 <= np <= n. f16 × f16 is exact in f32, so the FMA equals the
            // twin's multiply-then-add.
            unsafe {
                lo[j] = _mm256_fmadd_ps(load8(pa.add(at)), load8(pb.add(at)), lo[j]);
                hi[j] = _mm256_fmadd_ps(load8(pa.add(at + 8)), load8(pb.add(at + 8)), hi[j]);
            }
        }
    }
    let l0 = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3]));
    let h0 = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3]));
    // Lanes l + 8 and l, then l + 4 and l, then (0 + 2) + (1 + 3).
    let t8 = _mm256_add_ps(h0, l0);
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
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn mad_f16(acc: &mut [f16], v: &[f16], s: f32) {
    let n = acc.len().min(v.len());
    let np = n & !7;
    let vs = _mm256_set1_ps(s);
    for i in (0..np).step_by(8) {
        // SAFETY: i + 8 <= np <= n for both slices.
        unsafe {
            let x = _mm256_fmadd_ps(load8(v.as_ptr().add(i)), vs, load8(acc.as_ptr().add(i)));
            store8(acc.as_mut_ptr().add(i), x);
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
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn scale_f16(acc: &mut [f16], s: f32) {
    let n = acc.len();
    let np = n & !7;
    let vs = _mm256_set1_ps(s);
    for i in (0..np).step_by(8) {
        // SAFETY: i + 8 <= np <= n.
        unsafe {
            let x = _mm256_mul_ps(load8(acc.as_ptr().add(i)), vs);
            store8(acc.as_mut_ptr().add(i), x);
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
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn to_f16(src: &[f32], dst: &mut [f16]) {
    let n = src.len().min(dst.len());
    let np = n & !7;
    for i in (0..np).step_by(8) {
        // SAFETY: i + 8 <= np <= n for both slices.
        unsafe {
            store8(
                dst.as_mut_ptr().add(i),
                _mm256_loadu_ps(src.as_ptr().add(i)),
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
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let np = n & !7;
    let vs = _mm256_set1_ps(s);
    for i in (0..np).step_by(8) {
        // SAFETY: i + 8 <= np <= n for both slices.
        unsafe {
            let x = _mm256_mul_ps(load8(src.as_ptr().add(i)), vs);
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), x);
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
    fn avx2_f16_ops_equal_scalar_twins() {
        if !super::available() {
            eprintln!("skipped: this CPU lacks AVX2 + F16C + FMA");
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
            12,
        );
    }
}
