//! gemma3 (text): NeoX RoPE; embeddings scaled by sqrt(n_embd); sandwich norms (before and after
//! attention and FFN); QK-norm; GeGLU (tanh GELU); when the file has a sliding window, five
//! sliding-window layers (their own RoPE base, default 10 000, unscaled) for every global layer
//! unless `attention.sliding_window_pattern` says otherwise; final logit soft-cap when the file
//! has one; output tied to the embedding unless the file has `output.weight`. Norm weights in
//! GGUF already include Gemma's `1 +`. As llama.cpp's graph, the FFN ignores per-tensor scales.

use kestrel_gguf::GgufModel;

use crate::config::swa_pattern;
use crate::{Activation, ArchError, DecoderConfig, QkNorm};

/// Every `SWA_PATTERN`-th layer is global (llama.cpp: `load_swa_pattern(ml, 6)`).
const SWA_PATTERN: usize = 6;
/// RoPE base of the sliding-window layers when the file does not say (llama.cpp's default of
/// `rope_freq_base_train_swa`).
const SWA_FREQ_BASE: f32 = 10_000.0;

pub(crate) fn adjust(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    let md = model.metadata();
    let key = |f: &str| format!("{}.{f}", cfg.arch);
    cfg.rope.neox = true;
    cfg.embd_scale = Some((cfg.n_embd as f32).sqrt());
    cfg.activation = Activation::GeluTanh;
    cfg.qk_norm = QkNorm::PerHead;
    // llama.cpp: `Qcur = ggml_scale(Qcur, f_attention_scale)`, then attention with scale 1.
    cfg.q_prescale = true;
    cfg.post_norms = true;
    let window = md.opt(&key("attention.sliding_window"), |m, k| m.get_usize(k))?;
    if let Some(w) = window.filter(|&w| w > 0) {
        cfg.sliding_window = Some(w);
        cfg.swa_layers = swa_pattern(&md, &cfg.arch, cfg.n_layer, SWA_PATTERN, false)?;
        cfg.rope.swa_unscaled = true;
        cfg.rope.freq_base_swa = Some(
            md.opt(&key("rope.freq_base_swa"), |m, k| m.get_f32(k))?
                .unwrap_or(SWA_FREQ_BASE),
        );
    }
    cfg.final_softcap = md
        .opt(&key("final_logit_softcapping"), |m, k| m.get_f32(k))?
        .filter(|&c| c != 0.0);
    // llama.cpp: the 27B model (62 layers) scales by 1/sqrt(n_embd / n_head), the others by
    // 1/sqrt(head size).
    if cfg.n_layer == 62 {
        cfg.attn_scale = 1.0 / ((cfg.n_embd / cfg.n_head[0]) as f32).sqrt();
    }
    Ok(())
}
