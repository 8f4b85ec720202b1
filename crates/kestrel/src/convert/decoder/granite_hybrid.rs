//! Granite 4.0-H and Bamba (`GraniteMoeHybridForCausalLM`, `BambaForCausalLM`; GGUF
//! `granitehybrid`): Mamba 2 layers and attention layers (`layer_types`, or
//! `attn_layer_indices`, or a period and offset), Granite MoE's fused experts and shared
//! expert, converted as llama.cpp's `GraniteHybridModel` does: hyperparameters read from
//! `config.json` as written (`mamba_`-prefixed keys where the plain ones are missing), Granite
//! MoE's keys, then the state-space sizes (inner size `mamba_expand · hidden`, time-step rank =
//! `mamba_n_heads`), the KV head count per layer (0 on Mamba layers), RoPE marked as not
//! fine-tuned and the context set to 2^20 unless the model uses RoPE (Bamba); the vocabulary
//! padded to a multiple of 8; Mamba tensors as Mamba 2's, attention's as Llama's (Q/K rows
//! reordered).

use serde_json::Value;

use super::params::hparams::Hparams;
use super::{bad, u32_of, uint};
use crate::convert::meta::Meta;
use crate::convert::ConvertError;

/// The keys `GraniteHybridModel.set_gguf_parameters` adds after Granite MoE's.
pub(super) fn params(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let sizes = sizes(hp.h, hp.cfg)?;
    let attn = attn_layers(hp.h, hp.n_layer, hp.cfg)?;
    params_with(meta, hp, sizes, &attn)
}

/// `find_hparam` with the hybrid's `mamba_` prefix.
pub(super) fn find(
    h: &Value,
    keys: &[&str],
    cfg: &std::path::Path,
) -> Result<Option<u64>, ConvertError> {
    super::find_prefixed(h, keys, "mamba_", cfg)
}

/// The attention layers of `n_layer`, as `GraniteHybridModel.get_attn_layers` finds them.
pub(super) fn attn_layers(
    h: &Value,
    n_layer: u64,
    cfg: &std::path::Path,
) -> Result<Vec<u64>, ConvertError> {
    if let Some(types) = h.get("layer_types").and_then(Value::as_array) {
        return Ok(types
            .iter()
            .enumerate()
            .filter(|(_, t)| t.as_str() == Some("attention"))
            .map(|(i, _)| i as u64)
            .collect());
    }
    if let Some(idx) = h
        .get("attn_layer_indices")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
    {
        return idx
            .iter()
            .map(|v| v.as_u64().ok_or_else(|| bad(cfg, "attn_layer_indices")))
            .collect();
    }
    let period = uint(h, &["attn_layer_period"], cfg)?
        .filter(|&p| p > 0)
        .ok_or_else(|| {
            bad(
                cfg,
                "no layer_types, attn_layer_indices or attn_layer_period",
            )
        })?;
    let offset = uint(h, &["attn_layer_offset"], cfg)?
        .ok_or_else(|| bad(cfg, "attn_layer_period without attn_layer_offset"))?;
    Ok((0..n_layer).filter(|i| i % period == offset).collect())
}

/// `(d_inner, n_group)`: `expand · hidden` (`GraniteHybridModel` overrides Mamba 2's) and the
/// group count.
pub(super) fn sizes(h: &Value, cfg: &std::path::Path) -> Result<(u64, u64), ConvertError> {
    let d_model =
        find(h, &["hidden_size", "d_model"], cfg)?.ok_or_else(|| bad(cfg, "no hidden_size"))?;
    let expand =
        find(h, &["expand", "num_heads"], cfg)?.ok_or_else(|| bad(cfg, "no mamba_expand"))?;
    let n_group = find(h, &["n_groups", "num_groups"], cfg)?
        .filter(|&g| g > 0)
        .ok_or_else(|| bad(cfg, "no mamba_n_groups"))?;
    let d_inner = expand
        .checked_mul(d_model)
        .ok_or_else(|| bad(cfg, "mamba_expand × hidden_size overflows"))?;
    if d_inner % n_group != 0 {
        return Err(bad(cfg, format!("d_inner {d_inner} in {n_group} groups")));
    }
    Ok((d_inner, n_group))
}

/// The keys `GraniteHybridModel.set_gguf_parameters` adds after Granite MoE's, for a model of
/// `(d_inner, n_group)` with attention layers `attn` (Nemotron-H computes both its own way).
pub(super) fn params_with(
    meta: &mut Meta,
    hp: &Hparams,
    (d_inner, n_group): (u64, u64),
    attn: &[u64],
) -> Result<(), ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let v = |x: u64, key: &str| u32_of(x, key, cfg);
    let need = |keys: &[&str]| -> Result<u64, ConvertError> {
        find(h, keys, cfg)?.ok_or_else(|| bad(cfg, format!("no mamba_{}", keys[0])))
    };
    meta.u32(
        k("ssm.conv_kernel"),
        v(need(&["conv_kernel", "d_conv"])?, "mamba_d_conv")?,
    );
    meta.u32(
        k("ssm.state_size"),
        v(
            need(&["state_size", "d_state", "state_dim", "ssm_state_size"])?,
            "mamba_d_state",
        )?,
    );
    meta.u32(k("ssm.group_count"), v(n_group, "mamba_n_groups")?);
    meta.u32(k("ssm.inner_size"), v(d_inner, "mamba_expand")?);
    meta.u32(
        k("ssm.time_step_rank"),
        v(need(&["n_heads", "num_heads"])?, "mamba_n_heads")?,
    );
    let kv = find(h, &["num_key_value_heads", "n_head_kv"], cfg)?
        .ok_or_else(|| bad(cfg, "no num_key_value_heads"))?;
    let kv = i32::try_from(kv).map_err(|_| bad(cfg, "num_key_value_heads too large"))?;
    if let Some(d) = uint(h, &["attn_rotary_emb"], cfg)? {
        meta.u32(k("rope.dimension_count"), v(d, "attn_rotary_emb")?);
    }
    let per_layer: Vec<i32> = (0..hp.n_layer)
        .map(|i| if attn.contains(&i) { kv } else { 0 })
        .collect();
    meta.i32s(k("attention.head_count_kv"), &per_layer);
    let bamba = h
        .get("architectures")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x.as_str() == Some("BambaForCausalLM")));
    meta.bool(k("rope.scaling.finetuned"), bamba);
    if !bamba {
        meta.u32(k("context_length"), 1 << 20);
    }
    let d_head = find(h, &["d_head"], cfg)?.unwrap_or(64);
    if !matches!(
        h.get("hidden_act").and_then(Value::as_str),
        None | Some("silu")
    ) {
        return Err(bad(
            cfg,
            "Granite hybrid with an activation other than silu",
        ));
    }
    if d_head == 0 || d_inner % d_head != 0 {
        return Err(bad(
            cfg,
            format!("SSM inner size {d_inner} is not a multiple of head dim {d_head}"),
        ));
    }
    Ok(())
}
