//! LoRA adapters applied on top of a model (not merged) against the same adapters merged into
//! the weights (`export_merged`, llama-export-lora's arithmetic): a synthetic F32 llama and
//! random adapters written by kestrel's GGUF writer, one and two at once with different scales,
//! every adapted kind of weight (attention, feed-forward, output, token embedding). The merged
//! file is F32 here, so the two differ only by float order (and the f16 rounding of an F16
//! `lora_b`'s input). Also: bad adapters are refused with
//! the reason, and the batched scheduler applies adapters as a single sequence does.

mod lora_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kestrel_arch::synthetic::{synthetic_model, SYNTHETIC_VOCAB};
use kestrel_arch::{export_merged, LoraAdapter};
use kestrel_generate::{BatchOptions, BatchRequest, GenerateParams, Generator};
use kestrel_gguf::{GgmlType, GgufModel, GgufWriter};
use lora_common::{adapter, base, base64, generator, temp_dir};

const IDS: [u32; 12] = [1, 17, 200, 3, 99, 42, 7, 128, 5, 61, 33, 250];

fn nmse(want: &[f32], got: &[f32]) -> f64 {
    let num: f64 = want
        .iter()
        .zip(got)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
        .sum();
    let den: f64 = want.iter().map(|&a| f64::from(a).powi(2)).sum();
    num / den
}

/// Last-position logits after `IDS` (prefilled in chunks of 8), then after two steps.
fn run(g: &mut Generator) -> Vec<Vec<f32>> {
    let mut out = vec![g.prefill(&IDS).unwrap().to_vec()];
    for t in [9u32, 77] {
        out.push(g.step(t).unwrap().to_vec());
    }
    out
}

const TARGETS: [(&str, usize, usize); 6] = [
    ("blk.0.attn_q.weight", 64, 64),
    ("blk.0.attn_v.weight", 64, 32),
    ("blk.1.attn_output.weight", 64, 64),
    ("blk.1.ffn_down.weight", 128, 64),
    ("output.weight", 64, SYNTHETIC_VOCAB),
    ("token_embd.weight", 64, SYNTHETIC_VOCAB),
];

