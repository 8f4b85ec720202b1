//! Writing a planned decoder conversion: each tensor's rows streamed from the mapped shards
//! (permuted, shifted, stacked as the plan says), encoded in parallel and appended to the file
//! through a temporary name, so an interrupted run leaves no half-written model behind.

use std::io::{BufWriter, Write};
use std::path::Path;

use half::{bf16, f16};
use kestrel_gguf::{GgmlType, GgufStreamWriter, TensorSpec};
use rayon::prelude::*;

use super::bad;
use crate::convert::checkpoint::Checkpoint;
use crate::convert::meta::Meta;
use crate::convert::safetensors::StDType;
use crate::convert::{ConvertError, ConvertOptions, ConvertReport};

/// Where a tensor's values come from.
#[derive(Clone, Debug)]
pub(super) enum Source {
    /// Rows of a checkpoint tensor (`rows` of them kept, Llama's Q/K permutation over `heads`).
    Tensor {
        hf: String,
        rows: usize,
        permute_heads: Option<usize>,
        shift: bool,
    },
    /// Checkpoint tensors of `rows` rows each, one after the other (experts stacked into one
    /// 3-D tensor).
    Stacked { hfs: Vec<String>, rows: usize },
    /// Values the converter computes (Llama 3's RoPE factors).
    Generated(Vec<f32>),
}

/// One output tensor.
#[derive(Clone, Debug)]
pub(super) struct Planned {
    pub spec: TensorSpec,
    /// Values per row (ggml `ne0`).
    pub cols: usize,
    pub source: Source,
}

/// One checkpoint tensor's rows to stream.
struct Part<'a> {
    hf: &'a str,
    rows: usize,
    permute_heads: Option<usize>,
    shift: bool,
}

/// Streams `part`'s rows, encoded as `p`'s type, a chunk at a time.
fn stream_rows<W: Write>(
    ck: &Checkpoint,
    part: &Part,
    p: &Planned,
    buf: &mut Vec<u8>,
    w: &mut GgufStreamWriter<W>,
    bar: &indicatif::ProgressBar,
    out: &Path,
) -> Result<(), ConvertError> {
    let hf = part.hf;
    let (t, bytes) = ck
        .get(hf)
        .ok_or_else(|| bad(out, format!("{hf} vanished")))?;
    let row_bytes = p
        .spec
        .ggml_type
        .row_bytes(p.cols as u64)
        .ok_or_else(|| bad(out, format!("{hf}: bad row")))? as usize;
    let chunk_rows = (CHUNK_VALUES / p.cols.max(1)).max(1);
    let src_rows = t.shape.first().copied().unwrap_or(1);
    let mut r0 = 0;
    while r0 < part.rows {
        let n = chunk_rows.min(part.rows - r0);
        buf.resize(n * row_bytes, 0);
        buf.par_chunks_mut(row_bytes)
            .enumerate()
            .try_for_each(|(i, dst)| {
                let r = r0 + i;
                let src = match part.permute_heads {
                    Some(h) => permuted_row(r, h, src_rows),
                    None => r,
                };
                encode_row(
                    t.dtype,
                    bytes,
                    src,
                    p.cols,
                    part.shift,
                    p.spec.ggml_type,
                    dst,
                )
            })
            .map_err(|e| bad(out, format!("{hf}: {e}")))?;
        w.write(buf)?;
        bar.inc(buf.len() as u64);
        r0 += n;
    }
    Ok(())
}

/// Rows per chunk (and per parallel task) when streaming a tensor.
const CHUNK_VALUES: usize = 1 << 20;

pub(super) fn write_file(
    out: &Path,
    ck: &Checkpoint,
    meta: Meta,
    plan: &[Planned],
    opts: &ConvertOptions,
) -> Result<ConvertReport, ConvertError> {
    let specs: Vec<TensorSpec> = plan.iter().map(|p| p.spec.clone()).collect();
    let tmp = out.with_extension("gguf.partial");
    let result = (|| -> Result<u64, ConvertError> {
        let file =
            std::fs::File::create(&tmp).map_err(|e| bad(&tmp, format!("cannot create: {e}")))?;
        let entries = meta.into_entries();
        let mut w = GgufStreamWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            32,
            &entries,
            &specs,
        )?;
        let total: u64 = specs.iter().filter_map(|s| s.n_bytes()).sum();
        let bar = crate::convert::progress_bar(opts.progress, total);
        let mut buf: Vec<u8> = Vec::new();
        for p in plan {
            match &p.source {
                Source::Generated(v) => {
                    buf.clear();
                    for x in v {
                        buf.extend_from_slice(&x.to_le_bytes());
                    }
                    w.write(&buf)?;
                }
                Source::Tensor {
                    hf,
                    rows,
                    permute_heads,
                    shift,
                } => {
                    let part = Part {
                        hf,
                        rows: *rows,
                        permute_heads: *permute_heads,
                        shift: *shift,
                    };
                    stream_rows(ck, &part, p, &mut buf, &mut w, &bar, out)?;
                }
                Source::Stacked { hfs, rows } => {
                    for hf in hfs {
                        let part = Part {
                            hf,
                            rows: *rows,
                            permute_heads: None,
                            shift: false,
                        };
                        stream_rows(ck, &part, p, &mut buf, &mut w, &bar, out)?;
                    }
                }
            }
        }
        bar.finish_and_clear();
        let mut bw = w.finish()?;
        bw.flush()
            .map_err(|e| bad(&tmp, format!("cannot write: {e}")))?;
        Ok(total)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, out).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        bad(out, format!("cannot move the written file into place: {e}"))
    })?;
    let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    Ok(ConvertReport {
        arch: String::new(),
        tensors: specs.len(),
        bytes,
    })
}

/// The source row of output row `r` under llama.cpp's `permute` (rows as `[heads][2][half]`
/// read as `[heads][half][2]`).
fn permuted_row(r: usize, heads: usize, rows: usize) -> usize {
    let per_head = rows / heads;
    let half = per_head / 2;
    let (h, rest) = (r / per_head, r % per_head);
    let (i, j) = (rest / 2, rest % 2);
    h * per_head + j * half + i
}

/// One row converted: read as f32 (F16 values shifted in f16, as torch adds in the tensor's
/// own type), then encoded as `ty`.
fn encode_row(
    dtype: StDType,
    bytes: &[u8],
    row: usize,
    cols: usize,
    shift: bool,
    ty: GgmlType,
    dst: &mut [u8],
) -> Result<(), String> {
    let esize = match dtype {
        StDType::F32 => 4,
        StDType::F16 | StDType::BF16 => 2,
        StDType::Other => return Err("not a float tensor".into()),
    };
    let src = bytes
        .get(row * cols * esize..(row + 1) * cols * esize)
        .ok_or_else(|| format!("row {row} is outside the tensor"))?;
    let mut vals: Vec<f32> = match dtype {
        StDType::F32 => src
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        StDType::F16 => src
            .chunks_exact(2)
            .map(|c| {
                let x = f16::from_bits(u16::from_le_bytes([c[0], c[1]]));
                if shift {
                    f16::from_f32(x.to_f32() + 1.0).to_f32()
                } else {
                    x.to_f32()
                }
            })
            .collect(),
        StDType::BF16 => src
            .chunks_exact(2)
            .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
        StDType::Other => unreachable!(),
    };
    if shift && dtype != StDType::F16 {
        for v in &mut vals {
            *v += 1.0;
        }
    }
    kestrel_gguf::quant::quantize(ty, &vals, dst).map_err(|e| e.to_string())
}
