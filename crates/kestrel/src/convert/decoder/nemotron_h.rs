//! Nemotron-H (`NemotronHForCausalLM`, GGUF `nemotron_h`, or `nemotron_h_moe` with experts):
//! one mixer per layer under `backbone.layers.{L}.mixer.`, a Mamba 2 mixer (`M`), attention
//! (`*`), a ReLU² MLP (`-`) or, in the MoE form (Nemotron 3 Nano), experts (`E`: a router with
//! its correction bias, ReLU² experts stacked per layer, a shared expert) by
//! `hybrid_override_pattern`, converted as llama.cpp's `NemotronHModel` (a Granite hybrid)
//! does: Granite MoE's keys (head_dim dropped: RoPE over hidden / heads), the hybrid's state-space
//! keys with the inner size `mamba_num_heads × mamba_head_dim`, the KV heads per layer, then
//! `key_length`/`value_length` from `head_dim`, the feed-forward length per layer (0 off the
//! MLP or expert layers) and the experts' keys; Mamba tensors as Mamba 2's, attention's with
//! Llama's Q/K order; the vocabulary padded to 8. Experts in a latent space (Nemotron 3 Super:
//! `moe_latent_size` after the experts' keys, `fc1_latent_proj`/`fc2_latent_proj` as
//! `ffn_latent_down`/`_up`). Nemotron 3 Super's multi-token-prediction head (one NextN block,
//! `mtp.layers.0` attention and `mtp.layers.1` experts) is written as a last layer that is both,
//! with `nextn_predict_layers`, as llama.cpp does. Refused: the list-form layer pattern and more
//! than one NextN block.

use serde_json::Value;

use super::granite_hybrid::find;
use super::params::hparams::Hparams;
use super::{bad, u32_of, uint};
use crate::convert::meta::Meta;
use crate::convert::ConvertError;

/// Whether the config is the mixture-of-experts form (`nemotron_h_moe`), as llama.cpp decides.
pub(super) fn is_moe(h: &Value) -> bool {
    h.get("num_experts_per_tok").is_some()
        || h.get("llm_config")
            .is_some_and(|c| c.get("num_experts_per_tok").is_some())
}

/// The letter of the layers with an FFN: `E` (experts) in the MoE form, else `-`.
fn ffn_letter(h: &Value) -> char {
    if is_moe(h) {
        'E'
    } else {
        '-'
    }
}

/// The layer pattern (`M`, `*` and `-` or `E` per layer), checked against the layer count.
fn pattern<'a>(h: &'a Value, n_layer: u64, cfg: &std::path::Path) -> Result<&'a str, ConvertError> {
    mtp_block(h, n_layer, cfg)?;
    let ffn = ffn_letter(h);
    let p = h
        .get("hybrid_override_pattern")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            bad(
                cfg,
                "a Nemotron-H config without a hybrid_override_pattern string is not supported yet",
            )
        })?;
    if p.len() as u64 != n_layer || !p.chars().all(|c| c == 'M' || c == '*' || c == ffn) {
        return Err(bad(
            cfg,
            format!(
                "hybrid_override_pattern {p:?} does not give {n_layer} layers of M, * and {ffn}"
            ),
        ));
    }
    Ok(p)
}

/// The layer the multi-token-prediction head becomes (the one after the pattern's), if the
/// model has one: `num_nextn_predict_layers` of 1 in the MoE form (llama.cpp's converter
/// asserts at most one; the dense form ignores the key).
pub(super) fn mtp_block(
    h: &Value,
    n_layer: u64,
    cfg: &std::path::Path,
) -> Result<Option<u64>, ConvertError> {
    if !is_moe(h) {
        return Ok(None);
    }
    match uint(h, &["num_nextn_predict_layers"], cfg)?.unwrap_or(0) {
        0 => Ok(None),
        1 => Ok(Some(n_layer)),
        n => Err(bad(
            cfg,
            format!("{n} multi-token-prediction layers (llama.cpp converts one)"),
        )),
    }
}

/// A multi-token-prediction tensor's name as a tensor of layer `bid`: `mtp.layers.0.*`
/// (the input fusion and attention) and `mtp.layers.1.*` (experts; its `norm` is the
/// post-attention norm) under `backbone.layers.{bid}.`; other names unchanged.
pub(super) fn mtp_name(name: String, bid: u64) -> String {
    if name == "mtp.layers.1.norm.weight" {
        return format!("backbone.layers.{bid}.post_attention_layernorm.weight");
    }
    match name
        .strip_prefix("mtp.layers.0.")
        .or_else(|| name.strip_prefix("mtp.layers.1."))
    {
        Some(tail) => format!("backbone.layers.{bid}.{tail}"),
        None => name,
    }
}

