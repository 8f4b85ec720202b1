//! llama.cpp's grammars (tests/fixtures/grammars, copied from llama.cpp's `grammars/`): each
//! parses; random constrained walks over a synthetic vocabulary produce strings the grammar
//! accepts when re-fed whole to a fresh matcher; known-good and known-bad strings.

mod common;

use common::{accepts, accepts_prefix, random_walk, synthetic_vocab};
use kestrel_sampling::{Grammar, TokenTrie};

fn load(name: &str) -> Grammar {
    let path = format!(
        "{}/tests/fixtures/grammars/{name}.gbnf",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    Grammar::from_gbnf(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

const ALL: &[&str] = &[
    "arithmetic",
    "c",
    "chess",
    "english",
    "japanese",
    "json",
    "json_arr",
    "list",
];

#[test]
fn every_llama_cpp_grammar_parses() {
    for name in ALL {
        let g = load(name);
        assert!(g.rule_count() > 0);
    }
}

#[test]
fn random_walks_yield_accepted_strings() {
    let (vocab, eog) = synthetic_vocab();
    let trie = TokenTrie::new(&vocab, &[eog]);
    for name in ALL {
        let g = load(name);
        let mut completed = 0;
        for seed in 0..30u64 {
            let w = random_walk(&g, &trie, seed * 7919 + 1, 400);
            let text = String::from_utf8_lossy(&w.bytes).into_owned();
            if w.completed {
                completed += 1;
                assert!(
                    accepts(&g, &w.bytes),
                    "{name}: walk {seed} produced {text:?}, rejected when re-fed"
                );
                // json.gbnf allows lone-surrogate escapes like "\ud800", which are not JSON
                let lone_surrogate = text.to_lowercase().contains("\\ud8")
                    || [
                        "\\ud9", "\\uda", "\\udb", "\\udc", "\\udd", "\\ude", "\\udf",
                    ]
                    .iter()
                    .any(|p| text.to_lowercase().contains(p));
                if name.starts_with("json") && !lone_surrogate {
                    serde_json::from_slice::<serde_json::Value>(&w.bytes).unwrap_or_else(|e| {
                        panic!("{name}: walk {seed} {text:?} is not JSON: {e}")
                    });
                }
            } else {
                assert!(
                    accepts_prefix(&g, &w.bytes),
                    "{name}: unfinished walk {seed} {text:?} rejected"
                );
            }
        }
        assert!(
            completed >= 10,
            "{name}: only {completed}/30 walks completed"
        );
    }
}

fn check(name: &str, good: &[&str], bad: &[&str]) {
    let g = load(name);
    for s in good {
        assert!(accepts(&g, s.as_bytes()), "{name} should accept {s:?}");
    }
    for s in bad {
        assert!(!accepts(&g, s.as_bytes()), "{name} should reject {s:?}");
    }
}

#[test]
fn known_strings() {
    check(
        "arithmetic",
        &["1+2=3\n", "(a +b)*c= x\n", "x=1\ny=2\n"],
        &["1+2\n", "=3\n", "1++2=3\n", "A=1\n"],
    );
    check(
        "c",
        &[
            "int main(){return 0;}",
            "float f(int x){x = x+1;while(x<3){x = x*2;}}",
            "char g(){// hi\n}",
        ],
        &["int main(){return 0}", "main(){}", "int 9x(){}"],
    );
    check(
        "chess",
        &[
            "1. e4 e5\n2. Nf3 Nc6\n",
            "1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd8#\n",
        ],
        &["1. e4 e5\n", "1. e9 e5\n2. a3 a6\n", "e4 e5\n2. a3 a6\n"],
    );
    check(
        "english",
        &["Hello, world!", "a b\tc"],
        &["", "héllo", "two  spaces"],
    );
    check("japanese", &["こんにちは", "カタカナ 漢字。"], &["abc", ""]);
    check(
        "json",
        &[
            "{}",
            "{\"a\": [1, 2.5, -3e+7, true, null, \"x\\n\"]}",
            "{\n  \"k\": {\"n\": \"\\u00e9\"}}",
        ],
        &[
            "[]",
            "{\"a\": 01}",
            "{\"a\" 1}",
            "{\"a\": tru}",
            "{\"a\": \"\x01\"}",
        ],
    );
    check("json_arr", &["[\n]", "[\n1,\n{\"a\": []}]"], &["[1]", "{}"]);
    check("list", &["- one\n- two\n"], &["- one", "* one\n", "- \n"]);
}

#[test]
fn sampler_under_a_grammar_yields_accepted_strings() {
    use kestrel_sampling::{GrammarMatcher, Sampler, SamplingConfig};
    let (vocab, eog) = synthetic_vocab();
    let trie = TokenTrie::new(&vocab, &[eog]);
    let g = load("json");
    for (seed, grammar_first) in [(1u64, false), (2, true), (3, false), (4, true)] {
        let cfg = SamplingConfig {
            seed: Some(seed),
            grammar_first,
            top_k: 50,
            ..Default::default()
        };
        let mut s = Sampler::new(&cfg, vocab.len()).unwrap();
        let mut m = GrammarMatcher::new(&g);
        let mut rng = common::Rng(seed);
        let mut out: Vec<u32> = Vec::new();
        let mut text = Vec::new();
        for step in 0..2000 {
            // random logits that increasingly favour closing punctuation and EOG, so it ends
            let mut logits: Vec<f32> = (0..vocab.len())
                .map(|_| (rng.below(1000) as f32) / 250.0)
                .collect();
            for (i, b) in vocab.iter().enumerate() {
                if b.iter().any(|c| b"\"}]".contains(c)) {
                    logits[i] += step as f32 / 50.0;
                }
            }
            logits[eog as usize] += step as f32 / 20.0;
            let t = s
                .sample_constrained(&mut logits, &out, &mut m, &trie)
                .unwrap();
            m.accept_token(&trie, t).unwrap();
            if t == eog {
                break;
            }
            out.push(t);
            text.extend_from_slice(trie.token_bytes(t).unwrap());
        }
        assert!(
            common::accepts(&g, &text),
            "{:?}",
            String::from_utf8_lossy(&text)
        );
        if grammar_first {
            assert_eq!(s.masks_computed() as usize, out.len() + 1);
        }
    }
}

#[test]
fn mask_matches_direct_acceptance_on_a_large_vocabulary() {
    use kestrel_sampling::{GrammarMatcher, TokenMask};
    let (vocab, eog) = common::big_vocab::synthetic_vocab(40_000);
    let trie = TokenTrie::new(&vocab, &[eog]);
    let mut mask = TokenMask::new(vocab.len());
    for (name, prefixes) in [
        (
            "json",
            &[
                "",
                "{\"name\": ",
                "{\"name\": \"Jo",
                "{\"a\": [1, 2.5",
                "{\"a\": {\"b\": true",
                "{\"s\": \"\\u00",
            ][..],
        ),
        ("c", &["int main(){", "int f(){x = 12"][..]),
        ("japanese", &["こんにち", "カ "][..]),
        ("list", &["- item\n- x"][..]),
    ] {
        let g = load(name);
        for prefix in prefixes {
            let mut m = GrammarMatcher::new(&g);
            m.accept_str(prefix).unwrap();
            m.fill_mask(&trie, &mut mask);
            let mut allowed = 0;
            for t in 0..vocab.len() as u32 {
                let direct = m.accepts_token(&trie, t);
                assert_eq!(
                    mask.is_allowed(t),
                    direct,
                    "{name} after {prefix:?}: token {t} {:?}",
                    String::from_utf8_lossy(&vocab[t as usize])
                );
                allowed += usize::from(direct);
            }
            assert!(allowed > 0, "{name} after {prefix:?}");
        }
    }
}
