//! BERT checkpoints → GGUF `bert`: tensor names and metadata as llama.cpp's converter writes
//! them, the WordPiece vocabulary in llama.cpp's "phantom space" form (`##x` → `x`, `x` → `▁x`,
//! `[SPECIAL]` kept), and the pooling of a sentence-transformers `modules.json`.

use std::path::Path;

use half::f16;
use kestrel_gguf::{GgmlType, GgufWriter, MetadataValue};

use super::safetensors::SafeTensors;
use super::{read_json, ConvertError, ConvertOptions, OutType};

/// llama.cpp's token types.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;

/// The GGUF name of a Hugging Face BERT tensor; `None` for tensors an encoder does not use.
fn gguf_name(hf: &str) -> Option<String> {
    let name = hf.strip_prefix("bert.").unwrap_or(hf);
    let fixed = match name {
        "embeddings.word_embeddings.weight" => Some("token_embd.weight"),
        "embeddings.position_embeddings.weight" => Some("position_embd.weight"),
        "embeddings.token_type_embeddings.weight" => Some("token_types.weight"),
        "embeddings.LayerNorm.weight" => Some("token_embd_norm.weight"),
        "embeddings.LayerNorm.bias" => Some("token_embd_norm.bias"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let (layer, module, kind) = super::layer_tensor(name, "encoder.layer.")?;
    let short = match module {
        "attention.self.query" => "attn_q",
        "attention.self.key" => "attn_k",
        "attention.self.value" => "attn_v",
        "attention.output.dense" => "attn_output",
        "attention.output.LayerNorm" => "attn_output_norm",
        "intermediate.dense" => "ffn_up",
        "output.dense" => "ffn_down",
        "output.LayerNorm" => "layer_output_norm",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}.{kind}"))
}

fn usize_of(config: &serde_json::Value, key: &str, path: &Path) -> Result<usize, ConvertError> {
    config
        .get(key)
        .and_then(|v| v.as_u64())
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| ConvertError::Input {
            path: path.to_path_buf(),
            reason: format!("{key:?} is missing or not a non-negative integer"),
        })
}

/// The vocabulary, by id: `vocab.txt` (one token per line) or `tokenizer.json`'s WordPiece map.
fn read_vocab(dir: &Path) -> Result<Vec<String>, ConvertError> {
    let txt = dir.join("vocab.txt");
    if txt.exists() {
        let bad = |reason: String| ConvertError::Input {
            path: txt.clone(),
            reason,
        };
        let len = std::fs::metadata(&txt)
            .map_err(|e| bad(format!("cannot read: {e}")))?
            .len();
        if len > 64 << 20 {
            return Err(bad(format!("{len} bytes is too large for a vocabulary")));
        }
        let text = std::fs::read_to_string(&txt).map_err(|e| bad(format!("cannot read: {e}")))?;
        return Ok(text.lines().map(str::to_string).collect());
    }
    let path = dir.join("tokenizer.json");
    let tj = read_json(&path)?;
    let map = tj
        .get("model")
        .and_then(|m| m.get("vocab"))
        .and_then(|v| v.as_object())
        .ok_or_else(|| ConvertError::Input {
            path: path.clone(),
            reason: "no vocab.txt, and no model.vocab map in tokenizer.json".into(),
        })?;
    let mut tokens = vec![String::new(); map.len()];
    for (tok, id) in map {
        let id = id
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .filter(|&i| i < tokens.len())
            .ok_or_else(|| ConvertError::Input {
                path: path.clone(),
                reason: format!("token {tok:?} has id {id}, outside 0..{}", map.len()),
            })?;
        tokens[id] = tok.clone();
    }
    Ok(tokens)
}

/// llama.cpp's phantom-space form of a WordPiece token.
fn phantom(tok: &str) -> String {
    if tok.starts_with('[') && tok.ends_with(']') {
        tok.to_string()
    } else if let Some(rest) = tok.strip_prefix("##") {
        rest.to_string()
    } else {
        format!("\u{2581}{tok}")
    }
}

/// llama.cpp's pooling number from a sentence-transformers `modules.json`, if there is one.
fn pooling_type(dir: &Path) -> Result<Option<u32>, ConvertError> {
    let modules = dir.join("modules.json");
    if !modules.exists() {
        return Ok(None);
    }
    let m = read_json(&modules)?;
    let pooling_dir = m.as_array().and_then(|a| {
        a.iter().find_map(|e| {
            let ty = e.get("type")?.as_str()?;
            ty.ends_with("models.Pooling")
                .then(|| e.get("path")?.as_str().map(str::to_string))
                .flatten()
        })
    });
    let Some(p) = pooling_dir else {
        return Ok(None);
    };
    let cfg_path = dir.join(p).join("config.json");
    let cfg = read_json(&cfg_path)?;
    let on = |k: &str| cfg.get(k).and_then(|v| v.as_bool()).unwrap_or(false);
    if on("pooling_mode_mean_tokens") {
        Ok(Some(1))
    } else if on("pooling_mode_cls_token") {
        Ok(Some(2))
    } else if on("pooling_mode_lasttoken") {
        Ok(Some(3))
    } else {
        Err(ConvertError::Input {
            path: cfg_path,
            reason: "only mean, cls and last-token pooling are supported".into(),
        })
    }
}

/// Build the GGUF writer for the BERT checkpoint in `dir`; returns it and its tensor count.
pub(super) fn convert(
    dir: &Path,
    config: &serde_json::Value,
    opts: &ConvertOptions,
) -> Result<(GgufWriter, usize), ConvertError> {
    let cpath = dir.join("config.json");
    let n_embd = usize_of(config, "hidden_size", &cpath)?;
    let n_layer = usize_of(config, "num_hidden_layers", &cpath)?;
    let n_head = usize_of(config, "num_attention_heads", &cpath)?;
    let n_ff = usize_of(config, "intermediate_size", &cpath)?;
    let n_ctx = usize_of(config, "max_position_embeddings", &cpath)?;
    let n_types = usize_of(config, "type_vocab_size", &cpath).unwrap_or(2);
    let eps = config
        .get("layer_norm_eps")
        .and_then(|v| v.as_f64())
        .unwrap_or(1e-12) as f32;
    if let Some(act) = config.get("hidden_act").and_then(|v| v.as_str()) {
        if act != "gelu" {
            return Err(ConvertError::Input {
                path: cpath,
                reason: format!("hidden_act {act:?}: only exact \"gelu\" is supported"),
            });
        }
    }
    let pos_type = config
        .get("position_embedding_type")
        .and_then(|v| v.as_str())
        .unwrap_or("absolute");
    if pos_type != "absolute" {
        return Err(ConvertError::Input {
            path: cpath,
            reason: format!("position_embedding_type {pos_type:?}: only \"absolute\" is supported"),
        });
    }

    let vocab = read_vocab(dir)?;
    let tok_cfg_path = dir.join("tokenizer_config.json");
    let tok_cfg = if tok_cfg_path.exists() {
        read_json(&tok_cfg_path)?
    } else {
        serde_json::Value::Null
    };
    let lowercase = tok_cfg
        .get("do_lower_case")
        .and_then(|v| v.as_bool())
        .unwrap_or(true);
    let special = |key: &str, default: &str| -> String {
        tok_cfg
            .get(key)
            .and_then(|v| v.as_str().or_else(|| v.get("content")?.as_str()))
            .unwrap_or(default)
            .to_string()
    };
    let id_of = |tok: &str| vocab.iter().position(|t| t == tok).map(|i| i as u32);
    let specials = [
        (
            "tokenizer.ggml.unknown_token_id",
            special("unk_token", "[UNK]"),
        ),
        (
            "tokenizer.ggml.seperator_token_id",
            special("sep_token", "[SEP]"),
        ),
        (
            "tokenizer.ggml.padding_token_id",
            special("pad_token", "[PAD]"),
        ),
        ("tokenizer.ggml.cls_token_id", special("cls_token", "[CLS]")),
        (
            "tokenizer.ggml.mask_token_id",
            special("mask_token", "[MASK]"),
        ),
    ];
    let types: Vec<i32> = vocab
        .iter()
        .map(|t| {
            if specials.iter().any(|(_, s)| s == t) {
                CONTROL
            } else {
                NORMAL
            }
        })
        .collect();

    let mut w = GgufWriter::new();
    let name = config
        .get("_name_or_path")
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "bert".into());
    w.add_metadata("general.architecture", "bert");
    w.add_metadata("general.name", name);
    w.add_metadata("general.file_type", opts.outtype.file_type());
    w.add_metadata("bert.context_length", n_ctx as u32);
    w.add_metadata("bert.embedding_length", n_embd as u32);
    w.add_metadata("bert.feed_forward_length", n_ff as u32);
    w.add_metadata("bert.block_count", n_layer as u32);
    w.add_metadata("bert.attention.head_count", n_head as u32);
    w.add_metadata("bert.attention.layer_norm_epsilon", eps);
    w.add_metadata("bert.attention.causal", false);
    if let Some(p) = pooling_type(dir)? {
        w.add_metadata("bert.pooling_type", p);
    }
    w.add_metadata("tokenizer.ggml.model", "bert");
    w.add_metadata("tokenizer.ggml.pre", "default");
    w.add_metadata(
        "tokenizer.ggml.tokens",
        MetadataValue::string_array(vocab.iter().map(|t| phantom(t))),
    );
    w.add_metadata("tokenizer.ggml.token_type", MetadataValue::i32_array(types));
    w.add_metadata("tokenizer.ggml.token_type_count", n_types as u32);
    w.add_metadata("tokenizer.ggml.normalizer.lowercase", lowercase);
    for (key, tok) in &specials {
        if let Some(id) = id_of(tok) {
            w.add_metadata(key, id);
        }
    }
    if let Some(cls) = id_of(&specials[3].1) {
        w.add_metadata("tokenizer.ggml.bos_token_id", cls);
    }

    let st = SafeTensors::open(&dir.join("model.safetensors"))?;
    let mut count = 0;
    for (hf, t) in st.tensors() {
        let Some(name) = gguf_name(hf) else { continue };
        if !t.dtype.is_float() {
            return Err(ConvertError::Input {
                path: st.path().to_path_buf(),
                reason: format!("tensor {hf:?} is not a float tensor"),
            });
        }
        let values = st.to_f32(hf)?;
        let dims: Vec<u64> = t.shape.iter().rev().map(|&d| d as u64).collect();
        let matrix = t.shape.len() >= 2;
        match (matrix, opts.outtype) {
            (true, OutType::F16) => {
                let bytes: Vec<u8> = values
                    .iter()
                    .flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes())
                    .collect();
                w.add_tensor(&name, GgmlType::F16, &dims, bytes)?;
            }
            _ => {
                w.add_f32_tensor(&name, &dims, &values)?;
            }
        }
        count += 1;
    }
    if count == 0 {
        return Err(ConvertError::Input {
            path: st.path().to_path_buf(),
            reason: "no BERT tensors found".into(),
        });
    }
    Ok((w, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_as_llama_cpp_maps_them() {
        assert_eq!(
            gguf_name("embeddings.word_embeddings.weight").as_deref(),
            Some("token_embd.weight")
        );
        assert_eq!(
            gguf_name("bert.encoder.layer.3.attention.self.query.bias").as_deref(),
            Some("blk.3.attn_q.bias")
        );
        assert_eq!(
            gguf_name("encoder.layer.5.output.LayerNorm.weight").as_deref(),
            Some("blk.5.layer_output_norm.weight")
        );
        assert_eq!(
            gguf_name("encoder.layer.0.intermediate.dense.weight").as_deref(),
            Some("blk.0.ffn_up.weight")
        );
        assert_eq!(gguf_name("embeddings.position_ids"), None);
        assert_eq!(gguf_name("pooler.dense.weight"), None);
        assert_eq!(gguf_name("encoder.layer.x.output.dense.weight"), None);
    }

    #[test]
    fn phantom_space_vocabulary() {
        assert_eq!(phantom("[CLS]"), "[CLS]");
        assert_eq!(phantom("##ing"), "ing");
        assert_eq!(phantom("play"), "\u{2581}play");
    }
}
