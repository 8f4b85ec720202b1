//! `kestrel bench` end to end on SmolLM2: llama-bench's test names and JSON fields, and `-d`
//! (tests after that many cached tokens).

use std::process::Command;

use kestrel_gguf::models::{test_model, SMOLLM2_135M_Q4_1};
use serde_json::Value;

#[test]
fn bench_at_a_depth_names_its_tests_as_llama_bench_does() {
    let Some(model) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["bench", "-m", model.to_str().unwrap()])
        .args([
            "-p", "16", "-n", "4", "-d", "48", "-r", "2", "-t", "2", "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tests: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = tests
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["test"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pp16 @ d48", "tg4 @ d48"]);
    for t in tests.as_array().unwrap() {
        assert_eq!(t["samples_ns"].as_array().unwrap().len(), 2, "{t}");
        assert!(t["avg_ts"].as_f64().unwrap() > 0.0, "{t}");
    }
    // A depth no context could hold is refused before loading anything.
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["bench", "-m", model.to_str().unwrap(), "-d", "100000000"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--n-depth"));
}
