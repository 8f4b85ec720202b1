//! kestrel against llama.cpp on the real test models: greedy continuations, last-position top-1
//! and logits. The reference data is in `tests/fixtures/golden/` (see its README: llama.cpp
//! b11434 through `make_golden.py`).
//!
//! The targets ([`TARGET`]: continuations part only at ties within 1e-3,
//! full-vocabulary logits within 0.05) are met since 2026-11-23 (every logit of every step
//! bit-identical on all 14 prompts of both models), so the always-run `golden_fast` (3 prompts
//! per model: the ones with stored full logits) asserts them, as do `golden_all_prompts` and
//! `golden_strict` (all 14, ignored for time: `cargo test --release -p kestrel-generate --test golden --
//! --ignored`). Every run prints the measured figures;
//! `GOLDEN_STEPS=1` also prints the largest logit difference at each decode step.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kestrel_generate::{Generator, GeneratorOptions};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_gguf::GgufModel;
use kestrel_tokenizer::{EncodeOptions, Tokenizer, TokenizerOptions};
use serde_json::Value;

/// How close kestrel must be to llama.cpp.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    /// Where the continuations part (or the last-position top-1 differs), the two candidates'
    /// logits must be within this of each other in llama.cpp's logits and in kestrel's: a tie,
    /// where either pick is right.
    tie: f32,
    /// Max abs difference between kestrel's and llama.cpp's full last-position logits.
    logits: f32,
}

/// Most KL divergence (nats) of kestrel's last-position token distribution from llama.cpp's
/// at any prompt with stored full logits: what the aarch64 kernels (run under qemu in CI, in
/// x86's float order but with scalar attention and elementwise ops) must keep to.
const MAX_KLD: f64 = 0.002;

/// `KL(P || Q)` of the softmax distributions of `p` and `q` (logits), in f64.
fn kl_divergence(p: &[f32], q: &[f32]) -> f64 {
    fn log_softmax(x: &[f32]) -> Vec<f64> {
        let max = x
            .iter()
            .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
        let lse = x
            .iter()
            .map(|&v| (f64::from(v) - max).exp())
            .sum::<f64>()
            .ln()
            + max;
        x.iter().map(|&v| f64::from(v) - lse).collect()
    }
    log_softmax(p)
        .into_iter()
        .zip(log_softmax(q))
        .map(|(lp, lq)| lp.exp() * (lp - lq))
        .sum::<f64>()
        .max(0.0)
}

/// The criteria.
const TARGET: Bounds = Bounds {
    tie: 1e-3,
    logits: 0.05,
};

/// Gemma 3 270M now: every logit of every step of all 14 prompts bit-identical to llama.cpp's
/// (since 2026-11-23), so the guard is the target itself.
fn gemma3_now() -> Bounds {
    TARGET
}

/// SmolLM2 135M now: as Gemma, all 14 prompts bit-identical at every step.
fn smollm2_now() -> Bounds {
    TARGET
}

/// Prompts checked by the always-run test: the ones with stored full logits.
const FAST: &[&str] = &["prose", "code", "french"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden")
}

struct Prompt {
    name: String,
    text: String,
}

fn prompts() -> Vec<Prompt> {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("prompts.json")).unwrap())
            .unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| Prompt {
            name: p["name"].as_str().unwrap().to_string(),
            text: p["text"].as_str().unwrap().to_string(),
        })
        .collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// `[[id, logit], ...]`
fn pairs(v: &Value) -> Vec<(u32, f32)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32))
        .collect()
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// What one prompt gave.
struct PromptResult {
    name: String,
    /// Leading generated ids equal to llama.cpp's.
    matched: usize,
    /// At the first difference: (step, kestrel's id, llama.cpp's id, llama.cpp's gap, kestrel's gap).
    parted: Option<(usize, u32, u32, f32, f32)>,
    /// Max abs logit difference over llama.cpp's top-20 at the last prompt position.
    top20_diff: f32,
    /// Max abs logit difference over the vocabulary, for prompts with stored full logits.
    full_diff: Option<f32>,
    /// KL divergence of kestrel's last-position distribution from llama.cpp's, for prompts
    /// with stored full logits.
    kld: Option<f64>,
    /// Max abs difference over llama.cpp's top-5 at each decode step while the ids agree.
    steps_diff: f32,
}

