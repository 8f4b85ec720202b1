//! The families whose llama.cpp converter writes its own hyperparameters instead of extending
//! `TextModel.set_gguf_parameters`: Gemma 1 and 2, Phi-2, Phi-3 (with its LongRoPE factors),
//! StableLM, GPT-2 and StarCoder 1.

use super::hparams::{need, need_f32, need_u32, Hparams};
use crate::convert::decoder::family::{self, Family};
use crate::convert::decoder::{bad, u32_of, uint};
use crate::convert::meta::Meta;
use crate::convert::ConvertError;

/// `GemmaModel.set_gguf_parameters` (Gemma 1; it does not call the base): sizes, heads,
/// epsilon, head size and file type only.
pub(super) fn gemma(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let k = |s: &str| format!("{}.{s}", hp.arch);
    meta.u32(
        k("context_length"),
        need_u32(hp, &["max_position_embeddings"])?,
    );
    meta.u32(k("embedding_length"), need_u32(hp, &["hidden_size"])?);
    meta.u32(
        k("block_count"),
        u32_of(hp.n_layer, "num_hidden_layers", hp.cfg)?,
    );
    meta.u32(
        k("feed_forward_length"),
        need_u32(hp, &["intermediate_size"])?,
    );
    let heads = need_u32(hp, &["num_attention_heads"])?;
    meta.u32(k("attention.head_count"), heads);
    let kv = match uint(hp.h, &["num_key_value_heads"], hp.cfg)? {
        Some(v) => u32_of(v, "num_key_value_heads", hp.cfg)?,
        None => heads,
    };
    meta.u32(k("attention.head_count_kv"), kv);
    meta.f32(
        k("attention.layer_norm_rms_epsilon"),
        need_f32(hp, "rms_norm_eps")?,
    );
    let hd = need_u32(hp, &["head_dim"])?;
    meta.u32(k("attention.key_length"), hd);
    meta.u32(k("attention.value_length"), hd);
    meta.u32("general.file_type", hp.file_type);
    Ok(())
}

/// `Gemma2Model.set_gguf_parameters`: Gemma 1's keys, then the soft caps and the window.
pub(super) fn gemma2(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let k = |s: &str| format!("{}.{s}", hp.arch);
    gemma(meta, hp)?;
    meta.f32(
        k("attn_logit_softcapping"),
        need_f32(hp, "attn_logit_softcapping")?,
    );
    meta.f32(
        k("final_logit_softcapping"),
        need_f32(hp, "final_logit_softcapping")?,
    );
    meta.u32(
        k("attention.sliding_window"),
        need_u32(hp, &["sliding_window"])?,
    );
    Ok(())
}

/// `Phi2Model.set_gguf_parameters` (it does not call the base): a feed-forward of 4 × the
/// width and one KV head per head whatever the config says, the rotary share of each head,
/// and `add_bos_token` false (a tokenizer that says otherwise overwrites it in place).
pub(super) fn phi2(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let k = |s: &str| format!("{}.{s}", hp.arch);
    meta.u32(
        k("context_length"),
        need_u32(hp, &["n_positions", "max_position_embeddings"])?,
    );
    let n_embd = need_u32(hp, &["hidden_size", "n_embd"])?;
    meta.u32(k("embedding_length"), n_embd);
    let ff = n_embd
        .checked_mul(4)
        .ok_or_else(|| bad(hp.cfg, "hidden_size too large"))?;
    meta.u32(k("feed_forward_length"), ff);
    meta.u32(
        k("block_count"),
        u32_of(hp.n_layer, "num_hidden_layers", hp.cfg)?,
    );
    let heads = need_u32(hp, &["num_attention_heads", "n_head"])?;
    meta.u32(k("attention.head_count"), heads);
    meta.u32(k("attention.head_count_kv"), heads);
    let eps = family::find(hp.h, &["layer_norm_epsilon", "layer_norm_eps"])
        .and_then(|v| v.as_f64())
        .ok_or_else(|| bad(hp.cfg, "no layer_norm_eps"))?;
    meta.f32(k("attention.layer_norm_epsilon"), eps as f32);
    meta.u32(
        k("rope.dimension_count"),
        u32_of(phi3_rope_dims(hp)?, "rope dimensions", hp.cfg)?,
    );
    meta.u32("general.file_type", hp.file_type);
    meta.bool("tokenizer.ggml.add_bos_token", false);
    Ok(())
}

