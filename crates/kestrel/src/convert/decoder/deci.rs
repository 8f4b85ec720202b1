//! DeciLM's NAS-built Llama variants (`DeciLMForCausalLM` with `block_configs`: Llama 3.1
//! Nemotron 51B, Nano/Super/Ultra; GGUF `deci`), converted as llama.cpp's `DeciModel` does: per
//! layer, the heads (0 for an attention-free layer; all for a linear-attention one), KV heads
//! (`num_attention_heads / n_heads_in_group`, 0 without attention) and feed-forward size
//! (`2/3 · ffn_mult · hidden` rounded up to 256; 0 for a dummy layer), written as arrays
//! before the sizes; Q/K reordered with each layer's own head counts; Llama 3 RoPE factors; the
//! BPE vocabulary of Llama 3 (a `vocab_size` of 128256). DeciLM-7B (no `block_configs`) is
//! Llama's keys with its KV heads per layer (`num_key_value_heads_per_layer`) and a Llama HF
//! vocabulary.

use std::path::Path;

use serde_json::Value;

use super::params::hparams::Hparams;
use super::{bad, u32_of, uint};
use crate::convert::meta::Meta;
use crate::convert::ConvertError;

/// One layer's (heads, KV heads, feed-forward size).
pub(super) type Layer = (u64, u64, u64);

/// Whether the config describes its layers with `block_configs` (the Nemotron NAS models).
pub(super) fn has_blocks(h: &Value) -> bool {
    h.get("block_configs").is_some()
}

/// Each layer's (heads, KV heads) for reordering Q and K rows, as `DeciModel.modify_tensors`
/// takes them: DeciLM-7B's `num_key_value_heads_per_layer` (heads from the config), else
/// `block_configs`, else `None` (the config's single counts).
pub(super) fn head_layers(
    h: &Value,
    n_layer: u64,
    cfg: &Path,
) -> Result<Option<Vec<(u64, u64)>>, ConvertError> {
    if let Some(kv) = kv_heads_per_layer(h, n_layer, cfg)? {
        let heads = uint(h, &["num_attention_heads"], cfg)?
            .ok_or_else(|| bad(cfg, "no num_attention_heads"))?;
        return Ok(Some(kv.into_iter().map(|k| (heads, k)).collect()));
    }
    if has_blocks(h) {
        return Ok(Some(
            layers(h, n_layer, cfg)?
                .into_iter()
                .map(|(nh, kv, _)| (nh, kv))
                .collect(),
        ));
    }
    Ok(None)
}

/// DeciLM-7B's `num_key_value_heads_per_layer`, checked against the layer count.
fn kv_heads_per_layer(
    h: &Value,
    n_layer: u64,
    cfg: &Path,
) -> Result<Option<Vec<u64>>, ConvertError> {
    let Some(v) = h
        .get("num_key_value_heads_per_layer")
        .filter(|v| !v.is_null())
    else {
        return Ok(None);
    };
    let kv: Vec<u64> = v
        .as_array()
        .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
        .ok_or_else(|| bad(cfg, "num_key_value_heads_per_layer is not a list of counts"))?;
    if kv.len() as u64 != n_layer {
        return Err(bad(
            cfg,
            format!(
                "num_key_value_heads_per_layer has {} entries for {n_layer} layers",
                kv.len()
            ),
        ));
    }
    Ok(Some(kv))
}

/// DeciLM-7B's keys after Llama's (`TextModel`'s): the KV heads per layer (replacing the single
/// count in place, as gguf-py's writer does), the vocabulary size and the rotary dimension.
pub(super) fn params_7b(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    if let Some(kv) = kv_heads_per_layer(h, hp.n_layer, cfg)? {
        let kv: Vec<i32> = kv
            .iter()
            .map(|&n| i32::try_from(n).map_err(|_| bad(cfg, "a KV head count over 2^31")))
            .collect::<Result<_, _>>()?;
        meta.i32s(k("attention.head_count_kv"), &kv);
    }
    let need = |key: &str| uint(h, &[key], cfg)?.ok_or_else(|| bad(cfg, format!("no {key}")));
    meta.u32(
        k("vocab_size"),
        u32_of(need("vocab_size")?, "vocab_size", cfg)?,
    );
    let rope_dim = match uint(h, &["head_dim"], cfg)? {
        Some(d) => d,
        None => need("hidden_size")? / need("num_attention_heads")?.max(1),
    };
    meta.u32(
        k("rope.dimension_count"),
        u32_of(rope_dim, "head_dim", cfg)?,
    );
    Ok(())
}

