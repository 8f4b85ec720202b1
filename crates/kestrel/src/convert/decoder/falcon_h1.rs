//! Falcon-H1 (`FalconH1ForCausalLM`, GGUF `falcon-h1`): every layer runs attention and a Mamba
//! 2 mixer side by side, then a SwiGLU feed-forward. Converted as llama.cpp's `FalconH1Model`
//! does: `config.json` read as written (`mamba_`-prefixed keys where the plain ones are
//! missing), Mamba 2's keys with the inner size `mamba_d_ssm`, then the attention and
//! feed-forward sizes over them; the checkpoint's multipliers folded into the weights
//! (`mlp_multipliers`, `key_multiplier`, `attention_in/out_multiplier`, `ssm_in/out_multiplier`,
//! the five `ssm_multipliers` over `in_proj`'s z, x, B, C and dt rows, `lm_head_multiplier`,
//! `embedding_multiplier`), each product rounded to the tensor's type as torch rounds it; the
//! GPT-2-style vocabulary as the tokenizer has it (not padded).

use serde_json::Value;

use super::params::hparams::Hparams;
use super::read::ValueMap;
use super::{bad, u32_of, uint};
use crate::convert::meta::Meta;
use crate::convert::ConvertError;

/// `find_hparam` with Falcon-H1's `mamba_` prefix.
fn find(h: &Value, keys: &[&str], cfg: &std::path::Path) -> Result<Option<u64>, ConvertError> {
    super::find_prefixed(h, keys, "mamba_", cfg)
}

