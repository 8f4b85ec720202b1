//! ChatGLM (GGUF `chatglm`), converted as llama.cpp's `ChatGLMModel`: `ChatGLMModel` /
//! `ChatGLMForConditionalGeneration` checkpoints (ChatGLM3, GLM-4-9B as first released) with
//! their `transformer.*` names, and `GlmForCausalLM` ones (GLM-4-9B `-hf`, GLM-Edge) with
//! Llama's names and a fused gate-up matrix. Its own key list (which ignores a `-hf` config's
//! RMS epsilon and RoPE base, as llama.cpp's does); ChatGLM3's SentencePiece vocabulary as its
//! tokenizer code numbers it (nine special tokens after the pieces), others from
//! `tokenizer.json`.

use std::path::Path;

use serde_json::Value;

use super::params::hparams::Hparams;
use super::{bad, u32_of, uint};
use crate::convert::meta::Meta;
use crate::convert::vocab::spm::{self, SP_BYTE, SP_CONTROL, SP_UNKNOWN, SP_UNUSED};
use crate::convert::vocab::{Vocab, BYTE, CONTROL, NORMAL, UNUSED, USER_DEFINED};
use crate::convert::ConvertError;

/// llama.cpp's UNKNOWN token type.
const UNKNOWN: i32 = 2;

/// ChatGLM3's tokenizer code numbers these after the SentencePiece pieces.
const CHATGLM3_SPECIALS: [&str; 9] = [
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "sop",
    "eop",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
];

/// Whether llama.cpp reads the checkpoint as ChatGLM3 (by its `_name_or_path`, as it does).
pub(super) fn is_chatglm3(h: &Value) -> bool {
    h.get("_name_or_path")
        .and_then(Value::as_str)
        .is_some_and(|n| n.contains("THUDM/chatglm3-6b"))
}

/// The GGUF name of a `transformer.*` tensor (`None` for other names, which are Llama's).
pub(super) fn gguf_name(full: &str) -> Option<String> {
    let name = full.strip_prefix("transformer.")?;
    let whole = match name {
        "embedding.word_embeddings.weight" => Some("token_embd.weight"),
        "encoder.final_layernorm.weight" => Some("output_norm.weight"),
        "output_layer.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(n) = whole {
        return Some(n.into());
    }
    let (layer, module, kind) = crate::convert::layer_tensor(full, "transformer.encoder.layers.")?;
    let short = match module {
        "input_layernorm" => "attn_norm",
        "self_attention.query_key_value" => "attn_qkv",
        "self_attention.dense" => "attn_output",
        "post_attention_layernorm" => "ffn_norm",
        "mlp.dense_h_to_4h" => "ffn_up",
        "mlp.dense_4h_to_h" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}.{kind}"))
}

/// `ChatGLMModel.set_gguf_parameters` (it does not call the base): the context from
/// `seq_length` (else the width), width, feed-forward, blocks, heads and query groups, the RMS
/// epsilon from `layernorm_epsilon` (1e-5 without), the file type, RoPE over
/// `partial_rotary_factor` (0.5) of hidden / heads, no BOS, base 10000 × `rope_ratio`.
pub(super) fn params(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let get = |keys: &[&str]| uint(h, keys, cfg);
    let embd = get(&["hidden_size", "n_embed"])?.ok_or_else(|| bad(cfg, "no hidden_size"))?;
    let heads = get(&["n_head", "num_attention_heads"])?
        .ok_or_else(|| bad(cfg, "no num_attention_heads"))?;
    let kv = get(&["multi_query_group_num", "num_key_value_heads"])?.unwrap_or(heads);
    let ctx = get(&["seq_length"])?.unwrap_or(embd);
    let ff = get(&["ffn_hidden_size", "intermediate_size"])?.unwrap_or(4 * embd);
    let u = |v: u64, key: &str| u32_of(v, key, cfg);
    meta.u32(k("context_length"), u(ctx, "seq_length")?);
    meta.u32(k("embedding_length"), u(embd, "hidden_size")?);
    meta.u32(k("feed_forward_length"), u(ff, "ffn_hidden_size")?);
    meta.u32(k("block_count"), u(hp.n_layer, "num_layers")?);
    meta.u32(k("attention.head_count"), u(heads, "num_attention_heads")?);
    meta.u32(
        k("attention.head_count_kv"),
        u(kv, "multi_query_group_num")?,
    );
    let eps = match h.get("layernorm_epsilon").filter(|v| !v.is_null()) {
        None => 1e-5,
        Some(v) => v
            .as_f64()
            .ok_or_else(|| bad(cfg, "layernorm_epsilon is not a number"))?,
    };
    meta.f32(k("attention.layer_norm_rms_epsilon"), eps as f32);
    meta.u32("general.file_type", hp.file_type);
    let rope_dim = match get(&["attention_dim"])? {
        Some(d) => d,
        None => {
            let n = get(&["num_attention_heads"])?.filter(|&n| n > 0);
            let hidden = get(&["hidden_size"])?;
            match (hidden, n) {
                (Some(e), Some(n)) => e / n,
                _ => return Err(bad(cfg, "no hidden_size / num_attention_heads")),
            }
        }
    };
    let factor = hp
        .rp
        .get("partial_rotary_factor")
        .and_then(Value::as_f64)
        .unwrap_or(0.5);
    let rot = (rope_dim as f64 * factor).trunc();
    if !(0.0..=u32::MAX as f64).contains(&rot) {
        return Err(bad(cfg, format!("partial_rotary_factor {factor}")));
    }
    meta.u32(k("rope.dimension_count"), rot as u32);
    meta.bool("tokenizer.ggml.add_bos_token", false);
    let ratio = match h.get("rope_ratio").filter(|v| !v.is_null()) {
        None => 1.0,
        Some(v) => v
            .as_f64()
            .ok_or_else(|| bad(cfg, "rope_ratio is not a number"))?,
    };
    meta.f32(k("rope.freq_base"), (10000.0 * ratio) as f32);
    Ok(())
}

