//! Families that are llama's decoder with a few flags changed and nothing new, as llama.cpp's
//! graphs for them say: which RoPE style (and on which layers), which norm, whether the FFN
//! takes per-tensor scales, where Q and K are normed.

use kestrel_gguf::GgufModel;

use crate::{Activation, ArchError, DecoderConfig, FfnKind, NormKind, QkNorm};

/// smollm3: adjacent-pair RoPE except on every fourth layer (NoPE; fixed, not from metadata).
pub(crate) fn adjust_smollm3(cfg: &mut DecoderConfig, _m: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = false;
    cfg.rope_layers = (0..cfg.n_layer).map(|il| (il + 1) % 4 != 0).collect();
    Ok(())
}

/// mistral3 (Mistral Small 3.1+/Devstral text, Ministral 3, and its MoE files): llama, FFN
/// scales included. Ministral 3's long-context settings as llama.cpp's mistral3 graph and context
/// apply them: Llama 4's attention temperature on the queries (`attention.temperature_scale`,
/// in steps of the YaRN original context), and YaRN's magnitude factor from
/// `rope.scaling.yarn_log_multiplier` (read as `mscale_all_dim`, with `mscale` 1).
pub(crate) fn adjust_mistral3(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = false;
    cfg.ffn_scales = true;
    let md = model.metadata();
    let f32_of = |k: &str| -> Result<f32, ArchError> {
        let key = format!("{}.{k}", cfg.arch);
        Ok(md.opt(&key, |m, k| m.get_f32(k))?.unwrap_or(0.0))
    };
    let n_ctx_orig = md
        .opt(
            &format!("{}.rope.scaling.original_context_length", cfg.arch),
            |m, k| m.get_usize(k),
        )?
        .unwrap_or(cfg.n_ctx_train);
    let temp = f32_of("attention.temperature_scale")?;
    if temp != 0.0 {
        let floor_scale = u32::try_from(n_ctx_orig)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| ArchError::Invalid {
                arch: cfg.arch.clone(),
                reason: format!(
                    "attention temperature scaling over an original context of {n_ctx_orig}"
                ),
            })?;
        cfg.attn_temperature = Some(kestrel_graph::AttnTemperature {
            floor_scale,
            scale: temp,
            offset: 0.0,
        });
    }
    let log_mul = f32_of("rope.scaling.yarn_log_multiplier")?;
    let rope_attn_factor = cfg.rope.attn_factor;
    if let crate::RopeScaling::Yarn {
        factor,
        ext_factor,
        attn_factor,
        ..
    } = &mut cfg.rope.scaling
    {
        if log_mul != 0.0 && *ext_factor != 0.0 {
            // llama_context's yarn_attn_factor, in its f32 steps.
            let f = 1.0 / (1.0 / *factor);
            let mscale = |m: f32| {
                if f <= 1.0 {
                    1.0
                } else {
                    0.1 * m * f.ln() + 1.0
                }
            };
            let mut a = mscale(1.0) / mscale(log_mul);
            a *= 1.0 / (1.0 + 0.1 * f.ln());
            *attn_factor = a * rope_attn_factor;
        }
    }
    // Experts as llama's: softmax over normalized weights, expert scales applied.
    cfg.moe = super::softmax_moe(cfg, model, true, true, false)?;
    Ok(())
}

/// arcee (AFM): adjacent-pair RoPE; an ungated `relu(up)²` FFN without per-tensor scales.
pub(crate) fn adjust_arcee(cfg: &mut DecoderConfig, _m: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = false;
    cfg.ffn = FfnKind::Plain;
    cfg.activation = Activation::ReluSqr;
    Ok(())
}

/// seed_oss: NeoX RoPE; its pre-FFN norm is named `post_attention_norm`.
pub(crate) fn adjust_seed_oss(cfg: &mut DecoderConfig, _m: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    cfg.ffn_norm_name = "post_attention_norm";
    Ok(())
}

/// openelm (Apple OpenELM): head, KV head and FFN sizes per layer (llama.cpp's arrays), a fused
/// QKV projection without its per-tensor scale (llama.cpp's graph passes none; `attn_output`'s
/// it applies), RMS norms of Q and K per head, NeoX RoPE, the output tied to the embedding.
pub(crate) fn adjust_openelm(cfg: &mut DecoderConfig, _m: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    cfg.qk_norm = QkNorm::PerHead;
    cfg.qkv_scale = false;
    cfg.tied_output = true;
    Ok(())
}

