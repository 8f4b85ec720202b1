//! The state-space families: Mamba and Mamba-2 (recurrent layers alone, each
//! `x + mamba(rms_norm(x))` with no attention and no FFN: llama.cpp's `llama_model_mamba`,
//! `llama_model_mamba2`), and the hybrids that mix them with attention: jamba, granitehybrid
//! (Granite 4), nemotron_h (and its mixture-of-experts form), falcon-h1, and LFM2's short convolutions. The sizes are the `ssm.*`
//! keys; the recurrent state per sequence sits beside the attention layers' KV cache.

use kestrel_gguf::GgufModel;

use crate::{ArchError, DecoderConfig, QkNorm, SsmConfig, SsmKind};

/// The `ssm.*` keys (Mamba-2 also reads `ssm.group_count`), checked for the shapes the graph
/// needs.
pub(crate) fn ssm_config(
    cfg: &DecoderConfig,
    model: &GgufModel,
    kind: SsmKind,
) -> Result<SsmConfig, ArchError> {
    let mamba2 = kind == SsmKind::Mamba2;
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
        kind,
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

/// Mamba, Mamba-2: recurrent layers alone, no FFN.
pub(crate) fn adjust(
    cfg: &mut DecoderConfig,
    model: &GgufModel,
    kind: SsmKind,
) -> Result<(), ArchError> {
    cfg.ssm = Some(ssm_config(cfg, model, kind)?);
    cfg.recurrent_layers = vec![true; cfg.n_layer];
    cfg.attention_layers = vec![false; cfg.n_layer];
    cfg.block_ffn = false;
    Ok(())
}

/// `attention.scale` where the file sets it (non-zero), as llama.cpp's `f_attention_scale`.
fn attention_scale(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    if let Some(s) = model
        .metadata()
        .opt(&format!("{}.attention.scale", cfg.arch), |m, k| {
            m.get_f32(k)
        })?
        .filter(|&s| s != 0.0)
    {
        cfg.attn_scale = s;
    }
    Ok(())
}

/// The layers with 0 KV heads are the recurrent ones (llama.cpp's `is_recr` for jamba,
/// granitehybrid and LFM2).
fn recurrent_where_no_kv_heads(cfg: &mut DecoderConfig) {
    cfg.recurrent_layers = cfg.n_head_kv.iter().map(|&kv| kv == 0).collect();
    cfg.attention_layers = cfg.recurrent_layers.iter().map(|&r| !r).collect();
}

/// jamba: Mamba layers (with weighted RMS norms on `dt`, B and C) where a layer has no KV
/// heads, attention without RoPE elsewhere, an FFN (dense, or softmax-routed experts) after
/// every layer.
pub(crate) fn adjust_jamba(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    // The graph normalizes dt, B and C in each layer that has the three norm weights.
    cfg.ssm = Some(ssm_config(cfg, model, SsmKind::Mamba)?);
    recurrent_where_no_kv_heads(cfg);
    cfg.rope_layers = vec![false; cfg.n_layer];
    let scale = model
        .metadata()
        .opt(&format!("{}.expert_weights_scale", cfg.arch), |m, k| {
            m.get_f32(k)
        })?
        .unwrap_or(0.0);
    cfg.moe = super::softmax_moe(cfg, model, false, false, false)?.map(|mut m| {
        m.weights_scale = if scale == 0.0 { 1.0 } else { scale };
        m
    });
    Ok(())
}

/// granitehybrid (Granite 4): granite's multipliers (logit scale optional), Mamba-2 layers where
/// a layer has no KV heads, attention with adjacent-pair RoPE unless `rope.scaling.finetuned` is
/// false; the residual scale applies to either mixer's output.
pub(crate) fn adjust_granite_hybrid(
    cfg: &mut DecoderConfig,
    model: &GgufModel,
) -> Result<(), ArchError> {
    super::granite::adjust_hybrid(cfg, model)?;
    cfg.ssm = Some(ssm_config(cfg, model, SsmKind::Mamba2)?);
    recurrent_where_no_kv_heads(cfg);
    Ok(())
}

/// nemotron_h and nemotron_h_moe: each layer is one of three blocks, each
/// `x + block(rms_norm(x))`: Mamba-2 (no KV heads and FFN size 0), attention without RoPE (FFN
/// size 0), or an FFN alone: ungated relu² with biases and per-tensor scales, or, in a layer
/// with a router, relu² experts (sigmoid routing with the `exp_probs_b` selection bias,
/// `expert_weights_norm` and `_scale`, per-expert scales) plus an ungated relu² shared expert.
/// NextN (multi-token prediction) blocks at the top (`nextn_predict_layers`) are not run: llama.cpp
/// runs them only as a draft model.
pub(crate) fn adjust_nemotron_h(
    cfg: &mut DecoderConfig,
    model: &GgufModel,
) -> Result<(), ArchError> {
    let md = model.metadata();
    let arch = cfg.arch.clone();
    let key = |k: &str| format!("{arch}.{k}");
    let nextn = md
        .opt(&key("nextn_predict_layers"), |m, k| m.get_usize(k))?
        .unwrap_or(0);
    if nextn > 0 {
        if nextn >= cfg.n_layer {
            return Err(ArchError::Invalid {
                arch: cfg.arch.clone(),
                reason: format!("{nextn} NextN layers of {} blocks", cfg.n_layer),
            });
        }
        cfg.drop_top_layers(nextn);
    }
    cfg.ssm = Some(ssm_config(cfg, model, SsmKind::Mamba2)?);
    cfg.recurrent_layers = (0..cfg.n_layer)
        .map(|il| cfg.n_head_kv[il] == 0 && cfg.n_ff[il] == 0)
        .collect();
    cfg.attention_layers = (0..cfg.n_layer)
        .map(|il| !cfg.recurrent_layers[il] && cfg.n_ff[il] == 0)
        .collect();
    cfg.block_ffn = false;
    cfg.rope_layers = vec![false; cfg.n_layer];
    cfg.ffn = crate::FfnKind::Plain;
    cfg.activation = crate::Activation::ReluSqr;
    cfg.ffn_scales = true;
    attention_scale(cfg, model)?;
    let has =
        |t: &str| (0..cfg.n_layer).any(|il| model.tensor_info(&format!("blk.{il}.{t}")).is_some());
    if !has("ffn_gate_inp.weight") {
        return Ok(());
    }
    let (n_expert, n_used) =
        crate::config::moe_counts(&md, &cfg.arch)?.ok_or_else(|| ArchError::Invalid {
            arch: cfg.arch.clone(),
            reason: "a router (ffn_gate_inp) but no expert_count".into(),
        })?;
    cfg.moe = Some(crate::MoeConfig {
        n_expert,
        n_used,
        // llama.cpp's graph routes nemotron_h by sigmoid whatever expert_gating_func says.
        gating: kestrel_graph::MoeGating::Sigmoid,
        norm_weights: md
            .opt(&key("expert_weights_norm"), |m, k| m.get_bool(k))?
            .unwrap_or(false),
        weights_scale: md
            .opt(&key("expert_weights_scale"), |m, k| m.get_f32(k))?
            .unwrap_or(0.0),
        expert_scales: true,
        activation: kestrel_graph::MoeActivation::ReluSqr,
        shared_scales: true,
        biases: false,
        selection_bias: true,
        groups: None,
    });
    Ok(())
}

/// falcon-h1: attention (NeoX RoPE, no frequency factors, no output bias) and Mamba-2 side by
/// side in every layer, their outputs added, then a gated FFN with biases (its norm tensor is
/// `blk.N.ffn_norm`, without `.weight`).
pub(crate) fn adjust_falcon_h1(
    cfg: &mut DecoderConfig,
    model: &GgufModel,
) -> Result<(), ArchError> {
    cfg.ssm = Some(ssm_config(cfg, model, SsmKind::Mamba2)?);
    cfg.recurrent_layers = vec![true; cfg.n_layer];
    cfg.rope.neox = true;
    cfg.rope.freq_factors = None;
    cfg.attn_out_bias = false;
    attention_scale(cfg, model)?;
    Ok(())
}

/// LFM2: short convolutions where a layer has no KV heads, attention with per-head QK RMS norms
/// and NeoX RoPE elsewhere (sliding on every attention layer when `attention.sliding_window` is
/// set), a gated FFN after every layer (no per-tensor scales), the final norm
/// `token_embd_norm`.
pub(crate) fn adjust_lfm2(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    let md = model.metadata();
    let l_cache = md.get_usize(&format!("{}.shortconv.l_cache", cfg.arch))?;
    if !(2..=64).contains(&l_cache) {
        return Err(ArchError::Invalid {
            arch: cfg.arch.clone(),
            reason: format!("shortconv.l_cache {l_cache} (2..=64)"),
        });
    }
    cfg.ssm = Some(SsmConfig {
        kind: SsmKind::ShortConv,
        d_conv: l_cache,
        d_inner: cfg.n_embd,
        d_state: 0,
        dt_rank: 0,
        n_group: 1,
        dt_b_c_rms: false,
    });
    recurrent_where_no_kv_heads(cfg);
    cfg.rope.neox = true;
    cfg.qk_norm = QkNorm::PerHead;
    cfg.output_norm_name = "token_embd_norm";
    let window = md
        .opt(&format!("{}.attention.sliding_window", cfg.arch), |m, k| {
            m.get_usize(k)
        })?
        .filter(|&w| w > 0);
    if window.is_some() {
        cfg.sliding_window = window;
        cfg.swa_layers = cfg.attention_layers.clone();
    }
    if model.tensor_info("blk.0.ffn_gate_inp.weight").is_some() {
        return Err(super::unsupported_feature(cfg, "experts"));
    }
    Ok(())
}
