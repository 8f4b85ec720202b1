//! f16 / bf16 conversions for the KV cache and activations: f32 slices to and from half
//! precision (round to nearest even; bf16 as ggml's `ggml_compute_fp32_to_bf16`).

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use kestrel_gguf::quant::float::{bf16_to_f32, f32_to_bf16};

use crate::error::{Result, TensorError};

fn same(op: &'static str, a: usize, b: usize) -> Result<()> {
    if a != b {
        return Err(TensorError::LengthMismatch {
            op,
            what: "out",
            expected: a,
            actual: b,
        });
    }
    Ok(())
}

/// `out[i] = f16(src[i])`, round to nearest even (exact for representable values).
pub fn f32_to_f16(src: &[f32], out: &mut [f16]) -> Result<()> {
    same("f32_to_f16", src.len(), out.len())?;
    out.convert_from_f32_slice(src);
    Ok(())
}

/// `out[i] = f32(src[i])` (exact).
pub fn f16_to_f32(src: &[f16], out: &mut [f32]) -> Result<()> {
    same("f16_to_f32", src.len(), out.len())?;
    src.convert_to_f32_slice(out);
    Ok(())
}

/// `out[i] = bf16(src[i])`, round to nearest even, NaN kept NaN (ggml's rounding).
pub fn f32_to_bf16_slice(src: &[f32], out: &mut [bf16]) -> Result<()> {
    same("f32_to_bf16", src.len(), out.len())?;
    out.iter_mut()
        .zip(src)
        .for_each(|(o, &x)| *o = f32_to_bf16(x));
    Ok(())
}

/// `out[i] = f32(src[i])` (exact).
pub fn bf16_to_f32_slice(src: &[bf16], out: &mut [f32]) -> Result<()> {
    same("bf16_to_f32", src.len(), out.len())?;
    out.iter_mut()
        .zip(src)
        .for_each(|(o, &x)| *o = bf16_to_f32(x));
    Ok(())
}

/// Rounds every value to `dtype` and back when it is F16 or BF16 (as ggml reads a matmul's
/// input for a weight of that type); other types leave `x` as it is.
pub fn round_to(dtype: crate::DType, x: &mut [f32]) {
    match dtype {
        crate::DType::F16 => {
            // Through a small buffer, so `half` converts with F16C a vector at a time (its
            // rounding is the scalar one: to nearest even).
            let mut buf = [f16::ZERO; 256];
            for c in x.chunks_mut(256) {
                let h = &mut buf[..c.len()];
                h.convert_from_f32_slice(c);
                h.convert_to_f32_slice(c);
            }
        }
        crate::DType::BF16 => x.iter_mut().for_each(|v| *v = bf16_round(*v)),
        _ => {}
    }
}

/// `f32(bf16(v))` as ggml rounds (nearest even; NaN stays NaN), branch-free on the bits so
/// the loop over a slice vectorizes.
#[inline]
fn bf16_round(v: f32) -> f32 {
    let b = v.to_bits();
    let rounded = (b.wrapping_add(0x7fff + ((b >> 16) & 1))) & 0xffff_0000;
    let nan = (b & 0xffff_0000) | 0x0040_0000;
    f32::from_bits(if v.is_nan() { nan } else { rounded })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::Rng;

    #[test]
    fn round_to_is_the_scalar_round_trip() {
        let mut rng = Rng::new(7);
        let mut x = rng.vec(1000, 70000.0);
        x.extend([
            f32::NAN,
            f32::INFINITY,
            -0.0,
            1e-9,
            65520.0,
            f32::MAX,
            -f32::MAX,
            3.0e38,
        ]);
        x.extend((0..64).map(|i| f32::from_bits(0x3f80_8000 + i * 0x1_0000)));
        for dtype in [crate::DType::F16, crate::DType::BF16] {
            let mut got = x.clone();
            round_to(dtype, &mut got);
            for (&v, &g) in x.iter().zip(&got) {
                let want = match dtype {
                    crate::DType::F16 => f16::from_f32(v).to_f32(),
                    _ => bf16_to_f32(f32_to_bf16(v)),
                };
                assert!(
                    want.to_bits() == g.to_bits() || (want.is_nan() && g.is_nan()),
                    "{dtype:?} {v}: {g} want {want}"
                );
            }
        }
    }

    #[test]
    fn round_trips_are_within_half_an_ulp() {
        let mut rng = Rng::new(41);
        let x = rng.vec(1000, 100.0);
        let mut h = vec![f16::ZERO; 1000];
        let mut b = vec![bf16::ZERO; 1000];
        let mut y = vec![0f32; 1000];
        f32_to_f16(&x, &mut h).unwrap();
        f16_to_f32(&h, &mut y).unwrap();
        for (a, c) in x.iter().zip(&y) {
            // f16 has 11 significant bits: relative error <= 2^-11.
            assert!(((a - c) / a.abs().max(1e-3)).abs() <= 1.0 / 2048.0 + 1e-7);
        }
        f32_to_bf16_slice(&x, &mut b).unwrap();
        bf16_to_f32_slice(&b, &mut y).unwrap();
        for (a, c) in x.iter().zip(&y) {
            // bf16 has 8 significant bits: relative error <= 2^-8.
            assert!(((a - c) / a).abs() <= 1.0 / 256.0);
        }
        assert!(f32_to_f16(&x, &mut h[..3]).is_err());
    }
}
