//! glm4 (GLM-4-0414): sandwich norms (after attention and FFN too); `ffn_up` holding gate and up
//! side by side (gate first); RoPE over part of each head (`rope.dimension_count`), with
//! adjacent pairs, or NeoX pairs when the file has `rope.dimension_sections` (multi-axis RoPE,
//! the same on text); no per-tensor scales in the FFN.

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig, FfnKind};

pub(crate) fn adjust(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    cfg.post_norms = true;
    cfg.ffn = FfnKind::FusedGateUp;
    cfg.rope.neox = false;
    if let Some(sections) = super::rope_sections(cfg, model)? {
        if sections[0] > 0 && sections[1] > 0 {
            super::mrope_as_neox(cfg, sections, false)?;
        }
    }
    Ok(())
}
