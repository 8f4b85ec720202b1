//! Decoder checkpoints → GGUF, as llama.cpp's `convert_hf_to_gguf.py` writes them: the same
//! tensor names, order, shapes and types, the same metadata keys and values, the same
//! tokenizer data. Tensors stream from the memory-mapped shards to the file a block of rows at
//! a time, so the model is never held in memory.

mod family;

use std::io::{BufWriter, Write};
use std::path::Path;

use half::{bf16, f16};
use kestrel_gguf::{GgmlType, GgufStreamWriter, TensorSpec};
use rayon::prelude::*;
use serde_json::Value;

pub(crate) use family::{Family, SUPPORTED};

use super::checkpoint::Checkpoint;
use super::meta::Meta;
use super::safetensors::StDType;
use super::vocab::{bpe, special::SpecialVocab, spm, Vocab};
use super::{general, ConvertError, ConvertOptions, ConvertReport, OutType};

/// Where a tensor's values come from.
#[derive(Clone, Debug)]
enum Source {
    /// Rows of a checkpoint tensor (`rows` of them kept, Llama's Q/K permutation over `heads`).
    Tensor {
        hf: String,
        rows: usize,
        permute_heads: Option<usize>,
        shift: bool,
    },
    /// Values the converter computes (Llama 3's RoPE factors).
    Generated(Vec<f32>),
}

#[derive(Clone, Debug)]
struct Planned {
    spec: TensorSpec,
    /// Values per row (ggml `ne0`).
    cols: usize,
    source: Source,
}

fn bad(path: &Path, reason: impl Into<String>) -> ConvertError {
    ConvertError::Input {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn uint(h: &Value, keys: &[&str], cfg: &Path) -> Result<Option<u64>, ConvertError> {
    match family::find(h, keys) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            bad(
                cfg,
                format!("{} = {v} is not a non-negative integer", keys[0]),
            )
        }),
    }
}

fn u32_of(v: u64, key: &str, cfg: &Path) -> Result<u32, ConvertError> {
    u32::try_from(v).map_err(|_| bad(cfg, format!("{key} = {v} does not fit 32 bits")))
}

