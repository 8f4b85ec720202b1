//! The generator on a GPU against the CPU over the model families: every architecture kestrel
//! matches llama.cpp on (llama.cpp's random-weight files), DeepSeek 2 in both its forms, LoRA
//! adapters on mixture-of-experts experts and routers, and prompt-lookup speculation on
//! state-space models (a rejected draft's rollback). Bounds as `cuda_generate.rs`'s: KL
//! divergence ≤ 0.002, the same top token away from near-ties. Requires `--features cuda`;
//! skips with a reason without a GPU, fails with `KESTREL_REQUIRE_GPU=1`.
#![cfg(feature = "cuda")]

mod cuda_gen_common;
mod lora_common;

// llama.cpp's random-weight architecture files, rebuilt (the `llama_archs` test's builder).
#[path = "llama_archs/files.rs"]
#[allow(dead_code)]
mod files;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use cuda_gen_common::{
    agrees_away_from_near_ties, argmax, generator, greedy_alone, have_gpu, kld, top_gap,
    with_adapters,
};
use kestrel_generate::LookupOptions;
use kestrel_tensor::Device;

/// The last position's logits of `prompt` through `logits_of_ids` on `device` ("cpu" or
/// "cuda"), two threads; the error as text.
fn last_logits(
    model: &kestrel_gguf::GgufModel,
    prompt: &[u32],
    device: &str,
) -> Result<Vec<f32>, String> {
    use kestrel_generate::{logits_of_ids, LogitsOptions};
    let opts = LogitsOptions {
        device: device.into(),
        threads: 2,
        ..LogitsOptions::default()
    };
    logits_of_ids(model, prompt, &opts)
        .map_err(|e| e.to_string())?
        .pop()
        .ok_or_else(|| "no logits row".into())
}

/// The folder of llama.cpp's architecture fixtures and its skeletons (the files' shapes).
fn skeletons() -> (PathBuf, BTreeMap<String, files::Skeleton>) {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/archs");
    let skeletons = files::read_skeletons(&fixtures.join("skeletons.json"));
    (fixtures, skeletons)
}

/// Prompt-lookup speculation on state-space models on the GPU: a rejected draft returns the
/// state to its checkpoint (`CudaKvCache::checkpoint`) and runs the kept tokens again, so the
/// ids are greedy decoding's (away from near-ties); at least one family rejects a draft (the
/// rollback ran; before it was fixed, the GPU refused the re-run).
#[test]
fn prompt_lookup_on_gpu_state_space_models_keeps_greedy_tokens() {
    if !have_gpu() {
        return;
    }
    let (_, skeletons) = skeletons();
    let prompt: Vec<u32> = (0..24).map(|i| [5, 9, 17, 33, 64][i % 5]).collect();
    let mut rejected = 0;
    for stem in [
        "mamba-dense",
        "mamba2-dense",
        "jamba-dense",
        "falcon-h1-dense",
    ] {
        let model = Arc::new(files::build(&skeletons[stem], 2, 0.1));
        let mut g = generator(&model, Device::Cuda(0), 16);
        let (want, rows) = greedy_alone(&mut g, &prompt, 32);
        let (spec, stats) = g
            .generate_lookup(&prompt, 32, LookupOptions::default(), &mut |_| Ok(true))
            .unwrap();
        // The verification rows run through the prefill kernels: only a near-tie may part them.
        agrees_away_from_near_ties(&want, &rows, &spec.ids, &format!("{stem}: {stats:?}"));
        rejected += usize::from(stats.drafted > stats.accepted);
    }
    assert!(rejected >= 1, "no family rejected a draft");
}

