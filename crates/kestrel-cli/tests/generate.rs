//! `kestrel run` with sampling flags and a JSON Schema, and `kestrel chat` fed from stdin, end
//! to end on SmolLM2.

use std::io::Write;
use std::process::{Command, Stdio};

use kestrel_gguf::models::{test_model, SMOLLM2_135M_Q4_1};
use serde_json::Value;

#[test]
fn run_with_a_json_schema_prints_a_valid_document() {
    let Some(model) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("kestrel-cli-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("city.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"city":{"type":"string"},
            "population":{"type":"integer","minimum":0}},"required":["city","population"]}"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args([
            "run",
            "-m",
            model.to_str().unwrap(),
            "-p",
            "A city as JSON:",
        ])
        .args(["--temp", "1.0", "-s", "3", "-n", "64", "--json", "-j"])
        .arg(&schema)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = report["text"].as_str().unwrap();
    let doc: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    assert!(doc["city"].is_string(), "{doc}");
    assert!(doc["population"].as_u64().is_some(), "{doc}");
    assert!(report["finish_reason"].is_string());
}

#[test]
fn chat_answers_each_line_in_one_session() {
    let Some(model) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args([
            "chat",
            "-m",
            model.to_str().unwrap(),
            "--temp",
            "0",
            "-n",
            "16",
        ])
        .args(["--system", "You are a terse assistant.", "--stats"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Name a fruit.\nWhat is the capital of France?\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("Paris"), "{text}");
    // the second turn reuses the first turn's cached prefix
    let cached: Vec<u64> = text
        .match_indices(" cached")
        .filter_map(|(i, _)| text[..i].rsplit('(').next()?.trim().parse().ok())
        .collect();
    assert_eq!(cached.len(), 2, "{text}");
    assert_eq!(cached[0], 0);
    assert!(cached[1] > 0, "{text}");
}