/// Layers of the pattern holding `kind`.
fn layers_of(p: &str, kind: char) -> Vec<u64> {
    p.chars()
        .enumerate()
        .filter(|&(_, c)| c == kind)
        .map(|(i, _)| i as u64)
        .collect()
}

/// `(d_inner, n_group)`: `mamba_num_heads × mamba_head_dim` and `n_groups`.
pub(super) fn sizes(h: &Value, cfg: &std::path::Path) -> Result<(u64, u64), ConvertError> {
    let d_model = find(h, &["mamba_head_dim", "hidden_size", "d_model"], cfg)?
        .ok_or_else(|| bad(cfg, "no mamba_head_dim"))?;
    let heads = find(h, &["num_heads"], cfg)?.ok_or_else(|| bad(cfg, "no mamba_num_heads"))?;
    let n_group = find(h, &["n_groups", "num_groups"], cfg)?
        .filter(|&g| g > 0)
        .ok_or_else(|| bad(cfg, "no n_groups"))?;
    let d_inner = heads
        .checked_mul(d_model)
        .ok_or_else(|| bad(cfg, "mamba_num_heads × mamba_head_dim overflows"))?;
    if d_inner % n_group != 0 {
        return Err(bad(cfg, format!("d_inner {d_inner} in {n_group} groups")));
    }
    Ok((d_inner, n_group))
}

/// Checks the config before anything is written (the pattern, the variant).
pub(super) fn check(h: &Value, n_layer: u64, cfg: &std::path::Path) -> Result<(), ConvertError> {
    pattern(h, n_layer, cfg).map(|_| ())
}

/// The keys after Granite MoE's: the hybrid's, then Nemotron-H's.
pub(super) fn params(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let p = pattern(h, hp.n_layer, cfg)?;
    // The multi-token-prediction head is one more layer, with attention and experts.
    let mtp = mtp_block(h, hp.n_layer, cfg)?;
    let hp = &Hparams {
        n_layer: hp.n_layer + u64::from(mtp.is_some()),
        ..*hp
    };
    if mtp.is_some() {
        // Replaces the count written with the common keys, in place.
        meta.u32(
            k("block_count"),
            u32_of(hp.n_layer, "num_hidden_layers", cfg)?,
        );
    }
    let mut attn = layers_of(p, '*');
    attn.extend(mtp);
    super::granite_hybrid::params_with(meta, hp, sizes(h, cfg)?, &attn)?;
    let head_dim = uint(h, &["head_dim", "attention_head_dim"], cfg)?
        .ok_or_else(|| bad(cfg, "Nemotron-H without head_dim"))?;
    meta.u32(
        k("attention.key_length"),
        u32_of(head_dim, "head_dim", cfg)?,
    );
    meta.u32(
        k("attention.value_length"),
        u32_of(head_dim, "head_dim", cfg)?,
    );
    let moe = is_moe(h);
    let n_ff = if moe {
        uint(h, &["moe_intermediate_size"], cfg)?
            .ok_or_else(|| bad(cfg, "Nemotron-H experts without moe_intermediate_size"))?
    } else {
        find(h, &["intermediate_size", "n_inner", "hidden_dim"], cfg)?
            .ok_or_else(|| bad(cfg, "no intermediate_size"))?
    };
    let n_ff = i32::try_from(n_ff).map_err(|_| bad(cfg, "intermediate_size too large"))?;
    let mut mlp = layers_of(p, ffn_letter(h));
    mlp.extend(mtp);
    let per_layer: Vec<i32> = (0..hp.n_layer)
        .map(|i| if mlp.contains(&i) { n_ff } else { 0 })
        .collect();
    meta.i32s(k("feed_forward_length"), &per_layer);
    if moe {
        let need = |key: &str| {
            uint(h, &[key], cfg)?
                .ok_or_else(|| bad(cfg, format!("Nemotron-H experts without {key}")))
                .and_then(|v| u32_of(v, key, cfg))
        };
        let used = need("num_experts_per_tok")?;
        meta.u32(k("expert_used_count"), used);
        meta.u32(
            k("expert_feed_forward_length"),
            need("moe_intermediate_size")?,
        );
        meta.u32(
            k("expert_shared_feed_forward_length"),
            need("moe_shared_expert_intermediate_size")?,
        );
        meta.u32(k("expert_count"), need("n_routed_experts")?);
        meta.u32(k("expert_shared_count"), need("n_shared_experts")?);
        let norm = h
            .get("norm_topk_prob")
            .and_then(Value::as_bool)
            .ok_or_else(|| bad(cfg, "Nemotron-H experts without norm_topk_prob"))?;
        meta.bool(k("expert_weights_norm"), norm);
        let scale = h
            .get("routed_scaling_factor")
            .and_then(Value::as_f64)
            .ok_or_else(|| bad(cfg, "Nemotron-H experts without routed_scaling_factor"))?;
        meta.f32(k("expert_weights_scale"), scale as f32);
        meta.u32(k("expert_group_count"), need("n_group")?);
        meta.u32(k("expert_used_count"), used);
        if let Some(latent) = uint(h, &["moe_latent_size"], cfg)? {
            meta.u32(
                k("moe_latent_size"),
                u32_of(latent, "moe_latent_size", cfg)?,
            );
        }
    }
    if mtp.is_some() {
        meta.u32(k("nextn_predict_layers"), 1);
    }
    Ok(())
}

