//! Tokenize ~1 MB of English and report tokens/s. The text is generated deterministically from
//! a fixed word list (no data file is committed); `KESTREL_BENCH_TEXT=path` uses a file instead,
//! and the generated text is written to `target/tokenize-bench.txt` so llama-tokenize can be
//! timed on the same input:
//!
//! ```sh
//! cargo bench -p kestrel-tokenizer --bench tokenize
//! time llama-tokenize -m MODEL -f target/tokenize-bench.txt --ids --log-disable --no-escape > /dev/null
//! ```

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_tokenizer::{EncodeOptions, Tokenizer};

const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "I",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "river",
    "mountain",
    "government",
    "language",
    "question",
    "morning",
    "although",
    "children",
    "important",
    "thought",
    "between",
    "understanding",
    "beautiful",
    "remember",
    "system",
    "history",
    "Whatever",
    "London",
    "Tuesday",
    "1984",
    "42",
    "it's",
    "don't",
    "they're",
    "well-known",
    "e-mail",
    "naïve",
    "café",
];

fn english(bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 64);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut sentence = 0;
    while s.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let w = WORDS[(x % WORDS.len() as u64) as usize];
        if sentence == 0 {
            let mut c = w.chars();
            if let Some(f) = c.next() {
                s.extend(f.to_uppercase());
                s.push_str(c.as_str());
            }
        } else {
            s.push_str(w);
        }
        sentence += 1;
        if sentence > 8 + (x >> 60) as usize {
            s.push_str(if x & 1 == 0 { ". " } else { ", " });
            if x & 6 == 0 {
                s.push('\n');
            }
            sentence = if x & 1 == 0 { 0 } else { 1 };
        } else {
            s.push(' ');
        }
    }
    s
}

fn text() -> String {
    match std::env::var("KESTREL_BENCH_TEXT") {
        Ok(p) => std::fs::read_to_string(p).expect("KESTREL_BENCH_TEXT is readable"),
        Err(_) => {
            let t = english(1 << 20);
            let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/tokenize-bench.txt");
            let _ = std::fs::write(out, &t);
            t
        }
    }
}

fn bench(c: &mut Criterion) {
    let text = text();
    let mut g = c.benchmark_group("tokenize_1MB_english");
    g.sample_size(10);
    for file in [GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1] {
        let Some(path) = test_model(file) else {
            eprintln!("skipping {file}: not found");
            continue;
        };
        let tok = Tokenizer::from_file(path).expect("tokenizer");
        let opts = EncodeOptions::default().parse_special(true);
        let t0 = Instant::now();
        let n = tok.encode(&text, opts).expect("encodes").len();
        let dt = t0.elapsed().as_secs_f64();
        eprintln!(
            "{file}: {} bytes -> {n} tokens in {dt:.3} s = {:.0} tokens/s",
            text.len(),
            n as f64 / dt
        );
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(file, |b| {
            b.iter(|| tok.encode(black_box(&text), opts).expect("encodes"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
