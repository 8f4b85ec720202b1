//! What each architecture family does differently from the common decoder, one file each: the
//! metadata keys the family reads (as llama.cpp's `load_arch_hparams` for it) and the flags of
//! [`DecoderConfig`] it sets.

use kestrel_gguf::GgufModel;

use crate::{ArchError, ArchKind, DecoderConfig, SsmKind};

pub(crate) mod classic;
pub(crate) mod cohere;
pub(crate) mod deci;
pub(crate) mod deepseek2;
pub(crate) mod exaone;
pub(crate) mod gemma;
pub(crate) mod gemma3;
pub(crate) mod glm4;
pub(crate) mod gpt_oss;
pub(crate) mod granite;
pub(crate) mod llama;
pub(crate) mod llama_like;
pub(crate) mod mamba;
pub(crate) mod olmo;
pub(crate) mod phi;
pub(crate) mod qwen2;
pub(crate) mod qwen3;
pub(crate) mod simple;
pub(crate) mod stablelm;

/// Fill in what `cfg.kind` does differently.
pub(crate) fn adjust(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    match cfg.kind {
        ArchKind::Llama => llama::adjust(cfg, model),
        ArchKind::Gemma => gemma::adjust_gemma(cfg, model),
        ArchKind::Gemma2 => gemma::adjust_gemma2(cfg, model),
        ArchKind::Gemma3 => gemma3::adjust(cfg, model),
        ArchKind::Qwen2 => qwen2::adjust(cfg, model),
        ArchKind::Qwen3 => qwen3::adjust(cfg, model),
        ArchKind::Phi2 => phi::adjust_phi2(cfg, model),
        ArchKind::Phi3 => phi::adjust_phi3(cfg, model),
        ArchKind::StableLm => stablelm::adjust(cfg, model),
        ArchKind::CommandR => cohere::adjust_command_r(cfg, model),
        ArchKind::Cohere2 => cohere::adjust_cohere2(cfg, model),
        ArchKind::Olmo => olmo::adjust_olmo(cfg, model),
        ArchKind::Olmo2 => olmo::adjust_olmo2(cfg, model),
        ArchKind::Granite => granite::adjust(cfg, model),
        ArchKind::StarCoder2 => simple::adjust_starcoder2(cfg, model),
        ArchKind::InternLm2 => simple::adjust_internlm2(cfg, model),
        ArchKind::Exaone => exaone::adjust_exaone(cfg, model),
        ArchKind::Exaone4 => exaone::adjust_exaone4(cfg, model),
        ArchKind::SmolLm3 => llama_like::adjust_smollm3(cfg, model),
        ArchKind::Mistral3 => llama_like::adjust_mistral3(cfg, model),
        ArchKind::Arcee => llama_like::adjust_arcee(cfg, model),
        ArchKind::SeedOss => llama_like::adjust_seed_oss(cfg, model),
        ArchKind::Orion => llama_like::adjust_orion(cfg, model),
        ArchKind::OpenElm => llama_like::adjust_openelm(cfg, model),
        ArchKind::Xverse => llama_like::adjust_xverse(cfg, model),
        ArchKind::MainCoder => llama_like::adjust_maincoder(cfg, model),
        ArchKind::PanguEmbedded => llama_like::adjust_pangu_embedded(cfg, model),
        ArchKind::HunyuanDense => llama_like::adjust_hunyuan_dense(cfg, model),
        ArchKind::Nanbeige => llama_like::adjust_nanbeige(cfg, model),
        ArchKind::Baichuan => llama_like::adjust_baichuan(cfg, model),
        ArchKind::Qwen2Vl => llama_like::adjust_qwen2vl(cfg, model),
        ArchKind::Qwen3Vl => llama_like::adjust_qwen3vl(cfg, model),
        ArchKind::MiniCpm => granite::adjust_minicpm(cfg, model),
        ArchKind::Glm4 => glm4::adjust(cfg, model),
        ArchKind::Deci => deci::adjust(cfg, model),
        ArchKind::Qwen2Moe => qwen2::adjust_moe(cfg, model),
        ArchKind::Qwen3Moe => qwen3::adjust_moe(cfg, model),
        ArchKind::GraniteMoe => granite::adjust_moe(cfg, model),
        ArchKind::GraniteSwa => granite::adjust_swa(cfg, model),
        ArchKind::Olmoe => olmo::adjust_olmoe(cfg, model),
        ArchKind::PhiMoe => phi::adjust_phimoe(cfg, model),
        ArchKind::GptOss => gpt_oss::adjust(cfg, model),
        ArchKind::DeepSeek2 => deepseek2::adjust(cfg, model),
        ArchKind::Gpt2 | ArchKind::StarCoder => classic::adjust_gpt2(cfg, model),
        ArchKind::CodeShell => classic::adjust_codeshell(cfg, model),
        ArchKind::Jais2 | ArchKind::Nemotron => classic::adjust_relu_sqr(cfg, model),
        ArchKind::Qwen => classic::adjust_qwen(cfg, model),
        ArchKind::ChatGlm => classic::adjust_chatglm(cfg, model),
        ArchKind::Plamo => classic::adjust_plamo(cfg, model),
        ArchKind::Mamba => mamba::adjust(cfg, model, SsmKind::Mamba),
        ArchKind::Mamba2 => mamba::adjust(cfg, model, SsmKind::Mamba2),
        ArchKind::Jamba => mamba::adjust_jamba(cfg, model),
        ArchKind::GraniteHybrid => mamba::adjust_granite_hybrid(cfg, model),
        ArchKind::NemotronH => mamba::adjust_nemotron_h(cfg, model),
        ArchKind::FalconH1 => mamba::adjust_falcon_h1(cfg, model),
        ArchKind::Lfm2 => mamba::adjust_lfm2(cfg, model),
        ArchKind::Bert => Ok(()),
    }
}

