//! granite and minicpm.
//!
//! granite: llama with IBM's multipliers: embeddings times `embedding_scale`, attention and FFN
//! outputs times `residual_scale` (each when non-zero), attention scale `attention.scale` (when
//! non-zero), logits divided by `logit_scale`; adjacent-pair RoPE on every layer unless
//! `rope.scaling.finetuned` is false (then none); biases where the file has them; no per-tensor
//! scales in the FFN.

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig};

pub(crate) fn adjust(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    common(cfg, model)?;
    let key = format!("{}.rope.scaling.finetuned", cfg.arch);
    let finetuned = model
        .metadata()
        .opt(&key, |m, k| m.get_bool(k))?
        .unwrap_or(true);
    cfg.rope_layers = vec![finetuned; cfg.n_layer];
    // A granite file with experts runs the same MoE branch as granitemoe.
    cfg.moe = super::softmax_moe(cfg, model, true, false, false)?;
    Ok(())
}

/// granite_swa (Granite 4 dense with sliding windows): granite's graph with the window layers of
/// the required per-layer `attention.sliding_window_pattern` array, attention sinks in every
/// layer, RoPE on every layer unless an `attention.rope_pattern` array says otherwise
/// (`rope.scaling.finetuned` is not read). Its MoE files use fused gate/up experts: refused.
pub(crate) fn adjust_swa(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    use kestrel_gguf::Value;
    common(cfg, model)?;
    let md = model.metadata();
    let key = |f: &str| format!("{}.{f}", cfg.arch);
    cfg.sliding_window = Some(md.get_usize(&key("attention.sliding_window"))?);
    let flags = |k: &str| -> Option<Vec<bool>> {
        match md.get(k) {
            Some(Value::Array(a)) => crate::config::layer_flags(&a).map(|v| {
                (0..cfg.n_layer)
                    .map(|il| v.get(il).copied().unwrap_or(false))
                    .collect()
            }),
            _ => None,
        }
    };
    cfg.swa_layers =
        flags(&key("attention.sliding_window_pattern")).ok_or_else(|| ArchError::Invalid {
            arch: cfg.arch.clone(),
            reason: "attention.sliding_window_pattern must be a per-layer array".into(),
        })?;
    // Layers past the array end are dense, but layers past the rope array end keep RoPE.
    if let Some(mut rope) = flags(&key("attention.rope_pattern")) {
        if let Some(Value::Array(a)) = md.get(&key("attention.rope_pattern")) {
            rope.iter_mut().skip(a.len()).for_each(|r| *r = true);
        }
        cfg.rope_layers = rope;
    }
    cfg.attn_sinks = true;
    if model.tensor_info("blk.0.ffn_gate_inp.weight").is_some() {
        return Err(super::unsupported_feature(cfg, "fused gate/up experts"));
    }
    Ok(())
}

/// granitehybrid's attention and FFN side (its recurrent layers are set in `mamba.rs`):
/// granite's multipliers with the logit scale optional, RoPE unless `rope.scaling.finetuned` is
/// false, granitemoe's experts where the file has them.
pub(crate) fn adjust_hybrid(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    let md = model.metadata();
    let key = |f: &str| format!("{}.{f}", cfg.arch);
    let nonzero = |k: &str| -> Result<Option<f32>, ArchError> {
        Ok(md
            .opt(k, |m, k| m.get_f32(k))?
            .filter(|&v| v != 0.0 && v.is_finite()))
    };
    cfg.rope.neox = false;
    cfg.logit_scale = nonzero(&key("logit_scale"))?.map(|s| 1.0 / s);
    cfg.residual_scale = nonzero(&key("residual_scale"))?;
    cfg.embd_scale = nonzero(&key("embedding_scale"))?;
    if let Some(s) = nonzero(&key("attention.scale"))? {
        cfg.attn_scale = s;
    }
    let finetuned = md
        .opt(&key("rope.scaling.finetuned"), |m, k| m.get_bool(k))?
        .unwrap_or(true);
    cfg.rope_layers = vec![finetuned; cfg.n_layer];
    cfg.moe = super::softmax_moe(cfg, model, true, false, false)?;
    Ok(())
}

/// granitemoe (Granite 3 MoE, and its shared-expert variant): granite's graph with softmax
/// routing over normalized weights (no expert scales) and an unscaled shared expert where the
/// file has one; RoPE on every layer (`rope.scaling.finetuned` is not read).
pub(crate) fn adjust_moe(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    common(cfg, model)?;
    cfg.moe = super::softmax_moe(cfg, model, true, false, false)?;
    Ok(())
}

fn common(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
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
    Ok(())
}

/// minicpm: granite's graph with MiniCPM's defaults: embeddings times `embedding_scale` (12),
/// attention and FFN outputs times `residual_scale` (1.4 / sqrt(n_layer)), logits divided by
/// `logit_scale` (256 / n_embd); adjacent-pair RoPE on every layer; `attention.scale` not read.
pub(crate) fn adjust_minicpm(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    let md = model.metadata();
    let key = |f: &str| format!("{}.{f}", cfg.arch);
    let get = |k: &str, default: f32| -> Result<f32, ArchError> {
        Ok(md.opt(k, |m, k| m.get_f32(k))?.unwrap_or(default))
    };
    cfg.rope.neox = false;
    let embd = get(&key("embedding_scale"), 12.0)?;
    let residual = get(&key("residual_scale"), 1.4 / (cfg.n_layer as f32).sqrt())?;
    let logit = get(&key("logit_scale"), 256.0 / cfg.n_embd as f32)?;
    cfg.embd_scale = (embd != 0.0).then_some(embd);
    cfg.residual_scale = (residual != 0.0).then_some(residual);
    if logit == 0.0 || !logit.is_finite() {
        return Err(ArchError::Invalid {
            arch: cfg.arch.clone(),
            reason: format!("logit_scale {logit}"),
        });
    }
    cfg.logit_scale = Some(1.0 / logit);
    // granite's graph, MoE branch included.
    cfg.moe = super::softmax_moe(cfg, model, true, false, false)?;
    Ok(())
}
