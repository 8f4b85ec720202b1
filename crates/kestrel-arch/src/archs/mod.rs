//! What each architecture family does differently from the common decoder, one file each: the
//! metadata keys the family reads (as llama.cpp's `load_arch_hparams` for it) and the flags of
//! [`DecoderConfig`] it sets.

use kestrel_gguf::GgufModel;

use crate::{ArchError, ArchKind, DecoderConfig};

pub(crate) mod cohere;
pub(crate) mod exaone;
pub(crate) mod gemma;
pub(crate) mod gemma3;
pub(crate) mod granite;
pub(crate) mod llama;
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