/// The GGUF name of a Falcon-H1 tensor (`dt_bias` already read as the `dt_proj` bias).
pub(super) fn gguf_name(name: &str) -> Option<String> {
    match name {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.final_layernorm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let (layer, tail) = super::mamba::layer_of(name, "model.layers.")?;
    let short = match tail {
        "input_layernorm.weight" => "attn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        // llama.cpp's map names the full checkpoint name here, so its files (and its loader,
        // `FFN_PRE_NORM` without a suffix) have no `.weight`.
        "pre_ff_layernorm.weight" => "ffn_norm",
        "feed_forward.gate_proj.weight" => "ffn_gate.weight",
        "feed_forward.up_proj.weight" => "ffn_up.weight",
        "feed_forward.down_proj.weight" => "ffn_down.weight",
        _ => super::mamba::ssm_short(tail.strip_prefix("mamba.")?)?,
    };
    Some(format!("blk.{layer}.{short}"))
}

/// `(d_inner, n_group)`: `mamba_d_ssm` and `mamba_n_groups`.
pub(super) fn sizes(h: &Value, cfg: &std::path::Path) -> Result<(u64, u64), ConvertError> {
    let d_inner = find(h, &["d_ssm"], cfg)?.ok_or_else(|| bad(cfg, "no mamba_d_ssm"))?;
    let n_group = find(h, &["n_groups"], cfg)?
        .filter(|&g| g > 0)
        .ok_or_else(|| bad(cfg, "no mamba_n_groups"))?;
    if d_inner % n_group != 0 {
        return Err(bad(cfg, format!("d_inner {d_inner} in {n_group} groups")));
    }
    Ok((d_inner, n_group))
}

/// A multiplier of the config (llama.cpp's converter stops without it).
fn mult(h: &Value, key: &str, cfg: &std::path::Path) -> Result<f32, ConvertError> {
    h.get(key)
        .and_then(Value::as_f64)
        .map(|v| v as f32)
        .ok_or_else(|| bad(cfg, format!("Falcon-H1 config without {key}")))
}

/// The `i`th of a list of multipliers.
fn mult_at(h: &Value, key: &str, i: usize, cfg: &std::path::Path) -> Result<f32, ConvertError> {
    h.get(key)
        .and_then(Value::as_array)
        .and_then(|a| a.get(i))
        .and_then(Value::as_f64)
        .map(|v| v as f32)
        .ok_or_else(|| bad(cfg, format!("Falcon-H1 config without {key}[{i}]")))
}

/// The multipliers `FalconH1Model.modify_tensors` folds into the checkpoint tensor `name` (its
/// substring tests, in its order).
pub(super) fn value_map(
    name: &str,
    h: &Value,
    cfg: &std::path::Path,
) -> Result<ValueMap, ConvertError> {
    let one = |a: f32| ValueMap::Scale(a, 1.0);
    Ok(if name.contains("down_proj") {
        one(mult_at(h, "mlp_multipliers", 1, cfg)?)
    } else if name.contains("gate_proj") {
        one(mult_at(h, "mlp_multipliers", 0, cfg)?)
    } else if name.contains("k_proj") {
        ValueMap::Scale(
            mult(h, "key_multiplier", cfg)?,
            mult(h, "attention_in_multiplier", cfg)?,
        )
    } else if name.contains("q_proj") || name.contains("v_proj") {
        one(mult(h, "attention_in_multiplier", cfg)?)
    } else if name.contains("o_proj") {
        one(mult(h, "attention_out_multiplier", cfg)?)
    } else if name.contains("out_proj") {
        one(mult(h, "ssm_out_multiplier", cfg)?)
    } else if name.contains("in_proj") {
        let (d_inner, n_group) = sizes(h, cfg)?;
        let state = find(h, &["d_state"], cfg)?.ok_or_else(|| bad(cfg, "no mamba_d_state"))?;
        let (i, g) = (d_inner, n_group * state);
        let at = |v: u64| usize::try_from(v).map_err(|_| bad(cfg, "in_proj size"));
        let mut scales = [1.0; 5];
        for (k, s) in scales.iter_mut().enumerate() {
            *s = mult_at(h, "ssm_multipliers", k, cfg)?;
        }
        ValueMap::RowScales {
            first: mult(h, "ssm_in_multiplier", cfg)?,
            ends: [at(i)?, at(2 * i)?, at(2 * i + g)?, at(2 * i + 2 * g)?],
            scales,
        }
    } else if name.contains("lm_head") {
        one(mult(h, "lm_head_multiplier", cfg)?)
    } else if name.contains("embed_tokens") {
        one(mult(h, "embedding_multiplier", cfg)?)
    } else {
        ValueMap::Keep
    })
}

/// `Mamba2Model.set_gguf_parameters` as Falcon-H1 reads its keys, then `FalconH1Model`'s.
pub(super) fn params(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let v = |x: u64, key: &str| u32_of(x, key, cfg);
    let need = |keys: &[&str]| -> Result<u64, ConvertError> {
        uint(h, keys, cfg)?.ok_or_else(|| bad(cfg, format!("no {}", keys[0])))
    };
    let d_model = find(h, &["hidden_size", "d_model", "dim"], cfg)?
        .ok_or_else(|| bad(cfg, "no hidden_size"))?;
    let (d_inner, n_group) = sizes(h, cfg)?;
    let d_conv = find(h, &["conv_kernel", "d_conv"], cfg)?
        .filter(|&x| x != 0)
        .unwrap_or(4);
    let d_state = find(h, &["state_size", "d_state"], cfg)?
        .filter(|&x| x != 0)
        .unwrap_or(128);
    let head_dim = find(h, &["mamba_d_head", "head_dim"], cfg)?
        .filter(|&x| x != 0)
        .unwrap_or(64);
    let eps = super::family::find(h, &["layer_norm_epsilon", "rms_norm_eps"])
        .and_then(Value::as_f64)
        .filter(|&x| x != 0.0)
        .unwrap_or(1e-5);
    meta.u32(k("context_length"), 1 << 20);
    meta.u32(k("embedding_length"), v(d_model, "hidden_size")?);
    meta.u32(k("feed_forward_length"), 0);
    meta.u32(k("attention.head_count"), 0);
    meta.u32(k("block_count"), v(hp.n_layer, "num_hidden_layers")?);
    meta.u32(k("ssm.conv_kernel"), v(d_conv, "mamba_d_conv")?);
    meta.u32(k("ssm.inner_size"), v(d_inner, "mamba_d_ssm")?);
    meta.u32(k("ssm.state_size"), v(d_state, "mamba_d_state")?);
    meta.u32(
        k("ssm.time_step_rank"),
        v(d_inner / head_dim, "mamba_d_head")?,
    );
    meta.u32(k("ssm.group_count"), v(n_group, "mamba_n_groups")?);
    meta.f32(k("attention.layer_norm_rms_epsilon"), eps as f32);
    meta.u32("general.file_type", hp.file_type);
    // FalconH1Model's own.
    meta.u32(k("vocab_size"), v(need(&["vocab_size"])?, "vocab_size")?);
    meta.u32(k("block_count"), v(hp.n_layer, "num_hidden_layers")?);
    let ctx = uint(h, &["max_position_embeddings"], cfg)?.unwrap_or(0);
    meta.u32(k("context_length"), v(ctx, "max_position_embeddings")?);
    meta.u32(
        k("feed_forward_length"),
        v(need(&["intermediate_size"])?, "intermediate_size")?,
    );
    let heads = need(&["num_attention_heads"])?;
    meta.u32(k("attention.head_count"), v(heads, "num_attention_heads")?);
    let kv = need(&["num_key_value_heads"])?;
    meta.u32(k("attention.head_count_kv"), v(kv, "num_key_value_heads")?);
    let hd = need(&["head_dim"])?;
    meta.u32(k("attention.key_length"), v(hd, "head_dim")?);
    meta.u32(k("attention.value_length"), v(hd, "head_dim")?);
    if !matches!(
        h.get("hidden_act").and_then(Value::as_str),
        None | Some("silu")
    ) {
        return Err(bad(cfg, "Falcon-H1 with an activation other than silu"));
    }
    let d_head = find(h, &["d_head"], cfg)?.unwrap_or(0);
    if d_head == 0 || d_inner % d_head != 0 {
        return Err(bad(
            cfg,
            format!("SSM inner size {d_inner} is not a multiple of head dim {d_head}"),
        ));
    }
    let theta = hp
        .rp
        .get("rope_theta")
        .and_then(Value::as_f64)
        .ok_or_else(|| bad(cfg, "Falcon-H1 without rope_theta"))?;
    meta.f32(k("rope.freq_base"), theta as f32);
    Ok(())
}
