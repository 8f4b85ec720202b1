//! Mamba and Mamba-2: state-space layers alone, each `x + mamba(rms_norm(x))` with no attention
//! and no FFN (llama.cpp's `llama_model_mamba`, `llama_model_mamba2`). The sizes are the
//! `ssm.*` keys; the recurrent state per sequence replaces the KV cache.

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig, SsmConfig};

/// The `ssm.*` keys (Mamba-2 also reads `ssm.group_count`), checked for the shapes the graph
/// needs.
pub(crate) fn ssm_config(
    cfg: &DecoderConfig,
    model: &GgufModel,
    mamba2: bool,
) -> Result<SsmConfig, ArchError> {
    let md = model.metadata();
    let key = |f: &str| format!("{}.ssm.{f}", cfg.arch);
    let ssm = SsmConfig {
        d_conv: md.get_usize(&key("conv_kernel"))?,
        d_inner: md.get_usize(&key("inner_size"))?,
        d_state: md.get_usize(&key("state_size"))?,
        dt_rank: md.get_usize(&key("time_step_rank"))?,
        n_group: if mamba2 {
            md.get_usize(&key("group_count"))?
        } else {
            1
        },
        dt_b_c_rms: !mamba2
            && md
                .opt(&key("dt_b_c_rms"), |m, k| m.get_bool(k))?
                .unwrap_or(false),
        mamba2,
    };
    let bad = |reason: String| ArchError::Invalid {
        arch: cfg.arch.clone(),
        reason,
    };
    let limit = 1 << 20;
    if [
        ssm.d_conv,
        ssm.d_inner,
        ssm.d_state,
        ssm.dt_rank,
        ssm.n_group,
    ]
    .iter()
    .any(|&v| v == 0 || v > limit)
    {
        return Err(bad(format!("ssm sizes out of range: {ssm:?}")));
    }
    if mamba2
        && (!ssm.d_inner.is_multiple_of(ssm.dt_rank)
            || !ssm.dt_rank.is_multiple_of(ssm.n_group)
            || !ssm.d_inner.is_multiple_of(ssm.n_group))
    {
        return Err(bad(format!(
            "{} inner channels, {} heads and {} groups do not divide evenly",
            ssm.d_inner, ssm.dt_rank, ssm.n_group
        )));
    }
    Ok(ssm)
}

pub(crate) fn adjust(
    cfg: &mut DecoderConfig,
    model: &GgufModel,
    mamba2: bool,
) -> Result<(), ArchError> {
    cfg.ssm = Some(ssm_config(cfg, model, mamba2)?);
    cfg.recurrent_layers = vec![true; cfg.n_layer];
    Ok(())
}
