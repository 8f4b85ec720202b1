//! Decoder checkpoints → GGUF, as llama.cpp's `convert_hf_to_gguf.py` writes them: the same
//! tensor names, order, shapes and types, the same metadata keys and values, the same
//! tokenizer data. Tensors stream from the memory-mapped shards to the file a block of rows at
//! a time, so the model is never held in memory.

mod baichuan;
mod chatglm;
mod deci;
mod defaults;
mod experts;
mod falcon_h1;
mod family;
mod fuse;
mod generated;
mod gpt_oss;
mod granite_hybrid;
mod granite_moe;
mod head_norms;
mod hunyuan;
mod internlm2;
mod jamba;
mod lfm2;
mod lora;
mod mamba;
mod mla;
mod names;
mod nemotron_h;
mod openelm;
mod params;
mod read;
mod tensors;
mod tokenizer;
mod write;

use std::path::Path;

use serde_json::Value;

pub(crate) use family::{Family, SUPPORTED};
pub(crate) use lora::convert as convert_lora;

use super::checkpoint::Checkpoint;
use super::general;
use super::meta::Meta;
use super::model_id::ParamCount;
use super::overrides::Overrides;
use super::{ConvertError, ConvertOptions, ConvertReport, OutType};
use write::Planned;

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
    let full = defaults::with_defaults(config);
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
    // Nemotron-H with experts is llama.cpp's `nemotron_h_moe`.
    let arch = if family == Family::NemotronH && nemotron_h::is_moe(&h) {
        "nemotron_h_moe"
    } else {
        family.arch()
    };
    let ck = Checkpoint::open(dir)?;

    // OpenELMModel reads its layer count from `num_transformer_layers` only.
    let layer_keys: &[&str] = match family {
        Family::OpenElm => &["num_transformer_layers"],
        _ => &["n_layers", "num_hidden_layers", "n_layer", "num_layers"],
    };
    let n_layer =
        uint(&h, layer_keys, &cfg_path)?.ok_or_else(|| bad(&cfg_path, "no num_hidden_layers"))?;
    let n_embd = uint(&h, &["hidden_size", "n_embd", "dim"], &cfg_path)?;
    let n_head = uint(&h, &["n_heads", "num_attention_heads"], &cfg_path)?;
    let n_head_kv = uint(&h, &["n_kv_heads", "num_key_value_heads"], &cfg_path)?;
    let vocab_size = if family == Family::Mamba {
        mamba::padded_vocab(&h, &cfg_path, 8)?
    } else if family == Family::Mamba2 {
        mamba::padded_vocab(&h, &cfg_path, 16)?
    } else if matches!(family, Family::GraniteHybrid | Family::NemotronH) {
        // Their `set_vocab`s pad to 8 whatever the config says (a Granite hybrid without
        // Mamba layers, padded to 1, is refused); the parameters keep the config's size.
        if family == Family::NemotronH {
            nemotron_h::check(&h, n_layer, &cfg_path)?;
        } else if granite_hybrid::attn_layers(&h, n_layer, &cfg_path)?.len() as u64 == n_layer {
            return Err(bad(
                &cfg_path,
                "a Granite hybrid without Mamba layers (llama.cpp writes it as granite or \
                 granitemoe) is not supported yet",
            ));
        }
        let mut padded = h.clone();
        padded["pad_vocab_size_multiple"] = Value::from(8);
        mamba::padded_vocab(&padded, &cfg_path, 8)?
    } else if family == Family::ChatGlm {
        uint(&h, &["padded_vocab_size", "vocab_size"], &cfg_path)?
    } else {
        uint(&h, &["vocab_size"], &cfg_path)?
    };
    let rp = family::rope_parameters(&h);

    // The tokenizer first: Gemma 3 trims the embedding to its length.
    let vocab = tokenizer::load(family, dir, &h, vocab_size)?;
    // Checkpoints shipped quantized: only gpt-oss's MXFP4 experts are read (as llama.cpp,
    // which marks such files MXFP4_MOE unless asked for Q8_0).
    let quant = h
        .get("quantization_config")
        .and_then(|q| q.get("quant_method"))
        .and_then(|m| m.as_str());
    let mxfp4 = quant == Some("mxfp4");
    let fp8 = quant == Some("fp8");
    let fp8_block = if fp8 {
        fp8_block_size(&h, &cfg_path)?
    } else {
        None
    };
    match quant {
        None | Some("fp8") => {}
        Some("mxfp4") if family == Family::GptOss => {}
        Some(m) => {
            return Err(bad(
                &cfg_path,
                format!(
                    "a {m}-quantized checkpoint: not supported yet (convert the unquantized one)"
                ),
            ))
        }
    }
    let file_type = match opts.outtype {
        OutType::F32 | OutType::F16 | OutType::BF16 if mxfp4 => 38,
        _ => opts.outtype.file_type(),
    };
    let hp = params::hparams::Hparams {
        h: &h,
        rp: &rp,
        cfg: &cfg_path,
        arch,
        n_layer,
        n_embd,
        n_head,
        // The Granite hybrid's parameters are written before its vocabulary is padded.
        vocab_size: if matches!(family, Family::GraniteHybrid | Family::NemotronH) {
            uint(&h, &["vocab_size"], &cfg_path)?
        } else {
            vocab_size
        },
        file_type,
    };

    // Plan every tensor: name, type, dims, where its values come from.
    let mut plan: Vec<Planned> = Vec::new();
    let phi3_attn_factor = generated::plan(family, &hp, &mut plan)?;
    tensors::plan(
        &tensors::Inputs {
            family,
            arch,
            dir,
            cfg: &cfg_path,
            h: &h,
            ck: &ck,
            outtype: opts.outtype,
            fp8,
            n_layer,
            n_head,
            n_head_kv,
            n_tokens: vocab.tokens.len(),
        },
        &mut plan,
    )?;
    if opts.fp8_as_q8 {
        write::fp8_as_q8(&ck, &mut plan);
    }
    if opts.fuse_qkv {
        fuse::qkv(family, &mut plan, &cfg_path)?;
    }
    if opts.vocab_only && opts.split.is_set() {
        return Err(bad(out, "a vocabulary-only file is not split"));
    }
    if opts.vocab_only {
        // llama.cpp's `write_vocab`: no tensors prepared, so no parameter count and none of the
        // keys set while preparing them.
        plan.clear();
    }
    let params = ParamCount::of(
        plan.iter()
            .map(|p| (p.spec.name.as_str(), p.spec.dims.as_slice())),
    );

    // Metadata, in llama.cpp's order (keys set while preparing tensors come first).
    let mut meta = Meta::default();
    meta.str("general.architecture", arch);
    if let (Some(a), false) = (phi3_attn_factor, opts.vocab_only) {
        meta.f32(format!("{arch}.rope.scaling.attn_factor"), a);
    }
    let ov = Overrides::load(opts.metadata.as_deref(), opts.model_name.as_deref())?;
    general::write(&mut meta, dir, &h, params, &ov)?;
    params::write(&mut meta, family, &hp)?;
    meta.u32("general.quantization_version", 2);

    tokenizer::write_meta(&mut meta, family, dir, &cfg_path, &h, &vocab, vocab_size)?;
    if hf_arch == "Qwen3ForSequenceClassification" {
        return Err(bad(&cfg_path, "Qwen3 rerankers are not converted yet"));
    }
    if family == Family::NemotronH && !opts.vocab_only {
        nemotron_h::check_plan(&h, n_layer, &plan, &cfg_path)?;
    }

    let mut report = write::write_file(out, &ck, fp8_block, meta, &plan, opts)?;
    report.arch = arch.to_string();
    Ok(report)
}

