//! Converting Hugging Face checkpoints (a folder with `config.json`, `model.safetensors` and
//! the tokenizer files) to GGUF, written by kestrel's own GGUF writer with the tensor names and
//! metadata llama.cpp's `convert_hf_to_gguf.py` uses, so either engine reads the result.
//!
//! Supported: decoders (Llama/Mistral/Mixtral, Qwen2/2.5, Qwen2-MoE, Qwen3, Qwen3-MoE, Gemma 2,
//! Gemma 3, Phi-3, SmolLM3, OLMo 2/3, OLMoE, Granite, gpt-oss with its MXFP4 experts; [`decoder`]) with their
//! tokenizers (BPE `tokenizer.json` with the pre-tokenizer name llama.cpp would choose, or a
//! SentencePiece `tokenizer.model`), streamed from the memory-mapped shards to F32, F16, BF16
//! or Q8_0; and BERT encoders (`BertModel`, e.g. sentence-transformers' all-MiniLM-L6-v2), F32
//! or F16, held in memory (encoder-sized). Anything else is refused with the list of what is
//! supported.
//!
//! ```no_run
//! use kestrel::convert::{convert_hf, ConvertOptions, OutType};
//! let report = convert_hf(
//!     "models/all-MiniLM-L6-v2".as_ref(),
//!     "all-minilm-l6-v2-f16.gguf".as_ref(),
//!     &ConvertOptions::new(OutType::F16),
//! )?;
//! println!("{} tensors, {} bytes", report.tensors, report.bytes);
//! # Ok::<(), kestrel::convert::ConvertError>(())
//! ```

mod bert;
pub mod checkpoint;
mod decoder;
mod general;
mod meta;
mod model_card;
mod model_id;
mod overrides;
pub mod safetensors;
mod split;
mod vocab;

use std::path::{Path, PathBuf};

use safetensors::StDType;
pub use split::Split;

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// An input file that is missing, unreadable or malformed.
    #[error("{}: {reason}", path.display())]
    Input {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A model kind the converter does not know.
    #[error("cannot convert {model_type:?} models (supported: {supported})")]
    Unsupported {
        /// `config.json`'s `model_type` / `architectures`.
        model_type: String,
        /// What is supported.
        supported: &'static str,
    },
    /// Writing the GGUF file.
    #[error(transparent)]
    Write(#[from] kestrel_gguf::GgufError),
}

/// Element type of the converted matrices (vectors, norms and biases stay F32, as llama.cpp
/// keeps them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutType {
    /// Exact.
    #[default]
    F32,
    /// Half the size (IEEE half).
    F16,
    /// Half the size (bfloat16; decoders only).
    BF16,
    /// 8-bit blocks (decoders only; matrices whose rows are not whole blocks get F16, as
    /// llama.cpp does).
    Q8_0,
    /// The checkpoint's own 16-bit type, as llama.cpp's `--outtype auto` guesses it: the first
    /// matrix (in converter order) stored as BF16 or F16 decides; all-F32 checkpoints get F16.
    Auto,
}

impl OutType {
    /// By name (`f32`, `f16`, `bf16`, `q8_0`, `auto`).
    pub fn parse(s: &str) -> Option<OutType> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Some(OutType::F32),
            "f16" => Some(OutType::F16),
            "bf16" => Some(OutType::BF16),
            "q8_0" => Some(OutType::Q8_0),
            "auto" => Some(OutType::Auto),
            _ => None,
        }
    }

    /// llama.cpp's `general.file_type` for a file of this type.
    pub fn file_type(self) -> u32 {
        match self {
            OutType::F32 => 0,
            OutType::F16 => 1,
            OutType::Q8_0 => 7,
            OutType::BF16 => 32,
            // Resolved before anything is written; llama.cpp's GUESSED.
            OutType::Auto => 1024,
        }
    }

    /// `Auto` resolved against the checkpoint in `dir` (other types as they are).
    ///
    /// # Errors
    /// An unreadable checkpoint.
    pub fn resolve(self, dir: &Path) -> Result<OutType, ConvertError> {
        if self != OutType::Auto {
            return Ok(self);
        }
        let ck = checkpoint::Checkpoint::open(dir)?;
        for name in ck.names() {
            match ck.info(name) {
                Some((_, shape)) if shape.len() < 2 => continue,
                Some((StDType::BF16, _)) => return Ok(OutType::BF16),
                Some((StDType::F16, _)) => return Ok(OutType::F16),
                _ => continue,
            }
        }
        Ok(OutType::F16)
    }
}