/// Phi-3's RoPE dimensions: `int(partial_rotary_factor * n_embd) // n_head`.
fn phi3_rope_dims(hp: &Hparams) -> Result<u64, ConvertError> {
    let n_embd = need(hp, &["hidden_size", "n_embd"])?;
    let n_head = need(hp, &["num_attention_heads", "n_head"])?;
    if n_head == 0 {
        return Err(bad(hp.cfg, "num_attention_heads is 0"));
    }
    let pct = hp
        .rp
        .get("partial_rotary_factor")
        .and_then(|v| v.as_f64())
        .unwrap_or(1.0);
    Ok((pct * n_embd as f64) as u64 / n_head)
}

/// Phi-3's LongRoPE: the attention factor and the long and short frequency factors.
pub(in crate::convert::decoder) struct LongRope {
    /// `rope.scaling.attn_factor`.
    pub attn_factor: f32,
    /// `rope_factors_long.weight`.
    pub long: Vec<f32>,
    /// `rope_factors_short.weight`.
    pub short: Vec<f32>,
}

/// Phi-3's long-context RoPE, when the config has it (`Phi3MiniModel.generate_extra_tensors`).
pub(in crate::convert::decoder) fn phi3_rope_factors(
    hp: &Hparams,
) -> Result<Option<LongRope>, ConvertError> {
    let rp = hp.rp;
    let factors = |key: &str| -> Option<Vec<f32>> {
        let a = rp.get(key)?.as_array()?;
        a.iter().map(|v| v.as_f64().map(|x| x as f32)).collect()
    };
    let long = factors("long_factor");
    if long.as_ref().is_none_or(|l| l.is_empty()) {
        return Ok(None);
    }
    let max_pos = need(hp, &["n_positions", "max_position_embeddings"])? as f64;
    let orig = rp
        .get("original_max_position_embeddings")
        .and_then(|v| v.as_f64())
        .ok_or_else(|| bad(hp.cfg, "no original_max_position_embeddings"))?;
    let scale = max_pos / orig;
    let ty = rp
        .get("rope_type")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_lowercase();
    let attn = match ty.as_str() {
        "" => return Err(bad(hp.cfg, "rope_scaling has factors but no type")),
        "su" | "longrope" if scale > 1.0 => (1.0 + scale.ln() / orig.ln()).sqrt(),
        "yarn" if scale > 1.0 => 0.1 * scale.ln() + 1.0,
        "su" | "longrope" | "yarn" => 1.0,
        t => {
            return Err(bad(
                hp.cfg,
                format!("RoPE scaling type {t:?} is not supported"),
            ))
        }
    };
    let (Some(long), Some(short)) = (long, factors("short_factor")) else {
        return Err(bad(
            hp.cfg,
            "rope_scaling needs both long_factor and short_factor",
        ));
    };
    let dims = phi3_rope_dims(hp)?;
    if long.len() != short.len() || long.len() as u64 * 2 != dims {
        return Err(bad(
            hp.cfg,
            format!(
                "RoPE long and short factors must have {} values each, not {} and {}",
                dims / 2,
                long.len(),
                short.len()
            ),
        ));
    }
    Ok(Some(LongRope {
        attn_factor: attn as f32,
        long,
        short,
    }))
}

/// `Phi3MiniModel.set_gguf_parameters` (it does not call the base).
pub(super) fn phi3(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let orig = hp
        .rp
        .get("original_max_position_embeddings")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| bad(hp.cfg, "no original_max_position_embeddings"))?;
    meta.u32(
        k("context_length"),
        need_u32(hp, &["n_positions", "max_position_embeddings"])?,
    );
    meta.u32(
        k("rope.scaling.original_context_length"),
        u32_of(orig, "original_max_position_embeddings", hp.cfg)?,
    );
    meta.u32(
        k("embedding_length"),
        need_u32(hp, &["hidden_size", "n_embd"])?,
    );
    meta.u32(
        k("feed_forward_length"),
        need_u32(hp, &["intermediate_size"])?,
    );
    meta.u32(
        k("block_count"),
        u32_of(hp.n_layer, "num_hidden_layers", hp.cfg)?,
    );
    meta.u32(
        k("attention.head_count"),
        need_u32(hp, &["num_attention_heads", "n_head"])?,
    );
    meta.u32(
        k("attention.head_count_kv"),
        need_u32(hp, &["num_key_value_heads", "n_head_kv"])?,
    );
    meta.f32(
        k("attention.layer_norm_rms_epsilon"),
        need_f32(hp, "rms_norm_eps")?,
    );
    meta.u32(
        k("rope.dimension_count"),
        u32_of(phi3_rope_dims(hp)?, "rope dimensions", hp.cfg)?,
    );
    let rope = hp
        .rp
        .get("full_attention")
        .and_then(|v| v.as_object())
        .unwrap_or(hp.rp);
    let theta = rope
        .get("rope_theta")
        .and_then(|v| v.as_f64())
        .ok_or_else(|| bad(hp.cfg, "no rope_theta"))?;
    meta.f32(k("rope.freq_base"), theta as f32);
    meta.u32("general.file_type", hp.file_type);
    let sw = uint(hp.h, &["sliding_window"], hp.cfg)?.unwrap_or(0);
    meta.u32(
        k("attention.sliding_window"),
        u32_of(sw, "sliding_window", hp.cfg)?,
    );
    Ok(())
}

