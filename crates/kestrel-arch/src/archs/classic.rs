//! Older and simpler families, each llama.cpp's graph for it in kestrel's flags:
//! - gpt2, starcoder: layer norms with biases, learned absolute positions (no RoPE), fused QKV
//!   with biases, a plain GELU FFN with biases;
//! - codeshell: gpt2's block with NeoX RoPE instead of learned positions;
//! - jais2, nemotron: layer norms with biases, NeoX RoPE (nemotron's partial), a plain relu² FFN;
//! - qwen (Qwen-1): llama with fused QKV and NeoX RoPE;
//! - chatglm (GLM-4 of the chatglm line): adjacent-pair RoPE, usually partial, and `ffn_up`
//!   holding gate and up side by side (gate first);
//! - plamo: attention and FFN in parallel from one RMS norm, NeoX RoPE.
//!
//! None of their graphs passes per-tensor scales to the FFN.

use kestrel_gguf::GgufModel;

use crate::{Activation, ArchError, BlockLayout, DecoderConfig, FfnKind, NormKind};

fn layer_norm_plain_ffn(
    cfg: &mut DecoderConfig,
    model: &GgufModel,
    act: Activation,
) -> Result<(), ArchError> {
    cfg.norm = NormKind::Layer;
    cfg.norm_eps = super::layer_norm_eps(cfg, model)?;
    cfg.ffn = FfnKind::Plain;
    cfg.activation = act;
    Ok(())
}

pub(crate) fn adjust_gpt2(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    layer_norm_plain_ffn(cfg, model, Activation::GeluTanh)?;
    cfg.learned_positions = true;
    cfg.rope_layers = vec![false; cfg.n_layer];
    Ok(())
}

pub(crate) fn adjust_codeshell(
    cfg: &mut DecoderConfig,
    model: &GgufModel,
) -> Result<(), ArchError> {
    layer_norm_plain_ffn(cfg, model, Activation::GeluTanh)?;
    cfg.rope.neox = true;
    Ok(())
}

pub(crate) fn adjust_relu_sqr(cfg: &mut DecoderConfig, model: &GgufModel) -> Result<(), ArchError> {
    layer_norm_plain_ffn(cfg, model, Activation::ReluSqr)?;
    cfg.rope.neox = true;
    Ok(())
}

pub(crate) fn adjust_qwen(cfg: &mut DecoderConfig, _model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    Ok(())
}

pub(crate) fn adjust_chatglm(cfg: &mut DecoderConfig, _model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = false;
    cfg.ffn = FfnKind::FusedGateUp;
    Ok(())
}

pub(crate) fn adjust_plamo(cfg: &mut DecoderConfig, _model: &GgufModel) -> Result<(), ArchError> {
    cfg.rope.neox = true;
    cfg.layout = BlockLayout::Parallel;
    Ok(())
}
