//! LoRA adapters on the experts of a mixture-of-experts model (llama.cpp's `build_lora_mm_id`:
//! 3-d halves, one pair per expert), on llama.cpp's own random-weight `qwen3moe` file (rebuilt
//! from `fixtures/archs/skeletons.json`, as `llama_archs.rs` does, less its per-tensor scales):
//! applied on top against the same adapters merged into the
//! expert weights by `export_merged` (F32, so the two differ by float order and the f16 rounding
//! of an F16 half's input), batched against alone, and against llama.cpp's logits on the same
//! files (`fixtures/lora/golden.json`, `experts` cases).

mod lora_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kestrel_arch::{export_merged, LoraAdapter};
use kestrel_generate::{BatchOptions, BatchRequest, GenerateParams, Generator};
use kestrel_gguf::{GgmlType, GgufModel};
use lora_common::{base64, generator, temp_dir};

#[path = "llama_archs/files.rs"]
#[allow(dead_code)]
mod files;

const IDS: [u32; 12] = [1, 17, 100, 3, 99, 42, 7, 127, 5, 61, 33, 120];
const EXPERTS: u64 = 2;

/// Adapted weights: `(name, k, m, experts)` (experts 0: a plain matrix).
const TARGETS: [(&str, u64, u64, u64); 5] = [
    ("blk.0.ffn_gate_exps.weight", 256, 384, EXPERTS),
    ("blk.0.ffn_down_exps.weight", 384, 256, EXPERTS),
    ("blk.1.ffn_up_exps.weight", 256, 384, EXPERTS),
    ("blk.1.ffn_gate_inp.weight", 256, EXPERTS, 0),
    ("blk.1.attn_q.weight", 256, 256, 0),
];

/// llama.cpp's random-weight qwen3moe file (seed 1, deviation 0.1) in `dir`, less its
/// per-tensor scales: llama.cpp adds most terms after a weight's scale, which no merged weight
/// can express (`scaled` keeps them, for the comparison with llama.cpp).
fn base_as(dir: &Path, scaled: bool) -> PathBuf {
    let skeletons = files::read_skeletons(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/archs/skeletons.json"),
    );
    let skeleton = skeletons["qwen3moe-moe"]
        .without(|n| !scaled && (n.ends_with(".scale") || n.ends_with(".input_scale")));
    let bytes = files::build_bytes_as(&skeleton, 1, 0.1, |_, _| GgmlType::F32);
    let p = dir.join(if scaled {
        "qwen3moe-scaled.gguf"
    } else {
        "qwen3moe.gguf"
    });
    std::fs::write(&p, bytes).unwrap();
    p
}

fn base(dir: &Path) -> PathBuf {
    base_as(dir, false)
}

/// An adapter of rank `rank` for `targets`, values uniform in `±amplitude` from `seed`,
/// `lora_b` in `b_type`.
pub fn adapter(
    path: &Path,
    alpha: Option<f32>,
    rank: u64,
    targets: &[(&str, u64, u64, u64)],
    seed: u64,
    b_type: GgmlType,
    amplitude: f32,
) {
    let pairs: Vec<lora_common::Pair> = targets
        .iter()
        .map(|&(name, k, m, e)| {
            let (mut a_dims, mut b_dims) = (vec![k, rank], vec![rank, m]);
            if e > 0 {
                a_dims.push(e);
                b_dims.push(e);
            }
            (name.to_string(), a_dims, b_dims)
        })
        .collect();
    lora_common::write_pairs(
        path,
        "qwen3moe",
        alpha,
        &pairs,
        seed,
        b_type,
        amplitude,
        &[],
    );
}

fn nmse(want: &[f32], got: &[f32]) -> f64 {
    let num: f64 = want
        .iter()
        .zip(got)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
        .sum();
    num / want.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>()
}

/// Last-position logits after `IDS`, then after two steps.
fn run(g: &mut Generator) -> Vec<Vec<f32>> {
    let mut out = vec![g.prefill(&IDS).unwrap().to_vec()];
    for t in [9u32, 77] {
        out.push(g.step(t).unwrap().to_vec());
    }
    out
}

/// The two adapters of these tests in `dir`: rank 4 with alpha 8 on every target, and rank 2
/// without alpha, `lora_b` F16, on the experts and the router; values within `±amplitude`.
fn adapters(dir: &Path, amplitude: f32) -> (PathBuf, PathBuf) {
    let (one, two) = (
        dir.join(format!("one-{amplitude}.gguf")),
        dir.join(format!("two-{amplitude}.gguf")),
    );
    adapter(&one, Some(8.0), 4, &TARGETS, 21, GgmlType::F32, amplitude);
    adapter(&two, None, 2, &TARGETS[..4], 22, GgmlType::F16, amplitude);
    (one, two)
}

