//! stablelm: layer norms with biases; NeoX RoPE, usually partial; per-head layer norms of Q and K
//! with a weight per head where the file has them (StableLM 2 12B); a layer without `ffn_norm`
//! feeds its FFN the attention's normed input (parallel), one with it is sequential.

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig, NormKind, QkNorm};

pub(crate) fn adjust(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.norm = NormKind::Layer;
    cfg.norm_eps = super::layer_norm_eps(cfg, model)?;
    cfg.rope.neox = true;
    cfg.ffn_norm_optional = true;
    if model.tensor_info("blk.0.attn_q_norm.weight").is_some() {
        cfg.qk_norm = QkNorm::LayerPerHead;
    }
    Ok(())
}
