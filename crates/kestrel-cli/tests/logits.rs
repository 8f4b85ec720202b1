//! `kestrel logits` end to end: raw logits of token ids as JSON, every position or the last,
//! refusals of bad ids and unavailable devices.

use std::process::Command;

use kestrel_gguf::models::{test_model, SMOLLM2_135M_Q4_1};
use serde_json::Value;

fn kestrel(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(args)
        .output()
        .expect("run kestrel")
}

fn logits(args: &[&str]) -> Value {
    let out = kestrel(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

#[test]
fn last_and_all_positions_agree() {
    let Some(path) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let m = path.to_str().unwrap();
    let ids = "504,3575,282,4649,314";
    let last = logits(&["logits", "-m", m, "--ids", ids, "--json", "-t", "2"]);
    let last = last["logits"].as_array().unwrap();
    assert_eq!(last.len(), 49152, "one vocabulary-sized row");
    let all = logits(&[
        "logits",
        "-m",
        m,
        "--ids",
        ids,
        "--json",
        "--all-positions",
        "-t",
        "2",
    ]);
    let rows = all["logits"].as_array().unwrap();
    assert_eq!(rows.len(), 5);
    // Rows do not depend on the other rows of the step (kestrel's batch invariant), so the last
    // position's logits are the same numbers either way.
    assert_eq!(rows[4].as_array().unwrap(), last);
    // The greedy pick after "The capital of France is" is " Paris" (id 7042).
    let best = last
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.as_f64().unwrap().total_cmp(&b.1.as_f64().unwrap()))
        .unwrap()
        .0;
    assert_eq!(best, 7042);
    let text = kestrel(&["logits", "-m", m, "--ids", ids, "--top", "3"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("position 4: 7042:"), "{text}");
}

#[test]
fn bad_ids_and_devices_are_refused() {
    let Some(path) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let m = path.to_str().unwrap();
    let out = kestrel(&["logits", "-m", m, "--ids", "1,99999"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("id 99999 at index 1 is outside the vocabulary of 49152"),
        "{err}"
    );
    let out = kestrel(&["logits", "-m", m, "--ids", "1", "--device", "tpu"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected cpu, cuda, cuda:N or auto"));
    // No GPU here (or no CUDA in this build): a sentence saying which, never a crash.
    let out = kestrel(&["logits", "-m", m, "--ids", "1", "--device", "cuda"]);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("CUDA") || err.contains("cuda"), "{err}");
    }
    let out = kestrel(&["logits", "-m", m, "--ids", ""]);
    assert!(!out.status.success());
}
