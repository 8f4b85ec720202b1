//! qwen2 (Qwen 2 / 2.5): NeoX RoPE, QKV biases, SwiGLU, an output bias where the file has one.

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig};

pub(crate) fn adjust(cfg: &mut DecoderConfig, _model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    Ok(())
}
