//! llama (Llama 1/2/3, Mistral, SmolLM, Mixtral): adjacent-pair RoPE, SwiGLU, RMSNorm before
//! attention and FFN, biases and per-tensor scales where the file has them; with experts
//! (Mixtral), softmax routing over normalized weights. As llama.cpp's `llama`, it
//! reads no sliding window, soft-cap or attention scale (a Mistral v0.1 file's window is
//! ignored there too).

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig};

pub(crate) fn adjust(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = false;
    cfg.ffn_scales = true;
    if cfg.rope.n_rot != cfg.head_dim_k {
        // llama.cpp: "invalid n_rot".
        return Err(ArchError::Invalid {
            arch: cfg.arch.clone(),
            reason: format!(
                "rope.dimension_count {} differs from the head size {}",
                cfg.rope.n_rot, cfg.head_dim_k
            ),
        });
    }
    // Mixtral: softmax routing, the chosen weights normalized, expert scales applied.
    cfg.moe = super::softmax_moe(cfg, model, true, true, false)?;
    Ok(())
}
