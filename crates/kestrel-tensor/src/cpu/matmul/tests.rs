//! The matmul entry points against an f64 reference: every weight type, decode and prefill
//! row counts, odd sizes and unaligned bytes; bad sizes refused.

use super::*;
use crate::cpu::testutil::{quantized_rows, Rng};

fn reference(x: &[f32], n: usize, k: usize, w: &[f32], m: usize) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0f64; n * m];
    let mut mag = vec![0f64; n * m];
    for t in 0..n {
        for r in 0..m {
            for j in 0..k {
                let p = x[t * k + j] as f64 * w[r * k + j] as f64;
                out[t * m + r] += p;
                mag[t * m + r] += p.abs();
            }
        }
    }
    (out, mag)
}

fn check(dtype: DType, n: usize, k: usize, m: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let (w, wf) = quantized_rows(&mut rng, dtype, m, k);
    let x = rng.vec(n * k, 1.0);
    let mut out = vec![f32::NAN; n * m];
    matmul_dequantized(&x, n, k, &w, dtype, m, &mut out).unwrap();
    let (want, mag) = reference(&x, n, k, &wf, m);
    for i in 0..n * m {
        let err = (out[i] as f64 - want[i]).abs();
        assert!(
            err <= 1e-5 * mag[i] + 1e-6,
            "{dtype} n={n} k={k} m={m} at {i}: {} vs {}",
            out[i],
            want[i]
        );
    }
}

#[test]
fn every_dtype_matches_f64_reference_decode_and_prefill() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    pool.install(|| {
        for (i, dtype) in DType::ALL.into_iter().enumerate() {
            // n = 1 (decode), n = 11 (a full tile plus a partial one); m not a multiple of
            // the task chunk.
            check(dtype, 1, 512, 37, i as u64);
            check(dtype, 11, 256, 45, 100 + i as u64);
        }
    });
}

#[test]
fn float_weights_with_odd_k_and_unaligned_bytes() {
    let mut rng = Rng::new(3);
    let (n, k, m) = (3, 45, 5);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let (w, wf) = quantized_rows(&mut rng, dtype, m, k);
        let mut shifted = vec![0u8; w.len() + 1];
        shifted[1..].copy_from_slice(&w);
        let x = rng.vec(n * k, 1.0);
        let mut out = vec![0f32; n * m];
        matmul_dequantized(&x, n, k, &shifted[1..], dtype, m, &mut out).unwrap();
        let (want, _) = reference(&x, n, k, &wf, m);
        for i in 0..n * m {
            assert!((out[i] as f64 - want[i]).abs() < 1e-5, "{dtype}");
        }
    }
}

#[test]
fn quantized_weights_at_odd_addresses() {
    let mut rng = Rng::new(4);
    let (n, k, m) = (2, 256, 3);
    let (w, wf) = quantized_rows(&mut rng, DType::Q4K, m, k);
    let mut shifted = vec![0u8; w.len() + 1];
    shifted[1..].copy_from_slice(&w);
    let x = rng.vec(n * k, 1.0);
    let mut out = vec![0f32; n * m];
    matmul_dequantized(&x, n, k, &shifted[1..], DType::Q4K, m, &mut out).unwrap();
    let (want, mag) = reference(&x, n, k, &wf, m);
    for i in 0..n * m {
        assert!((out[i] as f64 - want[i]).abs() <= 1e-5 * mag[i]);
    }
}

#[test]
fn bad_sizes_are_errors() {
    let x = vec![0f32; 64];
    let w = vec![0u8; 36];
    let mut out = vec![0f32; 1];
    assert!(matmul(&x, 1, 64, &w, DType::Q4_0, 1, &mut out).is_ok());
    assert!(matches!(
        matmul(&x, 1, 64, &w[..35], DType::Q4_0, 1, &mut out),
        Err(TensorError::LengthMismatch { .. })
    ));
    assert!(matches!(
        matmul(&x[..63], 1, 63, &w, DType::Q4_0, 1, &mut out),
        Err(TensorError::PartialBlock { .. })
    ));
    assert!(matmul(&x, 2, 64, &w, DType::Q4_0, 1, &mut out).is_err());
    assert!(matmul(&x, 1, 64, &w, DType::Q4_0, 1, &mut []).is_err());
    assert!(matmul(&x, usize::MAX, 2, &w, DType::Q4_0, 1, &mut out).is_err());
}

