//! qwen2 (Qwen 2 / 2.5): NeoX RoPE, QKV biases, SwiGLU, an output bias where the file has one.

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig};

pub(crate) fn adjust(cfg: &mut DecoderConfig, _model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    Ok(())
}

/// qwen2moe (Qwen1.5-MoE, Qwen2-MoE): qwen2 with softmax routing (weights not normalized, no
/// expert scales) and a shared expert gated by `sigmoid(x · ffn_gate_inp_shexp)`.
pub(crate) fn adjust_moe(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    cfg.moe = super::softmax_moe(cfg, model, false, false, false)?;
    Ok(())
}