/// `StableLMModel.set_gguf_parameters` (it does not call the base, so no RoPE base is written:
/// llama.cpp's default 10000 is StableLM's): sizes, the rotary share of each head, heads, the
/// parallel-block flag (true when the config has none) and the layer-norm epsilon.
pub(super) fn stablelm(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let k = |s: &str| format!("{}.{s}", hp.arch);
    meta.u32(
        k("context_length"),
        need_u32(hp, &["max_position_embeddings"])?,
    );
    let n_embd = need(hp, &["hidden_size"])?;
    meta.u32(
        k("embedding_length"),
        u32_of(n_embd, "hidden_size", hp.cfg)?,
    );
    meta.u32(
        k("block_count"),
        u32_of(hp.n_layer, "num_hidden_layers", hp.cfg)?,
    );
    meta.u32(
        k("feed_forward_length"),
        need_u32(hp, &["intermediate_size"])?,
    );
    let heads = need(hp, &["num_attention_heads"])?;
    if heads == 0 {
        return Err(bad(hp.cfg, "num_attention_heads = 0"));
    }
    let factor = hp
        .rp
        .get("partial_rotary_factor")
        .and_then(|v| v.as_f64())
        .ok_or_else(|| bad(hp.cfg, "no partial_rotary_factor"))?;
    // Python's int(factor * (hidden_size // heads)): truncated.
    let dims = (factor * (n_embd / heads) as f64).trunc();
    if !(0.0..=f64::from(u32::MAX)).contains(&dims) {
        return Err(bad(hp.cfg, format!("partial_rotary_factor = {factor}")));
    }
    meta.u32(k("rope.dimension_count"), dims as u32);
    meta.u32(
        k("attention.head_count"),
        u32_of(heads, "num_attention_heads", hp.cfg)?,
    );
    meta.u32(
        k("attention.head_count_kv"),
        need_u32(hp, &["num_key_value_heads"])?,
    );
    let parallel = match hp.h.get("use_parallel_residual") {
        None => true,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| bad(hp.cfg, "use_parallel_residual is not a bool"))?,
    };
    meta.bool(k("use_parallel_residual"), parallel);
    let eps = family::find(hp.h, &["layer_norm_eps", "norm_eps"])
        .and_then(|v| v.as_f64())
        .ok_or_else(|| bad(hp.cfg, "no layer_norm_eps"))?;
    meta.f32(k("attention.layer_norm_epsilon"), eps as f32);
    meta.u32("general.file_type", hp.file_type);
    Ok(())
}

/// `GPT2Model.set_gguf_parameters` and `StarCoderModel.set_gguf_parameters`, which write the
/// same keys in different orders: sizes (a feed-forward of 4 × the width), heads (StarCoder 1:
/// one KV head), the layer-norm epsilon. GPT-2's context is `n_ctx` (the original configs
/// carry it; kestrel takes `n_positions` where it is missing, where llama.cpp fails),
/// StarCoder's `n_positions`.
pub(super) fn gpt2(meta: &mut Meta, family: Family, hp: &Hparams) -> Result<(), ConvertError> {
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let block_count = u32_of(hp.n_layer, "n_layer", hp.cfg)?;
    let n_embd = need(hp, &["n_embd"])?;
    let ff = n_embd
        .checked_mul(4)
        .ok_or_else(|| bad(hp.cfg, "n_embd too large"))?;
    let (n_embd, ff) = (
        u32_of(n_embd, "n_embd", hp.cfg)?,
        u32_of(ff, "4 * n_embd", hp.cfg)?,
    );
    if family == Family::Gpt2 {
        meta.u32(k("block_count"), block_count);
        meta.u32(
            k("context_length"),
            need_u32(hp, &["n_ctx", "n_positions"])?,
        );
    } else {
        meta.u32(k("context_length"), need_u32(hp, &["n_positions"])?);
    }
    meta.u32(k("embedding_length"), n_embd);
    meta.u32(k("feed_forward_length"), ff);
    if family == Family::StarCoder {
        meta.u32(k("block_count"), block_count);
    }
    meta.u32(k("attention.head_count"), need_u32(hp, &["n_head"])?);
    if family == Family::StarCoder {
        meta.u32(k("attention.head_count_kv"), 1);
    }
    let eps =
        hp.h.get("layer_norm_epsilon")
            .and_then(|v| v.as_f64())
            .ok_or_else(|| bad(hp.cfg, "no layer_norm_epsilon"))?;
    meta.f32(k("attention.layer_norm_epsilon"), eps as f32);
    meta.u32("general.file_type", hp.file_type);
    Ok(())
}