/// Convert the decoder checkpoint in `dir` (already identified as `family`).
pub(crate) fn convert(
    dir: &Path,
    out: &Path,
    family: Family,
    hf_arch: &str,
    config: &Value,
    opts: &ConvertOptions,
) -> Result<ConvertReport, ConvertError> {
    let cfg_path = dir.join("config.json");
    // `text_config` folded onto the top level, as llama.cpp does.
    let full = family::with_defaults(config);
    let config = &full;
    let mut h = config.clone();
    if let (Some(top), Some(text)) = (
        h.as_object().cloned(),
        config.get("text_config").and_then(|t| t.as_object()),
    ) {
        let mut merged = top;
        for (k, v) in text {
            merged.insert(k.clone(), v.clone());
        }
        h = Value::Object(merged);
    }
    let arch = family.arch();
    let ck = Checkpoint::open(dir)?;

    let n_layer = uint(
        &h,
        &["n_layers", "num_hidden_layers", "n_layer", "num_layers"],
        &cfg_path,
    )?
    .ok_or_else(|| bad(&cfg_path, "no num_hidden_layers"))?;
    let n_embd = uint(&h, &["hidden_size", "n_embd", "dim"], &cfg_path)?;
    let n_head = uint(&h, &["n_heads", "num_attention_heads"], &cfg_path)?;
    let n_head_kv = uint(&h, &["n_kv_heads", "num_key_value_heads"], &cfg_path)?;
    let vocab_size = uint(&h, &["vocab_size"], &cfg_path)?;
    let rp = family::rope_parameters(&h);

    // The tokenizer first: Gemma trims the embedding to its length.
    let has_spm = dir.join("tokenizer.model").is_file();
    let vocab: Vocab = match family {
        Family::Llama | Family::Qwen2 | Family::Qwen3 if has_spm => {
            spm::load(dir, vocab_size.map(|v| v as usize))?
        }
        Family::Gemma3 if has_spm => spm::load(dir, vocab_size.map(|v| v as usize))?,
        _ => {
            let tj = dir.join("tokenizer.json");
            if !tj.is_file() {
                return Err(bad(dir, "no tokenizer.model and no tokenizer.json"));
            }
            if family == Family::Llama {
                refuse_llama_hf(&tj)?;
            }
            bpe::load(dir, vocab_size.map(|v| v as usize))?
        }
    };

    // Plan every tensor: name, type, dims, where its values come from.
    let mut plan: Vec<Planned> = Vec::new();
    let out_type = |name: &str, n_dims: usize, cols: usize| -> GgmlType {
        if n_dims <= 1 || name.ends_with("_norm.weight") || !name.ends_with(".weight") {
            return GgmlType::F32;
        }
        match opts.outtype {
            OutType::F32 => GgmlType::F32,
            OutType::F16 => GgmlType::F16,
            OutType::BF16 => GgmlType::BF16,
            // gguf-py falls back to F16 for rows that are not whole Q8_0 blocks.
            OutType::Q8_0 if cols.is_multiple_of(32) => GgmlType::Q8_0,
            // Resolved by `convert_hf` before this runs; F16 is its all-F32 answer.
            OutType::Q8_0 | OutType::Auto => GgmlType::F16,
        }
    };
    if family == Family::Llama {
        let rope_params = rp
            .get("full_attention")
            .and_then(|v| v.as_object())
            .unwrap_or(&rp);
        let ty = rope_params
            .get("rope_type")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        if ty.eq_ignore_ascii_case("llama3") {
            let dim = match uint(&h, &["head_dim"], &cfg_path)? {
                Some(d) => d,
                None => n_embd.unwrap_or(0) / n_head.filter(|&n| n > 0).unwrap_or(1),
            } as usize;
            let v = family::llama3_rope_factors(rope_params, dim);
            plan.push(Planned {
                spec: TensorSpec {
                    name: "rope_freqs.weight".into(),
                    ggml_type: GgmlType::F32,
                    dims: vec![v.len() as u64],
                },
                cols: v.len(),
                source: Source::Generated(v),
            });
        }
    }
    for hf in ck.names() {
        let Some(name) = family::filter_name(hf) else {
            continue;
        };
        let (dtype, shape) = ck
            .info(hf)
            .ok_or_else(|| bad(dir, format!("{hf} vanished")))?;
        if dtype == StDType::Other {
            return Err(bad(dir, format!("tensor {hf:?} is not a float tensor")));
        }
        let gguf = family::gguf_name(family, &name)
            .ok_or_else(|| bad(dir, format!("cannot map tensor {hf:?} for {arch}")))?;
        if shape.len() > 2 {
            return Err(bad(dir, format!("tensor {hf:?} has {} dims", shape.len())));
        }
        let cols = shape.last().copied().unwrap_or(1);
        let mut rows = if shape.len() == 2 { shape[0] } else { 1 };
        let mut permute_heads = None;
        if family.undo_permute() {
            let heads = if name.ends_with("q_proj.weight") || name.ends_with("q_proj.bias") {
                n_head
            } else if name.ends_with("k_proj.weight") || name.ends_with("k_proj.bias") {
                n_head_kv.or(n_head)
            } else {
                None
            };
            if let Some(hd) = heads {
                let hd = hd as usize;
                let len = shape[0];
                if hd == 0 || len % (2 * hd) != 0 {
                    return Err(bad(
                        dir,
                        format!("tensor {hf:?}: {len} rows do not split into {hd} heads of rotary pairs"),
                    ));
                }
                permute_heads = Some(hd);
            }
        }
        if family == Family::Gemma3 && name.ends_with("embed_tokens.weight") {
            rows = rows.min(vocab.tokens.len());
        }
        let dims: Vec<u64> = if shape.len() == 2 {
            vec![cols as u64, rows as u64]
        } else {
            vec![cols as u64]
        };
        let ty = out_type(&gguf, shape.len(), cols);
        plan.push(Planned {
            spec: TensorSpec {
                name: gguf,
                ggml_type: ty,
                dims,
            },
            cols,
            source: Source::Tensor {
                hf: hf.to_string(),
                rows,
                permute_heads,
                shift: family.norm_shift(&name),
            },
        });
    }
    let total_params: u64 = plan
        .iter()
        .map(|p| p.spec.dims.iter().product::<u64>())
        .sum();

    // Metadata, in llama.cpp's order.
    let mut meta = Meta::default();
    meta.str("general.architecture", arch);
    general::write(&mut meta, dir, &h, total_params);
    let k = |s: &str| format!("{arch}.{s}");
    meta.u32(
        k("block_count"),
        u32_of(n_layer, "num_hidden_layers", &cfg_path)?,
    );
    let ctx = uint(
        &h,
        &[
            "max_position_embeddings",
            "n_ctx",
            "n_positions",
            "max_length",
            "max_sequence_length",
            "model_max_length",
        ],
        &cfg_path,
    )?;
    if let Some(v) = ctx {
        meta.u32(
            k("context_length"),
            u32_of(v, "max_position_embeddings", &cfg_path)?,
        );
    }
    if let Some(v) = n_embd {
        meta.u32(k("embedding_length"), u32_of(v, "hidden_size", &cfg_path)?);
    }
    let ff = uint(
        &h,
        &[
            "prefix_dense_intermediate_size",
            "dense_intermediate_size",
            "intermediate_size",
            "n_inner",
            "hidden_dim",
        ],
        &cfg_path,
    )?;
    if let Some(v) = ff {
        meta.u32(
            k("feed_forward_length"),
            u32_of(v, "intermediate_size", &cfg_path)?,
        );
    }
    if let Some(v) = uint(&h, &["num_attention_heads", "n_head", "n_heads"], &cfg_path)? {
        meta.u32(
            k("attention.head_count"),
            u32_of(v, "num_attention_heads", &cfg_path)?,
        );
    }
    if let Some(v) = uint(&h, &["num_key_value_heads", "n_kv_heads"], &cfg_path)? {
        meta.u32(
            k("attention.head_count_kv"),
            u32_of(v, "num_key_value_heads", &cfg_path)?,
        );
    }
    if h.get("is_causal") == Some(&Value::Bool(false)) {
        meta.bool(k("attention.causal"), false);
    }
    let rope_params = rp
        .get("full_attention")
        .and_then(|v| v.as_object())
        .cloned()
        .unwrap_or_else(|| rp.clone());
    if let Some(rope_type) = rope_params.get("rope_type").and_then(|v| v.as_str()) {
        let factor = rope_params.get("factor").and_then(|v| v.as_f64());
        match (rope_type, factor) {
            ("linear", Some(f)) => {
                meta.str(k("rope.scaling.type"), "linear");
                meta.f32(k("rope.scaling.factor"), f as f32);
            }
            ("yarn", Some(f)) => {
                meta.str(k("rope.scaling.type"), "yarn");
                meta.f32(k("rope.scaling.factor"), f as f32);
                let orig = rope_params
                    .get("original_max_position_embeddings")
                    .and_then(|v| v.as_u64())
                    .ok_or_else(|| {
                        bad(
                            &cfg_path,
                            "yarn RoPE without original_max_position_embeddings",
                        )
                    })?;
                meta.u32(
                    k("rope.scaling.original_context_length"),
                    u32_of(orig, "original_max_position_embeddings", &cfg_path)?,
                );
                for (src, dst) in [
                    ("extrapolation_factor", "rope.scaling.yarn_ext_factor"),
                    ("attention_factor", "rope.scaling.yarn_attn_factor"),
                    ("beta_fast", "rope.scaling.yarn_beta_fast"),
                    ("beta_slow", "rope.scaling.yarn_beta_slow"),
                ] {
                    let v = rope_params.get(src).or_else(|| {
                        (src == "attention_factor")
                            .then(|| rope_params.get("attn_factor"))
                            .flatten()
                    });
                    if let Some(v) = v.and_then(|v| v.as_f64()) {
                        meta.f32(k(dst), v as f32);
                    }
                }
            }
            ("su" | "longrope", _) => meta.str(k("rope.scaling.type"), "longrope"),
            _ => {}
        }
    }
    if let Some(t) = rope_params.get("rope_theta").and_then(|v| v.as_f64()) {
        meta.f32(k("rope.freq_base"), t as f32);
    }
    if let Some(t) = rp
        .get("sliding_attention")
        .and_then(|s| s.get("rope_theta"))
        .and_then(|v| v.as_f64())
    {
        meta.f32(k("rope.freq_base_swa"), t as f32);
    }
    if let Some(v) = family::find(&h, &["rms_norm_eps", "norm_eps"]).and_then(|v| v.as_f64()) {
        meta.f32(k("attention.layer_norm_rms_epsilon"), v as f32);
    }
    if let Some(v) = family::find(
        &h,
        &["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"],
    )
    .and_then(|v| v.as_f64())
    {
        meta.f32(k("attention.layer_norm_epsilon"), v as f32);
    }
    if let Some(v) = uint(
        &h,
        &["num_local_experts", "num_experts", "n_routed_experts"],
        &cfg_path,
    )? {
        meta.u32(k("expert_count"), u32_of(v, "num_experts", &cfg_path)?);
    }
    if let Some(v) = uint(
        &h,
        &[
            "num_experts_per_tok",
            "num_experts_per_token",
            "top_k_experts",
        ],
        &cfg_path,
    )? {
        meta.u32(
            k("expert_used_count"),
            u32_of(v, "num_experts_per_tok", &cfg_path)?,
        );
    }
    let head_dim = uint(&h, &["head_dim"], &cfg_path)?;
    if let Some(v) = head_dim {
        meta.u32(k("attention.key_length"), u32_of(v, "head_dim", &cfg_path)?);
        meta.u32(
            k("attention.value_length"),
            u32_of(v, "head_dim", &cfg_path)?,
        );
    }
    meta.u32("general.file_type", opts.outtype.file_type());
    match family {
        Family::Llama => {
            let v = vocab_size.ok_or_else(|| bad(&cfg_path, "no vocab_size"))?;
            meta.u32(k("vocab_size"), u32_of(v, "vocab_size", &cfg_path)?);
            let rope_dim = match head_dim {
                Some(d) => d,
                None => {
                    let e = n_embd.ok_or_else(|| bad(&cfg_path, "no hidden_size"))?;
                    let nh = n_head
                        .filter(|&n| n > 0)
                        .ok_or_else(|| bad(&cfg_path, "no num_attention_heads"))?;
                    e / nh
                }
            };
            meta.u32(
                k("rope.dimension_count"),
                u32_of(rope_dim, "head_dim", &cfg_path)?,
            );
        }
        Family::Qwen2 | Family::Qwen3 => {}
        Family::Gemma3 => {
            let g = |key: &str, d: u64| -> Result<u32, ConvertError> {
                u32_of(uint(&h, &[key], &cfg_path)?.unwrap_or(d), key, &cfg_path)
            };
            meta.u32(k("context_length"), g("max_position_embeddings", 131072)?);
            meta.u32(k("attention.head_count"), g("num_attention_heads", 8)?);
            let eps = h
                .get("rms_norm_eps")
                .and_then(|v| v.as_f64())
                .unwrap_or(1e-6);
            meta.f32(k("attention.layer_norm_rms_epsilon"), eps as f32);
            meta.u32(k("attention.key_length"), g("head_dim", 256)?);
            meta.u32(k("attention.value_length"), g("head_dim", 256)?);
            let theta = rope_params
                .get("rope_theta")
                .and_then(|v| v.as_f64())
                .unwrap_or(1_000_000.0);
            meta.f32(k("rope.freq_base"), theta as f32);
            if h.get("attn_logit_softcapping")
                .is_some_and(|v| !v.is_null())
            {
                return Err(bad(
                    &cfg_path,
                    "Gemma 3 has no attn_logit_softcapping; refusing a config that sets it",
                ));
            }
            if let Some(c) = h.get("final_logit_softcapping").and_then(|v| v.as_f64()) {
                if c != 0.0 {
                    meta.f32(k("final_logit_softcapping"), c as f32);
                }
            }
            if h.get("sliding_window_pattern").and_then(|v| v.as_i64()) != Some(1) {
                let sw = uint(&h, &["sliding_window"], &cfg_path)?
                    .ok_or_else(|| bad(&cfg_path, "no sliding_window"))?;
                meta.u32(
                    k("attention.sliding_window"),
                    u32_of(sw, "sliding_window", &cfg_path)?,
                );
            }
            meta.u32(k("attention.head_count_kv"), g("num_key_value_heads", 4)?);
        }
    }
    meta.u32("general.quantization_version", 2);

    // Tokenizer.
    if family == Family::Llama {
        if let Some(b) = read_opt_json(&dir.join("tokenizer_config.json"))?
            .and_then(|c| c.get("add_prefix_space").and_then(|v| v.as_bool()))
        {
            meta.bool("tokenizer.ggml.add_space_prefix", b);
        }
    }
    vocab.write(&mut meta);
    let is_bpe = vocab.model == "gpt2";
    let sv = SpecialVocab::load(dir, is_bpe, (!is_bpe).then_some(vocab.tokens.len()))?;
    sv.write(&mut meta);
    if family == Family::Gemma3 && has_spm {
        meta.bool("tokenizer.ggml.add_space_prefix", false);
    }
    if family == Family::Llama && vocab_size == Some(49152) {
        // llama.cpp's rule for Granite-sized (and SmolLM) vocabularies.
        meta.bool("tokenizer.ggml.add_bos_token", false);
    }
    if hf_arch == "Qwen3ForSequenceClassification" {
        return Err(bad(&cfg_path, "Qwen3 rerankers are not converted yet"));
    }

    write_file(out, &ck, meta, &plan, opts)
}

