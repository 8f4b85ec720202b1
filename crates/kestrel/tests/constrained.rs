//! Grammar-constrained generation on the real models:
//! - JSON Schema: a sampled generation for each committed schema on each model (temperature
//!   1.0, one seed each) parses as JSON and validates against its schema (`jsonschema`, formats
//!   checked);
//! - GBNF: each of llama.cpp's grammars we commit yields text a fresh matcher accepts;
//! - the cost of the allowed-token mask over Gemma's 262k vocabulary against a decode step.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kestrel::{ChatMessage, FinishReason, GenerateOptions, Grammar, LoadOptions, Model};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_sampling::{GrammarMatcher, TokenMask};
use serde_json::Value;

fn fixtures(kind: &str, ext: &str) -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../kestrel-sampling/tests/fixtures")
        .join(kind);
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == ext).then(|| {
                (
                    p.file_stem().unwrap().to_string_lossy().into_owned(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn load(file: &str) -> Option<Model> {
    let opts = LoadOptions {
        threads: 2,
        ctx: 2048,
        ..LoadOptions::default()
    };
    Some(Model::load_file(test_model(file)?, opts).unwrap())
}

fn schema_messages(schema: &str) -> Vec<ChatMessage> {
    vec![ChatMessage::new(
        "user",
        format!("Write one example JSON document that follows this JSON Schema:\n{schema}"),
    )]
}

/// A generation for each schema on `file`, one seed each; every one must end by the grammar (or
/// an end-of-generation token it allowed), parse and validate.
fn schema_generations(file: &str) {
    let Some(mut m) = load(file) else { return };
    let schemas = fixtures("schemas", "json");
    assert!(schemas.len() >= 10, "{} schemas", schemas.len());
    let (mut tokens, mut closed) = (0, 0);
    for (seed, (name, text)) in (0u64..).zip(&schemas) {
        let schema: Value = serde_json::from_str(text).unwrap();
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&schema)
            .unwrap();
        let opts = GenerateOptions::default()
            .with_temperature(1.0)
            .with_seed(seed)
            .with_max_tokens(512)
            .with_json_schema(text)
            .unwrap();
        let out = m.chat(&schema_messages(text), &opts).unwrap();
        tokens += out.usage.completion_tokens;
        // Length: the budget ran low and the generator closed the document early
        assert!(
            matches!(
                out.finish,
                FinishReason::Grammar | FinishReason::EndOfGeneration | FinishReason::Length
            ),
            "{file} {name} seed {seed}: ended by {:?}: {}",
            out.finish,
            out.text
        );
        closed += usize::from(out.finish == FinishReason::Length);
        let doc: Value = serde_json::from_str(&out.text)
            .unwrap_or_else(|e| panic!("{file} {name} seed {seed}: {e}: {}", out.text));
        let errors: Vec<String> = validator
            .iter_errors(&doc)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{file} {name} seed {seed}: {errors:?}\n{}",
            out.text
        );
    }
    eprintln!(
        "{file}: {n}/{n} schema generations valid, {tokens} tokens, {closed} closed by the budget",
        n = schemas.len()
    );
}

#[test]
fn json_schema_generations_validate_on_smollm2() {
    schema_generations(SMOLLM2_135M_Q4_1);
}

#[test]
fn json_schema_generations_validate_on_gemma() {
    schema_generations(GEMMA3_270M_Q4_K_M);
}

/// A budget far too small for what the model wants to write: the generator still closes the
/// document (quotes, brackets, required fields) within the budget.
#[test]
fn a_small_budget_still_closes_the_document() {
    let Some(mut m) = load(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let schema = r#"{"type": "object", "properties": {
        "title": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "rating": {"type": "integer"}}, "required": ["title", "tags", "rating"]}"#;
    let validator = jsonschema::validator_for(&serde_json::from_str(schema).unwrap()).unwrap();
    for (seed, budget) in [(0u64, 16usize), (1, 20), (2, 32), (3, 48)] {
        let opts = GenerateOptions::default()
            .with_temperature(1.0)
            .with_seed(seed)
            .with_max_tokens(budget)
            .with_json_schema(schema)
            .unwrap();
        let out = m
            .chat(
                &[ChatMessage::new(
                    "user",
                    "Describe a long novel as JSON, with many tags.",
                )],
                &opts,
            )
            .unwrap();
        assert!(out.usage.completion_tokens <= budget);
        let doc: Value = serde_json::from_str(&out.text)
            .unwrap_or_else(|e| panic!("budget {budget}: {e}: {}", out.text));
        assert!(validator.is_valid(&doc), "budget {budget}: {}", out.text);
    }
}

/// A prompt that gives the model something to write in each grammar's language.
fn gbnf_prompt(name: &str) -> &'static str {
    match name {
        "arithmetic" => "Write an arithmetic expression:",
        "c" => "Write a short C program:",
        "chess" => "Write the moves of a chess game:",
        "english" => "Write an English sentence:",
        "japanese" => "Write a sentence in Japanese:",
        "list" => "Write a shopping list:",
        _ => "Write a JSON document:",
    }
}

