//! Families that are llama's decoder with a different RoPE style or norm, nothing else new:
//! starcoder2 (layer norms with biases, NeoX RoPE, a plain GELU FFN with biases) and internlm2
//! (llama with an FFN that takes no per-tensor scales).

use kestrel_gguf::GgufModel;

use crate::{Activation, ArchError, DecoderConfig, FfnKind, NormKind};

pub(crate) fn adjust_starcoder2(
    cfg: &mut DecoderConfig,
    model: &GgufModel,
) -> Result<(), ArchError> {
    cfg.norm = NormKind::Layer;
    cfg.norm_eps = super::layer_norm_eps(cfg, model)?;
    cfg.rope.neox = true;
    cfg.ffn = FfnKind::Plain;
    cfg.activation = Activation::GeluTanh;
    Ok(())
}

pub(crate) fn adjust_internlm2(
    cfg: &mut DecoderConfig,
    _model: &GgufModel,
) -> Result<(), ArchError> {
    cfg.rope.neox = false;
    Ok(())
}