/// Compare every selected prompt of one model; return the failures (empty: pass).
fn check_model(file: &str, key: &str, only: Option<&[&str]>, bounds: Bounds) -> Vec<String> {
    let Some(path) = test_model(file) else {
        return Vec::new();
    };
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join(format!("{key}.json"))).unwrap(),
    )
    .unwrap();
    let model = Arc::new(GgufModel::open(&path).unwrap());
    let tokenizer =
        Tokenizer::from_metadata(&model.metadata(), TokenizerOptions::default()).unwrap();
    let mut gen = Generator::new(
        model,
        GeneratorOptions {
            threads: 2,
            ctx: 512,
            ..GeneratorOptions::default()
        },
    )
    .unwrap();
    let texts = prompts();
    let mut failures = Vec::new();
    let mut results = Vec::new();
    for g in golden["prompts"].as_array().unwrap() {
        let name = g["name"].as_str().unwrap();
        if only.is_some_and(|o| !o.contains(&name)) {
            continue;
        }
        let text = &texts.iter().find(|p| p.name == name).unwrap().text;
        let prompt_ids = tokenizer
            .encode(
                text,
                EncodeOptions::default()
                    .add_special(true)
                    .parse_special(false),
            )
            .unwrap();
        if prompt_ids != ids(&g["prompt_ids"]) {
            failures.push(format!(
                "{key}/{name}: prompt ids differ from llama_tokenize's: {prompt_ids:?} vs {:?}",
                ids(&g["prompt_ids"])
            ));
            continue;
        }
        let want = ids(&g["ids"]);
        let steps: Vec<Vec<(u32, f32)>> =
            g["steps"].as_array().unwrap().iter().map(pairs).collect();
        let top20 = pairs(&g["top20"]);

        let logits = gen.prefill(&prompt_ids).unwrap().to_vec();
        let top20_diff = top20
            .iter()
            .map(|&(id, l)| (logits[id as usize] - l).abs())
            .fold(0f32, f32::max);
        let top1 = argmax(&logits);
        if top1 != top20[0].0 {
            let llama_gap = top20
                .iter()
                .find(|p| p.0 == top1)
                .map_or(f32::INFINITY, |p| top20[0].1 - p.1);
            let our_gap = logits[top1 as usize] - logits[top20[0].0 as usize];
            eprintln!(
                "{key}/{name}: TOP-1 DIFFERS at the last prompt position: kestrel {top1}, llama.cpp {}; gaps: llama.cpp {llama_gap:.5}, kestrel {our_gap:.5}",
                top20[0].0
            );
            if llama_gap > bounds.tie || our_gap > bounds.tie {
                failures.push(format!(
                    "{key}/{name}: last-position top-1 is {top1}, llama.cpp's is {}; their logits differ by {llama_gap:.5} in llama.cpp, {our_gap:.5} in kestrel: more than the tie margin {}",
                    top20[0].0, bounds.tie
                ));
            }
        }
        let mut kld = None;
        let full_diff = g.get("full_logits").and_then(Value::as_str).map(|f| {
            let reference = read_f32(&fixtures().join(f));
            assert_eq!(
                reference.len(),
                logits.len(),
                "{key}/{name}: vocabulary size"
            );
            let d = logits
                .iter()
                .zip(&reference)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            if d >= bounds.logits {
                failures.push(format!(
                    "{key}/{name}: max abs logit difference {d:.4} over the vocabulary, bound {}",
                    bounds.logits
                ));
            }
            let k = kl_divergence(&reference, &logits);
            if k > MAX_KLD {
                failures.push(format!(
                    "{key}/{name}: KL divergence {k:.6} from llama.cpp's last-position distribution, bound {MAX_KLD}"
                ));
            }
            kld = Some(k);
            d
        });

        // Greedy, 32 steps, comparing each id with llama.cpp's.
        let mut cur = logits;
        let mut matched = 0;
        let mut parted = None;
        let mut steps_diff = 0f32;
        for (k, &llama_id) in want.iter().enumerate() {
            let mut sd = 0f32;
            for &(id, l) in &steps[k] {
                sd = sd.max((cur[id as usize] - l).abs());
            }
            if std::env::var_os("GOLDEN_STEPS").is_some() {
                eprintln!("{key}/{name} step {k}: max|d| {sd:.5}");
            }
            steps_diff = steps_diff.max(sd);
            let ours = argmax(&cur);
            if ours != llama_id {
                let llama_gap = steps[k]
                    .iter()
                    .find(|p| p.0 == ours)
                    .map_or(f32::INFINITY, |p| steps[k][0].1 - p.1);
                let our_gap = cur[ours as usize] - cur[llama_id as usize];
                parted = Some((k, ours, llama_id, llama_gap, our_gap));
                if llama_gap > bounds.tie || our_gap > bounds.tie {
                    failures.push(format!(
                        "{key}/{name}: continuations part at step {k} (after {matched} equal ids): \
                         kestrel picks {ours}, llama.cpp {llama_id}; llama.cpp's logits differ by {llama_gap:.5}, \
                         kestrel's by {our_gap:.5}: more than the tie margin {}",
                        bounds.tie
                    ));
                }
                break;
            }
            matched += 1;
            if k + 1 < want.len() {
                cur = gen.step(ours).unwrap().to_vec();
            }
        }
        results.push(PromptResult {
            name: name.to_string(),
            matched,
            parted,
            top20_diff,
            full_diff,
            kld,
            steps_diff,
        });
    }
    report(key, &results);
    failures
}

