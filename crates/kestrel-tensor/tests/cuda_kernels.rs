//! Every CUDA kernel against the CPU engine on random inputs of real shapes (`--features cuda`).
//!
//! On a machine without a driver or GPU each test prints why it skipped and passes, unless
//! `KESTREL_REQUIRE_GPU=1` (the GPU test machine's script sets it), which makes that a failure.
//! Bounds, as normalized mean squared error `Σ(gpu - cpu)² / Σ cpu²`, or exact:
//! - float matvec: F32 weights 1e-10 (same products, another summation order); F16 1e-6 and
//!   BF16 5e-5, because the CPU engine rounds the activations to the weight's type first (as
//!   ggml's `vec_dot_f16` does: relative 2^-11 and 2^-8 an element) and the GPU keeps them f32;
//! - quantized matvec (Q4_0..Q8_0, K-quants, against 8-bit activations): both engines are
//!   measured against an f64 product of the dequantized weights and the f32 activations, and
//!   the GPU's NMSE must stay within 1.5× the CPU engine's (+1e-9): both errors are the 8-bit
//!   activation quantization's, and the GPU's Q8_1 `s` is `d·Σq` as ggml-cpu's (not ggml-cuda's
//!   `Σx`, which measured 18× the CPU's error on Q4_0 here), so they differ only by f16
//!   rounding of `s` and the order of sums;
//!   From 9 rows matmul takes the cuBLAS GEMM (TF32 products of f32 activations and the
//!   dequantized weight), whose error against f64 is far below the CPU's 8-bit one, so the
//!   same bound holds; float weights keep the bounds below (F32 weights take full f32);
//! - norms 1e-10; SiLU/SwiGLU 1e-10 (the GPU's expf is within 2 ulp); GELU/GeGLU 2e-7
//!   (the CPU engine rounds GELU through ggml-cpu's f16 table, as ggml-cpu does; the GPU keeps
//!   it f32 as ggml-cuda does: relative 2^-12 a value);
//!   add/mul and get_rows exact to 1e-12; argmax exact.
#![cfg(feature = "cuda")]

mod cuda_common;

use kestrel_tensor::cuda::{AttentionKernel, CudaDevice};
use kestrel_tensor::{quant, CpuEngine, DType, Engine, Shape, Tensor};

fn device() -> Option<CudaDevice> {
    cuda_common::device("kernel")
}

/// Deterministic values in [-1, 1) (xorshift), with a few larger ones as real activations have.
fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let v = (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            if i % 97 == 0 {
                v * 8.0
            } else {
                v
            }
        })
        .collect()
}

/// Every weight type the CUDA matmul and get_rows take.
const ALL: [DType; 11] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
];

fn nmse(gpu: &[f32], cpu: &[f32]) -> f64 {
    assert_eq!(gpu.len(), cpu.len());
    let num: f64 = gpu
        .iter()
        .zip(cpu)
        .map(|(&g, &c)| (g as f64 - c as f64).powi(2))
        .sum();
    let den: f64 = cpu
        .iter()
        .map(|&c| (c as f64).powi(2))
        .sum::<f64>()
        .max(1e-30);
    num / den
}

fn f32_tensor(rows: usize, k: usize, seed: u64) -> Tensor {
    Tensor::from_f32(Shape::matrix(rows, k).unwrap(), &random(rows * k, seed)).unwrap()
}

fn weight(dtype: DType, rows: usize, k: usize, seed: u64) -> Tensor {
    let src = random(rows * k, seed);
    let shape = Shape::matrix(rows, k).unwrap();
    if dtype == DType::F32 {
        return Tensor::from_f32(shape, &src).unwrap();
    }
    let mut bytes = vec![0u8; dtype.row_bytes(k).unwrap() * rows];
    quant::quantize(dtype.ggml_type(), &src, &mut bytes).unwrap();
    Tensor::from_bytes(dtype, shape, &bytes).unwrap()
}

/// `x · Wᵀ` in f64 over the dequantized weights, as f32.
fn reference(w: &Tensor, x: &Tensor) -> Vec<f32> {
    let (k, m) = (w.shape().row_len(), w.shape().n_rows());
    let mut wf = vec![0f32; k * m];
    quant::dequantize(w.dtype().ggml_type(), w.as_bytes(), &mut wf).unwrap();
    let xs = x.as_f32().unwrap();
    let mut out = Vec::with_capacity(xs.len() / k * m);
    for xr in xs.chunks(k) {
        for wr in wf.chunks(k) {
            out.push(
                xr.iter()
                    .zip(wr)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>() as f32,
            );
        }
    }
    out
}

#[test]
fn matmul_matches_the_cpu_engine() {
    let Some(dev) = device() else { return };
    let cpu = CpuEngine::new(2).unwrap();
    // Real shapes: SmolLM2's 576 (not a multiple of 256), Gemma 3's 640 and its FFN's 2048,
    // a llama-8B's 4096.
    for (k, m) in [(576, 1536), (640, 2048), (2048, 640), (4096, 1024)] {
        for dtype in ALL {
            if k % dtype.block_size() != 0 {
                continue; // K-quant rows are whole 256-value blocks
            }
            let w = weight(dtype, m, k, k as u64 + m as u64);
            let dw = dev.upload(&w).unwrap();
            for n in [1, 2, 3, 8, 13, 64] {
                let x = f32_tensor(n, k, n as u64);
                let mut want = Tensor::zeros(DType::F32, Shape::matrix(n, m).unwrap()).unwrap();
                cpu.matmul(&x, &w, &mut want).unwrap();
                let dx = dev.upload(&x).unwrap();
                let mut out = dev.zeros_f32(Shape::matrix(n, m).unwrap()).unwrap();
                dev.matmul(&dx, &dw, &mut out).unwrap();
                let got = dev.download_f32(&out).unwrap();
                if dtype.is_quantized() {
                    let exact = reference(&w, &x);
                    let (gpu, cpu) = (nmse(&got, &exact), nmse(want.as_f32().unwrap(), &exact));
                    assert!(
                        gpu <= 1.5 * cpu + 1e-9,
                        "{dtype} k={k} m={m} n={n}: nmse {gpu:e} against f64, the CPU's {cpu:e}"
                    );
                    continue;
                }
                let e = nmse(&got, want.as_f32().unwrap());
                let bound = match dtype {
                    DType::F32 => 1e-10,
                    DType::F16 => 1e-6,
                    _ => 5e-5,
                };
                assert!(
                    e <= bound,
                    "{dtype} k={k} m={m} n={n}: nmse {e:e} > {bound:e}"
                );
            }
        }
    }
}

