//! The official `openai` Python client against the server: chat, chat streaming with usage,
//! completions, embeddings, models, a json_schema response_format, a tool-call round trip and
//! error mapping (tests/python/openai_client.py). `cargo xtask test` installs the client into
//! a virtual environment and sets `KESTREL_PYTHON` and `KESTREL_REQUIRE_OPENAI=1`, so CI cannot
//! pass by skipping; elsewhere the test skips, with a note, when the package is missing.

mod common;

use std::process::Command;

use common::server;
use kestrel_serve::ServeOptions;

#[test]
fn official_openai_python_client() {
    let python = std::env::var("KESTREL_PYTHON").unwrap_or_else(|_| "python3".into());
    let has = Command::new(&python)
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        let required = std::env::var("KESTREL_REQUIRE_OPENAI").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "{python} cannot import openai and KESTREL_REQUIRE_OPENAI=1"
        );
        eprintln!("skipping: {python} has no `openai` package (pip install openai)");
        return;
    }
    let Some(srv) = server(
        1024,
        ServeOptions {
            parallel: 4,
            api_key: Some("sk-test".into()),
            ..ServeOptions::default()
        },
    ) else {
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/openai_client.py");
    let out = Command::new(&python)
        .arg(script)
        .arg(format!("http://{}/v1", srv.addr()))
        .arg("sk-test")
        .arg("smollm2")
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the openai client checks failed:\n{stdout}"
    );
}
