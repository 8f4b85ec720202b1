//! qwen3: NeoX RoPE, RMSNorm on Q and K per head, no QKV biases, SwiGLU.

use crate::DecoderConfig;

pub(crate) fn adjust(cfg: &mut DecoderConfig) {
    cfg.rope.neox = true;
    cfg.qk_norm = true;
}
