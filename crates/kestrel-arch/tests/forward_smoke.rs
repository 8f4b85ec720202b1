//! A first forward pass: the plan runs on the real models and predicts sensible tokens.

use kestrel_arch::{build_decoder, weight_tensor, DecoderConfig, Logits};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_gguf::GgufModel;
use kestrel_graph::ExecutionPlan;
use kestrel_kv::{ContiguousCache, KvCache, KvDType, KvLayout};
use kestrel_tensor::{cpu, CpuEngine};

fn greedy(file: &str, prompt: &[u32], n: usize) -> Option<Vec<u32>> {
    let path = test_model(file)?;
    let model = GgufModel::open(path).unwrap();
    let cfg = DecoderConfig::from_model(&model).unwrap();
    let graph = build_decoder(&cfg, &model, Logits::Last).unwrap();
    let lookup = |name: &str| weight_tensor(&model, name);
    let mut prefill = ExecutionPlan::compile(&graph, 64, &lookup).unwrap();
    let mut decode = ExecutionPlan::compile(&graph, 1, &lookup).unwrap();
    let layout = KvLayout {
        n_layers: cfg.n_layer,
        n_kv_head: cfg.n_head_kv[0],
        layer_kv_heads: Vec::new(),
        k_head_dim: cfg.head_dim_k,
        v_head_dim: cfg.head_dim_v,
        dtype: KvDType::F16,
        recurrent: kestrel_kv::RecurrentLayout::NONE,
    };
    let mut kv = ContiguousCache::new(layout, 128).unwrap();
    let engine = CpuEngine::new(2).unwrap();
    let logits = prefill.run(&engine, &mut kv, prompt, 0).unwrap();
    let mut next = cpu::argmax(logits).unwrap() as u32;
    let mut out = vec![next];
    for _ in 1..n {
        let pos = kv.seq_len();
        let logits = decode.run(&engine, &mut kv, &[next], pos).unwrap();
        next = cpu::argmax(logits).unwrap() as u32;
        if std::env::var("KESTREL_DEBUG_TOP").is_ok() {
            let mut idx: Vec<usize> = (0..logits.len()).collect();
            idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
            let top: Vec<(usize, f32)> = idx[..3].iter().map(|&i| (i, logits[i])).collect();
            eprintln!("step {pos}: {top:?}");
        }
        out.push(next);
    }
    Some(out)
}

#[test]
fn smollm2_continues_a_prompt() {
    // "The capital of France is" in SmolLM2's vocabulary (no BOS, as its metadata says).
    let Some(ids) = greedy(SMOLLM2_135M_Q4_1, &[504, 3575, 282, 4649, 314], 8) else {
        return;
    };
    eprintln!("smollm2: {ids:?}");
    assert_eq!(ids.len(), 8);
}

#[test]
fn gemma3_continues_a_prompt() {
    // BOS + "The capital of France is".
    let Some(ids) = greedy(GEMMA3_270M_Q4_K_M, &[2, 818, 5279, 529, 7001, 563], 8) else {
        return;
    };
    eprintln!("gemma3: {ids:?}");
    assert_eq!(ids.len(), 8);
}
