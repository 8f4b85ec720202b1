//! NEON versions of the f16 flash-attention ops (`cpu::attention`'s `F16Ops`; x86's are
//! `x86_64::f16_ops`), each bit for bit its scalar twin: ggml's AVX512 `ggml_vec_dot_f16`
//! order (four 16-lane f32 accumulators over 64 elements, here 16 registers of 4 lanes, its
//! reduction order, an f64 tail), `acc = f16(fma(v, s, acc))`, `acc = f16(acc · s)`,
//! round-to-nearest-even f32 → f16 and f16 → f32 scaled. The conversions are `fcvtl`/`fcvtn`
//! through `asm!` (Rust's f16 vector intrinsics are unstable); both are exact or round to
//! nearest even under the default FPCR, as `half` does in software.

use std::arch::aarch64::*;

use half::f16;

/// Eight f16 at `p` as two f32 vectors (elements 0-3, 4-7).
///
/// # Safety
/// `p..p + 8` must be readable.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn load8(p: *const f16) -> (float32x4_t, float32x4_t) {
    // SAFETY: the caller keeps 8 elements readable; f16 is a u16.
    let h = unsafe { vld1q_u16(p.cast()) };
    let (lo, hi): (float32x4_t, float32x4_t);
    // SAFETY: `fcvtl`/`fcvtl2` touch only these registers (`lo` is not `h`: `out`).
    unsafe {
        std::arch::asm!(
            "fcvtl {lo:v}.4s, {h:v}.4h",
            "fcvtl2 {hi:v}.4s, {h:v}.8h",
            h = in(vreg) h,
            lo = out(vreg) lo,
            hi = lateout(vreg) hi,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    (lo, hi)
}

/// Stores two f32 vectors as eight f16 at `p` (round to nearest even).
///
/// # Safety
/// `p..p + 8` must be writable.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn store8(p: *mut f16, lo: float32x4_t, hi: float32x4_t) {
    let h: uint16x8_t;
    // SAFETY: `fcvtn`/`fcvtn2` touch only these registers (`h` is neither input: `out`).
    unsafe {
        std::arch::asm!(
            "fcvtn {h:v}.4h, {lo:v}.4s",
            "fcvtn2 {h:v}.8h, {hi:v}.4s",
            lo = in(vreg) lo,
            hi = in(vreg) hi,
            h = out(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        );
        vst1q_u16(p.cast(), h);
    }
}

/// `ggml_vec_dot_f16` in an AVX512 build's order (see `qdot::dot_f16_ggml_x86`): accumulator
/// `j`'s lanes `4g..4g + 4` are register `4j + g`.
#[target_feature(enable = "neon")]
pub(crate) fn dot_f16(a: &[f16], b: &[f16]) -> f32 {
    let n = a.len().min(b.len());
    let np = n & !63;
    let mut acc = [vdupq_n_f32(0.0); 16];
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    for i in (0..np).step_by(64) {
        for h in 0..8 {
            // SAFETY: i + 8h + 8 <= np <= n for both slices.
            let ((x0, x1), (y0, y1)) =
                unsafe { (load8(pa.add(i + 8 * h)), load8(pb.add(i + 8 * h))) };
            // f16 × f16 is exact in f32, so the FMA equals ggml's multiply-then-add.
            acc[2 * h] = vfmaq_f32(acc[2 * h], x0, y0);
            acc[2 * h + 1] = vfmaq_f32(acc[2 * h + 1], x1, y1);
        }
    }
    // acc0 += acc2, acc1 += acc3, acc0 += acc1 (lane by lane).
    let a0: [float32x4_t; 4] = std::array::from_fn(|g| {
        let x = vaddq_f32(acc[g], acc[8 + g]);
        let y = vaddq_f32(acc[4 + g], acc[12 + g]);
        vaddq_f32(x, y)
    });
    // _mm512_reduce_add_ps: lanes l + 8, then l + 4, then (0 + 2) + (1 + 3).
    let t8 = [vaddq_f32(a0[2], a0[0]), vaddq_f32(a0[3], a0[1])];
    let t4 = vaddq_f32(t8[1], t8[0]);
    let t = |l| match l {
        0 => vgetq_lane_f32::<0>(t4),
        1 => vgetq_lane_f32::<1>(t4),
        2 => vgetq_lane_f32::<2>(t4),
        _ => vgetq_lane_f32::<3>(t4),
    };
    let mut sum = ((t(0) + t(2)) + (t(1) + t(3))) as f64;
    for i in np..n {
        sum += (a[i].to_f32() * b[i].to_f32()) as f64;
    }
    sum as f32
}

/// `acc[i] = f16(fma(v[i], s, acc[i]))`.
#[target_feature(enable = "neon")]
pub(crate) fn mad_f16(acc: &mut [f16], v: &[f16], s: f32) {
    let n = acc.len().min(v.len());
    let np = n & !7;
    for i in (0..np).step_by(8) {
        // SAFETY: i + 8 <= np <= n for both slices.
        unsafe {
            let (x0, x1) = load8(v.as_ptr().add(i));
            let (a0, a1) = load8(acc.as_ptr().add(i));
            store8(
                acc.as_mut_ptr().add(i),
                vfmaq_n_f32(a0, x0, s),
                vfmaq_n_f32(a1, x1, s),
            );
        }
    }
    for i in np..n {
        acc[i] = f16::from_f32(v[i].to_f32().mul_add(s, acc[i].to_f32()));
    }
}

/// `acc[i] = f16(acc[i] · s)`.
#[target_feature(enable = "neon")]
pub(crate) fn scale_f16(acc: &mut [f16], s: f32) {
    let n = acc.len();
    let np = n & !7;
    for i in (0..np).step_by(8) {
        // SAFETY: i + 8 <= np <= n.
        unsafe {
            let (a0, a1) = load8(acc.as_ptr().add(i));
            store8(
                acc.as_mut_ptr().add(i),
                vmulq_n_f32(a0, s),
                vmulq_n_f32(a1, s),
            );
        }
    }
    for a in &mut acc[np..n] {
        *a = f16::from_f32(a.to_f32() * s);
    }
}

/// `dst[i] = f16(src[i])` (round to nearest even).
#[target_feature(enable = "neon")]
pub(crate) fn to_f16(src: &[f32], dst: &mut [f16]) {
    let n = src.len().min(dst.len());
    let np = n & !7;
    for i in (0..np).step_by(8) {
        // SAFETY: i + 8 <= np <= n for both slices.
        unsafe {
            let p = src.as_ptr().add(i);
            store8(dst.as_mut_ptr().add(i), vld1q_f32(p), vld1q_f32(p.add(4)));
        }
    }
    for i in np..n {
        dst[i] = f16::from_f32(src[i]);
    }
}

/// `dst[i] = f32(src[i]) · s`.
#[target_feature(enable = "neon")]
pub(crate) fn to_f32_scaled(src: &[f16], s: f32, dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let np = n & !7;
    for i in (0..np).step_by(8) {
        // SAFETY: i + 8 <= np <= n for both slices.
        unsafe {
            let (x0, x1) = load8(src.as_ptr().add(i));
            let p = dst.as_mut_ptr().add(i);
            vst1q_f32(p, vmulq_n_f32(x0, s));
            vst1q_f32(p.add(4), vmulq_n_f32(x1, s));
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
        // SAFETY (each): NEON is part of the aarch64 base architecture.
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
