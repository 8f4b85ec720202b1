//! gpt-oss (OpenAI's open-weight MoE): NeoX RoPE (per-layer base on the sliding-window layers when
//! the file has `rope.freq_base_swa`); every other layer slides (`load_swa_pattern(ml, 2)`, the
//! window required); attention sinks (a learned logit per head in the softmax denominator); QKV
//! and output biases; the pre-FFN norm named `post_attention_norm`; experts chosen by the raw
//! router logits (plus the router bias), weighted by a softmax over the chosen ones, each a
//! clamped SwiGLU (`swiglu_oai`) with biases; its own output matrix.

use kestrel_gguf::GgufModel;
use kestrel_graph::{MoeActivation, MoeGating};

use crate::config::{moe_counts, swa_pattern};
use crate::{ArchError, DecoderConfig, MoeConfig};

pub(crate) fn adjust(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    let md = model.metadata();
    let key = |f: &str| format!("{}.{f}", cfg.arch);
    cfg.rope.neox = true;
    cfg.attn_sinks = true;
    cfg.ffn_norm_name = "post_attention_norm";
    cfg.tied_output = false;
    cfg.sliding_window = Some(md.get_usize(&key("attention.sliding_window"))?);
    cfg.swa_layers = swa_pattern(&md, &cfg.arch, cfg.n_layer, 2, false)?;
    cfg.rope.freq_base_swa = md.opt(&key("rope.freq_base_swa"), |m, k| m.get_f32(k))?;
    // llama.cpp: `1/sqrt(n_rot)` (the head size of these files).
    cfg.attn_scale = 1.0 / (cfg.rope.n_rot as f32).sqrt();
    let (n_expert, n_used) = moe_counts(&md, &cfg.arch)?.ok_or_else(|| ArchError::Invalid {
        arch: cfg.arch.clone(),
        reason: "expert_count is missing or 0".into(),
    })?;
    cfg.moe = Some(MoeConfig {
        n_expert,
        n_used,
        gating: MoeGating::SoftmaxWeight,
        norm_weights: false,
        weights_scale: 1.0,
        expert_scales: false,
        activation: MoeActivation::SwiGluOai,
        shared_scales: false,
        biases: true,
        selection_bias: false,
        groups: None,
    });
    Ok(())
}
