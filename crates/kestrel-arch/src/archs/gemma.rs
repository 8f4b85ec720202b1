//! gemma (v1) and gemma2.
//!
//! gemma: NeoX RoPE; embeddings scaled by sqrt(n_embd); GeGLU (tanh GELU); the query multiplied by
//! 1/sqrt(head size) before attention (scale 1 there); output tied to the embedding.
//!
//! gemma2 adds sandwich norms (after attention and FFN too), an attention logit soft-cap
//! (default 50) and a final logit soft-cap (default 30), both always on, and sliding-window
//! layers (window default 4096; every other layer unless `attention.sliding_window_pattern`
//! says otherwise) with their own RoPE base when the file has `rope.freq_base_swa` (scaled as the
//! global layers). As llama.cpp's
//! graphs, neither applies per-tensor scales in the FFN.

use kestrel_gguf::GgufModel;

use crate::config::swa_pattern;
use crate::{Activation, ArchError, DecoderConfig};

fn common(cfg: &mut DecoderConfig) {
    cfg.rope.neox = true;
    cfg.embd_scale = Some((cfg.n_embd as f32).sqrt());
    cfg.activation = Activation::GeluTanh;
    cfg.q_prescale = true;
    cfg.attn_scale = 1.0 / (cfg.head_dim_v as f32).sqrt();
    // llama.cpp loads `token_embd` as the output of both families.
    cfg.tied_output = true;
}

pub(crate) fn adjust_gemma(cfg: &mut DecoderConfig, _model: &GgufModel) -> Result<(), ArchError> {
    common(cfg);
    Ok(())
}

/// Every `SWA_PATTERN`-th layer is global (llama.cpp: `load_swa_pattern(ml, 2)`).
const SWA_PATTERN: usize = 2;
/// Window when the file does not say (llama.cpp: "default value of gemma 2").
const DEFAULT_WINDOW: usize = 4096;

pub(crate) fn adjust_gemma2(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    common(cfg);
    let md = model.metadata();
    let key = |f: &str| format!("{}.{f}", cfg.arch);
    cfg.post_norms = true;
    cfg.sliding_window = Some(
        md.opt(&key("attention.sliding_window"), |m, k| m.get_usize(k))?
            .unwrap_or(DEFAULT_WINDOW),
    );
    cfg.swa_layers = swa_pattern(&md, &cfg.arch, cfg.n_layer, SWA_PATTERN, false)?;
    cfg.rope.freq_base_swa = md.opt(&key("rope.freq_base_swa"), |m, k| m.get_f32(k))?;
    cfg.attn_softcap = Some(
        md.opt(&key("attn_logit_softcapping"), |m, k| m.get_f32(k))?
            .unwrap_or(50.0),
    );
    cfg.final_softcap = Some(
        md.opt(&key("final_logit_softcapping"), |m, k| m.get_f32(k))?
            .unwrap_or(30.0),
    );
    // llama.cpp: the 27B model (46 layers) scales by 1/sqrt(n_embd / n_head).
    cfg.attn_scale = if cfg.n_layer == 46 {
        1.0 / ((cfg.n_embd / cfg.n_head[0]) as f32).sqrt()
    } else {
        1.0 / (cfg.head_dim_k as f32).sqrt()
    };
    Ok(())
}
