//! Sampling, stop strings, streaming, cancellation and session reuse through the facade, on the
//! real models.

use kestrel::{CancelToken, ChatMessage, FinishReason, GenerateOptions, LoadOptions, Model};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};

fn load(file: &str, threads: usize) -> Option<Model> {
    let opts = LoadOptions {
        threads,
        ctx: 512,
        ..LoadOptions::default()
    };
    Some(Model::load_file(test_model(file)?, opts).unwrap())
}

fn sampled(seed: u64) -> GenerateOptions {
    GenerateOptions::default()
        .with_temperature(0.9)
        .with_top_k(40)
        .with_top_p(0.95)
        .with_seed(seed)
        .with_max_tokens(24)
}

#[test]
fn seeded_sampling_repeats_across_runs_and_thread_counts() {
    for file in [SMOLLM2_135M_Q4_1, GEMMA3_270M_Q4_K_M] {
        let Some(mut two) = load(file, 2) else { return };
        let Some(mut one) = load(file, 1) else { return };
        let prompt = "Once upon a time, in a small village,";
        let a = two.generate(prompt, &sampled(7)).unwrap();
        let b = two.generate(prompt, &sampled(7)).unwrap();
        let c = one.generate(prompt, &sampled(7)).unwrap();
        assert_eq!(a.ids, b.ids, "{file}: same seed, same run");
        assert_eq!(a.ids, c.ids, "{file}: same seed, 1 vs 2 threads");
        assert_eq!(a.text, c.text);
        let others: Vec<Vec<u32>> = (8..11)
            .map(|s| two.generate(prompt, &sampled(s)).unwrap().ids)
            .collect();
        assert!(
            others.iter().any(|o| *o != a.ids),
            "{file}: seeds change nothing"
        );
    }
}

#[test]
fn stop_strings_end_the_text_before_the_match() {
    let Some(mut m) = load(SMOLLM2_135M_Q4_1, 2) else {
        return;
    };
    let prompt = "The capital of France is";
    let base = GenerateOptions::greedy().with_max_tokens(32);
    let full = m.generate(prompt, &base).unwrap();
    assert_eq!(full.finish, FinishReason::Length);
    // stop strings starting at several places of the greedy text, some spanning tokens
    let chars: Vec<(usize, char)> = full.text.char_indices().collect();
    assert!(chars.len() > 20, "{:?}", full.text);
    for &start in &[3usize, 8, 13, 19] {
        let from = chars[start].0;
        let to = chars.get(start + 5).map_or(full.text.len(), |c| c.0);
        let stop = &full.text[from..to];
        let expected = &full.text[..full.text.find(stop).unwrap()];
        let mut streamed = String::new();
        let out = m
            .generate_stream(prompt, &base.clone().with_stop_strings([stop]), |p| {
                streamed.push_str(p);
                assert!(expected.starts_with(&streamed), "emitted past the stop");
                true
            })
            .unwrap();
        assert_eq!(out.text, expected, "stop {stop:?}");
        assert_eq!(streamed, expected);
        assert_eq!(out.finish, FinishReason::StopString(0));
    }
}

#[test]
fn iterator_callback_and_cancellation_agree() {
    let Some(mut m) = load(GEMMA3_270M_Q4_K_M, 2) else {
        return;
    };
    let prompt = "The three primary colours are";
    let opts = sampled(3);
    let whole = m.generate(prompt, &opts).unwrap();
    let mut text = String::new();
    let mut ids = Vec::new();
    for tok in m.generate_iter(prompt, &opts).unwrap() {
        let tok = tok.unwrap();
        text.push_str(&tok.text);
        ids.push(tok.id);
    }
    assert_eq!((ids, text), (whole.ids.clone(), whole.text.clone()));
    assert_eq!(m.metrics().generated_tokens, whole.ids.len());

    // a token cancelled after three tokens of text stops the generation there
    let cancel = CancelToken::new();
    let mut seen = 0;
    let c2 = cancel.clone();
    let out = m
        .generate_stream(prompt, &opts.clone().with_cancel(cancel), |_| {
            seen += 1;
            if seen == 3 {
                c2.cancel();
            }
            true
        })
        .unwrap();
    assert_eq!(out.finish, FinishReason::Cancelled);
    assert!(out.ids.len() < whole.ids.len() && out.ids.len() >= 3);
    assert_eq!(out.ids[..], whole.ids[..out.ids.len()]);
}

#[test]
fn chat_turns_reuse_the_cached_prefix() {
    let Some(mut m) = load(SMOLLM2_135M_Q4_1, 2) else {
        return;
    };
    let opts = GenerateOptions::greedy().with_max_tokens(16);
    let mut msgs = vec![
        ChatMessage::new("system", "You are a terse assistant."),
        ChatMessage::new("user", "Name a fruit."),
    ];
    let first = m.chat(&msgs, &opts).unwrap();
    assert_eq!(first.usage.cached_tokens, 0);
    assert!(!first.text.is_empty());
    msgs.push(ChatMessage::new("assistant", first.text.clone()));
    msgs.push(ChatMessage::new("user", "And a vegetable?"));
    let second = m.chat(&msgs, &opts).unwrap();
    let u = second.usage;
    assert!(
        u.cached_tokens >= first.usage.prompt_tokens,
        "only {} of {} tokens reused",
        u.cached_tokens,
        u.prompt_tokens
    );
    assert_eq!(u.total_tokens, u.prompt_tokens + u.completion_tokens);
    // the reply equals a fresh model's, which prefills the whole conversation
    let Some(mut fresh) = load(SMOLLM2_135M_Q4_1, 2) else {
        return;
    };
    let again = fresh.chat(&msgs, &opts).unwrap();
    assert_eq!(again.usage.cached_tokens, 0);
    assert_eq!(again.text, second.text);
}
