//! Importance matrices: llama.cpp's `llama-imatrix` output (a GGUF file of `<tensor>.in_sum2`
//! and `<tensor>.counts` per weight matrix), read as `llama-quantize` reads it: each entry's
//! per-column sums divided by its count (per expert for 3-d weights; 1 where a count is 0).
//! [`ImatrixSums`] writes such a file.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::QuantizeError;
use crate::{GgmlType, GgufFile, GgufWriter, MetadataValue, Value};

/// One weight matrix's collected activations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImatrixEntry {
    /// Sum of squares of each input column, per expert (`n_expert × width`, one expert for a
    /// dense matrix).
    pub in_sum2: Vec<f32>,
    /// Sum of each input column, laid out as `in_sum2`.
    pub in_sum: Vec<f32>,
    /// Rows seen, per expert.
    pub counts: Vec<f32>,
}

/// What `llama-imatrix` writes: per-matrix sums over a text's tokens, with the text's name and
/// the chunks it was cut into.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImatrixSums {
    /// The texts (`imatrix.datasets`).
    pub datasets: Vec<String>,
    /// Chunks evaluated (`imatrix.chunk_count`).
    pub chunk_count: u32,
    /// Tokens per chunk (`imatrix.chunk_size`).
    pub chunk_size: u32,
    /// The matrices by GGUF tensor name.
    pub entries: BTreeMap<String, ImatrixEntry>,
}

impl ImatrixSums {
    /// Writes the GGUF imatrix file llama-imatrix writes (`general.type = imatrix`; per matrix,
    /// in name order, `<name>.in_sum2` `[width, n_expert]`, `<name>.counts` `[1, n_expert]`,
    /// `<name>.in_sum`; llama-imatrix's per-matrix `.stats` summaries are not written).
    ///
    /// # Errors
    /// An entry whose lengths disagree, or the write failing.
    pub fn write(&self, path: &Path) -> crate::Result<()> {
        let mut w = GgufWriter::new();
        w.add_metadata("general.type", "imatrix");
        w.add_metadata(
            "imatrix.datasets",
            MetadataValue::string_array(self.datasets.iter().cloned()),
        );
        w.add_metadata("imatrix.chunk_count", self.chunk_count);
        w.add_metadata("imatrix.chunk_size", self.chunk_size);
        for (name, e) in &self.entries {
            let n = e.counts.len() as u64;
            if n == 0
                || !(e.in_sum2.len() as u64).is_multiple_of(n)
                || (!e.in_sum.is_empty() && e.in_sum.len() != e.in_sum2.len())
            {
                return Err(crate::GgufError::InvalidWrite(format!(
                    "imatrix entry {name}: {} sums, {} counts",
                    e.in_sum2.len(),
                    e.counts.len()
                )));
            }
            let width = e.in_sum2.len() as u64 / n;
            w.add_f32_tensor(&format!("{name}.in_sum2"), &[width, n], &e.in_sum2)?;
            w.add_f32_tensor(&format!("{name}.counts"), &[1, n], &e.counts)?;
            if !e.in_sum.is_empty() {
                w.add_f32_tensor(&format!("{name}.in_sum"), &[width, n], &e.in_sum)?;
            }
        }
        w.write_file(path)
    }
}

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
