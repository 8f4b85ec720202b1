//! phi2, phi3 and phimoe.
//!
//! phi2: layer norms with biases; NeoX RoPE, usually partial; the query multiplied by
//! 1/sqrt(head size) before attention; attention and FFN in parallel from one norm; a plain
//! GELU FFN with biases; an output bias.
//!
//! phi3: RMS norms; NeoX RoPE with LongRoPE's short factors (`rope_factors_short.weight`) when
//! the file has them; the query pre-scaled as phi2; fused QKV; `ffn_up` holding gate and up side
//! by side (gate first); no sliding window (llama.cpp disables it).

use kestrel_gguf::GgufModel;

use crate::{Activation, ArchError, BlockLayout, DecoderConfig, FfnKind, NormKind};

pub(crate) fn adjust_phi2(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.norm = NormKind::Layer;
    cfg.norm_eps = super::layer_norm_eps(cfg, model)?;
    cfg.rope.neox = true;
    cfg.q_prescale = true;
    cfg.attn_scale = 1.0 / (cfg.head_dim_v as f32).sqrt();
    cfg.layout = BlockLayout::Parallel;
    cfg.ffn = FfnKind::Plain;
    cfg.activation = Activation::GeluTanh;
    Ok(())
}

pub(crate) fn adjust_phi3(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    cfg.q_prescale = true;
    cfg.attn_scale = 1.0 / (cfg.head_dim_v as f32).sqrt();
    cfg.ffn = FfnKind::FusedGateUp;
    // llama.cpp picks the long factors when the context exceeds the original one; kestrel uses
    // the short ones (contexts up to `rope.scaling.original_context_length`).
    cfg.rope.freq_factors = model
        .tensor_info("rope_factors_short.weight")
        .map(|_| "rope_factors_short.weight".to_string());
    Ok(())
}

/// phimoe (Phi-3.5-MoE): phi3's graph (RMS norms, here with biases; the query pre-scaled; the
/// short LongRoPE factors) with an attention-output and output bias, and softmax routing over
/// normalized weights without expert scales.
pub(crate) fn adjust_phimoe(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    adjust_phi3(cfg, model)?;
    cfg.ffn = FfnKind::Gated;
    cfg.moe = super::softmax_moe(cfg, model, true, false, false)?;
    Ok(())
}
