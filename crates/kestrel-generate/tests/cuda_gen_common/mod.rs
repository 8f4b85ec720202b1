//! What the generator's GPU tests share (`cuda_generate.rs`, `cuda_architectures.rs`): whether
//! a GPU is there (failing instead of skipping with `KESTREL_REQUIRE_GPU`), generators on either
//! device, KL divergence, greedy runs and their near-ties.
// Each test crate uses some of these.
#![allow(dead_code)]

use std::sync::Arc;

use kestrel_arch::synthetic::synthetic_model;
use kestrel_generate::{Generator, GeneratorOptions};
use kestrel_gguf::{GgufFile, GgufModel};
use kestrel_tensor::cuda::{device_count, CudaError};
use kestrel_tensor::Device;

pub fn have_gpu() -> bool {
    match device_count() {
        Ok(n) if n > 0 => true,
        Ok(_) | Err(CudaError::NoDriver) => {
            assert!(
                std::env::var_os("KESTREL_REQUIRE_GPU").is_none(),
                "KESTREL_REQUIRE_GPU is set but no CUDA device was found"
            );
            eprintln!("skipping the CUDA generator test: no CUDA device");
            false
        }
        Err(e) => panic!("CUDA did not answer: {e}"),
    }
}

pub fn generator(model: &Arc<GgufModel>, device: Device, batch: usize) -> Generator {
    let opts = GeneratorOptions {
        threads: 2,
        ctx: 128,
        batch,
        device,
        ..GeneratorOptions::default()
    };
    Generator::new(model.clone(), opts).unwrap()
}

pub fn log_softmax(x: &[f32]) -> Vec<f64> {
    let m = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let lse = x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln() + m;
    x.iter().map(|&v| v as f64 - lse).collect()
}

pub fn kld(p_logits: &[f32], q_logits: &[f32]) -> f64 {
    let (p, q) = (log_softmax(p_logits), log_softmax(q_logits));
    p.iter().zip(&q).map(|(&a, &b)| a.exp() * (a - b)).sum()
}

pub fn argmax(x: &[f32]) -> u32 {
    (0..x.len())
        .max_by(|&a, &b| x[a].total_cmp(&x[b]))
        .unwrap_or(0) as u32
}

pub fn synthetic(arch: &str) -> Arc<GgufModel> {
    let bytes = synthetic_model(arch, 7).unwrap().to_bytes().unwrap();
    Arc::new(
        GgufModel::from_shards(
            vec![GgufFile::from_bytes(bytes).unwrap()],
            std::path::Path::new(arch),
        )
        .unwrap(),
    )
}

/// Greedy ids of `prompt` in a new session of `g`: up to `n` of them, and the logits each one
/// was picked from.
pub fn greedy_alone(g: &mut Generator, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut s = g.new_session().unwrap();
    let mut logits = g.prefill_in(&mut s, prompt).unwrap().to_vec();
    let (mut ids, mut rows) = (Vec::new(), Vec::new());
    while ids.len() < n {
        let next = argmax(&logits);
        ids.push(next);
        rows.push(logits);
        logits = g.step_in(&mut s, next).unwrap().to_vec();
    }
    (ids, rows)
}

/// The largest logit minus the second largest.
pub fn top_gap(x: &[f32]) -> f32 {
    let mut v = x.to_vec();
    v.sort_by(|a, b| b.total_cmp(a));
    v[0] - v[1]
}

/// Whether `got` is `want` (greedy ids, `rows` the logits each followed) over `got`'s length;
/// where they part, asserts the greedy logits' top two were within 0.5 (a near-tie, which
/// other kernels' rounding may flip) and returns false.
pub fn agrees_away_from_near_ties(
    want: &[u32],
    rows: &[Vec<f32>],
    got: &[u32],
    what: &str,
) -> bool {
    let agree = want.iter().zip(got).take_while(|(a, b)| a == b).count();
    if agree < got.len().min(want.len()) {
        let gap = top_gap(&rows[agree]);
        assert!(
            gap <= 0.5,
            "{what} parted from greedy at token {agree} with a top-2 gap of {gap}"
        );
        return false;
    }
    true
}

/// A generator for the synthetic llama file at `path` with `adapters` (file, scale) on `device`.
pub fn with_adapters(
    path: &std::path::Path,
    adapters: &[(std::path::PathBuf, f32)],
    device: Device,
) -> Generator {
    let adapters = adapters
        .iter()
        .map(|(p, s)| (Arc::new(kestrel_arch::LoraAdapter::open(p).unwrap()), *s))
        .collect();
    let opts = GeneratorOptions {
        threads: 2,
        ctx: 64,
        batch: 4,
        device,
        adapters,
        ..GeneratorOptions::default()
    };
    Generator::new(Arc::new(GgufModel::open(path).unwrap()), opts).unwrap()
}
