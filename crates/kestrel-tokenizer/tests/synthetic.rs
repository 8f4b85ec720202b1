//! Small synthetic vocabularies written as GGUF files: the error for an unknown pre-tokenizer,
//! WordPiece, and SentencePiece's leading-space rules. They need no downloaded model.

use std::path::PathBuf;

use kestrel_gguf::{GgufWriter, MetadataValue};
use kestrel_tokenizer::{
    DecodeOptions, EncodeOptions, Tokenizer, TokenizerError, TokenizerOptions,
};

fn write(name: &str, kv: Vec<(&str, MetadataValue)>) -> PathBuf {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama");
    for (k, v) in kv {
        w.add_metadata(k, v);
    }
    let path = std::env::temp_dir().join(format!("kestrel-tok-{}-{name}.gguf", std::process::id()));
    w.write_file(&path).expect("writes");
    path
}

#[test]
fn unknown_pre_is_an_error_naming_it_unless_allowed() {
    let toks = ["a", "b", "ab", "Ġ"];
    let path = write(
        "pre",
        vec![
            ("tokenizer.ggml.model", "gpt2".into()),
            ("tokenizer.ggml.pre", "no-such-pre".into()),
            ("tokenizer.ggml.tokens", MetadataValue::string_array(toks)),
            (
                "tokenizer.ggml.merges",
                MetadataValue::string_array(["a b"]),
            ),
        ],
    );
    let err = Tokenizer::from_file(&path).expect_err("unknown pre");
    assert!(
        matches!(&err, TokenizerError::UnknownPreTokenizer(p) if p == "no-such-pre"),
        "{err}"
    );
    assert!(err.to_string().contains("no-such-pre"));
    let tok = Tokenizer::from_file_with(&path, TokenizerOptions::default().allow_unknown_pre(true))
        .expect("falls back to the default pre-tokenizer");
    let ids = tok
        .encode("ab", EncodeOptions::default().add_special(false))
        .expect("encodes");
    assert_eq!(ids, [2]);
    let _ = std::fs::remove_file(path);
}

#[test]
fn unsupported_model_is_an_error() {
    let path = write(
        "model",
        vec![
            ("tokenizer.ggml.model", "rwkv".into()),
            ("tokenizer.ggml.tokens", MetadataValue::string_array(["a"])),
        ],
    );
    let err = Tokenizer::from_file(&path).expect_err("unsupported");
    assert!(
        matches!(err, TokenizerError::UnsupportedModel(ref m) if m == "rwkv"),
        "{err}"
    );
    let _ = std::fs::remove_file(path);
}

#[test]
fn wordpiece_greedy_longest_match() {
    let toks = [
        "[UNK]", "[CLS]", "[SEP]", "▁hello", "▁world", "▁,", "▁!", "▁wor", "ld",
    ];
    let path = write(
        "bert",
        vec![
            ("tokenizer.ggml.model", "bert".into()),
            ("tokenizer.ggml.tokens", MetadataValue::string_array(toks)),
            ("tokenizer.ggml.unknown_token_id", 0u32.into()),
            ("tokenizer.ggml.bos_token_id", 1u32.into()),
            ("tokenizer.ggml.seperator_token_id", 2u32.into()),
            ("tokenizer.ggml.normalizer.lowercase", true.into()),
        ],
    );
    let tok = Tokenizer::from_file(&path).expect("loads");
    let ids = tok
        .encode("Hello, World! xyz", EncodeOptions::default())
        .expect("encodes");
    assert_eq!(ids, [1, 3, 5, 4, 6, 0, 2]);
    let _ = std::fs::remove_file(path);
}

#[test]
fn sentencepiece_space_prefix_and_its_removal() {
    let toks = ["<unk>", "<s>", "</s>", "▁", "▁a", "b", "▁ab", "<0x63>"];
    let types: Vec<i32> = vec![2, 3, 3, 1, 1, 1, 1, 6];
    let scores: Vec<f32> = vec![0.0, 0.0, 0.0, -5.0, -1.0, -2.0, -10.0, 0.0];
    let path = write(
        "spm",
        vec![
            ("tokenizer.ggml.model", "llama".into()),
            ("tokenizer.ggml.tokens", MetadataValue::string_array(toks)),
            ("tokenizer.ggml.token_type", MetadataValue::i32_array(types)),
            ("tokenizer.ggml.scores", MetadataValue::f32_array(scores)),
        ],
    );
    let tok = Tokenizer::from_file(&path).expect("loads");
    assert!(tok.add_bos() && tok.add_space_prefix());
    // " abc" -> ▁ a b c: (▁,a) is the only pair that is a token, then (▁a,b) -> ▁ab;
    // "c" has no token and falls back to its byte
    let ids = tok
        .encode("abc", EncodeOptions::default())
        .expect("encodes");
    assert_eq!(ids, [1, 6, 7]);
    // the prefixed space is stripped from the first piece, unless BOS comes first
    assert_eq!(
        tok.decode(&ids[1..], DecodeOptions::default())
            .expect("decodes"),
        "abc"
    );
    assert_eq!(
        tok.decode(&ids, DecodeOptions::default()).expect("decodes"),
        " abc"
    );
    assert_eq!(
        tok.decode(&ids, DecodeOptions::default().special(true))
            .expect("decodes"),
        "<s> abc"
    );
    assert!(matches!(
        tok.decode(&[99], DecodeOptions::default()),
        Err(TokenizerError::TokenOutOfRange { id: 99, .. })
    ));
    let _ = std::fs::remove_file(path);
}
