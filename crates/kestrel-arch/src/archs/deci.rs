//! deci (Llama-3.1-Nemotron "NAS" models): llama with FFN biases and no FFN scales, built per
//! layer from its head counts as llama.cpp's `llm_build_deci` is: heads and KV heads make
//! attention (KV heads may differ between layers); heads without KV heads a "linear attention"
//! (`attn_output` on the normed input, Nemotron 51B); no heads an attention-free layer whose
//! input goes straight to its FFN; an FFN size of 0 a layer llama.cpp leaves out whole
//! (Nemotron Ultra's dummy layers).

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig};

pub(crate) fn adjust(cfg: &mut DecoderConfig, _m: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = false;
    for il in 0..cfg.n_layer {
        let (heads, kv, ff) = (cfg.n_head[il], cfg.n_head_kv[il], cfg.n_ff[il]);
        cfg.skip_layers[il] = ff == 0;
        cfg.attention_layers[il] = ff > 0 && heads > 0 && kv > 0;
        cfg.linear_attn_layers[il] = ff > 0 && heads > 0 && kv == 0;
    }
    Ok(())
}
