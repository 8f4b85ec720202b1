//! DeepSeek V2/V3's hyperparameters beyond the base's (llama.cpp's `DeepseekV2Model`).

use super::hparams::{need, need_u32, Hparams};
use crate::convert::decoder::{bad, u32_of, uint};
use crate::convert::meta::Meta;
use crate::convert::ConvertError;

/// `DeepseekV2Model.set_gguf_parameters` after the base's keys: the latent-attention sizes,
/// leading dense layers, expert counts and weights, and YaRN's log multiplier.
pub(super) fn write(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let opt = |key: &str| uint(h, &[key], cfg);
    let moe = opt("n_routed_experts")?.is_some();
    let dense = match opt("first_k_dense_replace")? {
        Some(n) => n,
        None if moe => 0,
        None => hp.n_layer,
    };
    meta.u32(
        k("leading_dense_block_count"),
        u32_of(dense, "first_k_dense_replace", cfg)?,
    );
    meta.u32(k("vocab_size"), need_u32(hp, &["vocab_size"])?);
    if let Some(q) = opt("q_lora_rank")? {
        meta.u32(k("attention.q_lora_rank"), u32_of(q, "q_lora_rank", cfg)?);
    }
    let kv_lora = opt("kv_lora_rank")?.unwrap_or(512);
    let rope = need(hp, &["qk_rope_head_dim"])?;
    let nope = need(hp, &["qk_nope_head_dim"])?;
    let sum = |a: u64, b: u64, what: &str| {
        a.checked_add(b)
            .ok_or_else(|| bad(cfg, format!("{what} overflows")))
    };
    meta.u32(
        k("attention.kv_lora_rank"),
        u32_of(kv_lora, "kv_lora_rank", cfg)?,
    );
    meta.u32(
        k("attention.key_length"),
        u32_of(
            sum(kv_lora, rope, "kv_lora_rank + qk_rope_head_dim")?,
            "key length",
            cfg,
        )?,
    );
    meta.u32(
        k("attention.value_length"),
        u32_of(kv_lora, "kv_lora_rank", cfg)?,
    );
    meta.u32(
        k("attention.key_length_mla"),
        u32_of(
            sum(nope, rope, "qk_nope_head_dim + qk_rope_head_dim")?,
            "key length",
            cfg,
        )?,
    );
    meta.u32(
        k("attention.value_length_mla"),
        need_u32(hp, &["v_head_dim"])?,
    );
    meta.u32(
        k("expert_feed_forward_length"),
        need_u32(hp, &["moe_intermediate_size", "intermediate_size"])?,
    );
    if let Some(n) = opt("n_routed_experts")? {
        meta.u32(k("expert_count"), u32_of(n, "n_routed_experts", cfg)?);
    }
    let shared = opt("n_shared_experts")?.unwrap_or(0);
    meta.u32(
        k("expert_shared_count"),
        u32_of(shared, "n_shared_experts", cfg)?,
    );
    if let Some(s) = h.get("routed_scaling_factor").filter(|v| !v.is_null()) {
        let s = s
            .as_f64()
            .ok_or_else(|| bad(cfg, format!("routed_scaling_factor = {s} is not a number")))?;
        meta.f32(k("expert_weights_scale"), s as f32);
    }
    if h.get("norm_topk_prob").and_then(|v| v.as_bool()) == Some(true) {
        meta.bool(k("expert_weights_norm"), true);
    }
    meta.u32(
        k("rope.dimension_count"),
        u32_of(rope, "qk_rope_head_dim", cfg)?,
    );
    if let Some(m) = hp.rp.get("mscale_all_dim").and_then(|v| v.as_f64()) {
        // llama.cpp's [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]: 0.1 x mscale_all_dim.
        meta.f32(k("rope.scaling.yarn_log_multiplier"), (0.1 * m) as f32);
    }
    Ok(())
}