/// How to convert.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConvertOptions {
    /// Element type of the matrices.
    pub outtype: OutType,
    /// Draw a progress bar on standard error while writing tensors.
    pub progress: bool,
    /// Split the output into several files (decoders and adapters; default: one file).
    pub split: Split,
    /// Write only the vocabulary and the metadata, no tensors (decoders; `--vocab-only`).
    pub vocab_only: bool,
    /// `general.name`, over what the checkpoint gives (decoders; `--model-name`).
    pub model_name: Option<String>,
    /// A JSON file of `general.*` values over what the checkpoint gives (decoders;
    /// `--metadata`, llama.cpp's authorship override file).
    pub metadata: Option<PathBuf>,
    /// Matrices stored in FP8 in the checkpoint are written as Q8_0 whatever `outtype` says
    /// (decoders; `--fp8-as-q8`).
    pub fp8_as_q8: bool,
    /// Each layer's Q, K and V written as one `attn_qkv` (decoders; `--fuse-qkv`).
    pub fuse_qkv: bool,
}

impl ConvertOptions {
    /// Options with this output type and no progress bar.
    pub fn new(outtype: OutType) -> ConvertOptions {
        ConvertOptions {
            outtype,
            progress: false,
            split: Split::default(),
            vocab_only: false,
            model_name: None,
            metadata: None,
            fp8_as_q8: false,
            fuse_qkv: false,
        }
    }

    /// With or without a progress bar.
    pub fn with_progress(mut self, on: bool) -> ConvertOptions {
        self.progress = on;
        self
    }

    /// Only the vocabulary and metadata, or everything.
    pub fn with_vocab_only(mut self, on: bool) -> ConvertOptions {
        self.vocab_only = on;
        self
    }

    /// `general.name` as given.
    pub fn with_model_name(mut self, name: Option<String>) -> ConvertOptions {
        self.model_name = name;
        self
    }

    /// `general.*` values from a JSON file over the checkpoint's.
    pub fn with_metadata(mut self, path: Option<PathBuf>) -> ConvertOptions {
        self.metadata = path;
        self
    }

    /// FP8 matrices as Q8_0, or as `outtype` says.
    pub fn with_fp8_as_q8(mut self, on: bool) -> ConvertOptions {
        self.fp8_as_q8 = on;
        self
    }

    /// Q, K and V fused into one `attn_qkv` per layer, or separate.
    pub fn with_fuse_qkv(mut self, on: bool) -> ConvertOptions {
        self.fuse_qkv = on;
        self
    }

    /// Split the output as `split` says.
    pub fn with_split(mut self, split: Split) -> ConvertOptions {
        self.split = split;
        self
    }
}

/// A progress bar over `total` bytes, hidden unless `on`.
pub(crate) fn progress_bar(on: bool, total: u64) -> indicatif::ProgressBar {
    if !on {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message("writing");
    bar
}

/// What a conversion wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvertReport {
    /// `general.architecture` of the result.
    pub arch: String,
    /// Tensors written.
    pub tensors: usize,
    /// Bytes of the GGUF file (of all its files when split).
    pub bytes: u64,
    /// The files written: the output path, or its shards in order when split.
    pub files: Vec<PathBuf>,
}

