//! Converting Hugging Face checkpoints (a folder with `config.json`, `model.safetensors` and
//! the tokenizer files) to GGUF, written by kestrel's own GGUF writer with the tensor names and
//! metadata llama.cpp's `convert_hf_to_gguf.py` uses, so either engine reads the result.
//!
//! Supported: BERT encoders (`BertModel`, e.g. sentence-transformers' all-MiniLM-L6-v2), F32
//! or F16 output. Everything is held in memory while writing: meant for encoder-sized models.
//!
//! ```no_run
//! use kestrel::convert::{convert_hf, ConvertOptions, OutType};
//! let report = convert_hf(
//!     "models/all-MiniLM-L6-v2".as_ref(),
//!     "all-minilm-l6-v2-f16.gguf".as_ref(),
//!     &ConvertOptions { outtype: OutType::F16 },
//! )?;
//! println!("{} tensors, {} bytes", report.tensors, report.bytes);
//! # Ok::<(), kestrel::convert::ConvertError>(())
//! ```

mod bert;
pub mod safetensors;

use std::path::{Path, PathBuf};

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

/// Element type of the converted matrices (vectors stay F32, as llama.cpp keeps them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutType {
    /// Exact.
    #[default]
    F32,
    /// Half the size.
    F16,
}

impl OutType {
    /// By name (`f32`, `f16`).
    pub fn parse(s: &str) -> Option<OutType> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Some(OutType::F32),
            "f16" => Some(OutType::F16),
            _ => None,
        }
    }
}

/// How to convert.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConvertOptions {
    /// Element type of the matrices.
    pub outtype: OutType,
}

/// What a conversion wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvertReport {
    /// `general.architecture` of the result.
    pub arch: String,
    /// Tensors written.
    pub tensors: usize,
    /// Bytes of the GGUF file.
    pub bytes: u64,
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
            supported: "bert (BertModel)",
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
    })
}
