//! The greedy decode loop on the real models: chunked prefill changes nothing, limits are
//! errors, stop tokens stop, and perplexity is finite and sensible.

use std::sync::Arc;

use kestrel_generate::{GenerateError, Generator, GeneratorOptions};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_gguf::GgufModel;

fn generator(file: &str, batch: usize, ctx: usize) -> Option<Generator> {
    let model = Arc::new(GgufModel::open(test_model(file)?).unwrap());
    Some(
        Generator::new(
            model,
            GeneratorOptions {
                threads: 2,
                ctx,
                batch,
                ..GeneratorOptions::default()
            },
        )
        .unwrap(),
    )
}

/// "The capital of France is" (SmolLM2 ids, no BOS) repeated into a longer prompt.
fn smollm_prompt() -> Vec<u32> {
    [504, 3575, 282, 4649, 314, 7042, 30, 198].repeat(3)
}

#[test]
fn chunked_prefill_gives_the_same_tokens() {
    let Some(mut whole) = generator(SMOLLM2_135M_Q4_1, 512, 128) else {
        return;
    };
    let Some(mut chunked) = generator(SMOLLM2_135M_Q4_1, 5, 128) else {
        return;
    };
    let p = smollm_prompt();
    let a = whole.generate_ids(&p, 8, &mut |_| Ok(true)).unwrap();
    let b = chunked.generate_ids(&p, 8, &mut |_| Ok(true)).unwrap();
    assert_eq!(a.ids, b.ids);
    assert_eq!(a.metrics.prompt_tokens, p.len());
    assert_eq!(a.metrics.generated_tokens, 8);
    // Running again from the same generator gives the same result (the cache is reset).
    let c = whole.generate_ids(&p, 8, &mut |_| Ok(true)).unwrap();
    assert_eq!(a.ids, c.ids);
}

#[test]
fn limits_and_callbacks() {
    let Some(mut g) = generator(SMOLLM2_135M_Q4_1, 512, 32) else {
        return;
    };
    let p = smollm_prompt();
    assert!(matches!(
        g.generate_ids(&p, 16, &mut |_| Ok(true)),
        Err(GenerateError::ContextTooSmall { .. })
    ));
    assert!(matches!(
        g.generate_ids(&[], 4, &mut |_| Ok(true)),
        Err(GenerateError::EmptyPrompt)
    ));
    let mut seen = 0;
    let out = g
        .generate_ids(&p[..5], 6, &mut |_| {
            seen += 1;
            Ok(seen < 3)
        })
        .unwrap();
    assert_eq!(out.ids.len(), 3);
    let e = g
        .generate_ids(&p[..5], 6, &mut |_| Err("no more".into()))
        .unwrap_err();
    assert!(e.to_string().contains("no more"));
    // SmolLM2 stops on its eos and on <|im_end|>.
    assert!(g.stop_ids().contains(&2));
}

#[test]
fn gemma_stop_ids_include_end_of_turn() {
    let Some(g) = generator(GEMMA3_270M_Q4_K_M, 64, 64) else {
        return;
    };
    // <eos> = 1, <end_of_turn> = 106.
    assert!(
        g.stop_ids().contains(&1) && g.stop_ids().contains(&106),
        "{:?}",
        g.stop_ids()
    );
}

#[test]
fn perplexity_of_a_repetitive_text_is_low() {
    let Some(mut g) = generator(SMOLLM2_135M_Q4_1, 64, 64) else {
        return;
    };
    let tokens: Vec<u32> = smollm_prompt().repeat(6); // 144 tokens: two windows of 64
    let p = g.perplexity(&tokens, 64, None).unwrap();
    assert_eq!((p.chunks, p.scored), (2, 62));
    assert!(p.ppl.is_finite() && p.ppl >= 1.0 && p.ppl < 3.0, "{p:?}");
    assert!(g.perplexity(&tokens[..10], 64, None).is_err());
}