/// From 9 rows matmul dequantizes the weight in bands of at most 256 MiB of f32 and runs
/// cuBLAS; a weight of 4096 × 17000 takes two bands, the second writing from column 16384 on.
#[test]
fn gemm_covers_every_band_of_a_large_weight() {
    let Some(dev) = device() else { return };
    if std::env::var_os("KESTREL_REQUIRE_GPU").is_some() {
        assert_eq!(dev.gemm_off(), None, "the GPU machine has cuBLAS");
    }
    let cpu = CpuEngine::new(4).unwrap();
    let (k, m, n) = (4096, 17_000, 16);
    let w = weight(DType::Q8_0, m, k, 77);
    let x = f32_tensor(n, k, 78);
    let mut want = Tensor::zeros(DType::F32, Shape::matrix(n, m).unwrap()).unwrap();
    cpu.matmul(&x, &w, &mut want).unwrap();
    let mut out = dev.zeros_f32(Shape::matrix(n, m).unwrap()).unwrap();
    dev.matmul(&dev.upload(&x).unwrap(), &dev.upload(&w).unwrap(), &mut out)
        .unwrap();
    let got = dev.download_f32(&out).unwrap();
    // The CPU's 8-bit activations against the GPU's TF32 ones: both near the exact product.
    let e = nmse(&got, want.as_f32().unwrap());
    assert!(e <= 1e-4, "Q8_0 {k}x{m}, {n} rows: nmse {e:e}");
    let tail = nmse(&got[m - 600..m], &want.as_f32().unwrap()[m - 600..m]);
    assert!(tail <= 1e-4, "the last band: nmse {tail:e}");
}

/// A matvec handed the ticket of the same input's Q8_1 data skips quantizing it and gives the
/// product bit for bit; a ticket gone stale (another input quantized since) is refused.
#[test]
fn a_reused_quantized_input_gives_the_same_product() {
    let Some(dev) = device() else { return };
    let (k, m, n) = (1024, 256, 2);
    let w1 = dev.upload(&weight(DType::Q4K, m, k, 5)).unwrap();
    let w2 = dev.upload(&weight(DType::Q8_0, m, k, 6)).unwrap();
    let x = dev.upload(&f32_tensor(n, k, 7)).unwrap();
    let y = dev.upload(&f32_tensor(n, k, 8)).unwrap();
    let zeros = || dev.zeros_f32(Shape::matrix(n, m).unwrap()).unwrap();
    let mut o = zeros();
    dev.matmul(&x, &w2, &mut o).unwrap();
    let want = dev.download_f32(&o).unwrap();

    let t = dev.matmul_reusing(&x, &w1, &mut zeros(), None).unwrap();
    assert!(t.is_some(), "a matvec leaves Q8_1 data");
    let mut o = zeros();
    let reused = dev.matmul_reusing(&x, &w2, &mut o, t).unwrap();
    assert_eq!(reused, t, "the same data is named by the same ticket");
    assert_eq!(dev.download_f32(&o).unwrap(), want);

    dev.matmul(&y, &w1, &mut zeros()).unwrap();
    let mut o = zeros();
    let fresh = dev.matmul_reusing(&x, &w2, &mut o, t).unwrap();
    assert_ne!(fresh, t, "a stale ticket makes the call quantize again");
    assert_eq!(dev.download_f32(&o).unwrap(), want);
}

