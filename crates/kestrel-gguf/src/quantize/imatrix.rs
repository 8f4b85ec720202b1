//! Importance matrices: llama.cpp's `llama-imatrix` output (a GGUF file of `<tensor>.in_sum2`
//! and `<tensor>.counts` per weight matrix), read as `llama-quantize` reads it: each entry's
//! per-column sums divided by its count (per expert for 3-d weights; 1 where a count is 0).

use std::collections::HashMap;
use std::path::Path;

use super::QuantizeError;
use crate::{GgmlType, GgufFile, Value};

/// An importance matrix: for each weight matrix, one weight per input column (per expert).
#[derive(Clone, Debug, Default)]
pub struct Imatrix {
    /// The file name as given (written to `quantize.imatrix.file`).
    pub file: String,
    /// The texts it was computed on (`imatrix.datasets`).
    pub datasets: Vec<String>,
    /// Chunks it was computed on (`imatrix.chunk_count`).
    pub chunks: u32,
    /// Weights by tensor name.
    pub entries: HashMap<String, Vec<f32>>,
}

impl Imatrix {
    /// Reads a GGUF imatrix file (`llama-imatrix` since b5900; the older `.dat` format is
    /// refused).
    pub fn load(path: &Path) -> Result<Imatrix, QuantizeError> {
        let bad = |why: String| {
            QuantizeError::Refused(format!("importance matrix {}: {why}", path.display()))
        };
        let file = GgufFile::open(path).map_err(|e| bad(e.to_string()))?;
        let md = file.metadata();
        if md.get_str("general.type").ok() != Some("imatrix") {
            return Err(bad(
                "not a GGUF imatrix (general.type is not \"imatrix\"; the legacy .dat format is not read)"
                    .into(),
            ));
        }
        let datasets = match md.get("imatrix.datasets") {
            Some(Value::Array(a)) => a
                .strings()
                .map(|it| {
                    it.map(|s| String::from_utf8_lossy(s).into_owned())
                        .collect()
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        let chunks = md.get_u32("imatrix.chunk_count").unwrap_or(0);
        let f32s = |name: &str| -> Result<Vec<f32>, QuantizeError> {
            let t = file.tensor(name).map_err(|e| bad(e.to_string()))?;
            if t.info.ggml_type() != GgmlType::F32 {
                return Err(bad(format!("{name} is {}, not F32", t.info.ggml_type())));
            }
            Ok(t.data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect())
        };
        let mut entries = HashMap::new();
        for t in file.tensors() {
            let Some(name) = t.name().strip_suffix(".in_sum2") else {
                continue;
            };
            let sums = f32s(t.name())?;
            let counts = f32s(&format!("{name}.counts"))?;
            if counts.is_empty() || !sums.len().is_multiple_of(counts.len()) {
                return Err(bad(format!(
                    "{name}: {} sums for {} counts",
                    sums.len(),
                    counts.len()
                )));
            }
            let ne0 = sums.len() / counts.len();
            let mut e = vec![0f32; sums.len()];
            for (j, &count) in counts.iter().enumerate() {
                for i in 0..ne0 {
                    e[j * ne0 + i] = if count > 0.0 {
                        sums[j * ne0 + i] / count
                    } else {
                        1.0
                    };
                }
            }
            if e.iter().any(|v| !v.is_finite()) {
                return Err(bad(format!("{name} holds a non-finite value")));
            }
            entries.insert(name.to_string(), e);
        }
        Ok(Imatrix {
            file: path.to_string_lossy().into_owned(),
            datasets,
            chunks,
            entries,
        })
    }
}
