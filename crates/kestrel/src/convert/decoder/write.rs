//! Writing a planned decoder conversion: each tensor's rows streamed from the mapped shards
//! (permuted, shifted, stacked as the plan says), encoded in parallel and appended to the file
//! through a temporary name, so an interrupted run leaves no half-written model behind.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use kestrel_gguf::{GgufStreamWriter, TensorSpec};
use rayon::prelude::*;

use super::bad;
use super::read::{ValueMap, Values};
use crate::convert::checkpoint::Checkpoint;
use crate::convert::meta::Meta;
use crate::convert::{split, ConvertError, ConvertOptions, ConvertReport};

/// Where a tensor's values come from.
#[derive(Clone, Debug)]
pub(super) enum Source {
    /// Rows of a checkpoint tensor (`rows` of them kept, Llama's Q/K permutation over `heads`).
    Tensor {
        hf: String,
        rows: usize,
        permute_heads: Option<usize>,
        map: ValueMap,
    },
    /// Checkpoint tensors of `rows` rows each, one after the other (experts stacked into one
    /// 3-D tensor).
    Stacked { hfs: Vec<String>, rows: usize },
    /// Values gathered by element strides from a checkpoint tensor: output row `(p, r)` (of
    /// `planes` x `rows`) holds, for each column `j`, the element at
    /// `off + p * s_plane + r * s_row + j * s_col` (gpt-oss's transposed, interleaved experts).
    Strided {
        hf: String,
        planes: usize,
        rows: usize,
        s_plane: usize,
        s_row: usize,
        s_col: usize,
        off: usize,
        map: ValueMap,
    },
    /// Rows of a checkpoint tensor picked by index: output row `r` is input row `rows[r]`
    /// (InternLM2's fused, grouped Q/K/V split and Q/K reordered in one pass).
    Rows {
        hf: String,
        rows: Vec<usize>,
        map: ValueMap,
    },
    /// MXFP4 experts already quantized in the checkpoint (`*_blocks` `[E, R, B, 16]` and
    /// `*_scales` `[E, R, B]` bytes), repacked into GGUF's MXFP4 blocks: output row `(e, r)`
    /// is input row `r * row_step + row_off`.
    Mxfp4 {
        blocks: String,
        scales: String,
        planes: usize,
        rows: usize,
        in_rows: usize,
        row_step: usize,
        row_off: usize,
    },
    /// Values the converter computes (Llama 3's RoPE factors).
    Generated(Vec<f32>),
    /// Several planned tensors' data one after the other (`--fuse-qkv`: Q, K, V as one
    /// tensor, rows or bias values), each from a [`Source::Tensor`].
    Concat(Vec<Planned>),
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
    map: ValueMap,
}