/// The fused forms (`cuda/fused.rs`) against the launches they replace, bit for bit: a
/// residual add in the matvec's epilogue; the add and RMS norm in one launch, with and without
/// Q8_1 output (whose ticket the next matmul takes: the same product as quantizing itself);
/// SwiGLU/GeGLU with Q8_1 output; 2-3 matvecs of one row in one launch; scale, soft cap and
/// exact GELU from another buffer. Rows of 576 values (1 row, Q4_1 weight) and 640 (3 rows,
/// Q8_0).
#[test]
fn fused_launches_equal_the_launches_they_replace() {
    use kestrel_tensor::cuda::Glu;
    let Some(dev) = device() else { return };
    for (n, k) in [(1, 576), (3, 640)] {
        let m = 256;
        let shape = Shape::matrix(n, k).unwrap();
        let zeros = |s: Shape| dev.zeros_f32(s).unwrap();
        let x = dev.upload(&f32_tensor(n, k, 21)).unwrap();
        let r = dev.upload(&f32_tensor(n, k, 22)).unwrap();
        let nw = dev.upload(&f32_tensor(1, k, 23)).unwrap();
        let dtype = if n == 1 { DType::Q4_1 } else { DType::Q8_0 };
        let w = dev.upload(&weight(dtype, m, k, 24)).unwrap();
        // Two-step forms.
        let mut sum = zeros(shape);
        dev.add(&x, &r, &mut sum).unwrap();
        let mut normed = zeros(shape);
        dev.rms_norm(&sum, Some(&nw), 1e-6, &mut normed).unwrap();
        let mut prod = zeros(Shape::matrix(n, m).unwrap());
        dev.matmul(&normed, &w, &mut prod).unwrap();
        let res = dev.upload(&f32_tensor(n, m, 25)).unwrap();
        let mut prod_res = zeros(Shape::matrix(n, m).unwrap());
        dev.add(&prod, &res, &mut prod_res).unwrap();
        let (sum, normed, prod, prod_res) = (
            dev.download_f32(&sum).unwrap(),
            dev.download_f32(&normed).unwrap(),
            dev.download_f32(&prod).unwrap(),
            dev.download_f32(&prod_res).unwrap(),
        );
        for quantize in [false, true] {
            let (mut s2, mut o2) = (zeros(shape), zeros(shape));
            let t = dev
                .rms_norm_fused(&x, Some((&r, &mut s2)), Some(&nw), 1e-6, &mut o2, quantize)
                .unwrap();
            assert_eq!(t.is_some(), quantize, "a ticket exactly when quantizing");
            assert_eq!(
                dev.download_f32(&s2).unwrap(),
                sum,
                "add+norm: sum ({n}x{k})"
            );
            assert_eq!(dev.download_f32(&o2).unwrap(), normed, "add+norm ({n}x{k})");
            let mut p2 = zeros(Shape::matrix(n, m).unwrap());
            let t2 = dev.matmul_reusing(&o2, &w, &mut p2, t).unwrap();
            assert_eq!(
                t2.is_some() && t2 == t,
                quantize,
                "the matmul took the fused Q8_1"
            );
            assert_eq!(
                dev.download_f32(&p2).unwrap(),
                prod,
                "matmul of the fused norm"
            );
            let mut p3 = zeros(Shape::matrix(n, m).unwrap());
            dev.matmul_add_reusing(&o2, &w, &res, &mut p3, t2).unwrap();
            assert_eq!(
                dev.download_f32(&p3).unwrap(),
                prod_res,
                "epilogue add ({n}x{k})"
            );
            // A sandwich norm of `r` first (Gemma): rms_norm, add, add+norm's bits.
            let pw = dev.upload(&f32_tensor(1, k, 26)).unwrap();
            let mut pre1 = zeros(shape);
            dev.rms_norm(&r, Some(&pw), 1e-5, &mut pre1).unwrap();
            let (mut s1, mut o1) = (zeros(shape), zeros(shape));
            dev.rms_norm_fused(&x, Some((&pre1, &mut s1)), Some(&nw), 1e-6, &mut o1, false)
                .unwrap();
            let (mut pre2, mut s3, mut o3) = (zeros(shape), zeros(shape), zeros(shape));
            let t3 = dev
                .norm_add_rms_norm(
                    (&r, Some(&pw), 1e-5),
                    &mut pre2,
                    (&x, &mut s3),
                    (Some(&nw), 1e-6),
                    &mut o3,
                    quantize,
                )
                .unwrap();
            for (what, a, b) in [
                ("normed", &pre1, &pre2),
                ("sum", &s1, &s3),
                ("out", &o1, &o3),
            ] {
                assert_eq!(
                    dev.download_f32(a).unwrap(),
                    dev.download_f32(b).unwrap(),
                    "norm + add + norm: {what} ({n}x{k})"
                );
            }
            let mut p4 = zeros(Shape::matrix(n, m).unwrap());
            let t4 = dev.matmul_reusing(&o3, &w, &mut p4, t3).unwrap();
            assert_eq!(
                t4.is_some() && t4 == t3,
                quantize,
                "the matmul took the sandwich-fused Q8_1"
            );
            let mut p5 = zeros(Shape::matrix(n, m).unwrap());
            dev.matmul(&o1, &w, &mut p5).unwrap();
            assert_eq!(
                dev.download_f32(&p4).unwrap(),
                dev.download_f32(&p5).unwrap(),
                "matmul of the sandwich-fused norm"
            );
        }
        let mut o3 = zeros(shape);
        dev.rms_norm_fused(
            &sum_tensor(&dev, &sum, shape),
            None,
            Some(&nw),
            1e-6,
            &mut o3,
            true,
        )
        .unwrap();
        assert_eq!(
            dev.download_f32(&o3).unwrap(),
            normed,
            "norm with Q8_1 ({n}x{k})"
        );
        for glu in [Glu::SwiGlu, Glu::GeGlu] {
            let mut want = zeros(shape);
            match glu {
                Glu::SwiGlu => dev.swiglu(&x, &r, &mut want).unwrap(),
                _ => dev.geglu(&x, &r, &mut want).unwrap(),
            }
            let mut got = zeros(shape);
            let t = dev.glu_fused(glu, &x, &r, &mut got, true).unwrap();
            assert!(t.is_some());
            assert_eq!(
                dev.download_f32(&got).unwrap(),
                dev.download_f32(&want).unwrap()
            );
            let (mut p1, mut p2) = (
                zeros(Shape::matrix(n, m).unwrap()),
                zeros(Shape::matrix(n, m).unwrap()),
            );
            dev.matmul_reusing(&got, &w, &mut p2, t).unwrap();
            dev.matmul(&want, &w, &mut p1).unwrap();
            assert_eq!(
                dev.download_f32(&p1).unwrap(),
                dev.download_f32(&p2).unwrap(),
                "{glu:?}"
            );
        }
    }
    // Two or three weights of one type against one row in one launch = a launch per weight.
    for dtype in [DType::Q4_1, DType::Q4K, DType::Q6K] {
        let k = 512;
        let x = dev.upload(&f32_tensor(1, k, 30)).unwrap();
        let ws: Vec<_> = [192usize, 64, 64]
            .iter()
            .enumerate()
            .map(|(i, &m)| dev.upload(&weight(dtype, m, k, 31 + i as u64)).unwrap())
            .collect();
        let want: Vec<Vec<f32>> = ws
            .iter()
            .map(|w| {
                let mut o = dev
                    .zeros_f32(Shape::matrix(1, w.shape().n_rows()).unwrap())
                    .unwrap();
                dev.matmul(&x, w, &mut o).unwrap();
                dev.download_f32(&o).unwrap()
            })
            .collect();
        let out = |w: &kestrel_tensor::cuda::DeviceTensor| {
            dev.zeros_f32(Shape::matrix(1, w.shape().n_rows()).unwrap())
                .unwrap()
        };
        let (mut o0, mut o1, mut o2) = (out(&ws[0]), out(&ws[1]), out(&ws[2]));
        dev.matmul_multi_reusing(
            &x,
            (&ws[0], &mut o0),
            (&ws[1], &mut o1),
            Some((&ws[2], &mut o2)),
            None,
        )
        .unwrap();
        for (o, w) in [&o0, &o1, &o2].into_iter().zip(&want) {
            assert_eq!(
                &dev.download_f32(o).unwrap(),
                w,
                "{dtype:?} q/k/v in one launch"
            );
        }
        let (mut p0, mut p1) = (out(&ws[1]), out(&ws[2]));
        dev.matmul_multi_reusing(&x, (&ws[1], &mut p0), (&ws[2], &mut p1), None, None)
            .unwrap();
        assert_eq!(dev.download_f32(&p0).unwrap(), want[1], "{dtype:?} gate/up");
        assert_eq!(dev.download_f32(&p1).unwrap(), want[2], "{dtype:?} gate/up");
    }
    // Mixed types are refused.
    {
        let x = dev.upload(&f32_tensor(1, 256, 32)).unwrap();
        let a = dev.upload(&weight(DType::Q4K, 32, 256, 33)).unwrap();
        let b = dev.upload(&weight(DType::Q6K, 32, 256, 34)).unwrap();
        let (mut oa, mut ob) = (
            dev.zeros_f32(Shape::matrix(1, 32).unwrap()).unwrap(),
            dev.zeros_f32(Shape::matrix(1, 32).unwrap()).unwrap(),
        );
        assert!(dev
            .matmul_multi_reusing(&x, (&a, &mut oa), (&b, &mut ob), None, None)
            .is_err());
    }
    // Scale, soft cap and exact GELU from another buffer = a copy, then the in-place form.
    let src = dev.upload(&f32_tensor(3, 640, 29)).unwrap();
    let shape = Shape::matrix(3, 640).unwrap();
    for op in 0..3 {
        let mut want = dev.zeros_f32(shape).unwrap();
        dev.copy_rows(&src, 0, 3, &mut want, 0).unwrap();
        let mut got = dev.zeros_f32(shape).unwrap();
        match op {
            0 => {
                dev.scale(&mut want, 0.125).unwrap();
                dev.scale_from(&src, &mut got, 0.125).unwrap();
            }
            1 => {
                dev.softcap(&mut want, 3.0).unwrap();
                dev.softcap_from(&src, &mut got, 3.0).unwrap();
            }
            _ => {
                dev.gelu_erf(&mut want).unwrap();
                dev.gelu_erf_from(&src, &mut got).unwrap();
            }
        }
        let (w, g) = (
            dev.download_f32(&want).unwrap(),
            dev.download_f32(&got).unwrap(),
        );
        assert_eq!(w, g, "elementwise op {op} from another buffer");
    }
    assert!(dev
        .softcap_from(&src, &mut dev.zeros_f32(shape).unwrap(), 0.0)
        .is_err());
    // An epilogue add needs the quantized matvec: an F32 weight is refused, not ignored.
    let wf = dev.upload(&f32_tensor(8, 64, 26)).unwrap();
    let x = dev.upload(&f32_tensor(1, 64, 27)).unwrap();
    let res = dev.upload(&f32_tensor(1, 8, 28)).unwrap();
    let mut out = dev.zeros_f32(Shape::matrix(1, 8).unwrap()).unwrap();
    assert!(dev
        .matmul_add_reusing(&x, &wf, &res, &mut out, None)
        .is_err());
}

