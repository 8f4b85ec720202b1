//! Prompt-lookup speculative decoding gives exactly greedy decoding's ids, in fewer forward
//! passes on a repetitive prompt.

use std::sync::Arc;
use std::time::Instant;

use kestrel_generate::{Generator, GeneratorOptions, LookupOptions};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_gguf::GgufModel;
use kestrel_tokenizer::EncodeOptions;

fn lookup_equals_greedy(file: &str) {
    let Some(path) = test_model(file) else { return };
    let model = Arc::new(GgufModel::open(path).unwrap());
    let opts = GeneratorOptions {
        threads: 2,
        ctx: 512,
        ..GeneratorOptions::default()
    };
    let mut g = Generator::new(model, opts).unwrap();
    let text = "fn add(a: i32, b: i32) -> i32 { a + b }\nfn sub(a: i32, b: i32) -> i32 { a - b }\nfn mul(a: i32, b: i32) -> i32 { a * b }\nfn div(a: i32, b: i32) -> i32 { a / b }\nfn add(a: i32, b: i32) -> i32 {";
    let prompt = g
        .tokenizer()
        .unwrap()
        .encode(text, EncodeOptions::default())
        .unwrap();
    let n = 64;
    let t = Instant::now();
    let plain = g.generate_ids(&prompt, n, &mut |_| Ok(true)).unwrap();
    let t_plain = t.elapsed();
    let t = Instant::now();
    let (spec, stats) = g
        .generate_lookup(&prompt, n, LookupOptions::default(), &mut |_| Ok(true))
        .unwrap();
    let t_spec = t.elapsed();
    assert_eq!(spec.ids, plain.ids, "{file}");
    eprintln!(
        "{file}: {} tokens in {} passes (plain {}), acceptance {:.2} ({} of {}), {:.2}x ({t_plain:?} -> {t_spec:?})",
        spec.ids.len(),
        stats.passes,
        plain.ids.len().saturating_sub(1),
        stats.acceptance(),
        stats.accepted,
        stats.drafted,
        t_plain.as_secs_f64() / t_spec.as_secs_f64()
    );
    assert!(stats.passes < spec.ids.len() - 1, "{stats:?}");
    // A one-token budget, and a stop by the callback, behave as in plain decoding.
    let (one, _) = g
        .generate_lookup(&prompt, 1, LookupOptions::default(), &mut |_| Ok(true))
        .unwrap();
    assert_eq!(one.ids, plain.ids[..1]);
    let mut seen = 0;
    let (cut, _) = g
        .generate_lookup(&prompt, n, LookupOptions::default(), &mut |_| {
            seen += 1;
            Ok(seen < 10)
        })
        .unwrap();
    assert_eq!(cut.ids, plain.ids[..10]);
}

#[test]
fn lookup_equals_greedy_smollm2() {
    lookup_equals_greedy(SMOLLM2_135M_Q4_1);
}

#[test]
fn lookup_equals_greedy_gemma3() {
    lookup_equals_greedy(GEMMA3_270M_Q4_K_M);
}

/// A draft model with the target's own weights agrees with every token: greedy ids, almost all
/// drafts accepted, and both caches stay in step across rollbacks.
#[test]
fn draft_model_gives_greedy_ids() {
    let Some(path) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let model = Arc::new(GgufModel::open(path).unwrap());
    let opts = GeneratorOptions {
        threads: 2,
        ctx: 256,
        ..GeneratorOptions::default()
    };
    let mut target = Generator::new(model.clone(), opts.clone()).unwrap();
    let mut draft = Generator::new(model, opts).unwrap();
    let prompt = target
        .tokenizer()
        .unwrap()
        .encode(
            "The history of the printing press",
            EncodeOptions::default(),
        )
        .unwrap();
    let plain = target.generate_ids(&prompt, 40, &mut |_| Ok(true)).unwrap();
    let (spec, stats) = target
        .generate_speculative(&mut draft, &prompt, 40, 6, &mut |_| Ok(true))
        .unwrap();
    assert_eq!(spec.ids, plain.ids);
    eprintln!(
        "self-draft: {stats:?}, acceptance {:.2}",
        stats.acceptance()
    );
    assert!(stats.acceptance() > 0.9, "{stats:?}");
    assert!(stats.passes * 3 < spec.ids.len(), "{stats:?}");
}

/// Sampled speculation: with a draft identical to the target nearly every draft is kept, and
/// the output is a valid sample (deterministic for a seed); prompt lookup under sampling runs
/// and keeps the budget. Distribution-level exactness is tested in kestrel-sampling.
#[test]
fn sampled_speculation_runs_and_an_identical_draft_is_always_accepted() {
    use kestrel_sampling::SamplingConfig;
    let Some(path) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let load = || {
        let opts = GeneratorOptions {
            threads: 2,
            ctx: 256,
            ..GeneratorOptions::default()
        };
        Generator::new(Arc::new(GgufModel::open(&path).unwrap()), opts).unwrap()
    };
    let mut target = load();
    let mut draft = load();
    let prompt = target
        .tokenizer()
        .unwrap()
        .encode(
            "Once upon a time, in a land far away,",
            EncodeOptions::default(),
        )
        .unwrap();
    let cfg = SamplingConfig {
        temperature: 0.8,
        top_k: 40,
        seed: Some(5),
        max_new_tokens: 32,
        ..Default::default()
    };
    let (a, stats) = target
        .generate_speculative_sampled(&mut draft, &prompt, &cfg, 4, &mut |_| Ok(true))
        .unwrap();
    assert!(!a.ids.is_empty() && a.ids.len() <= 32);
    assert!(stats.drafted > 0);
    // identical models: p == q up to the batched and single-row kernels' rounding, so
    // (nearly) every drafted token is kept
    assert!(stats.acceptance() >= 0.9, "{stats:?}");
    let (b, _) = target
        .generate_speculative_sampled(&mut draft, &prompt, &cfg, 4, &mut |_| Ok(true))
        .unwrap();
    assert_eq!(a.ids, b.ids, "the same seed gives the same sample");
    let (c, _) = target
        .generate_lookup_sampled(&prompt, &cfg, LookupOptions::default(), &mut |_| Ok(true))
        .unwrap();
    assert!(!c.ids.is_empty() && c.ids.len() <= 32);
}