/// The planned tensors against the config: a `moe_latent_size` needs the projections into and
/// out of it in every expert layer (else the experts' widths contradict the config, and
/// llama.cpp could not load the file); a multi-token-prediction layer needs its tensors.
pub(super) fn check_plan(
    h: &Value,
    n_layer: u64,
    plan: &[super::write::Planned],
    cfg: &std::path::Path,
) -> Result<(), ConvertError> {
    let count = |suffix: &str| {
        plan.iter()
            .filter(|p| p.spec.name.ends_with(suffix))
            .count()
    };
    if let Some(bid) = mtp_block(h, n_layer, cfg)? {
        if count(&format!("blk.{bid}.nextn.eh_proj.weight")) == 0 {
            return Err(bad(
                cfg,
                "num_nextn_predict_layers is 1 but the checkpoint has no mtp.layers.* tensors",
            ));
        }
    }
    let Some(latent) = uint(h, &["moe_latent_size"], cfg)? else {
        return Ok(());
    };
    let routers = count(".ffn_gate_inp.weight");
    if count(".ffn_latent_down.weight") != routers || count(".ffn_latent_up.weight") != routers {
        return Err(bad(
            cfg,
            format!(
                "moe_latent_size {latent}, but not every expert layer has fc1_latent_proj and \
                 fc2_latent_proj"
            ),
        ));
    }
    Ok(())
}

/// The GGUF name of a Nemotron-H tensor (`dt_bias` already read as the `dt_proj` bias).
pub(super) fn gguf_name(name: &str) -> Option<String> {
    match name {
        "backbone.embeddings.weight" => return Some("token_embd.weight".into()),
        "backbone.norm_f.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let (layer, tail) = super::mamba::layer_of(name, "backbone.layers.")?;
    let short = match tail {
        "norm.weight" => "attn_norm.weight",
        "mixer.q_proj.weight" => "attn_q.weight",
        "mixer.k_proj.weight" => "attn_k.weight",
        "mixer.v_proj.weight" => "attn_v.weight",
        "mixer.o_proj.weight" => "attn_output.weight",
        "mixer.up_proj.weight" => "ffn_up.weight",
        "mixer.down_proj.weight" => "ffn_down.weight",
        "mixer.gate.weight" => "ffn_gate_inp.weight",
        "mixer.gate.e_score_correction.bias" => "exp_probs_b.bias",
        "mixer.shared_experts.up_proj.weight" => "ffn_up_shexp.weight",
        "mixer.shared_experts.down_proj.weight" => "ffn_down_shexp.weight",
        "mixer.fc1_latent_proj.weight" => "ffn_latent_down.weight",
        "mixer.fc2_latent_proj.weight" => "ffn_latent_up.weight",
        // The multi-token-prediction layer's own tensors.
        "enorm.weight" => "nextn.enorm.weight",
        "hnorm.weight" => "nextn.hnorm.weight",
        "eh_proj.weight" => "nextn.eh_proj.weight",
        "final_layernorm.weight" => "nextn.shared_head_norm.weight",
        "post_attention_layernorm.weight" => "post_attention_norm.weight",
        _ => super::mamba::ssm_short(tail.strip_prefix("mixer.")?)?,
    };
    Some(format!("blk.{layer}.{short}"))
}
