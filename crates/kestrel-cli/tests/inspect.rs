//! `kestrel inspect` end to end: the real models against gguf-dump's view, and bad files.

use std::path::Path;
use std::process::Command;

use kestrel_gguf::models::{test_model, GEMMA3_270M_Q4_K_M, SMOLLM2_135M_Q4_1};
use serde_json::Value;

fn kestrel(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(args)
        .output()
        .expect("run kestrel")
}

fn check_json_against_gguf_dump(file: &str) {
    let Some(path) = test_model(file) else { return };
    let out = kestrel(&["inspect", "--json", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kestrel-gguf/tests/fixtures/gguf-dump")
        .join(file.replace(".gguf", ".json"));
    let want: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let tensors = doc["tensors"].as_array().unwrap();
    let want_tensors = want["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), want_tensors.len());
    assert_eq!(doc["n_tensors"], want["tensor_count"]);
    for (t, w) in tensors.iter().zip(want_tensors) {
        assert_eq!(t["name"], w[0]);
        assert_eq!(t["type"], w[1]);
        assert_eq!(t["shape"], w[2]);
    }
    // Token arrays are summarized without --full.
    let tokens = &doc["metadata"]["tokenizer.ggml.tokens"];
    assert_eq!(tokens["type"], "array");
    assert!(tokens["len"].as_u64().unwrap() > 1000);
    // The histogram adds up.
    let n: u64 = doc["type_histogram"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v["tensors"].as_u64().unwrap())
        .sum();
    assert_eq!(n as usize, tensors.len());
}

#[test]
fn gemma_json_matches_gguf_dump() {
    check_json_against_gguf_dump(GEMMA3_270M_Q4_K_M);
}

#[test]
fn smollm2_json_matches_gguf_dump() {
    check_json_against_gguf_dump(SMOLLM2_135M_Q4_1);
}

#[test]
fn gemma_text_has_histogram_and_summary() {
    let Some(path) = test_model(GEMMA3_270M_Q4_K_M) else {
        return;
    };
    let out = kestrel(&["inspect", path.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "Q5_0       81 tensors",
        "Q4_K       27 tensors",
        "F32       109 tensors",
        "268098176 parameters",
        "architecture: architecture=gemma3",
        "vocab_size=262144",
    ] {
        assert!(text.contains(needle), "missing {needle:?}");
    }
}

#[test]
fn bad_files_exit_1_with_one_error_line() {
    let dir = std::env::temp_dir().join(format!("kestrel-cli-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: [(&str, &[u8]); 4] = [
        ("empty.gguf", b""),
        ("magic.gguf", b"NOPE\x03\0\0\0"),
        (
            "count.gguf",
            b"GGUF\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff\0\0\0\0\0\0\0\0",
        ),
        ("v1.gguf", b"GGUF\x01\0\0\0\0\0\0\0\0\0\0\0"),
    ];
    for (name, bytes) in cases {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        for json in [false, true] {
            let mut args = vec!["inspect", p.to_str().unwrap()];
            if json {
                args.push("--json");
            }
            let out = kestrel(&args);
            assert_eq!(out.status.code(), Some(1), "{name}");
            let err = String::from_utf8(out.stderr).unwrap();
            assert!(
                err.starts_with("error: ") && err.lines().count() == 1,
                "{name}: {err}"
            );
            assert!(out.stdout.is_empty());
        }
    }
    let out = kestrel(&["inspect", dir.join("missing.gguf").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
}
