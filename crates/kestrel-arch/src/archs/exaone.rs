//! exaone and exaone4.
//!
//! exaone: llama with NeoX RoPE (and `rope_freqs` factors where the file has them).
//!
//! exaone4: no norms before attention and FFN, RMS norms after them; per-head RMS norms of Q and
//! K; NeoX RoPE. Only the 64-layer model (32B) has sliding-window layers (three of every four
//! unless `attention.sliding_window_pattern` says otherwise; window default 4096), and then its
//! global layers have no positional encoding.

use kestrel_gguf::GgufModel;

use crate::config::swa_pattern;
use crate::{ArchError, DecoderConfig, QkNorm};

pub(crate) fn adjust_exaone(cfg: &mut DecoderConfig, _model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    Ok(())
}

/// Every `SWA_PATTERN`-th layer is global (llama.cpp: `load_swa_pattern(ml, 4)`).
const SWA_PATTERN: usize = 4;

pub(crate) fn adjust_exaone4(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    cfg.pre_norms = false;
    cfg.post_norms = true;
    cfg.qk_norm = QkNorm::PerHead;
    if cfg.n_layer == 64 {
        let md = model.metadata();
        cfg.sliding_window = Some(
            md.opt(&format!("{}.attention.sliding_window", cfg.arch), |m, k| {
                m.get_usize(k)
            })?
            .unwrap_or(4096),
        );
        cfg.swa_layers = swa_pattern(&md, &cfg.arch, cfg.n_layer, SWA_PATTERN, false)?;
        cfg.rope_layers = cfg.swa_layers.clone();
    }
    Ok(())
}
