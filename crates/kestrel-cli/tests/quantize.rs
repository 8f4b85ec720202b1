//! `kestrel quantize`'s per-tensor options and `--dry-run` from the command line (the bytes
//! themselves are checked against llama-quantize in kestrel-generate's quantize_golden.rs).

use std::process::Command;

use kestrel_gguf::models::{test_model, SMOLLM2_135M_Q4_1};

fn kestrel(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(args)
        .output()
        .expect("run kestrel")
}

#[test]
fn dry_run_prints_the_types_and_writes_nothing() {
    let Some(model) = test_model(SMOLLM2_135M_Q4_1) else {
        return;
    };
    let m = model.to_str().unwrap();
    let out = kestrel(&[
        "quantize",
        "--dry-run",
        "--allow-requantize",
        "--output-tensor-type",
        "f16",
        "--tensor-type",
        "ffn_down=q6_k",
        m,
        "Q4_K_M",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("dry run (Q4_K_M)"), "{err}");
    // SmolLM2 ties its output to the token embeddings: they follow --output-tensor-type.
    let line = |name: &str| {
        err.lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no line for {name}: {err}"))
            .to_string()
    };
    assert!(line("token_embd.weight").contains("-> F16"), "{err}");
    assert!(line("blk.0.ffn_down.weight").contains("-> Q6_K"), "{err}");
    // 576-wide rows are not whole 256-blocks: the mix's Q4_K falls back to Q5_0.
    assert!(line("blk.0.ffn_gate.weight").contains("-> Q5_0"), "{err}");
}

#[test]
fn bad_type_options_are_refused_with_the_reason() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["--tensor-type", "attn_q", "in.gguf", "out.gguf", "Q4_0"],
            "PATTERN=TYPE",
        ),
        (
            &[
                "--tensor-type",
                "attn_q=q9_9",
                "in.gguf",
                "out.gguf",
                "Q4_0",
            ],
            "unknown type",
        ),
        (
            &["--output-tensor-type", "q9", "in.gguf", "out.gguf", "Q4_0"],
            "--output-tensor-type",
        ),
        (&["in.gguf", "Q4_0"], "only --dry-run"),
        (
            &["--prune-layers", "1,x", "in.gguf", "out.gguf", "Q4_0"],
            "invalid layer id \"x\"",
        ),
        (
            &["--prune-layers=1,-2", "in.gguf", "out.gguf", "Q4_0"],
            "invalid layer id \"-2\"",
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["quantize"];
        all.extend_from_slice(args);
        let out = kestrel(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