fn report(key: &str, results: &[PromptResult]) {
    let full = results
        .iter()
        .filter_map(|r| r.full_diff)
        .fold(0f32, f32::max);
    let same = results.iter().filter(|r| r.matched == 32).count();
    eprintln!(
        "=== golden {key}: {same}/{} prompts give llama.cpp's 32 ids; \
         MAX ABS LOGIT DIFF (full vocab, last position) = {full:.4} (target 0.05) ===",
        results.len()
    );
    for r in results {
        let parted = match r.parted {
            None => "identical".to_string(),
            Some((k, a, b, lg, kg)) => {
                format!("part at step {k}: ours {a} vs {b}, llama gap {lg:.5}, kestrel gap {kg:.5}")
            }
        };
        let full = r
            .full_diff
            .map_or(String::new(), |d| format!(", full {d:.4}"));
        let full = match r.kld {
            Some(k) => format!("{full}, KLD {k:.2e}"),
            None => full,
        };
        eprintln!(
            "  {:<11} {:>2}/32 {parted}; max|dlogit| top20 {:.4}{full}, decode steps {:.4}",
            r.name, r.matched, r.top20_diff, r.steps_diff
        );
    }
}

fn check(only: Option<&[&str]>, gemma3: Bounds, smollm2: Bounds) {
    let mut failures = check_model(GEMMA3_270M_Q4_K_M, "gemma3", only, gemma3);
    failures.extend(check_model(SMOLLM2_135M_Q4_1, "smollm2", only, smollm2));
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn golden_fast() {
    check(Some(FAST), gemma3_now(), smollm2_now());
}

/// One prompt a model (with its full logits): the end-to-end check of `cargo xtask test`'s
/// aarch64 step, where each prompt takes ~20 s under qemu (the kernels are checked one by one
/// against their scalar twins there at every feature level).
#[test]
fn golden_one() {
    check(Some(&FAST[..1]), gemma3_now(), smollm2_now());
}

#[test]
#[ignore = "all 14 prompts per model (minutes): run with --ignored"]
fn golden_all_prompts() {
    check(None, gemma3_now(), smollm2_now());
}

#[test]
#[ignore = "the issue's criteria (ties within 1e-3, logits within 0.05), not met yet"]
fn golden_strict() {
    check(None, TARGET, TARGET);
}

#[test]
fn fixtures_are_complete() {
    let p = prompts();
    assert!(p.len() >= 10);
    for key in ["gemma3", "smollm2"] {
        let g: Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures().join(format!("{key}.json"))).unwrap(),
        )
        .unwrap();
        let n_vocab = g["n_vocab"].as_u64().unwrap();
        let gp = g["prompts"].as_array().unwrap();
        assert_eq!(gp.len(), p.len());
        let mut full = 0;
        for (g, p) in gp.iter().zip(&p) {
            assert_eq!(g["name"].as_str().unwrap(), p.name);
            assert_eq!(ids(&g["ids"]).len(), 32);
            assert_eq!(g["steps"].as_array().unwrap().len(), 32);
            assert_eq!(pairs(&g["top20"]).len(), 20);
            if let Some(f) = g.get("full_logits").and_then(Value::as_str) {
                let len = std::fs::metadata(fixtures().join(f)).unwrap().len();
                assert_eq!(len, 4 * n_vocab, "{f}");
                full += 1;
            }
        }
        assert_eq!(full, 3, "{key}: prompts with full logits");
    }
}
