//! The scalar dots against f64 references over dequantized blocks, and ggml's own cases.

use half::f16;
use kestrel_gguf::quant::{BlockQ8K, BlockQ8_0};

use super::common::h;
use crate::cpu::q8_block::BlockQ8_1;

/// Dequantizes a converted activation row (test reference).
#[cfg(test)]
pub(crate) trait ActDequant: Sized {
    /// Values of `y` as f32, and per value the largest error the conversion may have made.
    fn values(y: &[Self], x: &[f32]) -> (Vec<f32>, Vec<f32>);
}

#[cfg(test)]
impl ActDequant for BlockQ8_0 {
    fn values(y: &[Self], _x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let mut v = Vec::new();
        let mut e = Vec::new();
        for b in y {
            let d = h(b.d);
            for &q in &b.qs {
                v.push(d * q as f32);
                // Half a step, plus the f16 rounding of d over up to 127 steps.
                e.push(d * (0.5 + 127.0 / 1024.0) * 1.001);
            }
        }
        (v, e)
    }
}

#[cfg(test)]
impl ActDequant for BlockQ8_1 {
    fn values(y: &[Self], _x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let mut v = Vec::new();
        let mut e = Vec::new();
        for b in y {
            let d = h(b.d);
            for &q in &b.qs {
                v.push(d * q as f32);
                e.push(d * (0.5 + 127.0 / 1024.0) * 1.001);
            }
        }
        (v, e)
    }
}

#[cfg(test)]
impl ActDequant for BlockQ8K {
    fn values(y: &[Self], _x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let mut v = Vec::new();
        let mut e = Vec::new();
        for b in y {
            for &q in &b.qs {
                v.push(b.d * q as f32);
                e.push(b.d.abs() * 0.501);
            }
        }
        (v, e)
    }
}

#[cfg(test)]
impl ActDequant for u16 {
    fn values(y: &[Self], x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        // f16 and bf16 are both u16 here: tell them apart by which one reproduces `x`'s bits.
        let f16v: Vec<f32> = y.iter().map(|&b| f16::from_bits(b).to_f32()).collect();
        let is_f16 = y
            .iter()
            .zip(x)
            .all(|(&b, &xv)| f16::from_f32(xv).to_bits() == b);
        if is_f16 {
            let e = x.iter().map(|v| v.abs() / 2048.0 + 6e-8).collect();
            (f16v, e)
        } else {
            let v = y
                .iter()
                .map(|&b| f32::from_bits((b as u32) << 16))
                .collect();
            let e = x.iter().map(|v| v.abs() / 256.0).collect();
            (v, e)
        }
    }
}

use super::*;
use crate::cpu::testutil::{quantized_row, Rng};
use crate::DType;
use proptest::prelude::*;

/// For weight type `D` over `dtype`: the integer dot against (a) f64 over the dequantized
/// weights and the dequantized activations (tight: only f32 rounding, plus q8_1's f16 `s`),
/// (b) f64 over the dequantized weights and the original f32 activations (the activation
/// quantization error).
fn check<D: QDot>(dtype: DType, k: usize, seed: u64, scale: f32)
where
    D::Act: ActDequant,
{
    let mut rng = Rng::new(seed);
    let (w, wf) = quantized_row(&mut rng, dtype, k);
    let x = rng.vec(k, scale);
    let mut y = vec![D::Act::zeroed(); k / D::ACT_N];
    D::quantize(&x, &mut y);
    let got = D::dot(&w, &y) as f64;
    let (a, aerr) = <D::Act as ActDequant>::values(&y, &x);
    let mut want_q = 0f64;
    let mut want_x = 0f64;
    let mut mag = 0f64;
    let mut qerr = 0f64;
    for j in 0..k {
        want_q += wf[j] as f64 * a[j] as f64;
        want_x += wf[j] as f64 * x[j] as f64;
        mag += (wf[j] as f64 * a[j] as f64).abs();
        qerr += (wf[j] as f64).abs() * aerr[j] as f64;
    }
    // q8_1 weights add `m * s`, with `s = f16(d * Σq)` rounded to f16 (2^-11 relative) where
    // the dequantized activations give `m * f16(d) * Σq` (f16(d) also 2^-11 off).
    let mut s_err = 0f64;
    if matches!(dtype, DType::Q4_1 | DType::Q5_1) {
        let bb = dtype.block_bytes();
        let y1: &[BlockQ8_1] = bytemuck::cast_slice(bytemuck::cast_slice::<_, u8>(&y));
        for (blk, yb) in w.chunks_exact(bb).zip(y1) {
            let m = f16::from_bits(u16::from_le_bytes([blk[2], blk[3]])).to_f32() as f64;
            let sq: i32 = yb.qs.iter().map(|&q| q as i32).sum();
            s_err += m.abs() * (h(yb.d) as f64 * sq.abs() as f64) * 2.0 / 1024.0;
        }
    }
    let tol_q = 2e-6 * mag + s_err + 1e-6;
    assert!(
        (got - want_q).abs() <= tol_q,
        "{dtype} k={k}: {got} vs {want_q} over the quantized activations (tol {tol_q})"
    );
    let tol_x = qerr + 2e-6 * mag + s_err + 1e-6;
    assert!(
        (got - want_x).abs() <= tol_x,
        "{dtype} k={k}: {got} vs {want_x} over the f32 activations (tol {tol_x})"
    );
}

