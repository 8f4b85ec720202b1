//! olmo, olmo2 and olmoe.
//!
//! olmo: layer norms without weight or bias; adjacent-pair RoPE; Q, K and V clamped to
//! `±clamp_kqv` when the file sets it.
//!
//! olmo2: no norms before attention and FFN, RMS norms after them; RMS norms of the whole Q and
//! K projections; NeoX RoPE; an `output.weight` of its own; sliding-window layers when the file
//! has a window (three of every four unless `attention.sliding_window_pattern` says otherwise),
//! their RoPE unscaled at the global base.

use kestrel_gguf::GgufModel;

use crate::config::swa_pattern;
use crate::{ArchError, DecoderConfig, NormKind, QkNorm};

pub(crate) fn adjust_olmo(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.norm = NormKind::LayerPlain;
    cfg.norm_eps = super::layer_norm_eps(cfg, model)?;
    cfg.rope.neox = false;
    let md = model.metadata();
    cfg.clamp_kqv = md
        .opt(&format!("{}.attention.clamp_kqv", cfg.arch), |m, k| {
            m.get_f32(k)
        })?
        .filter(|&c| c > 0.0);
    Ok(())
}

/// Every `SWA_PATTERN`-th layer is global (llama.cpp: `load_swa_pattern(ml, 4)`).
const SWA_PATTERN: usize = 4;

pub(crate) fn adjust_olmo2(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    cfg.pre_norms = false;
    cfg.post_norms = true;
    cfg.qk_norm = QkNorm::Full;
    cfg.tied_output = false;
    let md = model.metadata();
    let window = md.opt(&format!("{}.attention.sliding_window", cfg.arch), |m, k| {
        m.get_usize(k)
    })?;
    if let Some(w) = window.filter(|&w| w > 0) {
        cfg.sliding_window = Some(w);
        cfg.swa_layers = swa_pattern(&md, &cfg.arch, cfg.n_layer, SWA_PATTERN, false)?;
        // The window layers rotate at the global base, unscaled.
        cfg.rope.freq_base_swa = Some(cfg.rope.freq_base);
        cfg.rope.swa_unscaled = true;
    }
    Ok(())
}

/// olmoe: RMS norms before attention and FFN; RMS norms of the whole Q and K projections; NeoX
/// RoPE; softmax routing, weights not normalized, no expert scales.
pub(crate) fn adjust_olmoe(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    cfg.qk_norm = QkNorm::Full;
    cfg.moe = super::softmax_moe(cfg, model, false, false, false)?;
    Ok(())
}
