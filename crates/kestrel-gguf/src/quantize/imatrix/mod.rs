//! Importance matrices: llama.cpp's `llama-imatrix` output (a GGUF file of `<tensor>.in_sum2`
//! and `<tensor>.counts` per weight matrix, or the legacy `.dat` format), read as
//! `llama-quantize` reads it: each entry's per-column sums divided by its count (per expert for
//! 3-d weights; 1 where a count is 0).
//! [`ImatrixSums`] reads, combines (`llama-imatrix --in-file`) and writes such files, with the
//! per-matrix statistics llama-imatrix stores beside the sums.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

mod entry;
pub(super) mod legacy;
pub(super) mod report;
mod stats;

use super::QuantizeError;
use crate::{GgmlType, GgufFile, GgufWriter, MetadataValue, Value};
pub use entry::ImatrixEntry;
use stats::{tensor_stats, STATS_SCHEMA};

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
    /// How many of the top blocks are NextN (multi-token prediction) blocks
    /// (`imatrix.n_layer_nextn`, written when not 0): their statistics are not compared with
    /// the blocks below them.
    pub n_layer_nextn: u32,
    /// The matrices by GGUF tensor name.
    pub entries: BTreeMap<String, ImatrixEntry>,
}

impl ImatrixSums {
    /// Writes the GGUF imatrix file llama-imatrix writes (`general.type = imatrix`; per matrix,
    /// in name order, `<name>.in_sum2` `[width, n_expert]`, `<name>.counts` `[1, n_expert]` (a
    /// dense matrix's `[width]` and `[1]`),
    /// `<name>.in_sum` where collected, and `<name>.stats`: the 12 summaries named by
    /// `imatrix.stats_schema`, computed as llama-imatrix computes them). From the same sums the
    /// file is byte for byte llama-imatrix's.
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
        if self.n_layer_nextn > 0 {
            w.add_metadata("imatrix.n_layer_nextn", self.n_layer_nextn);
        }
        w.add_metadata(
            "imatrix.stats_schema",
            MetadataValue::string_array(STATS_SCHEMA),
        );
        let stats = tensor_stats(&self.entries, self.n_layer_nextn);
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
            // ggml stores the dimensions up to the last that is not 1
            let (sums_shape, counts_shape) = if n == 1 {
                (vec![e.in_sum2.len() as u64], vec![1])
            } else {
                (vec![e.in_sum2.len() as u64 / n, n], vec![1, n])
            };
            w.add_f32_tensor(&format!("{name}.in_sum2"), &sums_shape, &e.in_sum2)?;
            w.add_f32_tensor(&format!("{name}.counts"), &counts_shape, &e.counts)?;
            if !e.in_sum.is_empty() {
                w.add_f32_tensor(&format!("{name}.in_sum"), &sums_shape, &e.in_sum)?;
            }
            let st = stats.get(name.as_str()).copied().unwrap_or([0.0; 12]);
            w.add_f32_tensor(&format!("{name}.stats"), &[12], &st)?;
        }
        w.write_file(path)
    }

    /// Reads the sums of an imatrix file as `llama-imatrix --in-file` reads them (counts
    /// rounded to whole rows; `in_sum` kept where the file has it); a legacy `.dat` file as
    /// [`load_with_chunk_size`](Self::load_with_chunk_size) reads it with llama-imatrix's
    /// default chunk size, 512.
    ///
    /// # Errors
    /// Not an imatrix file, no entries, an entry without its sums or counts, non-F32 sums, sums
    /// and counts whose lengths disagree.
    pub fn load(path: &Path) -> Result<ImatrixSums, QuantizeError> {
        Self::load_with_chunk_size(path, 512)
    }

    /// As [`load`](Self::load), with `chunk_size` the chunk size in force when llama-imatrix
    /// reads the file (the first GGUF file's that has one, else its `-c`): a legacy `.dat`
    /// file's values (means over its calls) and call counts are multiplied by it, as
    /// llama-imatrix turns them back into sums over rows; it has no `in_sum` and no chunk size.
    ///
    /// # Errors
    /// As [`load`](Self::load).
    pub fn load_with_chunk_size(
        path: &Path,
        chunk_size: u32,
    ) -> Result<ImatrixSums, QuantizeError> {
        let bad = |why: String| {
            QuantizeError::Refused(format!("importance matrix {}: {why}", path.display()))
        };
        if !is_gguf(path).map_err(|e| bad(e.to_string()))? {
            return Self::load_legacy(path, chunk_size);
        }
        let file = GgufFile::open(path).map_err(|e| bad(e.to_string()))?;
        let md = file.metadata();
        let mut out = ImatrixSums {
            datasets: string_list(md.get("imatrix.datasets")),
            chunk_count: md.get_u32("imatrix.chunk_count").unwrap_or(0),
            chunk_size: md.get_u32("imatrix.chunk_size").unwrap_or(0),
            n_layer_nextn: md.get_u32("imatrix.n_layer_nextn").unwrap_or(0),
            entries: BTreeMap::new(),
        };
        let f32s = |name: &str| -> Result<Option<Vec<f32>>, QuantizeError> {
            let Ok(t) = file.tensor(name) else {
                return Ok(None);
            };
            if t.info.ggml_type() != GgmlType::F32 {
                return Err(bad(format!("{name} is {}, not F32", t.info.ggml_type())));
            }
            Ok(Some(
                t.data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            ))
        };
        let mut names: Vec<&str> = file
            .tensors()
            .iter()
            .filter_map(|t| {
                let n = t.name();
                n.strip_suffix(".in_sum2")
                    .or_else(|| n.strip_suffix(".in_sum"))
                    .or_else(|| n.strip_suffix(".counts"))
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let sums = f32s(&format!("{name}.in_sum2"))?;
            let counts = f32s(&format!("{name}.counts"))?;
            let act = f32s(&format!("{name}.in_sum"))?;
            let (Some(in_sum2), Some(counts)) = (sums, counts) else {
                return Err(bad(format!("{name}: sums or counts missing")));
            };
            if act.as_ref().is_some_and(|a| a.len() != in_sum2.len()) {
                return Err(bad(format!("{name}: in_sum and in_sum2 differ in length")));
            }
            let counts = counts.iter().map(|&c| c.round() as i64 as f32).collect();
            out.entries.insert(
                name.to_string(),
                ImatrixEntry {
                    in_sum2,
                    in_sum: act.unwrap_or_default(),
                    counts,
                },
            );
        }
        if out.entries.is_empty() {
            return Err(bad("no imatrix entries (<name>.in_sum2)".into()));
        }
        Ok(out)
    }

    fn load_legacy(path: &Path, chunk_size: u32) -> Result<ImatrixSums, QuantizeError> {
        let legacy = legacy::read(path)?;
        let scale = chunk_size as f32;
        let mut entries = BTreeMap::new();
        for e in legacy.entries {
            let entry = ImatrixEntry {
                // llama-imatrix: `sums[j] * chunk_size` (f32) and `ncall * chunk_size` (i64).
                in_sum2: e.values.iter().map(|v| v * scale).collect(),
                in_sum: Vec::new(),
                counts: vec![(i64::from(e.ncall) * i64::from(chunk_size)) as f32],
            };
            entries.insert(e.name, entry);
        }
        Ok(ImatrixSums {
            datasets: legacy.dataset.into_iter().collect(),
            chunk_count: u32::try_from(legacy.chunk_count).unwrap_or(0),
            chunk_size: 0,
            n_layer_nextn: 0,
            entries,
        })
    }

    /// Combines `path` into these as llama-imatrix's `--in-file` does, `ctx` its `-c`: a
    /// legacy file is scaled by the chunk size in force (these sums', else `ctx`).
    ///
    /// # Errors
    /// As [`load`](Self::load) and [`combine`](Self::combine).
    pub fn combine_file(&mut self, path: &Path, ctx: u32) -> Result<(), QuantizeError> {
        let chunk = if self.chunk_size > 0 {
            self.chunk_size
        } else {
            ctx
        };
        self.combine(Self::load_with_chunk_size(path, chunk)?)
    }

    /// What llama-imatrix writes after combining files without a text, `ctx` its `-c`: the
    /// chunk size the files gave, else `ctx`, and the chunks recounted in it.
    pub fn finish_combined(&mut self, ctx: u32) {
        if self.chunk_size == 0 {
            self.chunk_size = ctx;
        }
        self.count_chunks();
    }

    /// Adds `other`'s sums to these as `llama-imatrix --in-file A,B` combines files: sums and
    /// counts added per entry (a one-count entry broadcast over experts when the next has
    /// several), `in_sum` kept only where every contribution has it, datasets appended, the
    /// first chunk size and NextN count kept, and the chunk count recomputed from the counts.
    ///
    /// # Errors
    /// An entry whose sums, counts or `in_sum` lengths differ between the two.
    pub fn combine(&mut self, other: ImatrixSums) -> Result<(), QuantizeError> {
        if self.n_layer_nextn == 0 {
            self.n_layer_nextn = other.n_layer_nextn;
        }
        if self.chunk_size == 0 {
            self.chunk_size = other.chunk_size;
        }
        let other_chunks = other.chunk_count;
        for (name, x) in other.entries {
            let bad = |what: &str, a: usize, b: usize| {
                QuantizeError::Refused(format!(
                    "importance matrices: {name}: {what} {a} and {b} do not combine"
                ))
            };
            let e = self.entries.entry(name.clone()).or_default();
            let first = e.in_sum2.is_empty();
            if first {
                e.in_sum2 = vec![0.0; x.in_sum2.len()];
            } else if e.in_sum2.len() != x.in_sum2.len() {
                return Err(bad("sums of length", e.in_sum2.len(), x.in_sum2.len()));
            }
            if e.counts.is_empty() {
                e.counts = vec![0.0; x.counts.len()];
            } else if e.counts.len() == 1 && x.counts.len() > 1 {
                e.counts = vec![e.counts[0]; x.counts.len()];
            } else if e.counts.len() != x.counts.len() {
                return Err(bad("counts of length", e.counts.len(), x.counts.len()));
            }
            for (a, b) in e.in_sum2.iter_mut().zip(&x.in_sum2) {
                *a += b;
            }
            for (a, b) in e.counts.iter_mut().zip(&x.counts) {
                *a = (*a as i64 + *b as i64) as f32;
            }
            if !x.in_sum.is_empty() && (first || !e.in_sum.is_empty()) {
                if e.in_sum.is_empty() {
                    e.in_sum = vec![0.0; x.in_sum.len()];
                }
                if e.in_sum.len() != x.in_sum.len() || x.in_sum.len() != x.in_sum2.len() {
                    return Err(bad("in_sum of length", e.in_sum.len(), x.in_sum.len()));
                }
                for (a, b) in e.in_sum.iter_mut().zip(&x.in_sum) {
                    *a += b;
                }
            } else {
                e.in_sum.clear();
            }
        }
        self.datasets.extend(other.datasets);
        if self.chunk_size > 0 {
            self.count_chunks();
        } else {
            self.chunk_count += other_chunks;
        }
        Ok(())
    }

    /// Sets `chunk_count` as llama-imatrix does: the most rows any matrix (expert) counted, in
    /// chunks of `chunk_size`, rounded to the nearest.
    pub fn count_chunks(&mut self) {
        let rows = self
            .entries
            .values()
            .flat_map(|e| e.counts.iter())
            .map(|&c| c as i64)
            .max()
            .unwrap_or(0);
        let size = i64::from(self.chunk_size.max(1));
        self.chunk_count = u32::try_from((rows + size / 2) / size).unwrap_or(u32::MAX);
    }
}