/// Every architecture kestrel matches llama.cpp on whose graph the CUDA plan takes
/// (`CudaPlan::check`; `llama_archs.rs` lists the others) runs on the GPU as on the CPU:
/// llama.cpp's random-weight files of each (rebuilt from `fixtures/archs/skeletons.json`), the
/// last position's logits of the golden sets' prompts (16 ids; 64 at a larger weight
/// deviation) through `logits_of_ids` on both devices, KLD ≤ 0.002 and the same top token
/// wherever the CPU's top two are 0.5 apart. Prints each file's KLD.
#[test]
fn architectures_run_on_the_gpu_as_on_the_cpu() {
    use kestrel_arch::{build_decoder, DecoderConfig, Logits};
    use kestrel_graph::CudaPlan;
    if !have_gpu() {
        return;
    }
    let (fixtures, skeletons) = skeletons();
    let text = std::fs::read_to_string(fixtures.join("golden.json")).unwrap();
    let golden: serde_json::Value = serde_json::from_str(&text).unwrap();
    let matching = std::fs::read_to_string(fixtures.join("matching.txt")).unwrap();
    let (mut ran, mut failures) = (0, Vec::new());
    // Set 3 is the one of larger weights (stdev 1) and a 64-token prompt.
    for key in ["1", "3-d1"] {
        let set = &golden["sets"][key];
        let seed = set["seed"].as_u64().unwrap();
        let stdev = set["stdev"].as_f64().unwrap() as f32;
        let prompt: Vec<u32> = set["prompt"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        for stem in matching
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
        {
            let model = files::build(&skeletons[stem], seed, stdev);
            let cfg = DecoderConfig::from_model(&model).unwrap();
            if CudaPlan::check(&build_decoder(&cfg, &model, Logits::Last).unwrap()).is_err() {
                continue;
            }
            let cpu = last_logits(&model, &prompt, "cpu").unwrap();
            let gpu = match last_logits(&model, &prompt, "cuda") {
                Ok(g) => g,
                Err(e) => {
                    failures.push(format!("{stem} (set {key}): the GPU refused it: {e}"));
                    continue;
                }
            };
            ran += 1;
            let k = kld(&cpu, &gpu);
            let top_ok = top_gap(&cpu) <= 0.5 || argmax(&cpu) == argmax(&gpu);
            eprintln!(
                "{stem} (set {key}): KLD {k:.2e}, top token {}",
                if top_ok { "agrees" } else { "DIFFERS" }
            );
            if k.is_nan() || k > 0.002 || !top_ok {
                failures.push(format!(
                    "{stem} (set {key}): KLD {k:.3e}, top token agrees: {top_ok}"
                ));
            }
        }
    }
    eprintln!("{ran} files ran on the GPU");
    assert!(ran >= 2 * 64, "only {ran} files ran");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// DeepSeek 2 with 4 KV heads in both forms kestrel reads (llama_archs' variants): absorbed
/// (latent attention, per-head matmuls) and decompressed (`attn_kv_b`: key heads of 192 values,
/// value heads of 128, in caches of their own), GPU against CPU within the same bound.
#[test]
fn deepseek2_in_both_forms_runs_on_the_gpu_as_on_the_cpu() {
    if !have_gpu() {
        return;
    }
    let (_, skeletons) = skeletons();
    for stem in ["deepseek2-moe-h4", "deepseek2-moe-h4-kvb"] {
        let (base, v) = files::variant(stem).unwrap();
        let model = v.model(&skeletons[base], 1, 0.1);
        let vocab = kestrel_arch::DecoderConfig::from_model(&model)
            .unwrap()
            .n_vocab as u32;
        let prompt: Vec<u32> = (0..16).map(|i| (i * 37 + 3) % vocab).collect();
        let cpu = last_logits(&model, &prompt, "cpu").unwrap();
        let gpu = last_logits(&model, &prompt, "cuda").unwrap();
        let k = kld(&cpu, &gpu);
        assert!(k <= 0.002, "{stem}: KLD {k}");
        assert!(
            top_gap(&cpu) <= 0.5 || argmax(&cpu) == argmax(&gpu),
            "{stem}"
        );
    }
}

/// LoRA adapters on the experts and the router of a mixture-of-experts model (llama.cpp's
/// random-weight qwen3moe file, F32, less its per-tensor scales, as `lora_experts.rs` builds
/// it): rank-4 pairs with alpha on two experts' gate/down/up and the router, and a rank-2 pair
/// without alpha with an F16 `lora_b`; the GPU (each expert's halves uploaded one matrix an
/// expert) against the CPU within the plan's KLD bound, where the adapters move the
/// distribution far more.
#[test]
fn expert_lora_adapters_run_on_the_gpu_as_on_the_cpu() {
    if !have_gpu() {
        return;
    }
    let dir = lora_common::temp_dir("cuda-experts");
    let (_, skeletons) = skeletons();
    let skeleton =
        skeletons["qwen3moe-moe"].without(|n| n.ends_with(".scale") || n.ends_with(".input_scale"));
    let model = dir.join("qwen3moe.gguf");
    std::fs::write(
        &model,
        files::build_bytes_as(&skeleton, 1, 0.1, |_, _| kestrel_gguf::GgmlType::F32),
    )
    .unwrap();
    let targets: [(&str, u64, u64, u64); 4] = [
        ("blk.0.ffn_gate_exps.weight", 256, 384, 2),
        ("blk.0.ffn_down_exps.weight", 384, 256, 2),
        ("blk.1.ffn_up_exps.weight", 256, 384, 2),
        ("blk.1.ffn_gate_inp.weight", 256, 2, 0),
    ];
    let pairs = |rank: u64| -> Vec<lora_common::Pair> {
        targets
            .iter()
            .map(|&(name, k, m, e)| {
                let (mut a, mut b) = (vec![k, rank], vec![rank, m]);
                if e > 0 {
                    a.push(e);
                    b.push(e);
                }
                (name.to_string(), a, b)
            })
            .collect()
    };
    let (one, two) = (dir.join("one.gguf"), dir.join("two.gguf"));
    let f32_b = kestrel_gguf::GgmlType::F32;
    lora_common::write_pairs(&one, "qwen3moe", Some(8.0), &pairs(4), 21, f32_b, 0.2, &[]);
    let f16_b = kestrel_gguf::GgmlType::F16;
    lora_common::write_pairs(&two, "qwen3moe", None, &pairs(2), 22, f16_b, 0.2, &[]);
    let ids = [1u32, 17, 100, 3, 99, 42, 7, 127, 5, 61, 33, 120];
    let loaded = [(one, 0.5), (two, -1.5)];
    let mut cpu = with_adapters(&model, &loaded, Device::Cpu);
    let mut gpu = with_adapters(&model, &loaded, Device::Cuda(0));
    let mut base = with_adapters(&model, &[], Device::Cpu);
    let (mut want, mut got) = (
        cpu.prefill(&ids).unwrap().to_vec(),
        gpu.prefill(&ids).unwrap().to_vec(),
    );
    let mut plain = base.prefill(&ids).unwrap().to_vec();
    let first = want.clone();
    for (step, t) in [None, Some(9u32), Some(77)].into_iter().enumerate() {
        if let Some(t) = t {
            want = cpu.step(t).unwrap().to_vec();
            got = gpu.step(t).unwrap().to_vec();
            plain = base.step(t).unwrap().to_vec();
        }
        let (d, moved) = (kld(&want, &got), kld(&want, &plain));
        eprintln!("step {step}: KLD GPU vs CPU {d:.2e}, adapters' effect {moved:.2e}");
        assert!(d <= 0.002, "step {step}: KLD {d}");
        assert!(
            moved > 1e-5,
            "step {step}: the adapters barely act ({moved})"
        );
    }
    // Other scales bound (the first adapter off): the GPU follows them (an adapter on experts
    // and routers alone counts as a plan slot).
    cpu.set_adapter_scales(&[0.0, -1.5]).unwrap();
    gpu.set_adapter_scales(&[0.0, -1.5]).unwrap();
    let (want, got) = (
        cpu.prefill(&ids).unwrap().to_vec(),
        gpu.prefill(&ids).unwrap().to_vec(),
    );
    let d = kld(&want, &got);
    assert!(d <= 0.002, "other scales: KLD {d}");
    assert!(kld(&first, &want) > 1e-6, "the new scales changed nothing");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Mixture-of-experts layers routed on the device (`moe_route` and the indirect matvec, steps
/// of up to 64 rows): every MoE architecture the CUDA plan takes, llama.cpp's random-weight
/// file (every expert used) with F32 experts, with Q8_0 experts, and with one expert used (the
/// router chooses), plus kestrel's variants `nemotron_h_moe-experts` (2 of 4, selection bias,
/// normalised, scaled) and `deepseek2-moe-h4-top1`; a 12-token prompt, then six decode steps.
/// Decode steps replayed from CUDA graphs give the bits of plain launches, and every such plan
/// captures them (its cache holds a graph; with host routing, `set_moe_on_device(false)`, it
/// cannot); the logits are host routing's within KLD 1e-6 (only the routing weights' last bits
/// differ); two sequences in one batched step give the bits of each alone.
#[test]
fn moe_layers_route_on_the_device() {
    use kestrel_arch::{build_decoder, weight_tensor, DecoderConfig, Logits};
    use kestrel_gguf::{GgmlType, GgufFile, GgufModel};
    use kestrel_graph::CudaPlan;
    use kestrel_tensor::cuda::CudaDevice;
    if !have_gpu() {
        return;
    }
    let dev = Arc::new(CudaDevice::open(0).unwrap());
    let (fixtures, skeletons) = skeletons();
    let matching = std::fs::read_to_string(fixtures.join("matching.txt")).unwrap();
    let prompt: Vec<u32> = (0..12).map(|i| (i * 37 + 3) % 200).collect();
    let other: Vec<u32> = (0..9).map(|i| (i * 53 + 7) % 200).collect();
    let steps = [11u32, 42, 7, 99, 3, 150];
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let of_bytes = |bytes: Vec<u8>| {
        let file = GgufFile::from_bytes(bytes).unwrap();
        GgufModel::from_shards(vec![file], std::path::Path::new("moe.gguf")).unwrap()
    };
    // The files: (what, model).
    let mut models = Vec::new();
    for stem in matching
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
    {
        let s = &skeletons[stem];
        if !s.has_tensor("_exps") {
            continue;
        }
        let q8 = |n: &str, d: &[u64]| {
            if n.contains("_exps.weight") && d[0].is_multiple_of(32) {
                GgmlType::Q8_0
            } else {
                GgmlType::F32
            }
        };
        models.push((format!("{stem} (F32)"), files::build(s, 2, 0.1)));
        let bytes = files::build_bytes_as(s, 2, 0.1, q8);
        models.push((format!("{stem} (Q8_0 experts)"), of_bytes(bytes)));
        let one = files::one_expert_used(s);
        models.push((
            format!("{stem} (one expert used)"),
            files::build(&one, 2, 0.1),
        ));
    }
    for stem in ["nemotron_h_moe-experts", "deepseek2-moe-h4-top1"] {
        let (base, v) = files::variant(stem).unwrap();
        models.push((stem.to_string(), v.model(&skeletons[base], 2, 0.1)));
    }
    let (mut ran, mut failures) = (0, Vec::new());
    for (what, model) in &models {
        let cfg = DecoderConfig::from_model(model).unwrap();
        let g = build_decoder(&cfg, model, Logits::Last).unwrap();
        if CudaPlan::check(&g).is_err() {
            continue;
        }
        let lookup = |n: &str| weight_tensor(model, n);
        let mut plan = CudaPlan::compile(&g, Arc::clone(&dev), 16, &lookup).unwrap();
        ran += 1;
        // The files' vocabularies are as small as 128 tokens.
        let vocab = u32::try_from(cfg.n_vocab).unwrap();
        let in_vocab = |ids: &[u32]| ids.iter().map(|t| t % vocab).collect::<Vec<u32>>();
        let (prompt, other, steps) = (in_vocab(&prompt), in_vocab(&other), in_vocab(&steps));
        let run = |plan: &mut CudaPlan, graphs: bool, on_device: bool| {
            plan.set_graphs(graphs);
            plan.set_moe_on_device(on_device);
            let mut c = plan.new_cache(64).unwrap();
            let mut rows = vec![plan.run(&mut c, &prompt).unwrap().to_vec()];
            for &t in &steps {
                rows.push(plan.run(&mut c, &[t]).unwrap().to_vec());
            }
            (rows, plan.graphs() && c.has_graph())
        };
        let (device, captured) = run(&mut plan, true, true);
        let (plain, _) = run(&mut plan, false, true);
        let (host, host_graphs) = run(&mut plan, true, false);
        if !captured || plan.graph_error().is_some() {
            failures.push(format!(
                "{what}: no decode graph ({:?})",
                plan.graph_error()
            ));
        }
        if host_graphs {
            failures.push(format!("{what}: host routing claims CUDA graphs"));
        }
        for (i, ((d, p), h)) in device.iter().zip(&plain).zip(&host).enumerate() {
            if bits(d) != bits(p) {
                failures.push(format!("{what}: step {i}: the graph's logits differ"));
            }
            let k = kld(h, d);
            if k.is_nan() || k > 1e-6 {
                failures.push(format!(
                    "{what}: step {i}: KLD {k:.2e} against host routing"
                ));
            }
        }
        // Two sequences in one batched step against each alone.
        plan.set_graphs(true);
        plan.set_moe_on_device(true);
        let mut alone = Vec::new();
        for (p, t) in [(&prompt, steps[0]), (&other, steps[1])] {
            let mut c = plan.new_cache(64).unwrap();
            plan.run(&mut c, p).unwrap();
            alone.extend(plan.run(&mut c, &[t]).unwrap().iter().copied());
        }
        let (mut c1, mut c2) = (plan.new_cache(64).unwrap(), plan.new_cache(64).unwrap());
        plan.run(&mut c1, &prompt).unwrap();
        plan.run(&mut c2, &other).unwrap();
        let both = plan
            .run_batch(&mut [&mut c1, &mut c2], &[steps[0], steps[1]])
            .unwrap()
            .to_vec();
        if bits(&both) != bits(&alone) {
            failures.push(format!("{what}: batched rows differ from each alone"));
        }
        eprintln!("{what}: ran");
    }
    eprintln!("{ran} MoE files ran");
    assert!(ran >= 30, "only {ran} MoE files ran");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
