//! deepseek2 (DeepSeek V2, V2.5, V3, R1 and their distillations into the same graph): multi-head
//! latent attention in the absorbed form (`attention.key_length_mla` / `value_length_mla`, the
//! split `attn_k_b` / `attn_v_b`), adjacent-pair RoPE on the shared key part and each head's
//! query part, leading dense layers, then mixture-of-experts layers with a shared expert,
//! softmax or sigmoid gating, an optional selection bias (`exp_probs_b`) and expert groups.
//! Attention scores are scaled by `mscale² / sqrt(key_length_mla)` with YaRN's `mscale` as
//! llama.cpp computes it (`rope.scaling.yarn_log_multiplier`). Files of the older form, with one
//! `attn_kv_b` matrix, run as llama.cpp runs them: the latent decompressed into plain heads of
//! keys and values (cached as such, larger than the latent).

use kestrel_gguf::GgufModel;
use kestrel_graph::{MoeActivation, MoeGating};

use crate::config::moe_counts;
use crate::{ArchError, DecoderConfig, MlaConfig, MoeConfig, RopeScaling};

pub(crate) fn adjust(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    let md = model.metadata();
    let arch = cfg.arch.clone();
    let key = |f: &str| format!("{arch}.{f}");
    let invalid = |reason: String| ArchError::Invalid {
        arch: arch.clone(),
        reason,
    };
    let get = |f: &str| md.opt(&key(f), |m, k| m.get_usize(k));

    let k_mla = get("attention.key_length_mla")?.unwrap_or(0);
    let v_mla = get("attention.value_length_mla")?.unwrap_or(0);
    let absorbed = k_mla != 0 && v_mla != 0;
    let decompressed = model.tensor_info("blk.0.attn_kv_b.weight").is_some();
    if absorbed == decompressed {
        return Err(invalid(
            "not one form of multi-head latent attention: the absorbed form \
             (attention.key_length_mla, attn_k_b, attn_v_b) or the decompressed one (attn_kv_b \
             without key_length_mla)"
                .into(),
        ));
    }
    // The decompressed form's heads are the plain key and value lengths.
    let (k_mla, v_mla) = if absorbed {
        (k_mla, v_mla)
    } else {
        (cfg.head_dim_k, cfg.head_dim_v)
    };
    let kv_lora_rank = md.get_usize(&key("attention.kv_lora_rank"))?;
    let q_lora_rank = if model.tensor_info("blk.0.attn_q_a.weight").is_some() {
        md.get_usize(&key("attention.q_lora_rank"))?
    } else {
        0
    };
    let qk_rope = cfg.rope.n_rot;
    if qk_rope == 0 || qk_rope >= k_mla || !qk_rope.is_multiple_of(2) {
        return Err(invalid(format!(
            "rope.dimension_count {qk_rope} with a key length of {k_mla}"
        )));
    }
    if absorbed {
        // The latent cache: one row per token of the latent and the shared rotated key part.
        if cfg.head_dim_k != kv_lora_rank + qk_rope || cfg.head_dim_v != kv_lora_rank {
            return Err(invalid(format!(
                "key_length {} and value_length {} do not fit kv_lora_rank {kv_lora_rank} and \
                 {qk_rope} rotated values",
                cfg.head_dim_k, cfg.head_dim_v
            )));
        }
        if cfg.n_head_kv.iter().any(|&h| h != 1) {
            return Err(invalid(
                "the absorbed form needs head_count_kv 1 (one latent row per token)".into(),
            ));
        }
    } else if cfg.n_head_kv != cfg.n_head {
        return Err(invalid(
            "the decompressed form needs as many KV heads as heads".into(),
        ));
    }
    cfg.mla = Some(MlaConfig {
        q_lora_rank,
        kv_lora_rank,
        qk_nope: k_mla - qk_rope,
        qk_rope,
        v_head: v_mla,
        absorbed,
    });
    cfg.rope.neox = false;
    cfg.tied_output = model.tensor_info("output.weight").is_none();

    // llama.cpp's kq_scale: `mscale² / sqrt(key_length_mla)`, where `mscale` undoes the YaRN
    // magnitude factor llama.cpp puts into RoPE and applies `yarn_log_multiplier` instead.
    let log_mul = md
        .opt(&key("rope.scaling.yarn_log_multiplier"), |m, k| {
            m.get_f32(k)
        })?
        .map_or(0.0, |v| v / 0.1);
    let rope_attn_factor = md
        .opt(&key("rope.scaling.attn_factor"), |m, k| m.get_f32(k))?
        .unwrap_or(1.0);
    let (factor, yarn) = match cfg.rope.scaling {
        RopeScaling::None => (1.0f32, false),
        RopeScaling::Linear { factor } => (factor, false),
        RopeScaling::Yarn { factor, .. } => (factor, true),
    };
    let get_mscale = |s: f32, m: f32| {
        if s <= 1.0 {
            1.0
        } else {
            0.1 * m * s.ln() + 1.0
        }
    };
    let mut yarn_attn_factor = 1.0f32;
    if yarn {
        yarn_attn_factor = if log_mul != 0.0 {
            // DeepSeek V2's special case makes mscale equal mscale_all_dims.
            let mscale = if log_mul != 1.0 { log_mul } else { 1.0 };
            get_mscale(factor, mscale) / get_mscale(factor, log_mul)
        } else {
            get_mscale(factor, 1.0)
        };
        yarn_attn_factor *= 1.0 / (1.0 + 0.1 * factor.ln());
    }
    yarn_attn_factor *= rope_attn_factor;
    let attn_factor_org = yarn_attn_factor * (1.0 + 0.1 * factor.ln());
    let mscale = attn_factor_org * (1.0 + 0.1 * log_mul * factor.ln());
    cfg.attn_scale = mscale * mscale / (k_mla as f32).sqrt();
    if let RopeScaling::Yarn { attn_factor, .. } = &mut cfg.rope.scaling {
        // RoPE's own magnitude factor, as llama.cpp hands it to ggml_rope_ext (which multiplies
        // it by `1 + 0.1 ln(factor)` again).
        *attn_factor = yarn_attn_factor;
    }

    if let Some((n_expert, n_used)) = moe_counts(&md, &arch)? {
        let gating = match get("expert_gating_func")?.unwrap_or(0) {
            // 0: not set, which llama.cpp reads as softmax for DeepSeek V2 files.
            0 | 1 => MoeGating::Softmax,
            2 => MoeGating::Sigmoid,
            other => {
                return Err(super::unsupported_feature(
                    cfg,
                    &format!("expert gating function {other}"),
                ))
            }
        };
        let groups = match (
            get("expert_group_count")?.unwrap_or(0),
            get("expert_group_used_count")?.unwrap_or(0),
        ) {
            (0 | 1, _) => None,
            (g, u) => Some((g, u)),
        };
        cfg.moe = Some(MoeConfig {
            n_expert,
            n_used,
            gating,
            norm_weights: md
                .opt(&key("expert_weights_norm"), |m, k| m.get_bool(k))?
                .unwrap_or(false),
            weights_scale: md
                .opt(&key("expert_weights_scale"), |m, k| m.get_f32(k))?
                .unwrap_or(1.0),
            expert_scales: false,
            activation: MoeActivation::Silu,
            shared_scales: false,
            biases: false,
            selection_bias: true,
            groups,
        });
    }
    Ok(())
}