/// The layers of `block_configs`, checked against the layer count.
pub(super) fn layers(h: &Value, n_layer: u64, cfg: &Path) -> Result<Vec<Layer>, ConvertError> {
    let blocks = h
        .get("block_configs")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(cfg, "block_configs is not a list"))?;
    if blocks.len() as u64 != n_layer {
        return Err(bad(
            cfg,
            format!("{} block_configs for {n_layer} layers", blocks.len()),
        ));
    }
    let heads = uint(h, &["num_attention_heads"], cfg)?
        .filter(|&n| n > 0)
        .ok_or_else(|| bad(cfg, "no num_attention_heads"))?;
    let n_embd = uint(h, &["hidden_size"], cfg)?.ok_or_else(|| bad(cfg, "no hidden_size"))?;
    blocks
        .iter()
        .enumerate()
        .map(|(il, b)| {
            let attn = &b["attention"];
            let (nh, kv) = match attn.get("n_heads_in_group").filter(|v| !v.is_null()) {
                Some(g) => {
                    let g = g
                        .as_u64()
                        .filter(|&g| g > 0)
                        .ok_or_else(|| bad(cfg, format!("block {il}: n_heads_in_group {g}")))?;
                    (heads, heads / g)
                }
                None if attn.get("replace_with_linear") == Some(&Value::Bool(true)) => (heads, 0),
                None => (0, 0),
            };
            let ffn = match b["ffn"].get("ffn_mult").filter(|v| !v.is_null()) {
                None => 0,
                Some(m) => {
                    let m = m
                        .as_f64()
                        .filter(|m| m.is_finite() && *m >= 0.0)
                        .ok_or_else(|| bad(cfg, format!("block {il}: ffn_mult {m}")))?;
                    // int(2 * ffn_mult * n_embd / 3), then up to a multiple of 256.
                    let n = (2.0 * m * n_embd as f64 / 3.0).trunc();
                    if n > 1e12 {
                        return Err(bad(cfg, format!("block {il}: ffn_mult {m}")));
                    }
                    (n as u64).div_ceil(256) * 256
                }
            };
            Ok((nh, kv, ffn))
        })
        .collect()
}

/// `DeciModel.set_gguf_parameters` with `block_configs`: the RoPE base, the per-layer KV heads,
/// heads and feed-forward sizes, then the sizes, the key/value lengths (hidden / heads), the
/// file type, the vocabulary size and the rotary dimension.
pub(super) fn params(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let layers = layers(h, hp.n_layer, cfg)?;
    if let Some(theta) = hp.rp.get("rope_theta").and_then(Value::as_f64) {
        meta.f32(k("rope.freq_base"), theta as f32);
    }
    let i32s = |f: fn(&Layer) -> u64| -> Result<Vec<i32>, ConvertError> {
        layers
            .iter()
            .map(|l| i32::try_from(f(l)).map_err(|_| bad(cfg, "a per-layer size over 2^31")))
            .collect()
    };
    meta.i32s(k("attention.head_count_kv"), &i32s(|l| l.1)?);
    meta.i32s(k("attention.head_count"), &i32s(|l| l.0)?);
    meta.i32s(k("feed_forward_length"), &i32s(|l| l.2)?);
    meta.u32(
        k("block_count"),
        u32_of(hp.n_layer, "num_hidden_layers", cfg)?,
    );
    let need = |key: &str| uint(h, &[key], cfg)?.ok_or_else(|| bad(cfg, format!("no {key}")));
    meta.u32(
        k("context_length"),
        u32_of(
            need("max_position_embeddings")?,
            "max_position_embeddings",
            cfg,
        )?,
    );
    let n_embd = need("hidden_size")?;
    meta.u32(k("embedding_length"), u32_of(n_embd, "hidden_size", cfg)?);
    let eps = h
        .get("rms_norm_eps")
        .and_then(Value::as_f64)
        .ok_or_else(|| bad(cfg, "no rms_norm_eps"))?;
    meta.f32(k("attention.layer_norm_rms_epsilon"), eps as f32);
    let heads = need("num_attention_heads")?.max(1);
    meta.u32(
        k("attention.key_length"),
        u32_of(n_embd / heads, "head size", cfg)?,
    );
    meta.u32(
        k("attention.value_length"),
        u32_of(n_embd / heads, "head size", cfg)?,
    );
    meta.u32("general.file_type", hp.file_type);
    meta.u32(
        k("vocab_size"),
        u32_of(need("vocab_size")?, "vocab_size", cfg)?,
    );
    let rope_dim = uint(h, &["head_dim"], cfg)?.unwrap_or(n_embd / heads);
    meta.u32(
        k("rope.dimension_count"),
        u32_of(rope_dim, "head_dim", cfg)?,
    );
    Ok(())
}