fn check_dtype(dtype: DType, k: usize, seed: u64, scale: f32) {
    match dtype {
        DType::F16 => check::<DF16>(dtype, k, seed, scale),
        DType::BF16 => check::<DBF16>(dtype, k, seed, scale),
        DType::Q4_0 => check::<DQ4_0>(dtype, k, seed, scale),
        DType::Q4_1 => check::<DQ4_1>(dtype, k, seed, scale),
        DType::Q5_0 => check::<DQ5_0>(dtype, k, seed, scale),
        DType::Q5_1 => check::<DQ5_1>(dtype, k, seed, scale),
        DType::Q8_0 => check::<DQ8_0>(dtype, k, seed, scale),
        DType::Q2K => check::<DQ2K>(dtype, k, seed, scale),
        DType::Q3K => check::<DQ3K>(dtype, k, seed, scale),
        DType::Q4K => check::<DQ4K>(dtype, k, seed, scale),
        DType::Q5K => check::<DQ5K>(dtype, k, seed, scale),
        DType::Q6K => check::<DQ6K>(dtype, k, seed, scale),
        DType::Q8K => check::<DQ8K>(dtype, k, seed, scale),
        DType::IQ4NL => check::<DIQ4NL>(dtype, k, seed, scale),
        DType::IQ4XS => check::<DIQ4XS>(dtype, k, seed, scale),
        DType::MXFP4 => check::<DMXFP4>(dtype, k, seed, scale),
        DType::TQ1_0 => check::<DTQ1_0>(dtype, k, seed, scale),
        DType::TQ2_0 => check::<DTQ2_0>(dtype, k, seed, scale),
        DType::IQ2XXS => check::<DIQ2XXS>(dtype, k, seed, scale),
        DType::IQ2XS => check::<DIQ2XS>(dtype, k, seed, scale),
        DType::IQ2S => check::<DIQ2S>(dtype, k, seed, scale),
        DType::IQ3XXS => check::<DIQ3XXS>(dtype, k, seed, scale),
        DType::IQ3S => check::<DIQ3S>(dtype, k, seed, scale),
        DType::IQ1S => check::<DIQ1S>(dtype, k, seed, scale),
        DType::IQ1M => check::<DIQ1M>(dtype, k, seed, scale),
        DType::F32 => {}
    }
}

#[test]
fn every_dtype_at_fixed_seeds() {
    for dtype in DType::ALL {
        for (seed, k) in [(1u64, 256usize), (2, 512), (3, 1024)] {
            check_dtype(dtype, k, seed, 1.0);
        }
    }
}

