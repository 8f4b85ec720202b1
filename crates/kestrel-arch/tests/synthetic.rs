//! Every builder runs: a synthetic tiny model of each architecture loads, builds, and gives
//! finite logits; prefill over a sequence equals feeding it token by token.

use kestrel_arch::synthetic::{synthetic_model, SYNTHETIC_ARCHS, SYNTHETIC_VOCAB};
use kestrel_arch::{build_decoder, weight_tensor, DecoderConfig, Logits};
use kestrel_gguf::{GgufFile, GgufModel};
use kestrel_graph::ExecutionPlan;
use kestrel_kv::{ContiguousCache, KvDType, KvLayout};
use kestrel_tensor::CpuEngine;

fn open(arch: &str) -> GgufModel {
    let bytes = synthetic_model(arch, 42).unwrap().to_bytes().unwrap();
    GgufModel::from_shards(
        vec![GgufFile::from_bytes(bytes).unwrap()],
        std::path::Path::new(arch),
    )
    .unwrap()
}

#[test]
fn every_architecture_runs_and_prefill_equals_stepping() {
    let engine = CpuEngine::new(2).unwrap();
    let tokens = [1u32, 17, 200, 3, 99, 42, 7, 128];
    for arch in SYNTHETIC_ARCHS {
        let m = open(arch);
        let cfg = DecoderConfig::from_model(&m).unwrap();
        let g = build_decoder(&cfg, &m, Logits::All).unwrap();
        let lookup = |n: &str| weight_tensor(&m, n);
        let mut all = ExecutionPlan::compile(&g, 8, &lookup).unwrap();
        let mut one = ExecutionPlan::compile(&g, 1, &lookup).unwrap();
        let layout = KvLayout {
            n_layers: cfg.n_layer,
            n_kv_head: cfg.n_head_kv[0],
            layer_kv_heads: Vec::new(),
            k_head_dim: cfg.head_dim_k,
            v_head_dim: cfg.head_dim_v,
            dtype: KvDType::F32,
            recurrent: kestrel_kv::RecurrentLayout::NONE,
        };
        let mut kv = ContiguousCache::new(layout.clone(), 16).unwrap();
        let batch = all.run(&engine, &mut kv, &tokens, 0).unwrap().to_vec();
        assert_eq!(batch.len(), tokens.len() * SYNTHETIC_VOCAB);
        assert!(batch.iter().all(|v| v.is_finite()), "{arch}");
        let mut kv1 = ContiguousCache::new(layout, 16).unwrap();
        for (i, &t) in tokens.iter().enumerate() {
            let row = one.run(&engine, &mut kv1, &[t], i).unwrap();
            let want = &batch[i * SYNTHETIC_VOCAB..(i + 1) * SYNTHETIC_VOCAB];
            let diff = row
                .iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(diff < 1e-3, "{arch}: token {i} differs by {diff}");
        }
    }
}

#[test]
fn unknown_synthetic_arch_is_none() {
    assert!(synthetic_model("mamba", 1).is_none());
}

/// Logits at every position match llama.cpp's (fixtures/synthetic, made by make_fixtures.py from
/// models written by `synthetic_model(arch, 42)`).
#[test]
fn logits_match_llama_cpp() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/synthetic");
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let tokens: Vec<u32> = reference["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let engine = CpuEngine::new(2).unwrap();
    for arch in SYNTHETIC_ARCHS {
        let bytes = std::fs::read(dir.join(format!("{arch}.logits.f32"))).unwrap();
        let want: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(want.len(), tokens.len() * SYNTHETIC_VOCAB);
        let m = open(arch);
        let cfg = DecoderConfig::from_model(&m).unwrap();
        let g = build_decoder(&cfg, &m, Logits::All).unwrap();
        let lookup = |n: &str| weight_tensor(&m, n);
        let mut plan = ExecutionPlan::compile(&g, tokens.len(), &lookup).unwrap();
        let layout = KvLayout {
            n_layers: cfg.n_layer,
            n_kv_head: cfg.n_head_kv[0],
            layer_kv_heads: Vec::new(),
            k_head_dim: cfg.head_dim_k,
            v_head_dim: cfg.head_dim_v,
            dtype: KvDType::F16,
            recurrent: kestrel_kv::RecurrentLayout::NONE,
        };
        let mut kv = ContiguousCache::new(layout, 16).unwrap();
        let got = plan.run(&engine, &mut kv, &tokens, 0).unwrap();
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let max_abs = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        let rel = max_abs / scale;
        eprintln!(
            "{arch}: max |logit diff| {max_abs:.2e}, relative to max |logit| {scale:.2}: {rel:.2e}"
        );
        assert!(
            rel < 1e-3,
            "{arch}: logits differ from llama.cpp by {max_abs} ({rel:.2e} relative)"
        );
    }
}