fn sum_tensor(dev: &CudaDevice, v: &[f32], shape: Shape) -> kestrel_tensor::cuda::DeviceTensor {
    dev.upload(&Tensor::from_f32(shape, v).unwrap()).unwrap()
}

#[test]
fn matmul_takes_any_rows_and_refuses_a_k_mismatch() {
    let Some(dev) = device() else { return };
    let w = dev.upload(&weight(DType::Q4_0, 64, 256, 1)).unwrap();
    let x = dev.upload(&f32_tensor(9, 256, 2)).unwrap();
    let mut out = dev.zeros_f32(Shape::matrix(9, 64).unwrap()).unwrap();
    dev.matmul(&x, &w, &mut out).unwrap(); // 9 rows: the tensor-core matvec
    let x = dev.upload(&f32_tensor(1, 128, 2)).unwrap();
    let mut out = dev.zeros_f32(Shape::matrix(1, 64).unwrap()).unwrap();
    assert!(dev.matmul(&x, &w, &mut out).is_err(), "k mismatch");
}

#[test]
fn norms_match_the_cpu_engine() {
    let Some(dev) = device() else { return };
    let cpu = CpuEngine::new(2).unwrap();
    // rms_norm holds up to 8192 values a row in registers and loops over longer rows (16384);
    // per-head norms are many short rows (64).
    for (rows, k) in [(1, 576), (7, 640), (3, 4096), (2, 16_384), (40, 64)] {
        let x = f32_tensor(rows, k, 3);
        let w = f32_tensor(1, k, 4).reshape(Shape::vector(k)).unwrap();
        let b = f32_tensor(1, k, 5).reshape(Shape::vector(k)).unwrap();
        let (dx, dw, db) = (
            dev.upload(&x).unwrap(),
            dev.upload(&w).unwrap(),
            dev.upload(&b).unwrap(),
        );
        let shape = x.shape();
        let mut want = Tensor::zeros(DType::F32, shape).unwrap();
        let mut out = dev.zeros_f32(shape).unwrap();
        cpu.rms_norm(&x, Some(&w), 1e-6, &mut want).unwrap();
        dev.rms_norm(&dx, Some(&dw), 1e-6, &mut out).unwrap();
        let e = nmse(&dev.download_f32(&out).unwrap(), want.as_f32().unwrap());
        assert!(e <= 1e-10, "rms_norm {rows}x{k}: {e:e}");
        cpu.layer_norm(&x, Some(&w), Some(&b), 1e-5, &mut want)
            .unwrap();
        dev.layer_norm(&dx, Some(&dw), Some(&db), 1e-5, &mut out)
            .unwrap();
        let e = nmse(&dev.download_f32(&out).unwrap(), want.as_f32().unwrap());
        assert!(e <= 1e-10, "layer_norm {rows}x{k}: {e:e}");
    }
}

