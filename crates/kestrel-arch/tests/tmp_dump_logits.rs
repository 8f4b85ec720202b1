// TEMPORARY (not committed): dumps last-position logits of a prefill to compare with llama-debug.
use kestrel_arch::{build_decoder, weight_tensor, DecoderConfig, Logits};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_gguf::GgufModel;
use kestrel_graph::ExecutionPlan;
use kestrel_kv::{ContiguousCache, KvCache, KvDType, KvLayout};
use kestrel_tensor::CpuEngine;

fn dump(file: &str, prompt: &[u32], out: &str, decode_last: bool) {
    let path = test_model(file).unwrap();
    let model = GgufModel::open(path).unwrap();
    let cfg = DecoderConfig::from_model(&model).unwrap();
    let graph = build_decoder(&cfg, &model, Logits::Last).unwrap();
    let lookup = |name: &str| weight_tensor(&model, name);
    let mut prefill = ExecutionPlan::compile(&graph, 64, &lookup).unwrap();
    let mut decode = ExecutionPlan::compile(&graph, 1, &lookup).unwrap();
    let layout = KvLayout {
        n_layers: cfg.n_layer,
        n_kv_head: cfg.n_head_kv[0],
        k_head_dim: cfg.head_dim_k,
        v_head_dim: cfg.head_dim_v,
        dtype: KvDType::F16,
    };
    let mut kv = ContiguousCache::new(layout, 128).unwrap();
    let engine = CpuEngine::new(2).unwrap();
    let logits: Vec<f32> = if decode_last {
        prefill
            .run(&engine, &mut kv, &prompt[..prompt.len() - 1], 0)
            .unwrap();
        let pos = kv.seq_len();
        decode
            .run(&engine, &mut kv, &prompt[prompt.len() - 1..], pos)
            .unwrap()
            .to_vec()
    } else {
        prefill.run(&engine, &mut kv, prompt, 0).unwrap().to_vec()
    };
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(out, bytes).unwrap();
}

#[test]
fn dump_all() {
    let tag = std::env::var("TAG").unwrap_or_default();
    let smol = [504, 3575, 282, 4649, 314, 7042, 30, 198, 198, 504];
    let gem = [2, 818, 5279, 529, 7001, 563, 506, 5279, 529, 506];
    dump(
        SMOLLM2_135M_Q4_1,
        &smol,
        &format!("/tmp/oracle/ours_smol_prefill{tag}.bin"),
        false,
    );
    dump(
        SMOLLM2_135M_Q4_1,
        &smol,
        &format!("/tmp/oracle/ours_smol_decode{tag}.bin"),
        true,
    );
    dump(
        GEMMA3_270M_Q4_K_M,
        &gem,
        &format!("/tmp/oracle/ours_gem_prefill{tag}.bin"),
        false,
    );
    dump(
        GEMMA3_270M_Q4_K_M,
        &gem,
        &format!("/tmp/oracle/ours_gem_decode{tag}.bin"),
        true,
    );
}

#[test]
fn dump_smol5() {
    dump(
        SMOLLM2_135M_Q4_1,
        &[504, 3575, 282, 4649, 314],
        "/tmp/oracle/ours_smol5.bin",
        false,
    );
}

#[test]
fn dump_gem_bos() {
    dump(
        GEMMA3_270M_Q4_K_M,
        &[2],
        "/tmp/oracle/ours_gem_bos.bin",
        false,
    );
}

fn greedy(file: &str, prompt: &[u32], n: usize) -> Vec<u32> {
    let path = test_model(file).unwrap();
    let model = GgufModel::open(path).unwrap();
    let cfg = DecoderConfig::from_model(&model).unwrap();
    let graph = build_decoder(&cfg, &model, Logits::Last).unwrap();
    let lookup = |name: &str| weight_tensor(&model, name);
    let mut prefill = ExecutionPlan::compile(&graph, 64, &lookup).unwrap();
    let mut decode = ExecutionPlan::compile(&graph, 1, &lookup).unwrap();
    let layout = KvLayout {
        n_layers: cfg.n_layer,
        n_kv_head: cfg.n_head_kv[0],
        k_head_dim: cfg.head_dim_k,
        v_head_dim: cfg.head_dim_v,
        dtype: KvDType::F16,
    };
    let mut kv = ContiguousCache::new(layout, 128).unwrap();
    let engine = CpuEngine::new(2).unwrap();
    let logits = prefill.run(&engine, &mut kv, prompt, 0).unwrap();
    let mut next = kestrel_tensor::cpu::argmax(logits).unwrap() as u32;
    let mut out = vec![next];
    let mut margins = Vec::new();
    for _ in 1..n {
        let pos = kv.seq_len();
        let logits = decode.run(&engine, &mut kv, &[next], pos).unwrap();
        let mut idx: Vec<usize> = (0..logits.len()).collect();
        idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        margins.push(logits[idx[0]] - logits[idx[1]]);
        next = idx[0] as u32;
        out.push(next);
    }
    let minm = margins.iter().cloned().fold(f32::INFINITY, f32::min);
    eprintln!("min top1-top2 margin over decode steps: {minm:.4}");
    out
}

#[test]
fn greedy32() {
    eprintln!(
        "smol {:?}",
        greedy(SMOLLM2_135M_Q4_1, &[504, 3575, 282, 4649, 314], 32)
    );
    eprintln!(
        "gem {:?}",
        greedy(GEMMA3_270M_Q4_K_M, &[2, 818, 5279, 529, 7001, 563], 32)
    );
}
