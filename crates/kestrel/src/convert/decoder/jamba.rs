//! Jamba (`JambaForCausalLM`, GGUF `jamba`): Mamba layers with RMS norms on `dt`, B and C,
//! attention layers every `attn_layer_period` from `attn_layer_offset` (no RoPE), and experts
//! every `expert_layer_period` from `expert_layer_offset` (dense feed-forwards elsewhere),
//! converted as llama.cpp's `JambaModel` does: its own hyperparameters (the KV head count per
//! layer, 0 on Mamba layers), Mini-Jamba's `.moe.` names as `.feed_forward.`, a dense layer
//! stored as expert 0 unwrapped, `A = -exp(A_log)`, the convolution's middle axis dropped, the
//! experts stacked in Qwen 2 MoE's order.

use serde_json::Value;

use super::params::hparams::Hparams;
use super::{bad, u32_of, uint};
use crate::convert::meta::Meta;
use crate::convert::ConvertError;

/// The name llama.cpp's `JambaModel.modify_tensors` maps: `.moe.` read as `.feed_forward.`,
/// and `.experts.0.` dropped on layers without experts.
pub(super) fn name(name: String, h: &Value) -> String {
    let name = name.replace(".moe.", ".feed_forward.");
    let Some(layer) = name
        .strip_prefix("model.layers.")
        .and_then(|r| r.split_once('.'))
        .and_then(|(l, _)| l.parse::<u64>().ok())
    else {
        return name;
    };
    let get = |k: &str| h.get(k).and_then(Value::as_u64);
    let (offset, period) = (get("expert_layer_offset"), get("expert_layer_period"));
    let moe = match (offset, period) {
        (Some(o), Some(p)) if p > 0 => layer >= o && (layer - o) % p == 0,
        _ => true,
    };
    if moe {
        name
    } else {
        name.replace(".experts.0.", ".")
    }
}

/// The GGUF name of a (renamed) Jamba tensor, or `None` when it has no place in the file.
pub(super) fn gguf_name(name: &str) -> Option<String> {
    match name {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.final_layernorm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let (layer, tail) = super::mamba::layer_of(name, "model.layers.")?;
    if let Some(mixer) = tail.strip_prefix("mamba.") {
        let short = match mixer {
            "dt_layernorm.weight" => "ssm_dt_norm.weight",
            "b_layernorm.weight" => "ssm_b_norm.weight",
            "c_layernorm.weight" => "ssm_c_norm.weight",
            // Jamba's Mamba 1 mixer has no gated norm.
            "norm.weight" => return None,
            _ => super::mamba::ssm_short(mixer)?,
        };
        return Some(format!("blk.{layer}.{short}"));
    }
    let short = match tail {
        "input_layernorm.weight" => "attn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "pre_ff_layernorm.weight" => "ffn_norm.weight",
        "feed_forward.router.weight" => "ffn_gate_inp.weight",
        "feed_forward.gate_proj.weight" => "ffn_gate.weight",
        "feed_forward.up_proj.weight" => "ffn_up.weight",
        "feed_forward.down_proj.weight" => "ffn_down.weight",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}"))
}

/// `JambaModel.set_gguf_parameters`, key for key.
pub(super) fn params(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let need = |keys: &[&str]| -> Result<u64, ConvertError> {
        uint(h, keys, cfg)?.ok_or_else(|| bad(cfg, format!("no {}", keys[0])))
    };
    let nonzero = |keys: &[&str]| -> Result<Option<u64>, ConvertError> {
        Ok(uint(h, keys, cfg)?.filter(|&v| v != 0))
    };
    let d_model = need(&["hidden_size", "mamba_d_model"])?;
    let d_conv = nonzero(&["mamba_d_conv"])?.unwrap_or(4);
    let expand = need(&["mamba_expand"])?;
    let d_inner = expand
        .checked_mul(d_model)
        .ok_or_else(|| bad(cfg, "mamba_expand × hidden_size overflows"))?;
    let d_state = nonzero(&["mamba_d_state"])?.unwrap_or(16);
    let dt_rank = match super::family::find(h, &["mamba_dt_rank"]) {
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| bad(cfg, format!("mamba_dt_rank {n}")))?,
        // `transformers` resolves "auto" to ceil(hidden / 16) (llama.cpp's fallback too).
        Some(Value::String(s)) if s == "auto" => d_model.div_ceil(16),
        None | Some(Value::Null) => d_model.div_ceil(16),
        Some(v) => return Err(bad(cfg, format!("mamba_dt_rank {v}"))),
    };
    let dt_rank = if dt_rank == 0 {
        d_model.div_ceil(16)
    } else {
        dt_rank
    };
    let eps = super::family::find(h, &["layer_norm_epsilon", "rms_norm_eps"])
        .and_then(Value::as_f64)
        .filter(|&v| v != 0.0)
        .unwrap_or(1e-6);
    let n_kv = need(&["num_key_value_heads"])?;
    let (offset, period) = (need(&["attn_layer_offset"])?, need(&["attn_layer_period"])?);
    if period == 0 {
        return Err(bad(cfg, "attn_layer_period is 0"));
    }
    let n_kv = i32::try_from(n_kv).map_err(|_| bad(cfg, "num_key_value_heads too large"))?;
    let per_layer: Vec<i32> = (0..hp.n_layer)
        .map(|i| {
            if i >= offset && (i - offset) % period == 0 {
                n_kv
            } else {
                0
            }
        })
        .collect();
    let v = |x: u64, key: &str| u32_of(x, key, cfg);
    meta.u32(k("block_count"), v(hp.n_layer, "num_hidden_layers")?);
    let ctx = need(&["max_position_embeddings", "n_ctx"])?;
    meta.u32(k("context_length"), v(ctx, "max_position_embeddings")?);
    meta.u32(k("embedding_length"), v(d_model, "hidden_size")?);
    let ff = need(&["intermediate_size"])?;
    meta.u32(k("feed_forward_length"), v(ff, "intermediate_size")?);
    let heads = need(&["num_attention_heads"])?;
    meta.u32(k("attention.head_count"), v(heads, "num_attention_heads")?);
    meta.i32s(k("attention.head_count_kv"), &per_layer);
    meta.u32(k("ssm.conv_kernel"), v(d_conv, "mamba_d_conv")?);
    meta.u32(k("ssm.inner_size"), v(d_inner, "mamba_expand")?);
    meta.u32(k("ssm.state_size"), v(d_state, "mamba_d_state")?);
    meta.u32(k("ssm.time_step_rank"), v(dt_rank, "mamba_dt_rank")?);
    meta.f32(k("attention.layer_norm_rms_epsilon"), eps as f32);
    let experts = need(&["num_local_experts", "num_experts"])?;
    meta.u32(k("expert_count"), v(experts, "num_experts")?);
    let used = need(&["num_experts_per_tok", "num_experts_per_token"])?;
    meta.u32(k("expert_used_count"), v(used, "num_experts_per_tok")?);
    meta.u32("general.file_type", hp.file_type);
    Ok(())
}
