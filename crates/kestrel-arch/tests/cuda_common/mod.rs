//! What the CUDA plan tests share: the device (or a line saying why they skip), and the files
//! the batched and paged tests run: llama.cpp's synthetic architectures and SmolLM2- and
//! Gemma-3-shaped files of real widths.
#![allow(dead_code)] // each test target uses part of it

use std::sync::Arc;

use kestrel_arch::synth::{synth_model, SynthShape, SynthType};
use kestrel_arch::synthetic::{synthetic_model, SYNTHETIC_ARCHS};
use kestrel_gguf::{GgufFile, GgufModel};
use kestrel_tensor::cuda::{CudaDevice, CudaError};

/// Device 0, or `None` (saying so) without a driver or GPU; fails under
/// `KESTREL_REQUIRE_GPU=1`.
pub fn device(what: &str) -> Option<Arc<CudaDevice>> {
    match CudaDevice::open(0) {
        Ok(d) => Some(Arc::new(d)),
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

/// Every synthetic architecture's file, then the two real-shaped ones (two layers).
pub fn batch_files() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = SYNTHETIC_ARCHS
        .iter()
        .map(|a| {
            (
                a.to_string(),
                synthetic_model(a, 5).unwrap().to_bytes().unwrap(),
            )
        })
        .collect();
    files.extend(real_shaped());
    files
}

/// SmolLM2-135M-shaped Q4_1 and Gemma-3-270M-shaped Q4_K_M files of two layers.
pub fn real_shaped() -> Vec<(String, Vec<u8>)> {
    [
        (SynthShape::SmolLM2_135M, SynthType::Q4_1),
        (SynthShape::Gemma3_270M, SynthType::Q4KM),
    ]
    .into_iter()
    .map(|(shape, ty)| {
        let bytes = synth_model(shape, ty, 2, 9).unwrap().to_bytes().unwrap();
        (format!("{shape:?} {ty:?}"), bytes)
    })
    .collect()
}

/// A model from a file's bytes.
pub fn model_of(bytes: Vec<u8>) -> GgufModel {
    GgufModel::from_shards(
        vec![GgufFile::from_bytes(bytes).unwrap()],
        std::path::Path::new("synthetic"),
    )
    .unwrap()
}