/// The error for a file of a supported family that needs something kestrel lacks.
pub(crate) fn unsupported_feature(cfg: &DecoderConfig, feature: &str) -> ArchError {
    ArchError::UnsupportedFeature {
        arch: cfg.arch.clone(),
        feature: feature.into(),
    }
}

/// `{arch}.attention.layer_norm_epsilon`, which layer-norm families require (llama.cpp reads it
/// as required; kestrel falls back to 1e-5 as its RMS families do).
pub(crate) fn layer_norm_eps(cfg: &DecoderConfig, model: &GgufModel) -> Result<f32, ArchError> {
    Ok(model
        .metadata()
        .opt(
            &format!("{}.attention.layer_norm_epsilon", cfg.arch),
            |m, k| m.get_f32(k),
        )?
        .unwrap_or(1e-5))
}

/// `{arch}.rope.dimension_sections` (four values, or one for all four), if the file has it.
pub(crate) fn rope_sections(
    cfg: &DecoderConfig,
    model: &GgufModel,
) -> Result<Option<[usize; 4]>, ArchError> {
    use kestrel_gguf::Value;
    let md = model.metadata();
    let key = format!("{}.rope.dimension_sections", cfg.arch);
    let v: Vec<i64> = match md.get(&key) {
        Some(Value::Array(a)) => a.to_i64_vec().unwrap_or_default(),
        Some(_) => vec![md.get_usize(&key)? as i64; 4],
        None => return Ok(None),
    };
    if v.len() != 4 || v.iter().any(|&x| x < 0) {
        return Err(ArchError::Invalid {
            arch: cfg.arch.clone(),
            reason: format!("{key} must hold 4 non-negative values, has {v:?}"),
        });
    }
    Ok(Some([
        v[0] as usize,
        v[1] as usize,
        v[2] as usize,
        v[3] as usize,
    ]))
}

/// Multi-axis RoPE (M-RoPE, or interleaved I-RoPE) on text: every rotated pair takes the token's
/// position when its section is temporal, height or width, and position 0 (no rotation) when it
/// is the fourth; kestrel runs it as NeoX RoPE, with the fourth section's pairs (if any) kept
/// unrotated by the rope op (`RopeConfig::mrope`).
pub(crate) fn mrope_as_neox(
    cfg: &mut DecoderConfig,
    sections: [usize; 4],
    interleaved: bool,
) -> Result<(), ArchError> {
    if sections.iter().sum::<usize>() == 0 {
        return Err(ArchError::Invalid {
            arch: cfg.arch.clone(),
            reason: "rope.dimension_sections are all 0".into(),
        });
    }
    let sections = sections.map(|s| u32::try_from(s).unwrap_or(u32::MAX));
    let m = kestrel_tensor::cpu::MropeSections {
        sections,
        interleaved,
    };
    // Pairs of the fourth axis get position 0 for text: kept unrotated by the rope op (real
    // Qwen3-VL files, sections 24/20/20 over 64 pairs, leave pairs 61 and 62 so).
    cfg.rope.mrope = m.leaves_unrotated(cfg.rope.n_rot).then_some(m);
    cfg.rope.neox = true;
    Ok(())
}

/// The MoE settings of a family whose llama.cpp graph calls `build_moe_ffn` with softmax routing
/// and SiLU experts: `norm_weights` and which per-tensor scales it passes; `None` for a file
/// without experts.
pub(crate) fn softmax_moe(
    cfg: &DecoderConfig,
    model: &GgufModel,
    norm_weights: bool,
    expert_scales: bool,
    shared_scales: bool,
) -> Result<Option<crate::MoeConfig>, ArchError> {
    let md = model.metadata();
    Ok(
        crate::config::moe_counts(&md, &cfg.arch)?.map(|(n_expert, n_used)| crate::MoeConfig {
            n_expert,
            n_used,
            gating: kestrel_graph::MoeGating::Softmax,
            norm_weights,
            weights_scale: 1.0,
            expert_scales,
            activation: kestrel_graph::MoeActivation::Silu,
            shared_scales,
            biases: false,
            selection_bias: false,
            groups: None,
        }),
    )
}
