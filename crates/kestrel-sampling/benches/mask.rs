//! Cost of the allowed-token mask for a 262k-token synthetic vocabulary (Gemma-sized) under
//! llama.cpp's JSON grammar, at several grammar states:
//! - `warm`: transitions memoized (as after a few steps of generation), mask cache cleared,
//!   so the trie is walked;
//! - `cold`: a fresh matcher (nothing memoized) walks the trie;
//! - `cached`: the state's mask was computed before (a string body, for example, loops).
//!
//! Run: `cargo bench -p kestrel-sampling --bench mask`

use criterion::{criterion_group, criterion_main, Criterion};
use kestrel_sampling::{Grammar, GrammarMatcher, Sampler, SamplingConfig, TokenMask, TokenTrie};

#[path = "../tests/common/big_vocab.rs"]
mod big_vocab;
use big_vocab::synthetic_vocab;

const JSON: &str = include_str!("../tests/fixtures/grammars/json.gbnf");

fn bench(c: &mut Criterion) {
    let (vocab, eog) = synthetic_vocab(262_144);
    let trie = TokenTrie::new(&vocab, &[eog]);
    eprintln!(
        "vocab {} tokens, trie {} nodes",
        vocab.len(),
        trie.node_count()
    );
    let g = Grammar::from_gbnf(JSON).unwrap();
    let states = [
        ("start", ""),
        ("after_key", "{\"name\": "),
        ("in_string", "{\"name\": \"Jo"),
        ("in_number", "{\"a\": [1, 2.5"),
        ("after_value", "{\"a\": {\"b\": true"),
    ];
    let mut group = c.benchmark_group("json_mask_262k");
    group.sample_size(20);
    for (name, prefix) in states {
        let mut m = GrammarMatcher::new(&g);
        m.accept_str(prefix).unwrap();
        let mut mask = TokenMask::new(vocab.len());
        m.fill_mask(&trie, &mut mask);
        eprintln!("{name}: {} tokens allowed", mask.count_allowed());
        group.bench_function(format!("warm/{name}"), |b| {
            b.iter(|| {
                m.clear_mask_cache();
                m.fill_mask(&trie, &mut mask);
            })
        });
        group.bench_function(format!("cached/{name}"), |b| {
            b.iter(|| m.fill_mask(&trie, &mut mask))
        });
        group.bench_function(format!("cold/{name}"), |b| {
            b.iter(|| {
                let mut m = GrammarMatcher::new(&g);
                m.accept_str(prefix).unwrap();
                m.fill_mask(&trie, &mut mask);
            })
        });
    }
    group.finish();

    // a schema grammar: inside a length-bounded string and after a key
    let person = include_str!("../tests/fixtures/schemas/person.json");
    let g = Grammar::from_json_schema_str(person).unwrap();
    let mut group = c.benchmark_group("person_schema_mask_262k");
    group.sample_size(20);
    for (name, prefix) in [
        ("in_name", "{\"name\": \"Ad"),
        ("after_age", "{\"name\": \"Ada\", \"age\": 36"),
    ] {
        let mut m = GrammarMatcher::new(&g);
        m.accept_str(prefix).unwrap();
        let mut mask = TokenMask::new(vocab.len());
        group.bench_function(format!("warm/{name}"), |b| {
            b.iter(|| {
                m.clear_mask_cache();
                m.fill_mask(&trie, &mut mask);
            })
        });
    }
    group.finish();

    // a whole sampling step over 262k logits, for scale
    let logits: Vec<f32> = (0..vocab.len())
        .map(|i| ((i * 2_654_435_761) % 1000) as f32 / 100.0 - 5.0)
        .collect();
    let mut group = c.benchmark_group("sample_262k");
    group.sample_size(20);
    let mut work = logits.clone();
    for (name, cfg) in [
        ("greedy", SamplingConfig::greedy()),
        (
            "dist",
            SamplingConfig {
                seed: Some(1),
                ..Default::default()
            },
        ),
        (
            "top_k40_top_p0.95",
            SamplingConfig {
                seed: Some(1),
                top_k: 40,
                top_p: 0.95,
                ..Default::default()
            },
        ),
    ] {
        let mut s = Sampler::new(&cfg, vocab.len()).unwrap();
        group.bench_function(name, |b| {
            b.iter(|| {
                work.copy_from_slice(&logits);
                s.sample(&mut work, &[]).unwrap()
            })
        });
    }
    let json = Grammar::from_gbnf(JSON).unwrap();
    let cfg = SamplingConfig {
        seed: Some(1),
        grammar_first: true,
        ..Default::default()
    };
    let mut s = Sampler::new(&cfg, vocab.len()).unwrap();
    let mut m = GrammarMatcher::new(&json);
    m.accept_str("{\"name\": \"Jo").unwrap();
    group.bench_function("dist_json_in_string_mask_uncached", |b| {
        b.iter(|| {
            work.copy_from_slice(&logits);
            m.clear_mask_cache();
            s.sample_constrained(&mut work, &[], &mut m, &trie).unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
