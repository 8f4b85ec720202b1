//! Token-for-token parity with llama.cpp on the committed corpus (fixtures/README.md), the
//! decode round trip, streaming decode against whole decode, and the chat templates.

use std::path::PathBuf;

use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use kestrel_gguf::GgufModel;
use kestrel_tokenizer::{
    ChatMessage, ChatTemplate, DecodeOptions, EncodeOptions, RenderOptions, Tokenizer,
    TokenizerOptions,
};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&s).expect("fixture is JSON")
}

fn corpus() -> Vec<String> {
    serde_json::from_value(fixture("corpus.json")).expect("list of strings")
}

fn ids_of(v: &Value) -> Vec<u32> {
    serde_json::from_value(v.clone()).expect("ids")
}

fn load(file: &str) -> Option<Tokenizer> {
    let Some(path) = test_model(file) else {
        eprintln!("skipping: {file} not found (cargo xtask fetch-models)");
        return None;
    };
    Some(Tokenizer::from_file(path).expect("tokenizer loads"))
}

fn parity(file: &str, reference: &str) {
    let Some(tok) = load(file) else { return };
    let refs = fixture(reference);
    let cases = refs["cases"].as_array().expect("cases");
    let texts = corpus();
    assert_eq!(cases.len(), texts.len());
    let mut failures = Vec::new();
    let mut total = 0;
    for (text, case) in texts.iter().zip(cases) {
        for (parse_special, key) in [(true, "ids"), (false, "ids_no_parse_special")] {
            total += 1;
            let want = ids_of(&case[key]);
            let opts = EncodeOptions::default().parse_special(parse_special);
            let got = tok.encode(text, opts).expect("encodes");
            if got != want {
                failures.push(format!(
                    "{text:?} parse_special={parse_special}: got {got:?}, want {want:?}"
                ));
            }
            // the tokenizers-pipeline path gives the same ids
            let via: Vec<u32> = tok
                .encode_with_offsets(text, opts)
                .expect("encodes")
                .into_iter()
                .map(|p| p.0)
                .collect();
            assert_eq!(via, got, "pipeline path differs on {text:?}");
        }
    }
    assert!(
        failures.is_empty(),
        "{file}: {} of {total} differ from llama.cpp:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "{file}: {total}/{total} match llama.cpp ({})",
        refs["llama_cpp"]
    );
}

#[test]
fn gemma3_matches_llama_cpp() {
    parity(GEMMA3_270M_Q4_K_M, "reference_gemma3.json");
}

#[test]
fn smollm2_matches_llama_cpp() {
    parity(SMOLLM2_135M_Q4_1, "reference_smollm2.json");
}

/// decode(encode(s)) == s. Both files have no SentencePiece space prefix and SmolLM2's `smollm`
/// pre-tokenizer turns off the clean-up of spaces, so the round trip is exact; BOS decodes to
/// nothing because control tokens are not rendered.
fn round_trip(file: &str) {
    let Some(tok) = load(file) else { return };
    for text in corpus() {
        for add_special in [false, true] {
            let ids = tok
                .encode(&text, EncodeOptions::default().add_special(add_special))
                .expect("encodes");
            let back = tok.decode(&ids, DecodeOptions::default()).expect("decodes");
            assert_eq!(back, text, "{file}: round trip of {text:?} ({ids:?})");
        }
    }
}

#[test]
fn gemma3_round_trip() {
    round_trip(GEMMA3_270M_Q4_K_M);
}

#[test]
fn smollm2_round_trip() {
    round_trip(SMOLLM2_135M_Q4_1);
}

/// Streaming: after every prefix of the ids, what the decoder emitted plus what it would flush
/// equals the whole decode of that prefix, and nothing emitted is ever taken back.
fn streaming(file: &str) {
    let Some(tok) = load(file) else { return };
    for special in [false, true] {
        for text in corpus() {
            let ids = tok
                .encode(&text, EncodeOptions::default().parse_special(true))
                .expect("encodes");
            let mut dec = tok.decoder(special);
            let mut emitted = String::new();
            for k in 0..=ids.len() {
                if k > 0 {
                    if let Some(s) = dec.push(ids[k - 1]).expect("push") {
                        emitted.push_str(&s);
                    }
                }
                let whole = tok
                    .decode(&ids[..k], DecodeOptions::default().special(special))
                    .expect("decodes");
                let flushed = dec.clone().finish();
                assert_eq!(
                    format!("{emitted}{flushed}"),
                    whole,
                    "{file}: {text:?} after {k} tokens"
                );
                assert!(!emitted.contains('\u{FFFD}') || whole.contains('\u{FFFD}'));
            }
        }
    }
}

#[test]
fn gemma3_streaming_equals_whole_decode() {
    streaming(GEMMA3_270M_Q4_K_M);
}

#[test]
fn smollm2_streaming_equals_whole_decode() {
    streaming(SMOLLM2_135M_Q4_1);
}

/// A character split over byte-fallback tokens is held until complete.
#[test]
fn streaming_holds_partial_utf8() {
    let Some(tok) = load(GEMMA3_270M_Q4_K_M) else {
        return;
    };
    let ids: Vec<u32> = ["<0xF0>", "<0x9F>", "<0x98>", "<0x80>"]
        .iter()
        .map(|t| tok.token_id(t).expect("byte token"))
        .collect();
    let mut dec = tok.decoder(false);
    for &id in &ids[..3] {
        assert_eq!(dec.push(id).expect("push"), None);
    }
    assert_eq!(dec.push(ids[3]).expect("push").as_deref(), Some("😀"));
    assert_eq!(dec.finish(), "");
}

fn conversations() -> Vec<Vec<ChatMessage>> {
    serde_json::from_value(fixture("chat_conversations.json")).expect("conversations")
}

fn check_template(file: &str, reference: &str, expect_builtin: bool) {
    let Some(path) = test_model(file) else {
        eprintln!("skipping: {file} not found");
        return;
    };
    let model = GgufModel::open(&path).expect("opens");
    let md = model.metadata();
    let tok = Tokenizer::from_metadata(&md, TokenizerOptions::default()).expect("tokenizer");
    let tmpl = ChatTemplate::from_metadata(&md, &tok, None).expect("template");
    assert_eq!(tmpl.is_builtin(), expect_builtin, "{}", tmpl.name());
    let refs = fixture(reference);
    let renders = refs["renders"].as_array().expect("renders");
    let mut i = 0;
    for conv in conversations() {
        for agp in [true, false] {
            let want = renders[i]["text"].as_str().expect("text");
            assert_eq!(renders[i]["add_generation_prompt"].as_bool(), Some(agp));
            let got = tmpl
                .render(&conv, &RenderOptions::default().add_generation_prompt(agp))
                .expect("renders");
            assert_eq!(got, want, "{file}: conversation {} agp={agp}", i / 2);
            i += 1;
        }
    }
}

#[test]
fn smollm2_template_matches_jinja2() {
    check_template(SMOLLM2_135M_Q4_1, "chat_smollm2_jinja2.json", false);
}

#[test]
fn gemma3_fallback_matches_llama_cpp_gemma_template() {
    check_template(GEMMA3_270M_Q4_K_M, "chat_gemma_llamacpp.json", true);
}
