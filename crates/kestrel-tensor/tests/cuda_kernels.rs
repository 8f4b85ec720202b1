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
//!   9-64 rows take the tensor-core matvec (the same sums; `cuda_wide.rs` checks its bits),
//!   more the cuBLAS GEMM (f16 products of the dequantized weight and the activations scaled
//!   into f16's range, f32 sums), whose error against f64 is far below the CPU's 8-bit one, so
//!   the same bound holds; float weights keep the bounds below (F32 weights take full f32,
//!   BF16 TF32, F16 the f16 activations the CPU engine also rounds them to);
//! - norms 1e-10; SiLU/SwiGLU 1e-10 (the GPU's expf is within 2 ulp); GELU/GeGLU 2e-7
//!   (the CPU engine rounds GELU through ggml-cpu's f16 table, as ggml-cpu does; the GPU keeps
//!   it f32 as ggml-cuda does: relative 2^-12 a value);
//!   add/mul and get_rows exact to 1e-12; argmax and top-k exact.
//!
//! RoPE is tested in `cuda_rope.rs`, attention in `cuda_attention.rs`, the GEMM's bands, f16
//! range and shared conversions in `cuda_gemm.rs`.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::{f32_tensor, nmse, reference, spiky as random, WEIGHT_TYPES as ALL};
use kestrel_tensor::cuda::{CudaDevice, DeviceTensor, MIXED_MULTI_TYPES};
use kestrel_tensor::{CpuEngine, DType, Engine, Shape, Tensor};

fn device() -> Option<CudaDevice> {
    cuda_common::device("kernel")
}

