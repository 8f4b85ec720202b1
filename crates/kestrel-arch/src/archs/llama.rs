//! llama (Llama 1/2/3, Mistral, SmolLM, and the generic fallback): adjacent-pair RoPE, SwiGLU,
//! RMSNorm before attention and FFN. Biases only when the file has them.

use kestrel_gguf::GgufModel;

use crate::DecoderConfig;

pub(crate) fn adjust(cfg: &mut DecoderConfig, model: &GgufModel) {
    cfg.rope.neox = false;
    cfg.qkv_bias = model.tensor_info("blk.0.attn_q.bias").is_some();
    if let Some(w) = cfg.sliding_window {
        // Mistral v0.1 style: every layer attends within the window.
        if w > 0 {
            cfg.swa_layers = vec![true; cfg.n_layer];
        }
    }
}
