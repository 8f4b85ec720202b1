//! qwen2 (Qwen 2 / 2.5): NeoX RoPE, QKV biases, SwiGLU.

use kestrel_gguf::GgufModel;

use crate::DecoderConfig;

pub(crate) fn adjust(cfg: &mut DecoderConfig, model: &GgufModel) {
    cfg.rope.neox = true;
    cfg.qkv_bias = model.tensor_info("blk.0.attn_q.bias").is_some();
}
