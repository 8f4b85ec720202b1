//! command-r and cohere2: layer norms without biases; adjacent-pair RoPE; attention and FFN in
//! parallel from one norm; output tied to the embedding, times `logit_scale` when non-zero.
//!
//! command-r: per-head layer norms of Q and K (a weight per head) in models of 64 layers or more
//! (Command R+); RoPE on every layer.
//!
//! cohere2: sliding-window layers (three of every four unless `attention.sliding_window_pattern`
//! says otherwise) and RoPE only on them, with the global base: its global layers have no
//! positional encoding; its FFN applies per-tensor scales.

use kestrel_gguf::GgufModel;

use crate::config::swa_pattern;
use crate::{ArchError, BlockLayout, DecoderConfig, NormKind, QkNorm};

fn common(cfg: &mut DecoderConfig, model: &GgufModel, required: bool) -> Result<(), ArchError> {
    cfg.norm = NormKind::Layer;
    cfg.norm_eps = super::layer_norm_eps(cfg, model)?;
    cfg.rope.neox = false;
    cfg.layout = BlockLayout::Parallel;
    cfg.tied_output = true;
    let md = model.metadata();
    let key = format!("{}.logit_scale", cfg.arch);
    let scale = if required {
        Some(md.get_f32(&key)?)
    } else {
        md.opt(&key, |m, k| m.get_f32(k))?
    };
    cfg.logit_scale = scale.filter(|&s| s != 0.0);
    Ok(())
}

pub(crate) fn adjust_command_r(
    cfg: &mut DecoderConfig,
    model: &GgufModel,
) -> Result<(), ArchError> {
    common(cfg, model, false)?;
    if cfg.n_layer >= 64 {
        cfg.qk_norm = QkNorm::LayerPerHead;
    }
    Ok(())
}

/// Every `SWA_PATTERN`-th layer is global (llama.cpp: `load_swa_pattern(ml, 4)`).
const SWA_PATTERN: usize = 4;

pub(crate) fn adjust_cohere2(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    common(cfg, model, true)?;
    let md = model.metadata();
    cfg.sliding_window = Some(md.get_usize(&format!("{}.attention.sliding_window", cfg.arch))?);
    cfg.swa_layers = swa_pattern(&md, &cfg.arch, cfg.n_layer, SWA_PATTERN, false)?;
    cfg.rope_layers = cfg.swa_layers.clone();
    cfg.ffn_scales = true;
    Ok(())
}