#[test]
fn get_rows_matches_the_cpu_engine() {
    let Some(dev) = device() else { return };
    let cpu = CpuEngine::new(2).unwrap();
    let ids = [0u32, 5, 99, 5, 17];
    for dtype in ALL {
        let t = weight(dtype, 100, 768, 9);
        let shape = Shape::matrix(ids.len(), 768).unwrap();
        let mut want = Tensor::zeros(DType::F32, shape).unwrap();
        cpu.get_rows(&t, &ids, &mut want).unwrap();
        let mut out = dev.zeros_f32(shape).unwrap();
        dev.get_rows(&dev.upload(&t).unwrap(), &ids, &mut out)
            .unwrap();
        let e = nmse(&dev.download_f32(&out).unwrap(), want.as_f32().unwrap());
        assert!(e <= 1e-12, "get_rows {dtype}: {e:e}");
        assert!(
            dev.get_rows(&dev.upload(&t).unwrap(), &[100], &mut out)
                .is_err(),
            "id 100 of 100 rows"
        );
    }
}

#[test]
fn elementwise_matches_the_cpu_engine() {
    let Some(dev) = device() else { return };
    let cpu = CpuEngine::new(2).unwrap();
    let (rows, k) = (5, 1536);
    let a = f32_tensor(rows, k, 11);
    let b = f32_tensor(rows, k, 12);
    let row = f32_tensor(1, k, 13);
    let (da, db, drow) = (
        dev.upload(&a).unwrap(),
        dev.upload(&b).unwrap(),
        dev.upload(&row).unwrap(),
    );
    let shape = a.shape();
    let mut want = Tensor::zeros(DType::F32, shape).unwrap();
    let mut out = dev.zeros_f32(shape).unwrap();
    let check = |what: &str, got: Vec<f32>, want: &Tensor, bound: f64| {
        let e = nmse(&got, want.as_f32().unwrap());
        assert!(e <= bound, "{what}: {e:e}");
    };
    cpu.add(&a, &b, &mut want).unwrap();
    dev.add(&da, &db, &mut out).unwrap();
    check("add", dev.download_f32(&out).unwrap(), &want, 1e-12);
    cpu.mul(&a, &row, &mut want).unwrap();
    dev.mul(&da, &drow, &mut out).unwrap();
    check(
        "mul (row broadcast)",
        dev.download_f32(&out).unwrap(),
        &want,
        1e-12,
    );
    cpu.swiglu(&a, &b, &mut want).unwrap();
    dev.swiglu(&da, &db, &mut out).unwrap();
    check("swiglu", dev.download_f32(&out).unwrap(), &want, 1e-10);
    cpu.geglu(&a, &b, &mut want).unwrap();
    dev.geglu(&da, &db, &mut out).unwrap();
    check("geglu", dev.download_f32(&out).unwrap(), &want, 2e-7);
    for (name, op) in [("silu", 0), ("gelu", 1), ("scale", 2)] {
        let mut host = a.clone();
        let mut dx = dev.upload(&a).unwrap();
        match op {
            0 => {
                cpu.silu(&mut host).unwrap();
                dev.silu(&mut dx).unwrap();
            }
            1 => {
                cpu.gelu(&mut host).unwrap();
                dev.gelu(&mut dx).unwrap();
            }
            _ => {
                cpu.scale(&mut host, 0.125).unwrap();
                dev.scale(&mut dx, 0.125).unwrap();
            }
        }
        let bound = if name == "gelu" { 2e-7 } else { 1e-10 };
        check(name, dev.download_f32(&dx).unwrap(), &host, bound);
    }
}

#[test]
fn argmax_matches_the_cpu_engine() {
    let Some(dev) = device() else { return };
    let k = 49_152;
    let mut v = random(4 * k, 21);
    v[k + 1000] = 50.0; // row 1: a tie between two maxima goes to the lower index
    v[k + 3000] = 50.0;
    v[2 * k + 7] = f32::NAN; // row 2: a NaN never wins
    v[3 * k] = f32::NAN; // row 3: a first NaN gives 0, as on the CPU
    let x = Tensor::from_f32(Shape::matrix(4, k).unwrap(), &v).unwrap();
    let mut got = [0u32; 4];
    dev.argmax(&dev.upload(&x).unwrap(), &mut got).unwrap();
    let want: Vec<u32> = v
        .chunks(k)
        .map(|r| kestrel_tensor::cpu::argmax(r).unwrap() as u32)
        .collect();
    assert_eq!(got.to_vec(), want);
    assert_eq!(got[1], 1000);
}

