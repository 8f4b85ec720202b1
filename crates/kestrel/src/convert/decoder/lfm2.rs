//! LFM2 (`Lfm2ForCausalLM`, GGUF `lfm2`), as llama.cpp's `LFM2Model` converts it: a hybrid of
//! short-convolution layers (`conv.in_proj`, a depthwise `conv.conv` of `conv_L_cache` taps,
//! `conv.out_proj`) and attention layers with per-head Q/K norms; the KV head count written per
//! layer (0 on convolution layers), the feed-forward width as the model computes it from
//! `block_*` (two thirds, times the multiplier, rounded up to `block_multiple_of`), and
//! `model.embedding_norm` as the final norm's tensor (`token_embd_norm`).

use serde_json::Value;

use super::params::hparams::{need, Hparams};
use super::{bad, family, u32_of};
use crate::convert::meta::Meta;
use crate::convert::ConvertError;

/// The GGUF name of a (filtered) LFM2 tensor.
pub(super) fn gguf_name(name: &str) -> Option<String> {
    match name {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.embedding_norm.weight" => return Some("token_embd_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let (layer, module, kind) = crate::convert::layer_tensor(name, "model.layers.")?;
    let short = match module {
        "operator_norm" => "attn_norm",
        "ffn_norm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.out_proj" => "attn_output",
        "self_attn.q_layernorm" => "attn_q_norm",
        "self_attn.k_layernorm" => "attn_k_norm",
        "feed_forward.w1" => "ffn_gate",
        "feed_forward.w3" => "ffn_up",
        "feed_forward.w2" => "ffn_down",
        "conv.conv" => "shortconv.conv",
        "conv.in_proj" => "shortconv.in_proj",
        "conv.out_proj" => "shortconv.out_proj",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}.{kind}"))
}

/// The keys `LFM2Model.set_gguf_parameters` adds to the common ones (already in `meta`): the KV
/// heads per layer (replacing the single count in place), the vocabulary size, the convolution
/// cache, the RMS epsilon and the computed feed-forward width (both rewritten in place).
pub(super) fn params(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let kv = need(hp, &["num_key_value_heads"])?;
    let kv = u32_of(kv, "num_key_value_heads", cfg)? as i32;
    let types = layer_types(h, hp.n_layer)
        .ok_or_else(|| bad(cfg, "layer_types must name one type (a string) per layer"))?;
    let per_layer: Vec<i32> = types
        .iter()
        .map(|&attn| if attn { kv } else { 0 })
        .collect();
    meta.i32s(k("attention.head_count_kv"), &per_layer);
    if let Some(v) = hp.vocab_size {
        meta.u32(k("vocab_size"), u32_of(v, "vocab_size", cfg)?);
    }
    meta.u32(
        k("shortconv.l_cache"),
        u32_of(need(hp, &["conv_L_cache"])?, "conv_L_cache", cfg)?,
    );
    let eps = family::find(h, &["norm_eps"])
        .and_then(Value::as_f64)
        .ok_or_else(|| bad(cfg, "no norm_eps"))?;
    meta.f32(k("attention.layer_norm_rms_epsilon"), eps as f32);
    meta.u32(k("feed_forward_length"), ff_length(hp)?);
    Ok(())
}

/// Whether each layer is an attention layer: `layer_types` ("full_attention" / "conv"), else
/// `full_attn_idxs`, else every layer (as `Lfm2Config` fills them in). `None`: a list that is
/// not one entry per layer, or not of strings.
fn layer_types(h: &Value, n_layer: u64) -> Option<Vec<bool>> {
    let types: Vec<bool> = match (h.get("layer_types"), h.get("full_attn_idxs")) {
        (Some(Value::Array(t)), _) => t
            .iter()
            .map(|v| v.as_str().map(|s| s != "conv"))
            .collect::<Option<_>>()?,
        (_, Some(Value::Array(idx))) => {
            let idx: Vec<u64> = idx.iter().filter_map(Value::as_u64).collect();
            (0..n_layer).map(|l| idx.contains(&l)).collect()
        }
        _ => vec![true; usize::try_from(n_layer).ok()?],
    };
    (types.len() as u64 == n_layer).then_some(types)
}

/// `LFM2Model._add_feed_forward_length`.
fn ff_length(hp: &Hparams) -> Result<u32, ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let mut ff = need(hp, &["block_ff_dim", "intermediate_size"])? as f64;
    let flag = |key: &str| {
        h.get(key)
            .ok_or_else(|| bad(cfg, format!("LFM2 needs {key}")))
    };
    let auto = flag("block_auto_adjust_ff_dim")?.as_bool().unwrap_or(false);
    let mult = flag("block_ffn_dim_multiplier")?.as_f64();
    let multiple = flag("block_multiple_of")?
        .as_u64()
        .filter(|&m| m > 0)
        .ok_or_else(|| bad(cfg, "block_multiple_of must be a positive integer"))?;
    if auto {
        ff = (2.0 * ff / 3.0).trunc();
        if let Some(m) = mult {
            ff = (m * ff).trunc();
        }
        let ffu = ff as u64;
        ff = (multiple * ffu.div_ceil(multiple)) as f64;
    }
    u32_of(ff as u64, "block_ff_dim", cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn layer_types_come_from_names_indices_or_default_to_attention() {
        let named = json!({ "layer_types": ["conv", "full_attention", "conv"] });
        assert_eq!(layer_types(&named, 3), Some(vec![false, true, false]));
        let idx = json!({ "full_attn_idxs": [1, 2] });
        assert_eq!(layer_types(&idx, 4), Some(vec![false, true, true, false]));
        assert_eq!(layer_types(&json!({}), 2), Some(vec![true, true]));
        // One entry per layer, each a string.
        assert_eq!(layer_types(&named, 4), None);
        assert_eq!(layer_types(&json!({ "layer_types": ["conv", 3] }), 2), None);
    }

    #[test]
    fn tensor_names_follow_llama_cpp() {
        for (hf, gguf) in [
            ("model.embedding_norm.weight", "token_embd_norm.weight"),
            (
                "model.layers.0.conv.conv.weight",
                "blk.0.shortconv.conv.weight",
            ),
            (
                "model.layers.2.conv.in_proj.weight",
                "blk.2.shortconv.in_proj.weight",
            ),
            (
                "model.layers.1.self_attn.out_proj.weight",
                "blk.1.attn_output.weight",
            ),
            (
                "model.layers.1.self_attn.k_layernorm.weight",
                "blk.1.attn_k_norm.weight",
            ),
            (
                "model.layers.3.operator_norm.weight",
                "blk.3.attn_norm.weight",
            ),
            (
                "model.layers.3.feed_forward.w3.weight",
                "blk.3.ffn_up.weight",
            ),
        ] {
            assert_eq!(gguf_name(hf).as_deref(), Some(gguf), "{hf}");
        }
        assert_eq!(gguf_name("model.layers.0.conv.unknown.weight"), None);
    }
}
