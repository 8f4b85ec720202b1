//! Merging LoRA adapters into a model file, as llama.cpp's `llama-export-lora` does: every
//! adapted weight becomes `W + Σ scale · B·A` (the token embedding's `W + Σ scale · A·B`),
//! computed in f32 and written as F32 when the base weight is F32, else F16; every other tensor
//! is copied byte for byte; `general.file_type` says F16; tensors in name order, as it writes
//! them. The file streams to disk one tensor at a time through a temporary file renamed when
//! complete. Merged values differ from llama-export-lora's by the f32 summation order of `B·A`
//! (a last-bit difference of the F16 result in a few elements per million).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kestrel_gguf::{GgmlType, GgufModel, GgufStreamWriter, MetadataValue, TensorSpec};
use rayon::prelude::*;

use crate::lora::{LoraAdapter, LoraError};
use crate::weight_tensor;

/// What [`export_merged`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Tensors with at least one adapter merged in.
    pub merged: usize,
    /// Tensors written.
    pub tensors: usize,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> LoraError {
    LoraError::Invalid {
        path: path.to_path_buf(),
        reason: format!("cannot write: {e}"),
    }
}

/// Writes `base` with `adapters` (each with its scale) merged in to `out`.
///
/// # Errors
/// An adapter that does not fit the base (as [`LoraAdapter::check`]), a tensor that cannot be
/// read, an I/O error.
pub fn export_merged(
    base: &GgufModel,
    adapters: &[(Arc<LoraAdapter>, f32)],
    out: &Path,
) -> Result<ExportReport, LoraError> {
    for (a, _) in adapters {
        a.check(base)?;
    }
    let mut metadata: Vec<(String, MetadataValue)> = base
        .metadata()
        .iter()
        .filter(|(k, _)| !k.starts_with("split."))
        .map(|(k, v)| (k.to_string(), v.to_owned_value()))
        .collect();
    // llama-export-lora: "output is forced to f16 for now" (LLAMA_FTYPE_MOSTLY_F16), the key
    // set anew, so it moves to the end.
    metadata.retain(|(k, _)| k != "general.file_type");
    metadata.push(("general.file_type".into(), MetadataValue::U32(1)));
    let adapted = |name: &str| adapters.iter().any(|(a, _)| a.pair_of(name).is_some());
    // Its tensors come from a map keyed by name: written in name order.
    let mut views: Vec<_> = base.tensors().collect();
    views.sort_by(|a, b| a.info.name().cmp(b.info.name()));
    let specs: Vec<TensorSpec> = views
        .iter()
        .map(|t| TensorSpec {
            name: t.info.name().to_string(),
            ggml_type: match t.info.ggml_type() {
                ty if !adapted(t.info.name()) => ty,
                GgmlType::F32 => GgmlType::F32,
                _ => GgmlType::F16,
            },
            dims: t.info.dims().to_vec(),
        })
        .collect();
    let alignment = base.shards().first().map_or(32, |f| f.alignment());
    let tmp: PathBuf = out.with_extension("gguf.tmp");
    let result = (|| -> Result<ExportReport, LoraError> {
        let file = std::fs::File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
        let sink = std::io::BufWriter::with_capacity(8 << 20, file);
        let mut w =
            GgufStreamWriter::new(sink, alignment, &metadata, &specs).map_err(|source| {
                LoraError::Gguf {
                    path: tmp.clone(),
                    source,
                }
            })?;
        let gguf = |source| LoraError::Gguf {
            path: tmp.clone(),
            source,
        };
        let mut report = ExportReport::default();
        for (t, spec) in views.iter().zip(&specs) {
            let name = t.info.name();
            if !adapted(name) {
                w.write(t.data).map_err(gguf)?;
                report.tensors += 1;
                continue;
            }
            let v = merged(base, adapters, name)?;
            let bytes: Vec<u8> = match spec.ggml_type {
                GgmlType::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                _ => v
                    .iter()
                    .flat_map(|&x| half::f16::from_f32(x).to_bits().to_le_bytes())
                    .collect(),
            };
            w.write(&bytes).map_err(gguf)?;
            report.tensors += 1;
            report.merged += 1;
        }
        let mut sink = w.finish().map_err(gguf)?;
        sink.flush().map_err(|e| io_err(&tmp, e))?;
        Ok(report)
    })();
    match result {
        Ok(r) => {
            std::fs::rename(&tmp, out).map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                io_err(out, e)
            })?;
            Ok(r)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// `name`'s values (row-major, ggml order) with every adapter that has it merged in.
fn merged(
    base: &GgufModel,
    adapters: &[(Arc<LoraAdapter>, f32)],
    name: &str,
) -> Result<Vec<f32>, LoraError> {
    let unreadable = |what: &str, path: &Path| LoraError::Invalid {
        path: path.to_path_buf(),
        reason: format!("cannot read {what}"),
    };
    let base_path = base
        .shards()
        .first()
        .and_then(|f| f.path().map(Path::to_path_buf))
        .unwrap_or_default();
    let w = weight_tensor(base, name).ok_or_else(|| unreadable(name, &base_path))?;
    let mut v = w.to_f32_vec().map_err(|_| unreadable(name, &base_path))?;
    let embd = name.ends_with("token_embd.weight");
    let cols = w.shape().dims().first().copied().unwrap_or(1);
    // Rows of one matrix: an expert weight ([k, m, n_expert]) holds one per expert, each
    // merged with its own pair (as ggml's batched matmul merges them).
    let per = if w.shape().dims().len() == 3 {
        w.shape().dims()[1].max(1)
    } else {
        usize::MAX
    };
    for (ad, scale) in adapters {
        let Some((a_name, b_name, rank)) = ad.pair_of(name) else {
            continue;
        };
        let read = |n: &str| -> Result<Vec<f32>, LoraError> {
            ad.tensor(n)
                .and_then(|t| t.to_f32_vec().ok())
                .ok_or_else(|| unreadable(n, ad.path()))
        };
        let (a, b) = (read(a_name)?, read(b_name)?);
        let factor = ad.factor_for(rank, *scale);
        // Each output row `o` of `cols` values gets factor · Σ_t left[o][t] · right[t][j]:
        // a matmul weight's left is B ([rows][rank]) and right A ([rank][cols]); the table's
        // left is A ([n_vocab][rank]) and right B ([cols][rank], read transposed). An
        // expert's A starts at its expert's `rank · cols` values (its B rows are row `o`'s).
        v.par_chunks_mut(cols.max(1))
            .enumerate()
            .for_each(|(o, row)| {
                let a0 = (o / per) * rank * cols;
                for (j, x) in row.iter_mut().enumerate() {
                    let mut acc = 0.0f32;
                    for t in 0..rank {
                        let (l, r) = if embd {
                            (a[o * rank + t], b[j * rank + t])
                        } else {
                            (b[o * rank + t], a[a0 + t * cols + j])
                        };
                        acc += l * r;
                    }
                    *x += factor * acc;
                }
            });
    }
    Ok(v)
}