/// An unsigned hyperparameter as llama.cpp's hybrid converters' `find_hparam` reads it: the
/// first of `keys` present, else the first of them with `prefix` (`mamba_`).
pub(super) fn find_prefixed(
    h: &Value,
    keys: &[&str],
    prefix: &str,
    cfg: &Path,
) -> Result<Option<u64>, ConvertError> {
    if let Some(v) = uint(h, keys, cfg)? {
        return Ok(Some(v));
    }
    let prefixed: Vec<String> = keys.iter().map(|k| format!("{prefix}{k}")).collect();
    let refs: Vec<&str> = prefixed.iter().map(String::as_str).collect();
    uint(h, &refs, cfg)
}

/// An FP8 checkpoint's `weight_block_size` (`[rows, columns]` per scale), if it has one.
fn fp8_block_size(h: &Value, cfg: &Path) -> Result<Option<(usize, usize)>, ConvertError> {
    let v = h
        .get("quantization_config")
        .and_then(|q| q.get("weight_block_size"));
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => match a.as_slice() {
            [r, c] => {
                let dim = |x: &Value| x.as_u64().filter(|&d| d > 0 && d <= 1 << 20);
                match (dim(r), dim(c)) {
                    (Some(r), Some(c)) => Ok(Some((r as usize, c as usize))),
                    _ => Err(bad(
                        cfg,
                        format!("weight_block_size {v:?} is not two sizes"),
                    )),
                }
            }
            _ => Err(bad(cfg, "weight_block_size is not [rows, columns]")),
        },
        Some(other) => Err(bad(
            cfg,
            format!("weight_block_size = {other} is not a list"),
        )),
    }
}