#[test]
fn float_weights_take_any_row_length() {
    for k in [1usize, 31, 45, 100] {
        check::<DF16>(DType::F16, k, k as u64, 2.0);
        check::<DBF16>(DType::BF16, k, k as u64, 2.0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn random_blocks_match_the_dequantized_reference(
        seed in any::<u64>(),
        blocks in 1usize..4,
        scale in prop_oneof![Just(1.0f32), 1e-3f32..1e3],
    ) {
        for dtype in DType::ALL {
            check_dtype(dtype, blocks * 256, seed, scale);
        }
    }
}

#[test]
fn unaligned_weight_rows_give_the_same_bits() {
    let mut rng = Rng::new(5);
    let k = 512;
    let x = rng.vec(k, 1.0);
    for dtype in [
        DType::Q4_1,
        DType::Q4K,
        DType::Q6K,
        DType::IQ4XS,
        DType::F16,
    ] {
        let (w, _) = quantized_row(&mut rng, dtype, k);
        let mut shifted = vec![0u8; w.len() + 1];
        shifted[1..].copy_from_slice(&w);
        let (a, b) = match dtype {
            DType::Q4_1 => {
                let mut y = vec![BlockQ8_1::zeroed(); k / 32];
                DQ4_1::quantize(&x, &mut y);
                (DQ4_1::dot(&w, &y), DQ4_1::dot(&shifted[1..], &y))
            }
            DType::Q4K | DType::Q6K | DType::IQ4XS => {
                let mut y = vec![BlockQ8K::zeroed(); k / 256];
                DQ4K::quantize(&x, &mut y);
                let f = match dtype {
                    DType::Q4K => dot_q4_k,
                    DType::Q6K => dot_q6_k,
                    _ => dot_iq4_xs,
                };
                (f(&w, &y), f(&shifted[1..], &y))
            }
            _ => {
                let mut y = vec![0u16; k];
                DF16::quantize(&x, &mut y);
                (DF16::dot(&w, &y), DF16::dot(&shifted[1..], &y))
            }
        };
        assert_eq!(a.to_bits(), b.to_bits(), "{dtype}");
    }
}

use crate::cpu::testutil::{parse_ggml_dot, GgmlCase};

fn ggml_cases() -> Vec<GgmlCase> {
    parse_ggml_dot(include_bytes!("../../../tests/fixtures/ggml_dot.bin"))
}

/// Converts the case's activations with `D` (must equal ggml's bytes) and dots each row.
fn run_case<D: QDot>(c: &GgmlCase) -> (Vec<u8>, Vec<f32>) {
    let mut y = vec![D::Act::zeroed(); c.k / D::ACT_N];
    D::quantize(&c.x, &mut y);
    let rb = c.dtype.row_bytes(c.k).unwrap();
    let dots = c.w.chunks_exact(rb).map(|wr| D::dot(wr, &y)).collect();
    (bytemuck::cast_slice(&y).to_vec(), dots)
}

/// Bit-exact activation conversion against the installed ggml (x86 AVX512 build), and the
/// dots within a few f32 ulps of its generic and SIMD kernels (which contract `a*b + c` to
/// FMA and sum in other orders). ggml's generic Q5_0 in that build returns garbage
/// (-397.2 where the dequantized f64 reference and its AVX kernel give 1.4876), so Q5_0 is
/// compared with the SIMD kernel only.
#[test]
fn matches_ggml_fixture() {
    let cases = ggml_cases();
    assert_eq!(cases.len(), 14);
    for c in &cases {
        let (act, dots) = match c.dtype {
            DType::F16 => run_case::<DF16>(c),
            DType::BF16 => run_case::<DBF16>(c),
            DType::Q4_0 => run_case::<DQ4_0>(c),
            DType::Q4_1 => run_case::<DQ4_1>(c),
            DType::Q5_0 => run_case::<DQ5_0>(c),
            DType::Q5_1 => run_case::<DQ5_1>(c),
            DType::Q8_0 => run_case::<DQ8_0>(c),
            DType::Q2K => run_case::<DQ2K>(c),
            DType::Q3K => run_case::<DQ3K>(c),
            DType::Q4K => run_case::<DQ4K>(c),
            DType::Q5K => run_case::<DQ5K>(c),
            DType::Q6K => run_case::<DQ6K>(c),
            DType::IQ4NL => run_case::<DIQ4NL>(c),
            DType::IQ4XS => run_case::<DIQ4XS>(c),
            other => panic!("unexpected {other}"),
        };
        assert_eq!(
            act, c.act,
            "{}: activation bytes differ from ggml's",
            c.dtype
        );
        // The x86-order kernels matmul uses: bit-identical to ggml's SIMD kernels.
        let rb = c.dtype.row_bytes(c.k).unwrap();
        let x86: Option<Vec<f32>> = match c.dtype {
            DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => {
                let mut y = vec![BlockQ8_0::zeroed(); c.k / QK8];
                q8::quantize_row_q8_0(&c.x, &mut y);
                type Dot = fn(&[u8], &[BlockQ8_0]) -> f32;
                let (f, g): (Dot, Dot) = match c.dtype {
                    DType::Q4_0 => (dot_q4_0_x86, dot_q4_0),
                    DType::Q5_0 => (dot_q5_0_x86, dot_q5_0),
                    _ => (dot_q8_0_x86, dot_q8_0),
                };
                if c.dtype != DType::Q5_0 {
                    // The generic twins: bit-identical to ggml's generic kernels.
                    for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                        assert_eq!(g(wr, &y).to_bits(), c.generic[r].to_bits(), "{}", c.dtype);
                    }
                }
                Some(c.w.chunks_exact(rb).map(|wr| f(wr, &y)).collect())
            }
            DType::Q4_1 | DType::Q5_1 => {
                let mut y = vec![BlockQ8_1::zeroed(); c.k / QK8];
                q8::quantize_row_q8_1(&c.x, &mut y);
                let f = if c.dtype == DType::Q4_1 {
                    for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                        assert_eq!(dot_q4_1(wr, &y).to_bits(), c.generic[r].to_bits());
                    }
                    dot_q4_1_x86
                } else {
                    // ggml's generic Q5_1 is contracted to FMAs by GCC: within 1 ulp.
                    for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                        let (a, b) = (dot_q5_1(wr, &y).to_bits(), c.generic[r].to_bits());
                        assert!(a.abs_diff(b) <= 1, "Q5_1 generic row {r}");
                    }
                    dot_q5_1_x86
                };
                Some(c.w.chunks_exact(rb).map(|wr| f(wr, &y)).collect())
            }
            DType::IQ4NL => {
                let mut y = vec![BlockQ8_0::zeroed(); c.k / QK8];
                q8::quantize_row_q8_0(&c.x, &mut y);
                for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                    let (a, b) = (dot_iq4_nl(wr, &y).to_bits(), c.generic[r].to_bits());
                    assert!(a.abs_diff(b) <= 1, "IQ4_NL generic row {r}");
                }
                Some(
                    c.w.chunks_exact(rb)
                        .map(|wr| dot_iq4_nl_x86(wr, &y))
                        .collect(),
                )
            }
            DType::IQ4XS => {
                let mut y = vec![BlockQ8K::zeroed(); c.k / QK_K];
                q8::quantize_row_q8_k(&c.x, &mut y);
                for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                    let (a, b) = (dot_iq4_xs(wr, &y).to_bits(), c.generic[r].to_bits());
                    assert!(a.abs_diff(b) <= 1, "IQ4_XS generic row {r}");
                }
                Some(
                    c.w.chunks_exact(rb)
                        .map(|wr| dot_iq4_xs_x86(wr, &y))
                        .collect(),
                )
            }
            _ => None,
        };
        if let Some(x86) = x86 {
            for (r, v) in x86.iter().enumerate() {
                assert_eq!(
                    v.to_bits(),
                    c.simd[r].to_bits(),
                    "{} row {r} x86 order",
                    c.dtype
                );
            }
        }
        if c.dtype == DType::F16 {
            // The AVX512 emulation used by attention: bit-identical to ggml_vec_dot_f16.
            let a: Vec<f16> = c
                .act
                .chunks_exact(2)
                .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                .collect();
            let rb = c.dtype.row_bytes(c.k).unwrap();
            for (r, wr) in c.w.chunks_exact(rb).enumerate() {
                let w: Vec<f16> = wr
                    .chunks_exact(2)
                    .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                    .collect();
                assert_eq!(dot_f16_ggml_x86(&w, &a).to_bits(), c.simd[r].to_bits());
            }
        }
        let ulps = |a: f32, b: f32| (a.to_bits() as i64 - b.to_bits() as i64).abs();
        let gen_ulps = dots.iter().zip(&c.generic).map(|(&a, &b)| ulps(a, b)).max();
        let simd_ulps = dots.iter().zip(&c.simd).map(|(&a, &b)| ulps(a, b)).max();
        eprintln!(
            "{}: max ulps vs ggml generic {gen_ulps:?}, vs SIMD {simd_ulps:?}",
            c.dtype
        );
        for (r, &got) in dots.iter().enumerate() {
            let close = |want: f32| (got - want).abs() <= 1e-5 * want.abs().max(1.0);
            if c.dtype != DType::Q5_0 && c.generic[r].is_finite() {
                assert!(
                    close(c.generic[r]),
                    "{} row {r}: {got} vs ggml generic {}",
                    c.dtype,
                    c.generic[r]
                );
            }
            assert!(
                close(c.simd[r]),
                "{} row {r}: {got} vs ggml simd {}",
                c.dtype,
                c.simd[r]
            );
        }
    }
}