#[test]
fn rope_matches_the_cpu_engine() {
    use kestrel_tensor::cpu::{rope, RopeMode, RopeParams};
    let Some(dev) = device() else { return };
    let positions: Vec<i32> = vec![0, 1, 7, 100, 1023, 4095];
    for (n_head, head_dim, mode, yarn, ff) in [
        (9, 64, RopeMode::Normal, false, false),
        (4, 256, RopeMode::Neox, false, false),
        (8, 128, RopeMode::Normal, true, true),
    ] {
        let p = RopeParams {
            mode,
            n_rot: head_dim,
            freq_base: if yarn { 500_000.0 } else { 10_000.0 },
            freq_scale: if yarn { 0.25 } else { 1.0 },
            ext_factor: if yarn { 1.0 } else { 0.0 },
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: 8192,
            mrope: None,
        };
        let factors: Vec<f32> = (0..head_dim / 2).map(|i| 1.0 + (i % 5) as f32).collect();
        let host = random(positions.len() * n_head * head_dim, 31);
        let mut want = host.clone();
        rope(
            &mut want,
            n_head,
            head_dim,
            &positions,
            &p,
            ff.then_some(&factors[..]),
        )
        .unwrap();
        let shape = Shape::matrix(positions.len() * n_head, head_dim).unwrap();
        let mut x = dev
            .upload(&Tensor::from_f32(shape, &host).unwrap())
            .unwrap();
        let dff = dev
            .upload(&Tensor::from_f32(Shape::vector(factors.len()), &factors).unwrap())
            .unwrap();
        dev.rope(&mut x, &positions, n_head, head_dim, &p, ff.then_some(&dff))
            .unwrap();
        // Angles up to 4095 rad: ggml-cpu builds them by repeated products, the GPU by powf
        // (as ggml-cuda); they differ by ~1e-3 rad at the far positions.
        let e = nmse(&dev.download_f32(&x).unwrap(), &want);
        assert!(
            e <= 1e-5,
            "rope {mode:?} head {head_dim} yarn {yarn}: {e:e}"
        );
    }
}

/// The plan's one-launch forms: RoPE from a source buffer (a partial rotation, so the copied
/// tail counts) equals the copy + in-place RoPE, and the key/value pair append equals two
/// appends, bit for bit.
#[test]
fn fused_rope_and_pair_append_equal_their_two_step_forms() {
    use kestrel_tensor::cpu::{RopeMode, RopeParams};
    let Some(dev) = device() else { return };
    let positions: Vec<i32> = vec![3, 4, 5, 90];
    let mut ids = dev.new_ids(positions.len()).unwrap();
    dev.set_ids(&mut ids, &positions).unwrap();
    let (n_head, head_dim) = (4, 128);
    let p = RopeParams {
        mode: RopeMode::Neox,
        n_rot: 64,
        freq_base: 10_000.0,
        freq_scale: 1.0,
        ext_factor: 0.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
        n_ctx_orig: 4096,
        mrope: None,
    };
    let shape = Shape::matrix(positions.len() * n_head, head_dim).unwrap();
    let host = random(shape.elem_count(), 9);
    let src = dev
        .upload(&Tensor::from_f32(shape, &host).unwrap())
        .unwrap();
    let mut in_place = dev
        .upload(&Tensor::from_f32(shape, &host).unwrap())
        .unwrap();
    dev.rope(&mut in_place, &positions, n_head, head_dim, &p, None)
        .unwrap();
    let mut out = dev.zeros(DType::F32, shape).unwrap();
    dev.rope_ids_from(&src, &mut out, &ids, n_head, head_dim, &p, None)
        .unwrap();
    assert_eq!(
        dev.download_f32(&out).unwrap(),
        dev.download_f32(&in_place).unwrap()
    );

    // F16 caches are not downloadable: attention over each pair shows they hold the same.
    let (n_kv_head, capacity) = (2, 128);
    let row = n_kv_head * head_dim;
    let kv_shape = Shape::matrix(positions.len(), row).unwrap();
    let k = dev
        .upload(&Tensor::from_f32(kv_shape, &random(kv_shape.elem_count(), 10)).unwrap())
        .unwrap();
    let v = dev
        .upload(&Tensor::from_f32(kv_shape, &random(kv_shape.elem_count(), 11)).unwrap())
        .unwrap();
    let cache = || {
        dev.zeros(DType::F16, Shape::matrix(capacity, row).unwrap())
            .unwrap()
    };
    let (mut k1, mut v1, mut k2, mut v2) = (cache(), cache(), cache(), cache());
    dev.kv_append(&k, &positions, &mut k1).unwrap();
    dev.kv_append(&v, &positions, &mut v1).unwrap();
    dev.kv_append2_ids((&k, &v), &ids, (&mut k2, &mut v2))
        .unwrap();
    let ap = kestrel_tensor::cpu::AttentionParams {
        n_head,
        n_kv_head,
        head_dim,
        scale: 0.1,
        softcap: 0.0,
        window: 0,
    };
    let attend = |kc: &_, vc: &_| {
        let mut o = dev.zeros_f32(shape).unwrap();
        dev.attention(&out, &positions, kc, vc, capacity, &ap, &mut o)
            .unwrap();
        dev.download_f32(&o).unwrap()
    };
    assert_eq!(attend(&k1, &v1), attend(&k2, &v2));

    // Queries and keys rotated and keys and values appended in one launch: the rotated
    // queries as rope_ids_from's, the caches as rotating the keys and appending both.
    let mut k_rot = dev.zeros(DType::F32, kv_shape).unwrap();
    dev.rope_ids_from(&k, &mut k_rot, &ids, n_kv_head, head_dim, &p, None)
        .unwrap();
    let (mut k3, mut v3, mut k4, mut v4) = (cache(), cache(), cache(), cache());
    dev.kv_append2_ids((&k_rot, &v), &ids, (&mut k3, &mut v3))
        .unwrap();
    let mut q_out = dev.zeros(DType::F32, shape).unwrap();
    dev.rope_qk_append_ids(
        (&src, &mut q_out),
        (&k, &v),
        &ids,
        (&mut k4, &mut v4),
        (n_head, n_kv_head, head_dim),
        &p,
        None,
        1.0,
        [None, None],
    )
    .unwrap();
    assert_eq!(
        dev.download_f32(&q_out).unwrap(),
        dev.download_f32(&out).unwrap(),
        "fused RoPE: queries"
    );
    assert_eq!(attend(&k3, &v3), attend(&k4, &v4), "fused RoPE: caches");
    // With the queries scaled (Gemma): the rotated queries, then scale_from.
    let mut scaled = dev.zeros(DType::F32, shape).unwrap();
    dev.scale_from(&out, &mut scaled, 0.0625).unwrap();
    let (mut k5, mut v5) = (cache(), cache());
    dev.rope_qk_append_ids(
        (&src, &mut q_out),
        (&k, &v),
        &ids,
        (&mut k5, &mut v5),
        (n_head, n_kv_head, head_dim),
        &p,
        None,
        0.0625,
        [None, None],
    )
    .unwrap();
    assert_eq!(
        dev.download_f32(&q_out).unwrap(),
        dev.download_f32(&scaled).unwrap(),
        "fused RoPE with a query scale: queries"
    );
    assert_eq!(
        attend(&k3, &v3),
        attend(&k5, &v5),
        "fused RoPE with a query scale: caches"
    );
    // With per-head RMS norms of queries and keys (Gemma 3): the norms as their own launches
    // over head-long rows, then the launch without them.
    let qw = dev.upload(&f32_tensor(1, head_dim, 61)).unwrap();
    let kw = dev.upload(&f32_tensor(1, head_dim, 62)).unwrap();
    let k_heads_shape = Shape::matrix(positions.len() * n_kv_head, head_dim).unwrap();
    let k_heads = dev
        .upload(&Tensor::from_f32(k_heads_shape, &random(kv_shape.elem_count(), 10)).unwrap())
        .unwrap();
    let mut qn = dev.zeros(DType::F32, shape).unwrap();
    dev.rms_norm(&src, Some(&qw), 1e-6, &mut qn).unwrap();
    let mut kn = dev.zeros(DType::F32, k_heads_shape).unwrap();
    dev.rms_norm(&k_heads, Some(&kw), 1e-5, &mut kn).unwrap();
    kn.set_shape(kv_shape).unwrap();
    let (mut k6, mut v6, mut k7, mut v7) = (cache(), cache(), cache(), cache());
    let (mut q6, mut q7) = (
        dev.zeros(DType::F32, shape).unwrap(),
        dev.zeros(DType::F32, shape).unwrap(),
    );
    dev.rope_qk_append_ids(
        (&qn, &mut q6),
        (&kn, &v),
        &ids,
        (&mut k6, &mut v6),
        (n_head, n_kv_head, head_dim),
        &p,
        None,
        0.0625,
        [None, None],
    )
    .unwrap();
    dev.rope_qk_append_ids(
        (&src, &mut q7),
        (&k, &v),
        &ids,
        (&mut k7, &mut v7),
        (n_head, n_kv_head, head_dim),
        &p,
        None,
        0.0625,
        [Some((Some(&qw), 1e-6)), Some((Some(&kw), 1e-5))],
    )
    .unwrap();
    assert_eq!(
        dev.download_f32(&q6).unwrap(),
        dev.download_f32(&q7).unwrap(),
        "fused RoPE with head norms: queries"
    );
    assert_eq!(
        attend(&k6, &v6),
        attend(&k7, &v7),
        "fused RoPE with head norms: caches"
    );
    // A position past the cache is refused before anything is written.
    dev.set_ids(&mut ids, &[0, 1, 2, capacity as i32]).unwrap();
    assert!(dev
        .kv_append2_ids((&k, &v), &ids, (&mut k2, &mut v2))
        .is_err());
    assert!(dev
        .rope_qk_append_ids(
            (&src, &mut q_out),
            (&k, &v),
            &ids,
            (&mut k4, &mut v4),
            (n_head, n_kv_head, head_dim),
            &p,
            None,
            1.0,
            [None, None],
        )
        .is_err());
}