/// ChatGLM3's vocabulary as `set_vocab_chatglm3` reads it through ChatGLM3's tokenizer code:
/// the pieces of `tokenizer.model` by id, empty where that code gives no text (the BOS, EOS
/// and unknown ids, ids past the pieces), its nine special tokens after the pieces, ids 0-2
/// renamed `<unk>`, `<bos>`, `<eos>`, `[PAD{i}]` to `padded_vocab_size`; scores and types as
/// SentencePiece has them (user-defined pieces are normal).
pub(super) fn chatglm3_vocab(dir: &Path, vocab_size: Option<usize>) -> Result<Vocab, ConvertError> {
    let path = dir.join("tokenizer.model");
    let err = |reason: String| ConvertError::Input {
        path: path.clone(),
        reason,
    };
    let len = std::fs::metadata(&path)
        .map_err(|e| {
            err(format!(
                "cannot read ({e}): ChatGLM3 needs its tokenizer.model"
            ))
        })?
        .len();
    if len > 256 << 20 {
        return Err(err(format!("{len} bytes is too large for a tokenizer")));
    }
    let bytes = std::fs::read(&path).map_err(|e| err(format!("cannot read: {e}")))?;
    let pieces = spm::parse_pieces(&bytes).map_err(&err)?;
    let [unk, bos, eos] = spm::special_ids(&bytes, &pieces).map_err(&err)?;
    let n_sp = pieces.len();
    let n_words = n_sp + CHATGLM3_SPECIALS.len();
    let n = vocab_size.unwrap_or(n_words);
    if n < n_words {
        return Err(err(format!(
            "padded_vocab_size {n} is smaller than the tokenizer's {n_words} ids"
        )));
    }
    if n > 16 << 20 {
        return Err(err(format!("padded_vocab_size {n} is implausibly large")));
    }
    let empty = [eos, bos, unk];
    let mut tokens = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    let mut scores = Vec::with_capacity(n);
    for id in 0..n {
        let special = id.checked_sub(n_sp).and_then(|k| CHATGLM3_SPECIALS.get(k));
        // The SentencePiece piece of the id (`None` past the pieces).
        let sp = pieces.get(id);
        let mut piece = match (special, sp) {
            (Some(s), _) => s.to_string(),
            (None, Some(p)) if !empty.contains(&Some(id)) => p.text.clone(),
            (None, _) => String::new(),
        };
        match id {
            0 => piece = "<unk>".into(),
            1 => piece = "<bos>".into(),
            2 => piece = "<eos>".into(),
            _ => {}
        }
        let score = match sp {
            Some(p) if !piece.is_empty() => p.score,
            _ => 0.0,
        };
        let ty = if let Some(p) = sp {
            match p.kind {
                SP_UNKNOWN => UNKNOWN,
                SP_CONTROL => CONTROL,
                SP_UNUSED => UNUSED,
                SP_BYTE => BYTE,
                _ => NORMAL,
            }
        } else if special.is_some() {
            CONTROL
        } else if piece.is_empty() {
            piece = format!("[PAD{id}]");
            UNUSED
        } else {
            USER_DEFINED
        };
        tokens.push(piece);
        scores.push(score);
        types.push(ty);
    }
    Ok(Vocab {
        model: "llama",
        pre: "chatglm-spm".into(),
        tokens,
        types,
        scores: Some(scores),
        merges: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transformer_names_map_and_others_fall_through() {
        for (hf, gguf) in [
            (
                "transformer.embedding.word_embeddings.weight",
                "token_embd.weight",
            ),
            ("transformer.output_layer.weight", "output.weight"),
            (
                "transformer.encoder.layers.3.self_attention.query_key_value.bias",
                "blk.3.attn_qkv.bias",
            ),
            (
                "transformer.encoder.layers.0.mlp.dense_h_to_4h.weight",
                "blk.0.ffn_up.weight",
            ),
        ] {
            assert_eq!(gguf_name(hf).as_deref(), Some(gguf), "{hf}");
        }
        assert_eq!(gguf_name("model.layers.0.mlp.down_proj.weight"), None);
        assert_eq!(
            gguf_name("transformer.encoder.layers.0.mystery.weight"),
            None
        );
        assert!(is_chatglm3(
            &serde_json::json!({ "_name_or_path": "THUDM/chatglm3-6b-32k" })
        ));
        assert!(!is_chatglm3(
            &serde_json::json!({ "_name_or_path": "THUDM/glm-4-9b-chat" })
        ));
    }
}
