//! granite: llama with IBM's multipliers: embeddings times `embedding_scale`, attention and FFN
//! outputs times `residual_scale` (each when non-zero), attention scale `attention.scale` (when
//! non-zero), logits divided by `logit_scale`; adjacent-pair RoPE on every layer unless
//! `rope.scaling.finetuned` is false (then none); biases where the file has them; no per-tensor
//! scales in the FFN.

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig};

pub(crate) fn adjust(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    let md = model.metadata();
    let key = |f: &str| format!("{}.{f}", cfg.arch);
    let nonzero = |k: &str| -> Result<Option<f32>, ArchError> {
        Ok(md.opt(k, |m, k| m.get_f32(k))?.filter(|&v| v != 0.0))
    };
    cfg.rope.neox = false;
    let logit_scale = md.get_f32(&key("logit_scale"))?;
    if logit_scale == 0.0 || !logit_scale.is_finite() {
        return Err(ArchError::Invalid {
            arch: cfg.arch.clone(),
            reason: format!("logit_scale {logit_scale}"),
        });
    }
    cfg.logit_scale = Some(1.0 / logit_scale);
    cfg.residual_scale = nonzero(&key("residual_scale"))?;
    cfg.embd_scale = nonzero(&key("embedding_scale"))?;
    if let Some(s) = nonzero(&key("attention.scale"))? {
        cfg.attn_scale = s;
    }
    let finetuned = md
        .opt(&key("rope.scaling.finetuned"), |m, k| m.get_bool(k))?
        .unwrap_or(true);
    cfg.rope_layers = vec![finetuned; cfg.n_layer];
    if model.tensor_info("blk.0.ffn_gate_inp.weight").is_some() {
        return Err(super::unsupported_feature(cfg, "mixture-of-experts layers"));
    }
    Ok(())
}
