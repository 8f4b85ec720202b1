//! The prefill GEMM (`crates/kestrel-tensor/src/cuda/gemm.rs`: from 65 activation rows a weight
//! is dequantized band by band and multiplied by cuBLAS) against an f64 product and the CPU
//! engine (`--features cuda`; skips without a GPU, as `cuda_kernels.rs` says): every band of a
//! large weight, bands of any size, activations past f16's range, and one f16 conversion of an
//! input shared by the matmuls that take it. Bounds as NMSE against f64 (1e-6: f16 or TF32
//! operands with f32 sums), against the CPU's 8-bit activations 1e-4. The GEMM's rows in
//! `matmul_matches_the_cpu_engine` (`cuda_kernels.rs`) are checked there with the matvec's.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::{f32_tensor, nmse, reference, spiky as random};
use kestrel_tensor::cuda::{CudaDevice, DeviceTensor};
use kestrel_tensor::{CpuEngine, DType, Engine, Shape, Tensor};

fn device() -> Option<CudaDevice> {
    cuda_common::device("GEMM")
}

fn weight(dtype: DType, rows: usize, k: usize, seed: u64) -> Tensor {
    cuda_common::weight_of(dtype, rows, k, &random(rows * k, seed))
}

/// From 65 rows matmul dequantizes the weight in bands and runs cuBLAS; a weight of
/// 4096 × 17000 in bands of 16384 rows of f16 (as the default 256 MiB made them of f32
/// operands; 8192 rows on f32 operands) takes two, the second writing from column 16384 on.
#[test]
fn gemm_covers_every_band_of_a_large_weight() {
    let Some(dev) = device() else { return };
    if std::env::var_os("KESTREL_REQUIRE_GPU").is_some() {
        assert_eq!(dev.gemm_off(), None, "the GPU machine has cuBLAS");
    }
    let cpu = CpuEngine::new(4).unwrap();
    let (k, m, n) = (4096, 17_000, 72);
    dev.set_gemm_band_bytes(16_384 * k * 2);
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

/// The GEMM's f16 operands: activations past f16's range (Gemma's can pass 65504) are divided
/// by a power of two and the product multiplied back, so the result stays finite and as near
/// the exact product as for activations in range; in range the scale is 1.
#[test]
fn gemm_takes_activations_past_the_range_of_f16() {
    let Some(dev) = device() else { return };
    if let Some(why) = dev.gemm_off() {
        println!("skipped: no GEMM ({why})");
        return;
    }
    let (k, m, n) = (512, 256, 80);
    let w = weight(DType::Q4K, m, k, 31);
    let dw = dev.upload(&w).unwrap();
    let mut errors = Vec::new();
    for magnitude in [1.0f32, 3.0e4, 1.0e6, 3.0e9] {
        let values: Vec<f32> = random(n * k, 32).iter().map(|v| v * magnitude).collect();
        let x = Tensor::from_f32(Shape::matrix(n, k).unwrap(), &values).unwrap();
        let exact = reference(&w, &x);
        let mut out = dev.zeros_f32(Shape::matrix(n, m).unwrap()).unwrap();
        dev.matmul(&dev.upload(&x).unwrap(), &dw, &mut out).unwrap();
        let got = dev.download_f32(&out).unwrap();
        assert!(
            got.iter().all(|v| v.is_finite()),
            "activations up to {:e}: a product is not finite",
            8.0 * magnitude
        );
        let e = nmse(&got, &exact);
        assert!(
            e <= 1e-6,
            "activations up to {:e}: nmse {e:e} against f64",
            8.0 * magnitude
        );
        errors.push(e);
    }
    // The scaled runs are as near as the unscaled one (only f16's rounding differs).
    for e in &errors[1..] {
        assert!(*e <= 4.0 * errors[0] + 1e-12, "nmse {errors:?}");
    }
}

/// The GEMM dequantizes and multiplies a band of weight rows at a time: bands of a few rows
/// (`set_gemm_band_bytes`; the last one part-full) compute the product of one whole band,
/// for quantized weights (dequantized per band), F16 ones (multiplied in place, band by band)
/// and BF16 ones (f32 operands).
#[test]
fn gemm_bands_of_any_size_compute_the_same_product() {
    let Some(dev) = device() else { return };
    if let Some(why) = dev.gemm_off() {
        println!("skipped: no GEMM ({why})");
        return;
    }
    let (k, m, n) = (256, 100, 70);
    let x = f32_tensor(n, k, 61);
    let dx = dev.upload(&x).unwrap();
    for dtype in [DType::Q4_0, DType::Q6K, DType::F16, DType::BF16] {
        let w = weight(dtype, m, k, 62);
        let dw = dev.upload(&w).unwrap();
        let exact = reference(&w, &x);
        let run = |band: usize| {
            dev.set_gemm_band_bytes(band);
            let mut out = dev.zeros_f32(Shape::matrix(n, m).unwrap()).unwrap();
            dev.matmul(&dx, &dw, &mut out).unwrap();
            dev.download_f32(&out).unwrap()
        };
        let whole = run(usize::MAX);
        let banded = run(3 * k * 2);
        for (what, got) in [("whole", &whole), ("banded", &banded)] {
            let e = nmse(got, &exact);
            assert!(e <= 1e-6, "{dtype} {what}: nmse {e:e} against f64");
        }
        let e = nmse(&banded, &whole);
        assert!(
            e <= 1e-10,
            "{dtype}: bands of 3 rows against one band: nmse {e:e}"
        );
    }
}

/// The GEMM converts its input to f16 once for the matmuls that share it: handed the ticket of
/// the conversion it still holds, a GEMM skips converting and gives the bits of a fresh one; a
/// ticket whose conversion was replaced (another input, whose scale differs too) or a matvec's
/// Q8_1 ticket is not taken for it. On f32 operands (`KESTREL_CUDA_GEMM=f32`) there is nothing
/// to share and no ticket.
#[test]
fn gemm_shares_one_conversion_of_its_input_while_it_is_held() {
    let Some(dev) = device() else { return };
    if let Some(why) = dev.gemm_off() {
        println!("skipped: no GEMM ({why})");
        return;
    }
    let f32_operands = std::env::var("KESTREL_CUDA_GEMM")
        .is_ok_and(|v| v.eq_ignore_ascii_case("f32") || v.eq_ignore_ascii_case("tf32"));
    let (k, m, n) = (512, 96, 80);
    let w1 = dev.upload(&weight(DType::Q4K, m, k, 51)).unwrap();
    let w2 = dev.upload(&weight(DType::Q8_0, m + 32, k, 52)).unwrap();
    let x = dev.upload(&f32_tensor(n, k, 53)).unwrap();
    let big: Vec<f32> = random(n * k, 54).iter().map(|v| v * 1.0e6).collect();
    let y = dev
        .upload(&Tensor::from_f32(Shape::matrix(n, k).unwrap(), &big).unwrap())
        .unwrap();
    let one = dev.upload(&f32_tensor(1, k, 55)).unwrap();
    let out = |rows: usize, cols: usize| dev.zeros_f32(Shape::matrix(rows, cols).unwrap()).unwrap();
    let bits = |t: &DeviceTensor| -> Vec<u32> {
        dev.download_f32(t)
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    let mut fresh = out(n, m + 32);
    dev.matmul(&x, &w2, &mut fresh).unwrap();
    let want = bits(&fresh);

    let mut o1 = out(n, m);
    let t = dev.matmul_reusing(&x, &w1, &mut o1, None).unwrap();
    assert_eq!(t.is_some(), !f32_operands, "ticket {t:?}");
    let mut o2 = out(n, m + 32);
    let shared = dev.matmul_reusing(&x, &w2, &mut o2, t).unwrap();
    assert_eq!(shared, t, "the held conversion keeps its ticket");
    assert_eq!(bits(&o2), want, "with the shared conversion");

    // Another input converted since: the old ticket names nothing held.
    let mut oy = out(n, m);
    let ty = dev.matmul_reusing(&y, &w1, &mut oy, None).unwrap();
    if t.is_some() {
        assert_ne!(ty, t);
    }
    let mut o3 = out(n, m + 32);
    let again = dev.matmul_reusing(&x, &w2, &mut o3, t).unwrap();
    if t.is_some() {
        assert_ne!(again, t, "a stale ticket is not taken");
    }
    assert_eq!(bits(&o3), want, "after another input's conversion");

    // A matvec's Q8_1 ticket does not name the GEMM's f16 data.
    let mut o1row = out(1, m);
    let tq = dev.matmul_reusing(&one, &w1, &mut o1row, None).unwrap();
    assert!(tq.is_some());
    let mut oy2 = out(n, m);
    dev.matmul_reusing(&y, &w1, &mut oy2, None).unwrap();
    let mut o4 = out(n, m + 32);
    dev.matmul_reusing(&x, &w2, &mut o4, tq).unwrap();
    assert_eq!(bits(&o4), want, "handed a matvec's ticket");
}