#[test]
fn adapters_on_top_match_adapters_merged_in() {
    let dir = temp_dir("merge");
    let model = base(&dir, "llama");
    let one = dir.join("one.gguf");
    let two = dir.join("two.gguf");
    adapter(
        &one,
        "llama",
        Some(8.0),
        4,
        &TARGETS,
        11,
        GgmlType::F32,
        0.2,
    );
    // No alpha (the scale alone), rank 2, B in F16, a subset of the weights.
    adapter(
        &two,
        "llama",
        None,
        2,
        &TARGETS[1..4],
        12,
        GgmlType::F16,
        0.2,
    );
    let plain = run(&mut generator(&model, &[]).unwrap());
    for set in [
        vec![(one.clone(), 1.0)],
        vec![(one.clone(), 0.5), (two.clone(), 1.5)],
        vec![(two.clone(), -0.75)],
    ] {
        let on_top = run(&mut generator(&model, &set).unwrap());
        let merged_path = dir.join("merged.gguf");
        let base_model = GgufModel::open(&model).unwrap();
        let loaded: Vec<_> = set
            .iter()
            .map(|(p, s)| (Arc::new(LoraAdapter::open(p).unwrap()), *s))
            .collect();
        let report = export_merged(&base_model, &loaded, &merged_path).unwrap();
        assert_eq!(
            report.merged,
            if set.len() == 1 && set[0].0 == two {
                3
            } else {
                6
            }
        );
        let merged = run(&mut generator(&merged_path, &[]).unwrap());
        // F32 pairs differ from the merged file by float order alone; an F16 `lora_b` is read,
        // as ggml reads every F16 weight, with its input rounded to f16 (the second adapter).
        let bound = if set.iter().any(|(p, _)| *p == two) {
            1e-6
        } else {
            1e-10
        };
        for (step, ((w, g), p)) in merged.iter().zip(&on_top).zip(&plain).enumerate() {
            let d = nmse(w, g);
            assert!(
                d < bound,
                "{set:?} step {step}: NMSE {d} against the merged file"
            );
            // The adapters do change the logits.
            assert!(nmse(p, g) > 1e-4, "{set:?} step {step}: no effect");
        }
    }
    // Scale 0 is the base model.
    let zero = run(&mut generator(&model, &[(one.clone(), 0.0)]).unwrap());
    for (z, p) in zero.iter().zip(&plain) {
        assert!(nmse(p, z) < 1e-12);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn adapters_that_do_not_fit_are_refused_with_the_reason() {
    let dir = temp_dir("bad");
    let model = base(&dir, "llama");
    let refuse = |adapters: &[(PathBuf, f32)], want: &str| {
        let err = generator(&model, adapters).unwrap_err();
        assert!(err.contains(want), "{err:?} should say {want:?}");
    };
    let other = dir.join("qwen.gguf");
    adapter(
        &other,
        "qwen2",
        Some(4.0),
        2,
        &TARGETS[..1],
        1,
        GgmlType::F32,
        0.2,
    );
    refuse(&[(other, 1.0)], "it is for \"qwen2\"");
    let missing = dir.join("missing.gguf");
    adapter(
        &missing,
        "llama",
        Some(4.0),
        2,
        &[("blk.7.attn_q.weight", 64, 64)],
        1,
        GgmlType::F32,
        0.2,
    );
    refuse(
        &[(missing, 1.0)],
        "blk.7.attn_q.weight is not a tensor of the model",
    );
    let shape = dir.join("shape.gguf");
    adapter(
        &shape,
        "llama",
        Some(4.0),
        2,
        &[("blk.0.attn_q.weight", 64, 48)],
        1,
        GgmlType::F32,
        0.2,
    );
    refuse(&[(shape, 1.0)], "do not fit it");
    let plain_model = dir.join("plain.gguf");
    synthetic_model("llama", 1)
        .unwrap()
        .write_file(&plain_model)
        .unwrap();
    refuse(&[(plain_model, 1.0)], "general.type is \"\"");
    let half_pair = dir.join("half.gguf");
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama");
    w.add_metadata("general.type", "adapter");
    w.add_metadata("adapter.type", "lora");
    w.add_f32_tensor("blk.0.attn_q.weight.lora_a", &[64, 2], &[0.0; 128])
        .unwrap();
    w.write_file(&half_pair).unwrap();
    refuse(&[(half_pair, 1.0)], "only one of lora_a and lora_b");
    refuse(&[(dir.join("nope.gguf"), 1.0)], "nope.gguf");
    // Gemma 3 ties its output to the embedding: an embedding adapter is refused there.
    let gemma = base(&dir, "gemma3");
    let tied = dir.join("tied.gguf");
    adapter(
        &tied,
        "gemma3",
        Some(4.0),
        2,
        &[("token_embd.weight", 64, SYNTHETIC_VOCAB)],
        1,
        GgmlType::F32,
        0.2,
    );
    let err = generator(&gemma, &[(tied, 1.0)]).unwrap_err();
    assert!(err.contains("tied output"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_scheduler_applies_adapters_as_a_single_sequence_does() {
    let dir = temp_dir("batch");
    let model = base(&dir, "llama");
    let one = dir.join("one.gguf");
    adapter(
        &one,
        "llama",
        Some(8.0),
        4,
        &TARGETS,
        21,
        GgmlType::F32,
        0.2,
    );
    let mut g = generator(&model, &[(one, 1.0)]).unwrap();
    let prompts: Vec<Vec<u32>> = (0..3u32)
        .map(|i| (0..4 + 3 * i).map(|j| (j * 29 + i * 5 + 3) % 256).collect())
        .collect();
    let alone: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            let mut s = g.new_session().unwrap();
            let mut ids = Vec::new();
            let mut logits = g.prefill_in(&mut s, p).unwrap().to_vec();
            for _ in 0..6 {
                let next = (0..logits.len())
                    .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                    .unwrap() as u32;
                ids.push(next);
                logits = g.step_in(&mut s, next).unwrap().to_vec();
            }
            ids
        })
        .collect();
    let requests = prompts
        .iter()
        .map(|p| BatchRequest {
            prompt: p.clone(),
            params: GenerateParams::greedy(6),
        })
        .collect();
    let out = g
        .batch_generate(requests, &BatchOptions::default())
        .unwrap();
    for (i, (want, got)) in alone.iter().zip(&out).enumerate() {
        let got = &got.as_ref().unwrap().ids;
        assert_eq!(got[..], want[..got.len()], "request {i}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- against llama.cpp -------------------------------------------------------------------

/// The prompt of the llama.cpp comparisons.
const PROMPT: [u32; 16] = [
    1, 504, 3458, 314, 2277, 28, 253, 1345, 40, 9123, 30, 2, 77, 600, 1200, 5,
];

/// A comparison case: the model, its adapters with scales, the prompt.
struct Case {
    name: &'static str,
    model: PathBuf,
    adapters: Vec<(PathBuf, f32)>,
    prompt: Vec<u32>,
}

/// Every `blk.*` matmul weight of `model` named in `kinds`, as `(name, in, out)`.
fn matmul_targets(model: &Path, kinds: &[&str]) -> Vec<(String, usize, usize)> {
    let m = GgufModel::open(model).unwrap();
    let mut out: Vec<(String, usize, usize)> = m
        .tensors()
        .filter(|t| {
            let n = t.info.name();
            n.starts_with("blk.") && kinds.iter().any(|k| n.ends_with(&format!(".{k}.weight")))
        })
        .map(|t| {
            let d = t.info.dims();
            (t.info.name().to_string(), d[0] as usize, d[1] as usize)
        })
        .collect();
    out.sort();
    out
}

/// The cases: SmolLM2 (real, Q4_1, tied output) with one adapter on every attention and
/// feed-forward matrix, then with a second one (no alpha, F16 `lora_b`) at a negative scale;
/// the synthetic F32 llama with adapters on its output and token embedding too.
///
/// The SmolLM2 adapters' values are within ±0.02 (their product changes the logits by NMSE
/// ~4e-4). Much larger random adapters on every layer put this quantized model where the
/// q8 rounding of activations turns ulp-level differences into visible ones: at ±0.05,
/// scaling the adapter by 1.0001 moves kestrel's own logits by NMSE 1e-4, and kestrel and
/// llama.cpp (whose F32 matmuls sum in tinyBLAS's lane order, kestrel's in ggml's block order)
/// differ by 2e-4; at ±0.01 and ±0.02 they agree to the golden file's f16 rounding.
fn cases(dir: &Path) -> Vec<Case> {
    let mut out = Vec::new();
    if let Some(smollm) = kestrel_gguf::models::test_model(kestrel_gguf::models::SMOLLM2_135M_Q4_1)
    {
        let all = matmul_targets(
            &smollm,
            &[
                "attn_q",
                "attn_k",
                "attn_v",
                "attn_output",
                "ffn_gate",
                "ffn_up",
                "ffn_down",
            ],
        );
        let some = matmul_targets(&smollm, &["attn_v", "ffn_down"]);
        fn refs(t: &[(String, usize, usize)]) -> Vec<(&str, usize, usize)> {
            t.iter().map(|(n, k, m)| (n.as_str(), *k, *m)).collect()
        }
        let a = dir.join("smollm2-a.gguf");
        let b = dir.join("smollm2-b.gguf");
        adapter(
            &a,
            "llama",
            Some(16.0),
            8,
            &refs(&all),
            31,
            GgmlType::F32,
            0.02,
        );
        adapter(&b, "llama", None, 4, &refs(&some), 32, GgmlType::F16, 0.02);
        // The base model alone: how far the two engines are apart without adapters.
        out.push(Case {
            name: "smollm2-none",
            model: smollm.clone(),
            adapters: Vec::new(),
            prompt: PROMPT.to_vec(),
        });
        out.push(Case {
            name: "smollm2-one",
            model: smollm.clone(),
            adapters: vec![(a.clone(), 1.0)],
            prompt: PROMPT.to_vec(),
        });
        out.push(Case {
            name: "smollm2-two",
            model: smollm,
            adapters: vec![(a, 0.5), (b, -1.25)],
            prompt: PROMPT.to_vec(),
        });
    }
    let synth = base(dir, "llama");
    let s = dir.join("synth-a.gguf");
    adapter(&s, "llama", Some(8.0), 4, &TARGETS, 33, GgmlType::F32, 0.2);
    out.push(Case {
        name: "synthetic-llama",
        model: synth,
        adapters: vec![(s, 0.8)],
        prompt: PROMPT.iter().map(|&t| t % SYNTHETIC_VOCAB as u32).collect(),
    });
    out
}

/// kestrel's last-position logits with the adapters (as `kestrel logits --lora-scaled`) against
/// llama.cpp b11434's (`fixtures/lora/golden.json`, from `make_lora_golden.py`): NMSE ≤ 1e-6
/// (the issue asks 1e-4; the golden file's f16 rounding alone is 4.5e-8, and reading an F16
/// half's input unrounded, unlike ggml, already costs 8e-5 on the two-adapter case) and the
/// same top token wherever llama.cpp's top two are 1e-3 apart. With `KESTREL_LORA_OUT=DIR`
/// the files and `cases.json` are written there for the script instead.
#[test]
fn adapters_match_llama_cpp() {
    let out_dir = std::env::var_os("KESTREL_LORA_OUT").map(PathBuf::from);
    let dir = out_dir.clone().unwrap_or_else(|| temp_dir("llama"));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = cases(&dir);
    if out_dir.is_some() {
        let spec: serde_json::Map<String, serde_json::Value> = cases
            .iter()
            .map(|c| {
                let ad: Vec<serde_json::Value> = c
                    .adapters
                    .iter()
                    .map(|(p, s)| serde_json::json!([p, s]))
                    .collect();
                (
                    c.name.to_string(),
                    serde_json::json!({ "model": c.model, "adapters": ad, "prompt": c.prompt }),
                )
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
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lora/golden.json"),
        )
        .unwrap(),
    )
    .unwrap();
    for c in &cases {
        let rec = &golden["cases"][c.name];
        let want: Vec<f32> = base64(rec["logits_f16"].as_str().unwrap())
            .chunks(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect();
        let model = GgufModel::open(&c.model).unwrap();
        let opts = kestrel_generate::LogitsOptions {
            threads: 2,
            lora: c.adapters.clone(),
            ..Default::default()
        };
        let got = kestrel_generate::logits_of_ids(&model, &c.prompt, &opts).unwrap();
        let got = got.last().unwrap();
        assert_eq!(got.len(), want.len(), "{}", c.name);
        let d = nmse(&want, got);
        let top = |x: &[f32]| {
            let mut i: Vec<usize> = (0..x.len()).collect();
            i.sort_by(|&a, &b| x[b].total_cmp(&x[a]));
            (i[0], x[i[0]] - x[i[1]])
        };
        let ((wi, gap), (gi, _)) = (top(&want), top(got));
        eprintln!(
            "{}: NMSE {d:.2e} against llama.cpp, top {gi} (llama.cpp {wi}, gap {gap:.3})",
            c.name
        );
        assert!(d <= 1e-6, "{}: NMSE {d} against llama.cpp", c.name);
        if c.name.starts_with("smollm2-") && !c.adapters.is_empty() {
            // The adapters do move the logits, far past the engines' distance.
            let none: Vec<f32> = base64(
                golden["cases"]["smollm2-none"]["logits_f16"]
                    .as_str()
                    .unwrap(),
            )
            .chunks(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect();
            let effect = nmse(&none, got);
            assert!(
                effect > 1e-4,
                "{}: the adapters changed the logits by NMSE {effect}",
                c.name
            );
        }
        assert!(
            gap < 1e-3 || wi == gi,
            "{}: top token {gi}, llama.cpp's {wi}",
            c.name
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