/// Causal attention in float64 over f16 keys and values (`[capacity][n_kv_head * head_dim]`):
/// the function every attention kernel computes (window, soft cap, GQA; no visible key: zeros).
fn attention_f64(
    q: &[f32],
    positions: &[i32],
    (k, v): (&[half::f16], &[half::f16]),
    kv_len: usize,
    p: &kestrel_tensor::cpu::AttentionParams,
) -> Vec<f32> {
    let (hd, group) = (p.head_dim, p.n_head / p.n_kv_head);
    let row = p.n_kv_head * hd;
    let mut out = vec![0f32; q.len()];
    for (t, &pos) in positions.iter().enumerate() {
        if pos < 0 {
            continue;
        }
        let hi = (pos as usize + 1).min(kv_len);
        let lo = if p.window > 0 {
            (pos as usize + 1).saturating_sub(p.window).min(hi)
        } else {
            0
        };
        for h in 0..p.n_head {
            let qh = &q[(t * p.n_head + h) * hd..][..hd];
            let kv = (h / group) * hd;
            let scores: Vec<f64> = (lo..hi)
                .map(|j| {
                    let d: f64 = (0..hd)
                        .map(|i| qh[i] as f64 * k[j * row + kv + i].to_f64())
                        .sum();
                    let s = d * p.scale as f64;
                    if p.softcap > 0.0 {
                        p.softcap as f64 * (s / p.softcap as f64).tanh()
                    } else {
                        s
                    }
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let l: f64 = w.iter().sum();
            for i in 0..hd {
                let o: f64 = (lo..hi)
                    .zip(&w)
                    .map(|(j, wj)| wj * v[j * row + kv + i].to_f64())
                    .sum();
                out[(t * p.n_head + h) * hd + i] = (o / l) as f32;
            }
        }
    }
    out
}

#[test]
fn attention_matches_the_cpu_engine() {
    use half::f16;
    use kestrel_tensor::cpu::{attention, AttentionParams, KvSlice};
    let Some(dev) = device() else { return };
    // Long enough for split decode attention to merge several 256-key ranges.
    let kv_len = 1100;
    let capacity = 1200;
    // SmolLM2 (9 heads over 3, 64), Gemma 3 (4 over 1, 256), a window, a soft cap.
    for (n_head, n_kv_head, head_dim, window, softcap) in [
        (9, 3, 64, 0, 0.0),
        (4, 1, 256, 0, 0.0),
        (8, 2, 128, 128, 0.0),
        (8, 8, 64, 0, 50.0),
    ] {
        let row = n_kv_head * head_dim;
        let kf = random(capacity * row, 41);
        let vf = random(capacity * row, 42);
        let k16: Vec<f16> = kf.iter().map(|&v| f16::from_f32(v)).collect();
        let v16: Vec<f16> = vf.iter().map(|&v| f16::from_f32(v)).collect();
        let p = AttentionParams {
            n_head,
            n_kv_head,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap,
            window,
        };
        // One decode query, short steps (one or several key ranges each), and prefill chunks
        // that take the tiled kernel (from 8 tokens: the first 40 positions, then 50 ending at
        // 1099), all inside the cached 1100.
        for positions in [
            vec![1099],
            vec![100, 101, 1099],
            vec![299, 700],
            (0..40).collect(),
            (1050..1100).collect(),
        ] {
            let q = random(positions.len() * n_head * head_dim, 43);
            let mut want = vec![0f32; q.len()];
            attention(
                &q,
                &positions,
                KvSlice::F16(&k16),
                KvSlice::F16(&v16),
                kv_len,
                &p,
                &mut want,
            )
            .unwrap();
            let want64 = attention_f64(&q, &positions, (&k16, &v16), kv_len, &p);
            let mut kc = dev
                .zeros(DType::F16, Shape::matrix(capacity, row).unwrap())
                .unwrap();
            let mut vc = dev
                .zeros(DType::F16, Shape::matrix(capacity, row).unwrap())
                .unwrap();
            let all: Vec<i32> = (0..capacity as i32).collect();
            let src =
                |v: &[f32]| Tensor::from_f32(Shape::matrix(capacity, row).unwrap(), v).unwrap();
            dev.kv_append(&dev.upload(&src(&kf)).unwrap(), &all, &mut kc)
                .unwrap();
            dev.kv_append(&dev.upload(&src(&vf)).unwrap(), &all, &mut vc)
                .unwrap();
            let qshape = Shape::matrix(positions.len() * n_head, head_dim).unwrap();
            let dq = dev.upload(&Tensor::from_f32(qshape, &q).unwrap()).unwrap();
            // Both kernels (the tiled one serves 8 tokens or more); steps of up to 8 tokens
            // also with the keys split among CTAs: off, the device's choice, 5 and 64 ranges
            // (most of them empty at short positions).
            let few = positions.len() <= 8;
            for kernel in [AttentionKernel::PerToken, AttentionKernel::Tiled] {
                for splits in [Some(0), None, Some(5), Some(64)] {
                    if !few && splits.is_some() {
                        continue;
                    }
                    dev.set_attention_kernel(kernel);
                    dev.set_attention_splits(splits);
                    let mut out = dev.zeros_f32(qshape).unwrap();
                    dev.attention(&dq, &positions, &kc, &vc, kv_len, &p, &mut out)
                        .unwrap();
                    // The GPU computes in f32 from the f16 cache: against float64 of the same
                    // function, tightly. The CPU rounds the query and its accumulator to f16
                    // on this path, as llama.cpp does (~1e-3 relative, growing with the keys:
                    // NMSE 1.45e-5 at 1,100 on an H200, session 43), so it is a looser check.
                    let got = dev.download_f32(&out).unwrap();
                    let e = nmse(&got, &want64);
                    let e_cpu = nmse(&got, &want);
                    assert!(
                        e <= 1e-8 && e_cpu <= 1e-4,
                        "attention ({kernel:?}, splits {splits:?}) {n_head}/{n_kv_head}x{head_dim} window {window} cap {softcap} at {positions:?}: {e:e} (f64), {e_cpu:e} (CPU)"
                    );
                    // A step's first token alone gives the bits it gets in the step.
                    if few && positions.len() > 1 {
                        let one = Shape::matrix(n_head, head_dim).unwrap();
                        let dq1 = dev
                            .upload(&Tensor::from_f32(one, &q[..n_head * head_dim]).unwrap())
                            .unwrap();
                        let mut o1 = dev.zeros_f32(one).unwrap();
                        dev.attention(&dq1, &positions[..1], &kc, &vc, kv_len, &p, &mut o1)
                            .unwrap();
                        let alone = dev.download_f32(&o1).unwrap();
                        assert!(
                            alone
                                .iter()
                                .zip(&got)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "attention (splits {splits:?}): a token alone differs from the same token in a step"
                        );
                    }
                }
            }
            dev.set_attention_kernel(AttentionKernel::Auto);
            dev.set_attention_splits(None);
        }
    }
}

#[test]
fn softcap_and_exact_gelu_match_f64() {
    let Some(dev) = device() else { return };
    let host = random(4096, 51);
    let shape = Shape::vector(host.len());
    let mut x = dev
        .upload(&Tensor::from_f32(shape, &host).unwrap())
        .unwrap();
    dev.softcap(&mut x, 0.5).unwrap();
    let want: Vec<f32> = host
        .iter()
        .map(|&v| (0.5 * (v as f64 / 0.5).tanh()) as f32)
        .collect();
    assert!(nmse(&dev.download_f32(&x).unwrap(), &want) <= 1e-12);
    let mut x = dev
        .upload(&Tensor::from_f32(shape, &host).unwrap())
        .unwrap();
    dev.gelu_erf(&mut x).unwrap();
    let erf = |x: f64| {
        // Abramowitz-Stegun 7.1.26 is too coarse; integrate instead (Simpson, 2000 steps).
        let n = 2000;
        let h = x / n as f64;
        let f = |t: f64| (-t * t).exp();
        let mut s = f(0.0) + f(x);
        for i in 1..n {
            s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
        }
        s * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt()
    };
    let want: Vec<f32> = host
        .iter()
        .map(|&v| (0.5 * v as f64 * (1.0 + erf(v as f64 / 2f64.sqrt()))) as f32)
        .collect();
    assert!(nmse(&dev.download_f32(&x).unwrap(), &want) <= 1e-12);
    assert!(dev.softcap(&mut x, 0.0).is_err());
}