/// orion: layer norms with biases, NeoX RoPE.
pub(crate) fn adjust_orion(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.norm = NormKind::Layer;
    cfg.norm_eps = super::layer_norm_eps(cfg, model)?;
    cfg.rope.neox = true;
    Ok(())
}

/// xverse: adjacent-pair RoPE.
pub(crate) fn adjust_xverse(cfg: &mut DecoderConfig, _m: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = false;
    Ok(())
}

/// maincoder: adjacent-pair RoPE, then per-head RMS norms of Q and K (after RoPE).
pub(crate) fn adjust_maincoder(cfg: &mut DecoderConfig, _m: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = false;
    cfg.qk_norm = QkNorm::PerHead;
    cfg.qk_norm_after_rope = true;
    Ok(())
}

/// pangu-embedded: NeoX RoPE without the `rope_freqs` factors its files carry (llama.cpp's graph
/// passes none).
pub(crate) fn adjust_pangu_embedded(
    cfg: &mut DecoderConfig,
    _m: &GgufModel,
) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    cfg.rope.freq_factors = None;
    Ok(())
}

/// hunyuan-dense: NeoX RoPE (also with `rope.dimension_sections`), its base raised by the NTK
/// `rope.scaling.alpha` when non-zero; per-head RMS norms of Q and K after RoPE.
pub(crate) fn adjust_hunyuan_dense(
    cfg: &mut DecoderConfig,
    model: &GgufModel,
) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    cfg.qk_norm = QkNorm::PerHead;
    cfg.qk_norm_after_rope = true;
    let key = format!("{}.rope.scaling.alpha", cfg.arch);
    if let Some(alpha) = model
        .metadata()
        .opt(&key, |m, k| m.get_f32(k))?
        .filter(|&a| a > 0.0)
    {
        // llama.cpp: `rope_freq_base_train *= powf(alpha, dim / (dim - 2))`.
        let dim = cfg.head_dim_k as f32;
        cfg.rope.freq_base *= alpha.powf(dim / (dim - 2.0));
    }
    if model.tensor_info("blk.0.ffn_gate_inp.weight").is_some() {
        return Err(super::unsupported_feature(cfg, "mixture-of-experts layers"));
    }
    Ok(())
}

/// nanbeige: llama with FFN scales; files that loop their layers (`num_loops` > 1) are refused.
pub(crate) fn adjust_nanbeige(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = false;
    cfg.ffn_scales = true;
    let key = format!("{}.num_loops", cfg.arch);
    if model
        .metadata()
        .opt(&key, |m, k| m.get_usize(k))?
        .is_some_and(|n| n > 1)
    {
        return Err(super::unsupported_feature(
            cfg,
            "looped layers (num_loops > 1)",
        ));
    }
    Ok(())
}

/// baichuan: adjacent-pair RoPE for the 7B (32 layers) only; the 13B (40 layers) uses ALiBi,
/// which kestrel refuses; any other depth has no positional encoding, as in llama.cpp.
pub(crate) fn adjust_baichuan(cfg: &mut DecoderConfig, _m: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = false;
    match cfg.n_layer {
        32 => {}
        40 => {
            return Err(super::unsupported_feature(
                cfg,
                "ALiBi attention (Baichuan 13B)",
            ))
        }
        _ => cfg.rope_layers = vec![false; cfg.n_layer],
    }
    Ok(())
}

/// qwen2vl (text): multi-axis RoPE (NeoX pairs on text), no output bias even when the file has
/// one, and RMS norms with epsilon 0: llama.cpp never reads this family's epsilon key.
pub(crate) fn adjust_qwen2vl(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    let sections = super::rope_sections(cfg, model)?.ok_or_else(|| ArchError::Invalid {
        arch: cfg.arch.clone(),
        reason: "rope.dimension_sections is missing".into(),
    })?;
    super::mrope_as_neox(cfg, sections, false)?;
    cfg.norm_eps = 0.0;
    cfg.output_bias = false;
    Ok(())
}

/// qwen3vl (text): interleaved multi-axis RoPE (NeoX pairs on text), per-head RMS norms of Q and K
/// before it, no FFN scales. Deepstack layers add zeros for text, so they are skipped.
pub(crate) fn adjust_qwen3vl(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    let sections = super::rope_sections(cfg, model)?.ok_or_else(|| ArchError::Invalid {
        arch: cfg.arch.clone(),
        reason: "rope.dimension_sections is missing".into(),
    })?;
    super::mrope_as_neox(cfg, sections, true)?;
    cfg.qk_norm = QkNorm::PerHead;
    Ok(())
}
