//! Where kestrel keeps models: `$KESTREL_HOME` (default `~/.cache/kestrel`), and the test models
//! that `cargo xtask fetch-models` puts in `$KESTREL_HOME/models`.

use std::path::PathBuf;

/// File name of the Gemma 3 270M Q4_K_M test model.
pub const GEMMA3_270M_Q4_K_M: &str = "gemma-3-270m-q4_k_m.gguf";
/// File name of the SmolLM2 135M Instruct Q4_1 test model.
pub const SMOLLM2_135M_Q4_1: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The all-MiniLM-L6-v2 Hugging Face checkpoint (a folder; this is its weights file), which the
/// encoder tests convert to GGUF.
pub const MINILM_L6_V2_SAFETENSORS: &str = "all-minilm-l6-v2/model.safetensors";
/// Qwen 1's tiktoken vocabulary (`qwen.tiktoken`), which the converter tests build a Qwen 1
/// checkpoint around.
pub const QWEN_TIKTOKEN: &str = "qwen/qwen.tiktoken";

/// kestrel's home: `$KESTREL_HOME`, else `$HOME/.cache/kestrel`, else `./.kestrel`.
pub fn kestrel_home() -> PathBuf {
    if let Some(h) = std::env::var_os("KESTREL_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("kestrel"),
        None => PathBuf::from(".kestrel"),
    }
}

/// The model cache: `kestrel_home()/models`.
pub fn models_dir() -> PathBuf {
    kestrel_home().join("models")
}

/// For tests: the path of a fetched test model, or `None` (with a note on stderr) when it has not
/// been fetched. When `KESTREL_REQUIRE_MODELS=1` (as `cargo xtask test` sets), a missing model
/// panics instead, so CI cannot pass by skipping.
pub fn test_model(file: &str) -> Option<PathBuf> {
    let p = models_dir().join(file);
    if p.is_file() {
        return Some(p);
    }
    let required = std::env::var("KESTREL_REQUIRE_MODELS").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "test model {} is missing and KESTREL_REQUIRE_MODELS=1: run `cargo xtask fetch-models`",
        p.display()
    );
    eprintln!(
        "skipping: test model {} not found (run `cargo xtask fetch-models`)",
        p.display()
    );
    None
}