fn weight(dtype: DType, rows: usize, k: usize, seed: u64) -> Tensor {
    cuda_common::weight_of(dtype, rows, k, &random(rows * k, seed))
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
            for n in [1, 2, 3, 8, 13, 64, 72] {
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

/// The prefetching matvecs (`set_mmvq_prefetch`: a thread's blocks read two at a time, L2 asked
/// for the next two) compute nothing differently, also when one CTA an SM works through every
/// row group (`set_mmvq_ctas_per_sm(1)`): one row, with and without a residual add, and two
/// weights in one launch, bit for bit, on rows long enough for a thread to take many blocks
/// (an 8B model's 4096 and its FFN's 14336), and on rows of 2816 (11 K-quant blocks, 88 of the
/// 32-value types), which leave threads an odd number of blocks and some threads one more than
/// others.
#[test]
fn prefetching_matvecs_give_the_same_bits() {
    let Some(dev) = device() else { return };
    let zeros = |m: usize| dev.zeros_f32(Shape::matrix(1, m).unwrap()).unwrap();
    for k in [4096, 14_336, 2816] {
        // 600 rows of 2816: 300 row groups, more than one CTA an SM launches (132 SMs emulated),
        // so CTAs take several groups each.
        let m = if k == 2816 { 600 } else { 96 };
        let x = dev.upload(&f32_tensor(1, k, 41)).unwrap();
        let r = dev.upload(&f32_tensor(1, m, 42)).unwrap();
        for dtype in ALL.into_iter().filter(|d| d.is_quantized()) {
            let w1 = dev.upload(&weight(dtype, m, k, 43)).unwrap();
            let w2 = dev.upload(&weight(dtype, m + 32, k, 44)).unwrap();
            let run = |prefetch: bool, ctas: usize| {
                dev.set_mmvq_prefetch(prefetch);
                dev.set_mmvq_ctas_per_sm(ctas);
                let (mut o, mut oa, mut p0, mut p1) = (zeros(m), zeros(m), zeros(m), zeros(m + 32));
                dev.matmul(&x, &w1, &mut o).unwrap();
                dev.matmul_add_reusing(&x, &w1, &r, &mut oa, None).unwrap();
                dev.matmul_multi_reusing(&x, (&w1, &mut p0), (&w2, &mut p1), None, None)
                    .unwrap();
                [&o, &oa, &p0, &p1].map(|t| dev.download_f32(t).unwrap())
            };
            let plain = run(false, 0);
            assert_eq!(
                plain,
                run(true, 0),
                "{dtype} k={k}: the prefetching kernels differ"
            );
            assert_eq!(
                plain,
                run(true, 1),
                "{dtype} k={k}: the prefetching kernels differ on one CTA an SM"
            );
        }
    }
    dev.set_mmvq_prefetch(false);
    dev.set_mmvq_ctas_per_sm(0);
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
    // Two or three weights of one type against one row in one launch = a launch per weight;
    // so are q/k of one type with a v of the type paired with it (MIXED_MULTI_TYPES), with
    // 63 k rows so that a CTA holds rows of both types.
    let mut triples: Vec<[DType; 3]> = [DType::Q4_1, DType::Q4K, DType::Q6K]
        .map(|d| [d; 3])
        .to_vec();
    triples.extend(MIXED_MULTI_TYPES.map(|(a, b)| [a, a, b]));
    for types in triples {
        let dtype = types[0];
        let k = 512;
        let x = dev.upload(&f32_tensor(1, k, 30)).unwrap();
        let ws: Vec<_> = [192usize, 63, 65]
            .iter()
            .zip(types)
            .enumerate()
            .map(|(i, (&m, t))| dev.upload(&weight(t, m, k, 31 + i as u64)).unwrap())
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
        let out = |w: &DeviceTensor| {
            dev.zeros_f32(Shape::matrix(1, w.shape().n_rows()).unwrap())
                .unwrap()
        };
        for (prefetch, ctas) in [(false, 0), (true, 0), (true, 1)] {
            dev.set_mmvq_prefetch(prefetch);
            dev.set_mmvq_ctas_per_sm(ctas);
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
                    "{types:?} q/k/v in one launch (prefetching {prefetch}, {ctas} CTAs an SM)"
                );
            }
        }
        dev.set_mmvq_prefetch(false);
        dev.set_mmvq_ctas_per_sm(0);
        if types[2] != dtype {
            continue;
        }
        let (mut p0, mut p1) = (out(&ws[1]), out(&ws[2]));
        dev.matmul_multi_reusing(&x, (&ws[1], &mut p0), (&ws[2], &mut p1), None, None)
            .unwrap();
        assert_eq!(dev.download_f32(&p0).unwrap(), want[1], "{dtype:?} gate/up");
        assert_eq!(dev.download_f32(&p1).unwrap(), want[2], "{dtype:?} gate/up");
    }
    // Other mixes are refused: two weights of different types, a pair the wrong way round.
    assert!(!dev.matvec_multi_applies(&[DType::Q6K, DType::Q6K, DType::Q4K], 1));
    assert!(!dev.matvec_multi_applies(&[DType::Q4K, DType::Q6K, DType::Q6K], 1));
    assert!(dev.matvec_multi_applies(&[DType::Q4K, DType::Q4K, DType::Q6K], 1));
    assert!(!dev.matvec_multi_applies(&[DType::Q4K, DType::Q4K, DType::Q6K], 2));
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

fn sum_tensor(dev: &CudaDevice, v: &[f32], shape: Shape) -> DeviceTensor {
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

/// The device top-k against the sampler's rule: candidates (not NaN, not -inf) by logit in
/// `total_cmp`'s order, larger first, ties by lower id, the first k; on Gemma 3's 262,144-wide
/// rows and short ones, with NaNs, -infs, runs of ties across the k-th place and both zeros,
/// and a row with no candidate at all.
#[test]
fn top_k_matches_the_samplers_rule() {
    let Some(dev) = device() else { return };
    for (n, k) in [
        (262_144, 40),
        (262_144, 256),
        (1000, 1),
        (300, 256),
        (7, 40),
    ] {
        let rows = 4;
        let mut v = random(rows * n, n as u64 + k as u64);
        for (i, x) in v.iter_mut().enumerate() {
            match i % 29 {
                0 => *x = f32::NAN,
                1 => *x = f32::NEG_INFINITY,
                2 => *x = 2.5, // ties above most values
                3 => *x = if i % 2 == 0 { -0.0 } else { 0.0 },
                _ => {}
            }
        }
        v[3 * n..].iter_mut().for_each(|x| *x = f32::NEG_INFINITY); // row 3: none
        let x = Tensor::from_f32(Shape::matrix(rows, n).unwrap(), &v).unwrap();
        let mut out = dev.new_top_k(rows).unwrap();
        dev.top_k(&dev.upload(&x).unwrap(), k, &mut out).unwrap();
        assert_eq!(out.rows(), rows);
        for (r, row) in v.chunks(n).enumerate() {
            let mut want: Vec<u32> = (0..n as u32)
                .filter(|&i| !row[i as usize].is_nan() && row[i as usize] != f32::NEG_INFINITY)
                .collect();
            want.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
            want.truncate(k);
            let (ids, vals) = out.row(r);
            assert_eq!(ids, &want[..], "n {n} k {k} row {r}");
            let want_vals: Vec<u32> = want.iter().map(|&i| row[i as usize].to_bits()).collect();
            let got_vals: Vec<u32> = vals.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got_vals, want_vals, "n {n} k {k} row {r}: logits");
        }
    }
    let x = dev
        .upload(&Tensor::from_f32(Shape::matrix(1, 8).unwrap(), &[0.0; 8]).unwrap())
        .unwrap();
    let mut out = dev.new_top_k(1).unwrap();
    assert!(dev.top_k(&x, 0, &mut out).is_err() && dev.top_k(&x, 257, &mut out).is_err());
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
