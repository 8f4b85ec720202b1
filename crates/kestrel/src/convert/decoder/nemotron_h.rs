//! Nemotron-H (`NemotronHForCausalLM`, GGUF `nemotron_h`): one mixer per layer under
//! `backbone.layers.{L}.mixer.`, a Mamba 2 mixer (`M`), attention (`*`) or a ReLU² MLP (`-`) by
//! `hybrid_override_pattern`, converted as llama.cpp's `NemotronHModel` (a Granite hybrid)
//! does: Granite MoE's keys (head_dim dropped: RoPE over hidden / heads), the hybrid's state-space
//! keys with the inner size `mamba_num_heads × mamba_head_dim`, the KV heads per layer, then
//! `key_length`/`value_length` from `head_dim` and the feed-forward length per layer (0 off the
//! MLP layers); Mamba tensors as Mamba 2's, attention's with Llama's Q/K order; the vocabulary
//! padded to 8. Refused: the MoE variant (Nemotron 3 Nano) and the list-form layer pattern.

use serde_json::Value;

use super::granite_hybrid::find;
use super::params::Hparams;
use super::{bad, u32_of, uint};
use crate::convert::meta::Meta;
use crate::convert::ConvertError;

/// The layer pattern (`M`, `*`, `-` per layer), checked against the layer count.
fn pattern<'a>(h: &'a Value, n_layer: u64, cfg: &std::path::Path) -> Result<&'a str, ConvertError> {
    if h.get("num_experts_per_tok").is_some() {
        return Err(bad(cfg, "Nemotron-H with experts is not supported yet"));
    }
    let p = h
        .get("hybrid_override_pattern")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            bad(
                cfg,
                "a Nemotron-H config without a hybrid_override_pattern string is not supported yet",
            )
        })?;
    if p.len() as u64 != n_layer || !p.chars().all(|c| matches!(c, 'M' | '*' | '-')) {
        return Err(bad(
            cfg,
            format!("hybrid_override_pattern {p:?} does not give {n_layer} layers of M, * and -"),
        ));
    }
    Ok(p)
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
    super::granite_hybrid::params_with(meta, hp, sizes(h, cfg)?, &layers_of(p, '*'))?;
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
    let n_ff = find(h, &["intermediate_size", "n_inner", "hidden_dim"], cfg)?
        .ok_or_else(|| bad(cfg, "no intermediate_size"))?;
    let n_ff = i32::try_from(n_ff).map_err(|_| bad(cfg, "intermediate_size too large"))?;
    let mlp = layers_of(p, '-');
    let per_layer: Vec<i32> = (0..hp.n_layer)
        .map(|i| if mlp.contains(&i) { n_ff } else { 0 })
        .collect();
    meta.i32s(k("feed_forward_length"), &per_layer);
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
        _ => super::mamba::ssm_short(tail.strip_prefix("mixer.")?)?,
    };
    Some(format!("blk.{layer}.{short}"))
}