#[test]
fn gbnf_grammars_constrain_generation() {
    let Some(mut m) = load(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let grammars = fixtures("grammars", "gbnf");
    assert!(grammars.len() >= 6, "{} grammars", grammars.len());
    let (mut complete, mut written) = (0, 0);
    for (name, text) in &grammars {
        let grammar = Grammar::from_gbnf(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        for seed in 0..2u64 {
            let opts = GenerateOptions::default()
                .with_temperature(1.0)
                .with_top_k(40)
                .with_seed(seed)
                .with_max_tokens(160)
                .with_grammar(grammar.clone());
            let out = m.generate(gbnf_prompt(name), &opts).unwrap();
            written += usize::from(!out.text.is_empty());
            let mut check = GrammarMatcher::new(&grammar);
            check
                .accept_str(&out.text)
                .unwrap_or_else(|e| panic!("{name} seed {seed}: {e}: {:?}", out.text));
            match (out.finish, check.is_complete()) {
                (
                    FinishReason::Grammar | FinishReason::EndOfGeneration | FinishReason::Length,
                    true,
                ) => complete += 1,
                (FinishReason::Length, false) => {
                    assert!(check.can_continue(), "{name}: dead end")
                }
                (other, done) => {
                    panic!("{name} seed {seed}: ended by {other:?}, complete {done}")
                }
            }
        }
    }
    eprintln!(
        "gbnf: {complete}/{} generations complete ({written} non-empty), the rest accepted \
         prefixes at the token limit",
        grammars.len() * 2
    );
    assert!(complete >= grammars.len(), "only {complete} complete");
    assert!(written >= grammars.len(), "only {written} non-empty");
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The mask over Gemma's 262k tokens, computed by walking the token trie (its cache cleared),
/// at every token boundary of a generated JSON document, against Gemma's decode step.
#[test]
fn masking_costs_under_a_tenth_of_a_gemma_decode_step() {
    let Some(mut m) = load(GEMMA3_270M_Q4_K_M) else {
        return;
    };
    let schema = &fixtures("schemas", "json")
        .into_iter()
        .find(|(n, _)| n == "person")
        .unwrap()
        .1;
    let grammar = Grammar::from_json_schema_str(schema).unwrap();
    let opts = GenerateOptions::default()
        .with_temperature(1.0)
        .with_seed(1)
        .with_max_tokens(256)
        .with_grammar(grammar.clone());
    let prompt = m.format_messages(&schema_messages(schema)).unwrap();
    let out = m
        .generate(
            &prompt,
            &GenerateOptions {
                add_bos: false,
                parse_special: true,
                ..opts
            },
        )
        .unwrap();
    assert!(out.ids.len() > 8, "{}", out.text);

    // decode steps, timed one by one
    let prompt = m
        .encode("Tell me about the sea.", &GenerateOptions::greedy())
        .unwrap();
    let g = m.generator_mut();
    let _ = g.prefill(&prompt).unwrap();
    let mut steps = Vec::new();
    let mut tok = 2u32;
    for _ in 0..24 {
        let t = Instant::now();
        let logits = g.step(tok).unwrap();
        steps.push(t.elapsed());
        tok = (logits.len() as u32 / 3) + steps.len() as u32;
    }
    let step = median(steps);

    let trie = m.generator().token_trie().unwrap();
    let ids = out.ids.iter().filter(|&&id| !trie.is_eog(id));
    let mut matcher = GrammarMatcher::new(&grammar);
    let mut mask = TokenMask::new(trie.vocab_size());
    let mut masks = Vec::new();
    let mut allowed = 0;
    for &id in ids {
        matcher.clear_mask_cache();
        let t = Instant::now();
        matcher.fill_mask(trie, &mut mask);
        masks.push(t.elapsed());
        allowed += mask.count_allowed();
        matcher.accept_token(trie, id).unwrap();
    }
    let worst = *masks.iter().max().unwrap();
    let mask_median = median(masks.clone());
    eprintln!(
        "gemma decode step {:.2} ms; mask (trie walk, {} states, {} tokens allowed on average) \
         median {:.3} ms = {:.1}% of a step, worst {:.3} ms",
        step.as_secs_f64() * 1e3,
        masks.len(),
        allowed / masks.len(),
        mask_median.as_secs_f64() * 1e3,
        100.0 * mask_median.as_secs_f64() / step.as_secs_f64(),
        worst.as_secs_f64() * 1e3,
    );
    assert!(
        mask_median.as_secs_f64() < 0.10 * step.as_secs_f64(),
        "mask {mask_median:?} vs step {step:?}"
    );
}