#[test]
fn expert_adapters_on_top_match_them_merged_in() {
    let dir = temp_dir("experts");
    let model = base(&dir);
    let (one, two) = adapters(&dir, 0.2);
    let plain = run(&mut generator(&model, &[]).unwrap());
    for set in [vec![(one.clone(), 1.0)], vec![(one, 0.5), (two, -1.5)]] {
        let on_top = run(&mut generator(&model, &set).unwrap());
        let merged_path = dir.join("merged.gguf");
        let loaded: Vec<_> = set
            .iter()
            .map(|(p, s)| (Arc::new(LoraAdapter::open(p).unwrap()), *s))
            .collect();
        let report =
            export_merged(&GgufModel::open(&model).unwrap(), &loaded, &merged_path).unwrap();
        assert_eq!(report.merged, 5);
        let merged = run(&mut generator(&merged_path, &[]).unwrap());
        let bound = if set.len() > 1 { 1e-6 } else { 1e-9 };
        for (step, ((w, g), p)) in merged.iter().zip(&on_top).zip(&plain).enumerate() {
            let d = nmse(w, g);
            eprintln!(
                "{set:?} step {step}: NMSE {d:.2e} vs merged, {:.2e} vs base",
                nmse(p, g)
            );
            assert!(
                d < bound,
                "{set:?} step {step}: NMSE {d} against the merged file"
            );
            assert!(nmse(p, g) > 1e-4, "{set:?} step {step}: no effect");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Greedy tokens of `prompt` generated alone with the adapter choice `adapters`.
fn alone(g: &mut Generator, prompt: &[u32], adapters: Option<Vec<(usize, f32)>>) -> Vec<u32> {
    let params = GenerateParams {
        adapters,
        ..GenerateParams::greedy(6)
    };
    g.iter(prompt, &params)
        .unwrap()
        .map(|t| t.unwrap().id)
        .collect()
}

#[test]
fn expert_adapters_per_sequence_in_a_batch_match_alone() {
    let dir = temp_dir("experts-batch");
    let model = base(&dir);
    // Large enough to change greedy tokens.
    let (one, two) = adapters(&dir, 1.0);
    let mut g = generator(&model, &[(one, 1.0), (two, 1.0)]).unwrap();
    let choices: [Option<Vec<(usize, f32)>>; 5] = [
        Some(vec![]),
        Some(vec![(0, 1.0)]),
        Some(vec![(0, 0.5), (1, -1.0)]),
        None,
        Some(vec![(1, 2.0)]),
    ];
    let prompts: [&[u32]; 5] = [&IDS[..5], &IDS[2..9], &IDS[..12], &IDS[6..8], &IDS[1..4]];
    let requests: Vec<BatchRequest> = choices
        .iter()
        .zip(prompts)
        .map(|(c, p)| BatchRequest {
            prompt: p.to_vec(),
            params: GenerateParams {
                adapters: c.clone(),
                ..GenerateParams::greedy(6)
            },
        })
        .collect();
    let batch = BatchOptions {
        max_seqs: 8,
        ..BatchOptions::default()
    };
    let out = g.batch_generate(requests, &batch).unwrap();
    let mut distinct = std::collections::HashSet::new();
    for (i, ((choice, p), got)) in choices.iter().zip(prompts).zip(&out).enumerate() {
        let got = got.as_ref().unwrap().ids.clone();
        assert_eq!(
            got,
            alone(&mut g, p, choice.clone()),
            "request {i} ({choice:?})"
        );
        distinct.insert(alone(&mut g, prompts[2], choice.clone()));
    }
    assert!(
        distinct.len() >= 3,
        "only {} distinct outputs",
        distinct.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Last-position logits of a 16-token prompt with the expert adapters against llama.cpp's
/// (`fixtures/lora/experts_golden.json`, made by `fixtures/lora/make_lora_golden.py` from the
/// `cases.json` this test writes with `KESTREL_LORA_OUT=DIR`): NMSE ≤ 1e-6 and the same top
/// token wherever llama.cpp's top two are 1e-3 apart.
#[test]
fn expert_adapters_match_llama_cpp() {
    let out_dir = std::env::var_os("KESTREL_LORA_OUT").map(PathBuf::from);
    let dir = out_dir.clone().unwrap_or_else(|| temp_dir("experts-llama"));
    std::fs::create_dir_all(&dir).unwrap();
    let (model, scaled) = (base(&dir), base_as(&dir, true));
    let (one, two) = adapters(&dir, 0.2);
    // The scaled file's scales shrink what the adapters do: larger ones there.
    let (big_one, big_two) = adapters(&dir, 1.0);
    // Attention alone, where a per-tensor scale (`attn_v.scale`, `attn_output.scale`) sits
    // between the matmul and the term.
    let attn = dir.join("attn.gguf");
    let attn_targets = [
        ("blk.0.attn_v.weight", 256, 256, 0),
        ("blk.1.attn_output.weight", 256, 256, 0),
    ];
    adapter(&attn, Some(8.0), 4, &attn_targets, 23, GgmlType::F32, 0.2);
    let prompt: Vec<u32> = (0..16u32).map(|i| (i * 37 + 5) % 128).collect();
    // The scaled file: terms after the experts' and attn_q's scales, as llama.cpp adds them.
    type Case<'a> = (&'a str, &'a PathBuf, Vec<(PathBuf, f32)>);
    let cases: [Case; 6] = [
        ("qwen3moe-none", &model, vec![]),
        ("qwen3moe-one", &model, vec![(one.clone(), 1.0)]),
        ("qwen3moe-two", &model, vec![(one, 0.5), (two, -1.5)]),
        ("qwen3moe-scaled-none", &scaled, vec![]),
        (
            "qwen3moe-scaled-two",
            &scaled,
            vec![(big_one, 1.0), (big_two, 0.5)],
        ),
        ("qwen3moe-scaled-attn", &scaled, vec![(attn, 1.0)]),
    ];
    if out_dir.is_some() {
        let spec: serde_json::Map<String, serde_json::Value> = cases
            .iter()
            .map(|(name, model, ad)| {
                let ad: Vec<serde_json::Value> =
                    ad.iter().map(|(p, s)| serde_json::json!([p, s])).collect();
                let case = serde_json::json!({ "model": model, "adapters": ad, "prompt": prompt });
                (name.to_string(), case)
            })
            .collect();
        std::fs::write(
            dir.join("cases.json"),
            serde_json::to_vec_pretty(&spec).unwrap(),
        )
        .unwrap();
        return;
    }
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lora/experts_golden.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let logits = |name: &str| -> Vec<f32> {
        base64(golden["cases"][name]["logits_f16"].as_str().unwrap())
            .chunks(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect()
    };
    for (name, model, ad) in &cases {
        let gguf = GgufModel::open(model).unwrap();
        let want = logits(name);
        let opts = kestrel_generate::LogitsOptions {
            threads: 2,
            lora: ad.clone(),
            ..Default::default()
        };
        let got = kestrel_generate::logits_of_ids(&gguf, &prompt, &opts).unwrap();
        let got = got.last().unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        let d = nmse(&want, got);
        let top = |x: &[f32]| {
            let mut i: Vec<usize> = (0..x.len()).collect();
            i.sort_by(|&a, &b| x[b].total_cmp(&x[a]));
            (i[0], x[i[0]] - x[i[1]])
        };
        let ((wi, gap), (gi, _)) = (top(&want), top(got));
        let none = if name.contains("scaled") {
            "qwen3moe-scaled-none"
        } else {
            "qwen3moe-none"
        };
        let effect = nmse(&logits(none), got);
        eprintln!("{name}: NMSE {d:.2e} against llama.cpp (adapters' effect {effect:.2e}), top {gi} (llama.cpp {wi}, gap {gap:.3})");
        assert!(d <= 1e-6, "{name}: NMSE {d} against llama.cpp");
        if !ad.is_empty() {
            assert!(
                effect > 1e-4,
                "{name}: the adapters changed the logits by {effect}"
            );
        }
        assert!(
            gap < 1e-3 || wi == gi,
            "{name}: top token {gi}, llama.cpp's {wi}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn expert_adapters_that_do_not_fit_are_refused() {
    let dir = temp_dir("experts-bad");
    let model = base(&dir);
    let refuse = |targets: &[(&str, u64, u64, u64)], want: &str| {
        let path = dir.join("bad.gguf");
        adapter(&path, Some(8.0), 4, targets, 5, GgmlType::F32, 0.2);
        let err = generator(&model, &[(path, 1.0)]).unwrap_err();
        assert!(err.contains(want), "{err:?} should say {want:?}");
    };
    // One pair per expert of another model (three experts), and a 2-d pair on an expert weight.
    refuse(&[("blk.0.ffn_up_exps.weight", 256, 384, 3)], "do not fit");
    refuse(&[("blk.0.ffn_up_exps.weight", 256, 384, 0)], "do not fit");
    // A 3-d pair on a plain matrix.
    refuse(&[("blk.0.attn_q.weight", 256, 256, EXPERTS)], "do not fit");
    let _ = std::fs::remove_dir_all(&dir);
}
