//! What the CUDA engine's GPU tests share: opening GPU 0, or saying why the test skips (and
//! failing instead when `KESTREL_REQUIRE_GPU` is set, as the GPU machine's run does);
//! deterministic inputs; moving f32 matrices to and from the device.
// Each test crate uses some of these.
#![allow(dead_code)]

use kestrel_tensor::cuda::{CudaDevice, CudaError, DeviceTensor};
use kestrel_tensor::{quant, DType, Shape, Tensor};

/// GPU 0, or `None` (with a line saying why `what` skips) when there is no driver or GPU.
pub fn device(what: &str) -> Option<CudaDevice> {
    match CudaDevice::open(0) {
        Ok(d) => Some(d),
        Err(e @ (CudaError::NoDriver | CudaError::NoDevice { .. })) => {
            assert!(
                std::env::var_os("KESTREL_REQUIRE_GPU").is_none(),
                "KESTREL_REQUIRE_GPU is set but: {e}"
            );
            eprintln!("skipping the CUDA {what} test: {e}");
            None
        }
        Err(e) => panic!("CUDA device 0 did not open: {e}"),
    }
}

/// Deterministic values in [lo, hi) from `seed`.
pub fn random_in(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// Deterministic values in [-1, 1) from `seed`.
pub fn random(n: usize, seed: u64) -> Vec<f32> {
    random_in(n, seed, -1.0, 1.0)
}

/// `v` as a device matrix of `rows` × `width`.
pub fn upload(dev: &CudaDevice, rows: usize, width: usize, v: &[f32]) -> DeviceTensor {
    dev.upload(&Tensor::from_f32(Shape::matrix(rows, width).unwrap(), v).unwrap())
        .unwrap()
}

/// An F32 device tensor's values.
pub fn download(dev: &CudaDevice, t: &DeviceTensor) -> Vec<f32> {
    let mut v = vec![0f32; t.shape().elem_count()];
    dev.download_f32_into(t, &mut v).unwrap();
    v
}

/// A cache's values (f16 or q8_0, widened to f32 by the engine's row lookup, which is exact),
/// as bits.
pub fn cache_values(dev: &CudaDevice, t: &DeviceTensor) -> Vec<u32> {
    let (rows, width) = (t.shape().n_rows(), t.shape().row_len());
    let mut f = dev
        .zeros(DType::F32, Shape::matrix(rows, width).unwrap())
        .unwrap();
    let ids: Vec<u32> = (0..rows as u32).collect();
    dev.get_rows(t, &ids, &mut f).unwrap();
    download(dev, &f).iter().map(|x| x.to_bits()).collect()
}

/// Deterministic values in [-1, 1) (xorshift), with a few larger ones (every 97th, ×8) as real
/// activations have.
pub fn spiky(n: usize, seed: u64) -> Vec<f32> {
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

/// A host matrix of `rows` × `k` spiky values.
pub fn f32_tensor(rows: usize, k: usize, seed: u64) -> Tensor {
    Tensor::from_f32(Shape::matrix(rows, k).unwrap(), &spiky(rows * k, seed)).unwrap()
}

/// A weight of `dtype`, `rows` rows of `k`: `src` as F32, or quantized by the reference
/// quantizer.
pub fn weight_of(dtype: DType, rows: usize, k: usize, src: &[f32]) -> Tensor {
    let shape = Shape::matrix(rows, k).unwrap();
    if dtype == DType::F32 {
        return Tensor::from_f32(shape, src).unwrap();
    }
    let mut bytes = vec![0u8; dtype.row_bytes(k).unwrap() * rows];
    kestrel_tensor::quant::quantize(dtype.ggml_type(), src, &mut bytes).unwrap();
    Tensor::from_bytes(dtype, shape, &bytes).unwrap()
}

/// Normalized mean squared error `Σ(gpu - cpu)² / Σ cpu²`.
pub fn nmse(gpu: &[f32], cpu: &[f32]) -> f64 {
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

/// Every weight type the CUDA matmul and get_rows take.
pub const WEIGHT_TYPES: [DType; 11] = [
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

/// `x · Wᵀ` in f64 over the dequantized weights, as f32.
pub fn reference(w: &Tensor, x: &Tensor) -> Vec<f32> {
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