/// Streams `part`'s rows, encoded as `p`'s type, a chunk at a time.
#[allow(clippy::too_many_arguments)]
fn stream_rows<W: Write>(
    ck: &Checkpoint,
    fp8_block: Option<(usize, usize)>,
    part: &Part,
    p: &Planned,
    buf: &mut Vec<u8>,
    w: &mut GgufStreamWriter<W>,
    bar: &indicatif::ProgressBar,
    out: &Path,
) -> Result<(), ConvertError> {
    let hf = part.hf;
    let values = Values::open(ck, hf, fp8_block).map_err(|e| bad(out, format!("{hf}: {e}")))?;
    if values.cols() != p.cols {
        return Err(bad(
            out,
            format!("{hf}: rows of {} values, {} planned", values.cols(), p.cols),
        ));
    }
    let row_bytes = p
        .spec
        .ggml_type
        .row_bytes(p.cols as u64)
        .ok_or_else(|| bad(out, format!("{hf}: bad row")))? as usize;
    let chunk_rows = (CHUNK_VALUES / p.cols.max(1)).max(1);
    let src_rows = ck
        .info(hf)
        .and_then(|(_, sh)| sh.first().copied())
        .unwrap_or(1);
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
                let mut vals = Vec::with_capacity(p.cols);
                values.row(src, part.map, &mut vals)?;
                kestrel_gguf::quant::quantize(p.spec.ggml_type, &vals, dst)
                    .map_err(|e| e.to_string())
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

/// Writes `meta` and the `plan`ned tensors to `out`, or to its shards as `opts.split` says
/// (FP8 weights scaled per `fp8_block`, the checkpoint's `weight_block_size`). Each file is
/// written under a temporary name and all are moved into place at the end.
pub(super) fn write_file(
    out: &Path,
    ck: &Checkpoint,
    fp8_block: Option<(usize, usize)>,
    meta: Meta,
    plan: &[Planned],
    opts: &ConvertOptions,
) -> Result<ConvertReport, ConvertError> {
    let sizes: Vec<u64> = plan.iter().map(|p| p.spec.n_bytes().unwrap_or(0)).collect();
    let shards = opts.split.shards(&sizes);
    if shards.len() > u16::MAX as usize || plan.len() > i32::MAX as usize {
        return Err(bad(
            out,
            format!(
                "{} files for {} tensors: at most 65535 files (raise the split limits)",
                shards.len(),
                plan.len()
            ),
        ));
    }
    let paths = split::shard_paths(out, shards.len());
    let tmps: Vec<PathBuf> = paths
        .iter()
        .map(|p| p.with_extension("gguf.partial"))
        .collect();
    let mut entries = Some(meta.into_entries());
    let total: u64 = sizes.iter().sum();
    let bar = crate::convert::progress_bar(opts.progress, total);
    let mut buf: Vec<u8> = Vec::new();
    let result = (|| -> Result<(), ConvertError> {
        for (no, (tensors, tmp)) in shards.iter().zip(&tmps).enumerate() {
            let mut keys = if no == 0 {
                entries.take().unwrap_or_default()
            } else {
                Vec::new()
            };
            keys.extend(split::split_keys(no, shards.len(), plan.len()));
            let specs: Vec<TensorSpec> = tensors.iter().map(|&i| plan[i].spec.clone()).collect();
            let file =
                std::fs::File::create(tmp).map_err(|e| bad(tmp, format!("cannot create: {e}")))?;
            if opts.vocab_only && plan.is_empty() {
                // gguf-py's `write_vocab`: the metadata, nothing after it.
                GgufStreamWriter::metadata_only(BufWriter::new(file), &keys)?;
                continue;
            }
            let mut w =
                GgufStreamWriter::new(BufWriter::with_capacity(1 << 20, file), 32, &keys, &specs)?;
            for &i in tensors {
                write_tensor(ck, fp8_block, &plan[i], &mut buf, &mut w, &bar, out)?;
            }
            let mut bw = w.finish()?;
            bw.flush()
                .map_err(|e| bad(tmp, format!("cannot write: {e}")))?;
        }
        bar.finish_and_clear();
        Ok(())
    })();
    let remove_all = || {
        for t in &tmps {
            let _ = std::fs::remove_file(t);
        }
    };
    if let Err(e) = result {
        remove_all();
        return Err(e);
    }
    let mut bytes = 0;
    for (tmp, path) in tmps.iter().zip(&paths) {
        std::fs::rename(tmp, path).map_err(|e| {
            remove_all();
            bad(
                path,
                format!("cannot move the written file into place: {e}"),
            )
        })?;
        bytes += std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    }
    Ok(ConvertReport {
        arch: String::new(),
        tensors: plan.len(),
        bytes,
        files: paths,
    })
}

/// Streams one planned tensor's data into `w`.
fn write_tensor<W: Write>(
    ck: &Checkpoint,
    fp8_block: Option<(usize, usize)>,
    p: &Planned,
    buf: &mut Vec<u8>,
    w: &mut GgufStreamWriter<W>,
    bar: &indicatif::ProgressBar,
    out: &Path,
) -> Result<(), ConvertError> {
    match &p.source {
        Source::Concat(parts) => {
            for q in parts {
                write_tensor(ck, fp8_block, q, buf, w, bar, out)?;
            }
        }
        Source::Generated(v) => {
            buf.clear();
            for x in v {
                buf.extend_from_slice(&x.to_le_bytes());
            }
            w.write(buf)?;
        }
        Source::Tensor {
            hf,
            rows,
            permute_heads,
            map,
        } => {
            let part = Part {
                hf,
                rows: *rows,
                permute_heads: *permute_heads,
                map: *map,
            };
            stream_rows(ck, fp8_block, &part, p, buf, w, bar, out)?;
        }
        Source::Strided {
            hf,
            planes,
            rows,
            s_plane,
            s_row,
            s_col,
            off,
            map,
        } => {
            let values =
                Values::open(ck, hf, fp8_block).map_err(|e| bad(out, format!("{hf}: {e}")))?;
            let n = ck
                .info(hf)
                .map_or(0, |(_, sh)| sh.iter().product::<usize>());
            let last = off
                + (planes.max(&1) - 1) * s_plane
                + (rows.max(&1) - 1) * s_row
                + (p.cols.max(1) - 1) * s_col;
            if last >= n {
                return Err(bad(out, format!("{hf}: strided read past its {n} values")));
            }
            let row_bytes = p.spec.ggml_type.row_bytes(p.cols as u64).unwrap_or(0) as usize;
            let total = planes * rows;
            let chunk_rows = (CHUNK_VALUES / p.cols.max(1)).max(1);
            let mut r0 = 0;
            while r0 < total {
                let n = chunk_rows.min(total - r0);
                buf.resize(n * row_bytes, 0);
                buf.par_chunks_mut(row_bytes.max(1))
                    .enumerate()
                    .try_for_each(|(i, dst)| {
                        let i = r0 + i;
                        let base = off + (i / rows) * s_plane + (i % rows) * s_row;
                        let vals: Vec<f32> = (0..p.cols)
                            .map(|j| values.mapped(values.get(base + j * s_col), *map))
                            .collect();
                        kestrel_gguf::quant::quantize(p.spec.ggml_type, &vals, dst)
                            .map_err(|e| e.to_string())
                    })
                    .map_err(|e| bad(out, format!("{hf}: {e}")))?;
                w.write(buf)?;
                bar.inc(buf.len() as u64);
                r0 += n;
            }
        }
        Source::Rows { hf, rows, map } => {
            let values =
                Values::open(ck, hf, fp8_block).map_err(|e| bad(out, format!("{hf}: {e}")))?;
            let row_bytes = p.spec.ggml_type.row_bytes(p.cols as u64).unwrap_or(0) as usize;
            let chunk_rows = (CHUNK_VALUES / p.cols.max(1)).max(1);
            for chunk in rows.chunks(chunk_rows) {
                buf.resize(chunk.len() * row_bytes, 0);
                buf.par_chunks_mut(row_bytes.max(1))
                    .zip(chunk)
                    .try_for_each(|(dst, &src)| {
                        let mut vals = Vec::with_capacity(p.cols);
                        values.row(src, *map, &mut vals)?;
                        kestrel_gguf::quant::quantize(p.spec.ggml_type, &vals, dst)
                            .map_err(|e| e.to_string())
                    })
                    .map_err(|e| bad(out, format!("{hf}: {e}")))?;
                w.write(buf)?;
                bar.inc(buf.len() as u64);
            }
        }
        Source::Mxfp4 {
            blocks,
            scales,
            planes,
            rows,
            in_rows,
            row_step,
            row_off,
        } => {
            let get = |name: &str| {
                ck.get(name)
                    .map(|(_, b)| b)
                    .ok_or_else(|| bad(out, format!("{name} vanished")))
            };
            let (bl, sc) = (get(blocks)?, get(scales)?);
            let nb = p.cols / 32;
            let rows_fit = *rows == 0 || (rows - 1) * row_step + row_off < *in_rows;
            if !rows_fit
                || bl.len() != planes * in_rows * nb * 16
                || sc.len() != planes * in_rows * nb
            {
                return Err(bad(out, format!("{blocks}: sizes do not match {scales}")));
            }
            // One expert at a time: rows x blocks x 17 bytes.
            for e in 0..*planes {
                buf.clear();
                for r in 0..*rows {
                    let ir = e * in_rows + r * row_step + row_off;
                    for b in 0..nb {
                        buf.push(sc[ir * nb + b]);
                        let q = &bl[(ir * nb + b) * 16..][..16];
                        buf.extend_from_slice(&mxfp4_nibbles(q));
                    }
                }
                w.write(buf)?;
                bar.inc(buf.len() as u64);
            }
        }
        Source::Stacked { hfs, rows } => {
            for hf in hfs {
                let part = Part {
                    hf,
                    rows: *rows,
                    permute_heads: None,
                    map: ValueMap::Keep,
                };
                stream_rows(ck, fp8_block, &part, p, buf, w, bar, out)?;
            }
        }
    }
    Ok(())
}

/// `--fp8-as-q8`: matrices (two or more dims, not norms) read from FP8 checkpoint tensors
/// become Q8_0, or F16 where rows are not whole Q8_0 blocks (gguf-py's `tensor_force_quant`,
/// which wins over the F32 rules, and its fallback).
pub(super) fn fp8_as_q8(ck: &Checkpoint, plan: &mut [Planned]) {
    let is_fp8 = |hf: &str| ck.info(hf).is_some_and(|(dt, _)| dt.is_fp8());
    for p in plan {
        let from_fp8 = match &p.source {
            Source::Tensor { hf, .. } | Source::Strided { hf, .. } | Source::Rows { hf, .. } => {
                is_fp8(hf)
            }
            // gguf-py asks about the name it was given last: the last expert's.
            Source::Stacked { hfs, .. } => hfs.last().is_some_and(|h| is_fp8(h)),
            Source::Concat(parts) => parts.last().is_some_and(|q| match &q.source {
                Source::Tensor { hf, .. } => is_fp8(hf),
                _ => false,
            }),
            Source::Mxfp4 { .. } | Source::Generated(_) => false,
        };
        if from_fp8 && p.spec.dims.len() >= 2 && !p.spec.name.ends_with("_norm.weight") {
            p.spec.ggml_type = if p.cols.is_multiple_of(32) {
                kestrel_gguf::GgmlType::Q8_0
            } else {
                kestrel_gguf::GgmlType::F16
            };
        }
    }
}

/// One MXFP4 block's 32 nibbles from Hugging Face's order (value `k` in byte `k / 2`, low
/// nibble first) to ggml's (byte `j` holds value `j` low and value `j + 16` high), as
/// llama.cpp's `transform_nibble_layout`.
pub(super) fn mxfp4_nibbles(q: &[u8]) -> [u8; 16] {
    let v = |k: usize| (q[k / 2] >> (4 * (k % 2))) & 0x0f;
    std::array::from_fn(|j| v(j) | (v(j + 16) << 4))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mxfp4_nibbles_move_to_ggml_order() {
        // Value k (0..32) = k % 16, packed two per byte, low nibble first (Hugging Face).
        let q: Vec<u8> = (0..16u8)
            .map(|i| (2 * i % 16) | ((2 * i + 1) % 16) << 4)
            .collect();
        // ggml: byte j holds value j (low) and value j + 16 (high), here both j % 16.
        let want: Vec<u8> = (0..16u8).map(|j| j | (j << 4)).collect();
        assert_eq!(mxfp4_nibbles(&q).to_vec(), want);
    }

    #[test]
    fn permuted_rows_interleave_rotary_halves() {
        // One head of 8 rows: [0 1 2 3 | 4 5 6 7] read as pairs (0 4) (1 5) ...
        let rows: Vec<usize> = (0..8).map(|r| permuted_row(r, 1, 8)).collect();
        assert_eq!(rows, [0, 4, 1, 5, 2, 6, 3, 7]);
    }
}