/// `OrionModel.set_gguf_parameters` (it does not call the base): the file type, Meta's tensor
/// layout tag, the context (`max_sequence_length`, `max_position_embeddings` or
/// `model_max_length`), sizes, heads, and `rms_norm_eps` as the layer-norm epsilon (Orion's
/// norms are layer norms).
pub(super) fn orion(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let k = |s: &str| format!("{}.{s}", hp.arch);
    meta.u32("general.file_type", hp.file_type);
    meta.str(k("tensor_data_layout"), "Meta AI original pth");
    let ctx = [
        "max_sequence_length",
        "max_position_embeddings",
        "model_max_length",
    ]
    .iter()
    .find_map(|key| hp.h.get(*key).filter(|v| !v.is_null()).map(|_| *key))
    .ok_or_else(|| {
        bad(
            hp.cfg,
            "Orion: no context length (max_sequence_length, ...)",
        )
    })?;
    meta.u32(k("context_length"), need_u32(hp, &[ctx])?);
    meta.u32(k("embedding_length"), need_u32(hp, &["hidden_size"])?);
    meta.u32(
        k("block_count"),
        u32_of(hp.n_layer, "num_hidden_layers", hp.cfg)?,
    );
    meta.u32(
        k("feed_forward_length"),
        need_u32(hp, &["intermediate_size"])?,
    );
    let heads = need_u32(hp, &["num_attention_heads"])?;
    meta.u32(k("attention.head_count"), heads);
    let kv = match hp.h.get("num_key_value_heads").filter(|v| !v.is_null()) {
        Some(_) => need_u32(hp, &["num_key_value_heads"])?,
        None => heads,
    };
    meta.u32(k("attention.head_count_kv"), kv);
    let eps =
        hp.h.get("rms_norm_eps")
            .and_then(|v| v.as_f64())
            .ok_or_else(|| bad(hp.cfg, "Orion: no rms_norm_eps"))?;
    meta.f32(k("attention.layer_norm_epsilon"), eps as f32);
    Ok(())
}

/// `CodeShellModel.set_gguf_parameters` (it does not call the base): context (`n_positions`),
/// width, a feed-forward of 4 × width, blocks, heads and query groups, the layer-norm epsilon,
/// the file type, then a fixed RoPE base of 10000 with linear scaling by 1.
pub(super) fn codeshell(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let k = |s: &str| format!("{}.{s}", hp.arch);
    meta.u32(k("context_length"), need_u32(hp, &["n_positions"])?);
    let n_embd = need(hp, &["n_embd"])?;
    meta.u32(k("embedding_length"), u32_of(n_embd, "n_embd", hp.cfg)?);
    let ff = n_embd
        .checked_mul(4)
        .ok_or_else(|| bad(hp.cfg, "n_embd too large"))?;
    meta.u32(k("feed_forward_length"), u32_of(ff, "4 × n_embd", hp.cfg)?);
    meta.u32(k("block_count"), u32_of(hp.n_layer, "n_layer", hp.cfg)?);
    meta.u32(k("attention.head_count"), need_u32(hp, &["n_head"])?);
    meta.u32(
        k("attention.head_count_kv"),
        need_u32(hp, &["num_query_groups"])?,
    );
    meta.f32(
        k("attention.layer_norm_epsilon"),
        need_f32(hp, "layer_norm_epsilon")?,
    );
    meta.u32("general.file_type", hp.file_type);
    meta.f32(k("rope.freq_base"), 10000.0);
    meta.str(k("rope.scaling.type"), "linear");
    meta.f32(k("rope.scaling.factor"), 1.0);
    Ok(())
}
