//! The facade's model-level methods on the real models: `info`, `classify`, `embed`,
//! `speculative_generate`, and models loaded through the backend registry.

use kestrel::gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel::{GenerateOptions, LoadOptions, Model};

fn load(file: &str) -> Option<Model> {
    let p = test_model(file)?;
    Some(
        Model::load_file(
            p,
            LoadOptions {
                threads: 2,
                ctx: 512,
                ..Default::default()
            },
        )
        .unwrap(),
    )
}

#[test]
fn info_describes_both_models() {
    let Some(s) = load(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let i = s.info();
    assert_eq!(
        (
            i.architecture.as_str(),
            i.layers,
            i.hidden_size,
            i.heads,
            i.kv_heads
        ),
        ("llama", 30, 576, 9, 3)
    );
    assert_eq!((i.vocab_size, i.context_length, i.ctx), (49152, 8192, 512));
    assert_eq!((i.quant.as_str(), i.group_size), ("Q4_1", 32));
    assert!(
        i.bits_per_weight > 4.5 && i.bits_per_weight < 7.0,
        "{}",
        i.bits_per_weight
    );
    assert!(
        i.parameters > 130_000_000 && i.parameters < 140_000_000,
        "{}",
        i.parameters
    );
    let Some(g) = load(GEMMA3_270M_Q4_K_M) else {
        return;
    };
    let i = g.info();
    assert_eq!(
        (i.architecture.as_str(), i.layers, i.hidden_size),
        ("gemma3", 18, 640)
    );
    assert_eq!(i.vocab_size, 262144);
}

#[test]
fn classify_is_the_greedy_next_token() {
    let Some(mut m) = load(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let prompts = ["The capital of France is", "1, 2, 3, 4,"];
    let c = m.classify(&prompts, true).unwrap();
    assert_eq!(c.len(), 2);
    for (p, c) in prompts.iter().zip(&c) {
        let g = m
            .generate(p, &GenerateOptions::greedy().with_max_tokens(1))
            .unwrap();
        assert_eq!(c.token, g.ids[0], "{p}");
        let logits = c.logits.as_ref().unwrap();
        assert_eq!(logits.len(), 49152);
        let best = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(logits[c.token as usize], best);
        assert!(!c.text.is_empty());
    }
    assert!(m.classify(&["x"], false).unwrap()[0].logits.is_none());
}

#[test]
fn embeddings_are_normalized_and_deterministic() {
    let Some(mut m) = load(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let a = m.embed("The cat sat on the mat.").unwrap();
    let b = m.embed("The cat sat on the mat.").unwrap();
    let c = m.embed("Quarterly revenue grew by eight percent.").unwrap();
    assert_eq!(a.len(), 576);
    let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
    assert!((dot(&a, &a) - 1.0).abs() < 1e-4);
    assert_eq!(a, b);
    assert!(dot(&a, &c) < 0.999);
    // a longer text than one prefill chunk is pooled over every token
    let long = "word ".repeat(300);
    let l = m.embed(&long).unwrap();
    assert!((dot(&l, &l) - 1.0).abs() < 1e-4);
    // generation still works after embedding (the cache was reset)
    let g1 = m
        .generate("Hello", &GenerateOptions::greedy().with_max_tokens(5))
        .unwrap();
    let mut fresh = load(SMOLLM2_135M_Q4_1).unwrap();
    let g2 = fresh
        .generate("Hello", &GenerateOptions::greedy().with_max_tokens(5))
        .unwrap();
    assert_eq!(g1.ids, g2.ids);
}

#[test]
fn speculative_generate_equals_greedy() {
    let Some(mut target) = load(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let mut draft = load(SMOLLM2_135M_Q4_1).unwrap();
    let opts = GenerateOptions::greedy().with_max_tokens(24);
    let plain = target.generate("Once upon a time", &opts).unwrap();
    let spec = target
        .speculative_generate(&mut draft, "Once upon a time", 4, &opts)
        .unwrap();
    assert_eq!(spec.ids, plain.ids);
}

#[test]
fn backends_load_through_the_registry() {
    let Some(p) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let names: Vec<String> = kestrel::backend::backends()
        .iter()
        .map(|b| b.name().to_string())
        .collect();
    assert!(
        names.contains(&"cpu".to_string()) && names.contains(&"cuda".to_string()),
        "{names:?}"
    );
    let opts = LoadOptions {
        threads: 2,
        ctx: 256,
        ..Default::default()
    };
    let mut m = kestrel::backend::load_model(&p, None, &opts).unwrap();
    assert_eq!(m.info().architecture, "llama");
    let out = m
        .generate("Hello", &GenerateOptions::greedy().with_max_tokens(3))
        .unwrap();
    assert_eq!(out.ids.len(), 3);
    assert_eq!(m.metrics().generated_tokens, 3);
    let e = kestrel::backend::load_model(&p, Some("cuda:0"), &opts)
        .err()
        .unwrap();
    assert!(e.to_string().contains("not available"), "{e}");
    assert!(kestrel::backend::load_model(&p, Some("tpu"), &opts).is_err());
}

#[test]
fn a_session_pool_keeps_two_conversations_cached() {
    let Some(p) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let a = "The history of the city of Lyon begins with the Roman colony of Lugdunum, founded in 43 BC on the hill of Fourvière.";
    let b = "Photosynthesis is the process by which green plants use sunlight, water and carbon dioxide to make glucose.";
    let opts = GenerateOptions::greedy().with_max_tokens(4);
    let cached_on_return = |pool: usize| {
        let mut m = Model::load_file(
            &p,
            LoadOptions::default()
                .with_threads(2)
                .with_max_seq_len(256)
                .with_session_pool(pool),
        )
        .unwrap();
        let first = m.generate(a, &opts).unwrap();
        m.generate(b, &opts).unwrap();
        // Back to the first conversation, extended by what the model said.
        let again = format!("{a}{}", first.text);
        let out = m.generate(&again, &opts).unwrap();
        (
            out.metrics.cached_tokens,
            out.metrics.prompt_tokens,
            m.sessions(),
        )
    };
    let (cached, prompt, sessions) = cached_on_return(2);
    assert_eq!(sessions, (2, 2));
    assert!(
        cached + 6 >= prompt && cached > 20,
        "pool of 2: {cached} of {prompt} prompt tokens cached"
    );
    let (cached1, _, sessions1) = cached_on_return(1);
    assert_eq!(sessions1, (1, 1));
    assert!(cached1 < 5, "pool of 1: {cached1} cached");
    assert!(Model::load_file(&p, LoadOptions::default().with_session_pool(0)).is_err());
}

#[test]
fn devices_are_resolved_or_refused_with_the_reason() {
    let Some(p) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let with = |device: &str| {
        Model::load_file(
            &p,
            LoadOptions::default()
                .with_threads(2)
                .with_max_seq_len(64)
                .with_device(device),
        )
    };
    let e = with("tpu").err().unwrap().to_string();
    assert!(e.contains("tpu") && e.contains("cuda:N"), "{e}");
    // Without a GPU (as in CI) `cuda` names what is missing and `auto` falls back to the CPU,
    // saying why; with one, both run there.
    match kestrel::tensor::cuda::device_count() {
        Ok(n) if n > 0 => {
            let m = with("auto").unwrap();
            assert_eq!(m.device(), kestrel::tensor::Device::Cuda(0));
            assert!(m.device_note().is_none());
        }
        _ => {
            // The build, the driver or the GPU: whichever is missing is named.
            let e = with("cuda").err().unwrap().to_string().to_lowercase();
            assert!(
                e.contains("cuda")
                    && (e.contains("feature") || e.contains("driver") || e.contains("device")),
                "{e}"
            );
            let m = with("auto").unwrap();
            assert_eq!(m.device(), kestrel::tensor::Device::Cpu);
            let note = m.device_note().unwrap();
            assert!(note.contains("CPU"), "{note}");
            assert!(with("cuda:3").is_err());
        }
    }
    assert_eq!(with("cpu").unwrap().device(), kestrel::tensor::Device::Cpu);
}
