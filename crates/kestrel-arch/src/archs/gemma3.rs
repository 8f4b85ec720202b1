//! gemma3 (text): NeoX RoPE; embeddings scaled by sqrt(n_embd); sandwich norms (before and after
//! attention and FFN); QK-norm; GeGLU (tanh GELU); five sliding-window layers (RoPE base 10 000)
//! for every global layer (RoPE base and scaling from metadata); output tied to the embedding.
//! Norm weights in GGUF already include Gemma's `1 +`.

use crate::DecoderConfig;

/// Every `SWA_PATTERN`-th layer is global; the others use the sliding window.
const SWA_PATTERN: usize = 6;
/// RoPE base of the sliding-window layers (llama.cpp: `rope_freq_base_train_swa`).
const SWA_FREQ_BASE: f32 = 10_000.0;

pub(crate) fn adjust(cfg: &mut DecoderConfig) {
    cfg.rope.neox = true;
    cfg.rope.freq_base_swa = Some(SWA_FREQ_BASE);
    cfg.embd_scale = Some((cfg.n_embd as f32).sqrt());
    cfg.activation = crate::Activation::GeluTanh;
    cfg.qk_norm = true;
    // llama.cpp: `Qcur = ggml_scale(Qcur, f_attention_scale)`, then attention with scale 1.
    cfg.q_prescale = true;
    cfg.post_norms = true;
    cfg.swa_layers = (0..cfg.n_layer)
        .map(|il| (il + 1) % SWA_PATTERN != 0)
        .collect();
    // llama.cpp: the 27B model (62 layers) scales by 1/sqrt(n_embd / n_head), the others by
    // 1/sqrt(head size).
    if cfg.n_layer == 62 {
        cfg.attn_scale = 1.0 / ((cfg.n_embd / cfg.n_head[0]) as f32).sqrt();
    }
    if cfg.sliding_window.is_none() {
        cfg.sliding_window = Some(512);
    }
}