/// The quantized-activation matmul against per-row integer dots (bit-identical: the same
/// kernel, whatever the tiling and threading) and against the dequantized reference within
/// the activation quantization error.
fn check_quantized(dtype: DType, n: usize, k: usize, m: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let (w, wf) = quantized_rows(&mut rng, dtype, m, k);
    let x = rng.vec(n * k, 1.0);
    let mut out = vec![f32::NAN; n * m];
    matmul(&x, n, k, &w, dtype, m, &mut out).unwrap();
    let mut scratch = MatmulScratch::new();
    let mut out2 = vec![f32::NAN; n * m];
    matmul_with_scratch(&x, n, k, &w, dtype, m, &mut out2, &mut scratch).unwrap();
    let rb = dtype.row_bytes(k).unwrap();
    for t in 0..n {
        let mut one = vec![0f32; m];
        matvec(&x[t * k..(t + 1) * k], &w, dtype, m, &mut one).unwrap();
        // Q4_K rows in whole groups of 4 take llama.cpp's gemm order, the others its gemv
        // order (what matvec computes).
        if dtype == DType::Q4K && t < n - n % 4 {
            let mut y = vec![bytemuck::Zeroable::zeroed(); k / 256];
            super::super::q8::quantize_row_q8_k(&x[t * k..(t + 1) * k], &mut y);
            for (r, o) in one.iter_mut().enumerate() {
                *o = super::super::qdot::k_x86::dot_q4_k_8x8_gemm(&w[r * rb..(r + 1) * rb], &y);
            }
        }
        // Q6_K sequences of TILED_MIN_ROWS rows or more take b11434's tiled order.
        if dtype == DType::Q6K && n >= super::super::kernel_table::TILED_MIN_ROWS {
            let mut y = vec![bytemuck::Zeroable::zeroed(); k / 256];
            super::super::q8::quantize_row_q8_k(&x[t * k..(t + 1) * k], &mut y);
            for (r, o) in one.iter_mut().enumerate() {
                *o = super::super::qdot::k_x86::dot_q6_k_tiled(&w[r * rb..(r + 1) * rb], &y);
            }
        }
        for r in 0..m {
            let i = t * m + r;
            assert_eq!(out[i].to_bits(), out2[i].to_bits(), "{dtype}");
            assert_eq!(
                out[i].to_bits(),
                one[r].to_bits(),
                "{dtype} n={n} at {t},{r}"
            );
            // |x - q(x)| is at most ~0.63 of a step amax/127 (q8_K: 0.5), f16: 2^-11 |x|.
            let xs = &x[t * k..(t + 1) * k];
            let ws = &wf[r * k..(r + 1) * k];
            let bs = match dtype {
                DType::F32 | DType::F16 | DType::BF16 => 1,
                d if d.block_size() == 256 => 256,
                _ => 32,
            };
            let mut bound = 0f64;
            let mut want = 0f64;
            for (xb, wb) in xs.chunks(bs).zip(ws.chunks(bs)) {
                let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                let step = match dtype {
                    DType::F32 => 0.0,
                    DType::F16 => amax / 2048.0,
                    DType::BF16 => amax / 256.0,
                    _ => amax / 127.0 * 0.63,
                };
                for (&xv, &wv) in xb.iter().zip(wb) {
                    want += xv as f64 * wv as f64;
                    bound += (wv as f64).abs() * step + 2e-6 * (xv as f64 * wv as f64).abs();
                }
            }
            let _ = rb;
            assert!(
                (out[i] as f64 - want).abs() <= bound + 1e-3 * bound.max(1e-6) + 1e-5,
                "{dtype} n={n} k={k} at {t},{r}: {} vs {want} (bound {bound})",
                out[i]
            );
        }
    }
}

#[test]
fn quantized_path_matches_reference_within_activation_quantization_error() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    pool.install(|| {
        for (i, dtype) in DType::ALL.into_iter().enumerate() {
            check_quantized(dtype, 1, 512, 37, 200 + i as u64);
            check_quantized(dtype, 11, 256, 45, 300 + i as u64);
        }
    });
}
