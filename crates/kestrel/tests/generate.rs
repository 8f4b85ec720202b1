//! The facade end to end: text in, text out, streamed pieces add up to the whole.

use kestrel::{GenerateOptions, LoadOptions, Model};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};

fn load(file: &str) -> Option<Model> {
    let opts = LoadOptions {
        threads: 2,
        ctx: 256,
        ..LoadOptions::default()
    };
    Some(Model::load_file(test_model(file)?, opts).unwrap())
}

#[test]
fn gemma_says_paris_is_the_capital() {
    let Some(mut m) = load(GEMMA3_270M_Q4_K_M) else {
        return;
    };
    let opts = GenerateOptions::greedy().with_max_tokens(8);
    let mut streamed = String::new();
    let out = m
        .generate_stream("The capital of France is", &opts, |p| {
            streamed.push_str(p);
            true
        })
        .unwrap();
    assert_eq!(out.prompt_ids, [2, 818, 5279, 529, 7001, 563]);
    assert_eq!(streamed, out.text);
    // llama.cpp's llama-simple gives the same 8 tokens.
    assert_eq!(out.text, " the capital of the country of France.");
}

#[test]
fn smollm2_answers_paris() {
    let Some(mut m) = load(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let opts = GenerateOptions::greedy().with_max_tokens(4);
    let out = m.generate("The capital of France is", &opts).unwrap();
    assert_eq!(out.prompt_ids, [504, 3575, 282, 4649, 314]);
    assert!(out.text.starts_with(" Paris."), "{:?}", out.text);
    let bad = opts.clone().with_temperature(-0.7);
    assert!(m.generate("x", &bad).is_err());
    let bad = opts.with_max_tokens(0);
    assert!(m.generate("x", &bad).is_err());
}
