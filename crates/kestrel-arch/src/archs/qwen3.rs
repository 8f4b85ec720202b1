//! qwen3: NeoX RoPE, RMSNorm on Q and K per head, SwiGLU.

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig, QkNorm};

pub(crate) fn adjust(cfg: &mut DecoderConfig, _model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    cfg.qk_norm = QkNorm::PerHead;
    cfg.ffn_scales = true;
    Ok(())
}