fn read_opt_json(p: &Path) -> Result<Option<Value>, ConvertError> {
    if p.is_file() {
        super::read_json(p).map(Some)
    } else {
        Ok(None)
    }
}

/// A `tokenizer.json` llama.cpp reads as a Llama SentencePiece-BPE (`LlamaHfVocab`).
fn refuse_llama_hf(tj: &Path) -> Result<(), ConvertError> {
    let v = super::read_json(tj)?;
    let model = v.get("model");
    let ty = model.and_then(|m| m.get("type")).and_then(|t| t.as_str());
    let byte_fallback = model
        .and_then(|m| m.get("byte_fallback"))
        .and_then(|b| b.as_bool());
    let decoder_seq = v
        .get("decoder")
        .and_then(|d| d.get("type"))
        .and_then(|t| t.as_str())
        == Some("Sequence");
    if ty == Some("BPE") && byte_fallback == Some(true) && decoder_seq {
        return Err(bad(
            tj,
            "a SentencePiece-style BPE tokenizer.json without tokenizer.model: not supported yet \
             (add the checkpoint's tokenizer.model)",
        ));
    }
    Ok(())
}

/// Rows per chunk (and per parallel task) when streaming a tensor.
const CHUNK_VALUES: usize = 1 << 20;

fn write_file(
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
        let bar = super::progress_bar(opts.progress, total);
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
                    let (t, bytes) = ck
                        .get(hf)
                        .ok_or_else(|| bad(out, format!("{hf} vanished")))?;
                    let row_bytes = p
                        .spec
                        .ggml_type
                        .row_bytes(p.cols as u64)
                        .ok_or_else(|| bad(out, format!("{hf}: bad row")))?
                        as usize;
                    let chunk_rows = (CHUNK_VALUES / p.cols.max(1)).max(1);
                    let mut r0 = 0;
                    while r0 < *rows {
                        let n = chunk_rows.min(rows - r0);
                        buf.resize(n * row_bytes, 0);
                        let src_rows = t.shape.first().copied().unwrap_or(1);
                        buf.par_chunks_mut(row_bytes)
                            .enumerate()
                            .try_for_each(|(i, dst)| {
                                let r = r0 + i;
                                let src = match permute_heads {
                                    Some(h) => permuted_row(r, *h, src_rows),
                                    None => r,
                                };
                                encode_row(
                                    t.dtype,
                                    bytes,
                                    src,
                                    p.cols,
                                    *shift,
                                    p.spec.ggml_type,
                                    dst,
                                )
                            })
                            .map_err(|e| bad(out, format!("{hf}: {e}")))?;
                        w.write(&buf)?;
                        bar.inc(buf.len() as u64);
                        r0 += n;
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