/// Read a JSON file of the checkpoint folder.
pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value, ConvertError> {
    let bad = |reason: String| ConvertError::Input {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    if meta.len() > 64 << 20 {
        return Err(bad(format!(
            "{} bytes is too large for a config",
            meta.len()
        )));
    }
    let text = std::fs::read(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    serde_json::from_slice(&text).map_err(|e| bad(format!("not JSON: {e}")))
}

/// Convert the checkpoint in `dir` to a GGUF file at `out`.
///
/// # Errors
/// [`ConvertError`] naming the file and field that stopped it.
pub fn convert_hf(
    dir: &Path,
    out: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertReport, ConvertError> {
    let config_path = dir.join("config.json");
    let config = read_json(&config_path)?;
    let resolved;
    let opts = if opts.outtype == OutType::Auto {
        resolved = ConvertOptions {
            outtype: opts.outtype.resolve(dir)?,
            ..opts.clone()
        };
        &resolved
    } else {
        opts
    };
    let model_type = config
        .get("model_type")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    let archs: Vec<&str> = config
        .get("architectures")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    if let Some((family, hf_arch)) = archs
        .first()
        .and_then(|a| decoder::Family::of(a).map(|f| (f, *a)))
    {
        return decoder::convert(dir, out, family, hf_arch, &config, opts);
    }
    let is_bert = model_type == "bert"
        || archs.iter().any(|a| {
            matches!(
                *a,
                "BertModel" | "BertForMaskedLM" | "BertForSequenceClassification"
            )
        });
    if !is_bert {
        return Err(ConvertError::Unsupported {
            model_type: if model_type.is_empty() {
                archs.join(",")
            } else {
                model_type
            },
            supported: decoder::SUPPORTED,
        });
    }
    if !matches!(opts.outtype, OutType::F32 | OutType::F16) {
        return Err(ConvertError::Input {
            path: config_path,
            reason: format!(
                "BERT encoders convert to f32 or f16, not {:?}",
                opts.outtype
            ),
        });
    }
    if opts.split.is_set()
        || opts.vocab_only
        || opts.model_name.is_some()
        || opts.metadata.is_some()
    {
        return Err(ConvertError::Input {
            path: config_path,
            reason: "BERT encoders take no split, vocabulary-only or metadata options".into(),
        });
    }
    let (writer, tensors) = bert::convert(dir, &config, opts)?;
    let tmp = out.with_extension("gguf.partial");
    if let Err(e) = writer.write_file(&tmp) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    std::fs::rename(&tmp, out).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        ConvertError::Input {
            path: out.to_path_buf(),
            reason: format!("cannot move the written file into place: {e}"),
        }
    })?;
    let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    Ok(ConvertReport {
        arch: "bert".into(),
        tensors,
        bytes,
        files: vec![out.to_path_buf()],
    })
}

/// Convert the PEFT LoRA adapter in `adapter` (`adapter_config.json`,
/// `adapter_model.safetensors`) for the base model whose `config.json` is in `base` to a GGUF
/// adapter at `out`, as llama.cpp's `convert_lora_to_gguf.py` does (its default output type is
/// `f32`).
///
/// # Errors
/// [`ConvertError`] naming the file and field that stopped it.
pub fn convert_lora(
    adapter: &Path,
    base: &Path,
    out: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertReport, ConvertError> {
    if opts.vocab_only || opts.model_name.is_some() || opts.metadata.is_some() {
        return Err(ConvertError::Input {
            path: adapter.to_path_buf(),
            reason: "--vocab-only, --model-name and --metadata are for models, not adapters \
                     (llama.cpp's adapter converter has none of them)"
                .into(),
        });
    }
    decoder::convert_lora(adapter, base, out, opts)
}

/// A per-layer checkpoint tensor's `(layer, module, "weight" | "bias")`: `name` is
/// `{prefix}{layer}.{module}.{kind}` (`model.layers.`, `transformer.h.`, `encoder.layer.`).
pub(crate) fn layer_tensor<'a>(name: &'a str, prefix: &str) -> Option<(usize, &'a str, &'a str)> {
    let rest = name.strip_prefix(prefix)?;
    let (layer, tail) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = tail.rsplit_once('.')?;
    (kind == "weight" || kind == "bias").then_some((layer, module, kind))
}
