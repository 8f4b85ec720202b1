//! qwen3: NeoX RoPE, RMSNorm on Q and K per head, SwiGLU.

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig, QkNorm};

pub(crate) fn adjust(cfg: &mut DecoderConfig, _model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    cfg.qk_norm = QkNorm::PerHead;
    cfg.ffn_scales = true;
    Ok(())
}

/// qwen3moe: qwen3 with softmax routing over normalized weights, expert scales applied.
pub(crate) fn adjust_moe(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    adjust(cfg, model)?;
    cfg.moe = super::softmax_moe(cfg, model, true, true, false)?;
    Ok(())
}