/// The strings of an array value (empty for anything else).
fn string_list(v: Option<Value>) -> Vec<String> {
    match v {
        Some(Value::Array(a)) => a
            .strings()
            .map(|it| {
                it.map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Whether `path` starts with GGUF's magic (else it is read as the legacy `.dat` format, as
/// llama.cpp's loader falls back to it).
fn is_gguf(path: &Path) -> std::io::Result<bool> {
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path)?;
    let mut n = 0;
    while n < 4 {
        match std::io::Read::read(&mut f, &mut magic[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n == 4 && &magic == b"GGUF")
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
    /// Reads an imatrix file as `llama-quantize` does: GGUF (`llama-imatrix` since b5900), or
    /// the legacy `.dat` format (any file that does not start with GGUF's magic), whose values
    /// are divided by their call count.
    pub fn load(path: &Path) -> Result<Imatrix, QuantizeError> {
        let bad = |why: String| {
            QuantizeError::Refused(format!("importance matrix {}: {why}", path.display()))
        };
        if !is_gguf(path).map_err(|e| bad(e.to_string()))? {
            return Self::load_legacy(path);
        }
        let file = GgufFile::open(path).map_err(|e| bad(e.to_string()))?;
        let md = file.metadata();
        if md.get_str("general.type").ok() != Some("imatrix") {
            return Err(bad(
                "a GGUF file that is not an imatrix (general.type is not \"imatrix\")".into(),
            ));
        }
        let datasets = string_list(md.get("imatrix.datasets"));
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

    /// The legacy `.dat` format: each entry's values divided by its call count (as they are
    /// where the count is not positive), the trailer's chunk count and dataset.
    fn load_legacy(path: &Path) -> Result<Imatrix, QuantizeError> {
        let legacy = legacy::read(path)?;
        let mut entries = HashMap::new();
        for e in legacy.entries {
            let values: Vec<f32> = if e.ncall > 0 {
                // llama-quantize: `sums[i] / ncall`, the count as a float.
                let n = e.ncall as f32;
                e.values.iter().map(|v| v / n).collect()
            } else {
                e.values
            };
            if values.iter().any(|v| !v.is_finite()) {
                return Err(QuantizeError::Refused(format!(
                    "importance matrix {}: {} holds a non-finite value",
                    path.display(),
                    e.name
                )));
            }
            entries.insert(e.name, values);
        }
        Ok(Imatrix {
            file: path.to_string_lossy().into_owned(),
            datasets: legacy.dataset.into_iter().collect(),
            chunks: u32::try_from(legacy.chunk_count).unwrap_or(0),
            entries,
        })
    }
}
