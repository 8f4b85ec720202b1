//! `kestrel convert` on the all-MiniLM-L6-v2 checkpoint, then `kestrel embed` on the result.

use std::process::Command;

use kestrel_gguf::models::{test_model, MINILM_L6_V2_SAFETENSORS};
use serde_json::Value;

fn kestrel(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn convert_then_embed_prints_vectors_and_similarities() {
    let Some(weights) = test_model(MINILM_L6_V2_SAFETENSORS) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("kestrel-cli-embed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gguf = dir.join("minilm-f16.gguf");
    let ck = weights.parent().unwrap().to_str().unwrap();
    let out = kestrel(&[
        "convert",
        ck,
        "-o",
        gguf.to_str().unwrap(),
        "--outtype",
        "f16",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("bert, 101 tensors"));
    let bad = kestrel(&["convert", ck, "-o", "x.gguf", "--outtype", "q4"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected f32, f16, bf16, q8_0 or auto"));

    let out = kestrel(&[
        "embed",
        "-m",
        gguf.to_str().unwrap(),
        "-t",
        "2",
        "--json",
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "A monkey is playing drums.",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = v["embeddings"].as_array().unwrap();
    assert_eq!(e.len(), 3);
    assert_eq!(e[0].as_array().unwrap().len(), 384);
    let s = |i: usize, j: usize| v["similarity"][i][j].as_f64().unwrap();
    assert!((s(0, 0) - 1.0).abs() < 1e-5);
    // sentence-transformers: 0.755 for the two eating sentences; unrelated ones score lower.
    assert!((s(0, 1) - 0.755).abs() < 0.01, "{}", s(0, 1));
    assert!(s(0, 2) < s(0, 1));
}
