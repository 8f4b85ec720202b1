//! Hugging Face tensor names to llama.cpp's GGUF names, per family ([`gguf_name`]), after
//! llama.cpp's filters ([`filter_name`]); which tensors are experts ([`expert_of`]) and which
//! are GPT-2's transposed `Conv1D` weights ([`is_conv1d`]).

use super::family::{ExpertLayout, Family};

/// An expert tensor's (layer, expert, projection index in `layout.parts`), or `None` when
/// `name` is not one.
pub(crate) fn expert_of(layout: &ExpertLayout, name: &str) -> Option<(usize, usize, usize)> {
    let rest = name.strip_prefix(layout.layers)?;
    let (layer, rest) = rest.split_once('.')?;
    let rest = rest.strip_prefix(layout.infix)?;
    let (expert, rest) = rest.split_once('.')?;
    let proj = rest.strip_suffix(".weight")?;
    let part = layout.parts.iter().position(|p| p.0 == proj)?;
    Some((layer.parse().ok()?, expert.parse().ok()?, part))
}

/// The name after llama.cpp's filters (`None`: a tensor the text model does not use).
pub(crate) fn filter_name(hf: &str) -> Option<String> {
    let skip_prefix = [
        "mlp",
        "vit.",
        "vpm.",
        "siglip2.",
        "conformer.",
        "merger.",
        "resampler.",
        "sound_encoder.",
        "sound_projection.",
        "speech_embeddings.",
    ];
    let skip_inner = [
        "visual.",
        "vision.",
        "audio.",
        "talker.",
        "vision_",
        "audio_",
        "token2wav.",
        "code2wav.",
        "projector.",
        "pre_mm_projector_norm",
        "image_newline",
        "view_seperator",
        "patch_embed",
        "patch_embedding",
        "patch_merger.",
        "patch_merge_mlp.",
        "model.connector.",
    ];
    if skip_prefix.iter().any(|p| hf.starts_with(p)) || skip_inner.iter().any(|p| hf.contains(p)) {
        return None;
    }
    let mut name = hf.replace("e_score_correction_bias", "e_score_correction.bias");
    name = name.replace("language_model.", "");
    name = name.replace("text_model.", "");
    if name.ends_with(".attention.masked_bias")
        || name.ends_with(".attention.bias")
        || name.ends_with(".rotary_emb.inv_freq")
        || name.ends_with(".rotary_pos_emb.inv_freq")
    {
        return None;
    }
    // Bare `*Model` checkpoints (no `model.` prefix), as llama.cpp's Llama and Qwen2 classes.
    if name.starts_with("layers.") || name.starts_with("embed_tokens.") || name.starts_with("norm.")
    {
        name = format!("model.{name}");
    }
    Some(name)
}

/// EXAONE 3's GPT-2-style names (gguf-py's tensor map: `transformer.h.{L}.attn.attention.*`,
/// `mlp.c_fc_0` gate, `c_fc_1` up, `c_proj` down).
fn exaone_name(name: &str) -> Option<String> {
    match name {
        "transformer.wte.weight" => return Some("token_embd.weight".into()),
        "transformer.ln_f.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let (layer, module, kind) = crate::convert::layer_tensor(name, "transformer.h.")?;
    let short = match module {
        "ln_1" => "attn_norm",
        "attn.attention.q_proj" => "attn_q",
        "attn.attention.k_proj" => "attn_k",
        "attn.attention.v_proj" => "attn_v",
        "attn.attention.out_proj" => "attn_output",
        "ln_2" => "ffn_norm",
        "mlp.c_fc_0" => "ffn_gate",
        "mlp.c_fc_1" => "ffn_up",
        "mlp.c_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}.{kind}"))
}

/// A Granite hybrid tensor's GGUF name: Mamba 2's for the `mamba.*` mixers (`dt_bias` already
/// read as the `dt_proj` bias), Granite MoE's for the rest.
fn granite_hybrid_name(name: &str) -> Option<String> {
    let mamba = super::mamba::layer_of(name, "model.layers.").and_then(|(layer, tail)| {
        let short = super::mamba::ssm_short(tail.strip_prefix("mamba.")?)?;
        Some(format!("blk.{layer}.{short}"))
    });
    mamba.or_else(|| gguf_name(Family::GraniteMoe, name))
}

/// The GGUF name of a (filtered) Hugging Face tensor name, or `None` if the family has no
/// such tensor.
pub(crate) fn gguf_name(family: Family, name: &str) -> Option<String> {
    if matches!(family, Family::Gpt2 | Family::StarCoder | Family::CodeShell) {
        return gpt2_name(name);
    }
    if family == Family::Qwen {
        return qwen_name(name);
    }
    if family == Family::ChatGlm && name.starts_with("transformer.") {
        return super::chatglm::gguf_name(name);
    }
    if matches!(family, Family::Mamba | Family::Mamba2) {
        return super::mamba::gguf_name(name);
    }
    if family == Family::Lfm2 {
        return super::lfm2::gguf_name(name);
    }
    if family == Family::Jamba {
        return super::jamba::gguf_name(name);
    }
    if family == Family::GraniteHybrid {
        return granite_hybrid_name(name);
    }
    if family == Family::FalconH1 {
        return super::falcon_h1::gguf_name(name);
    }
    if family == Family::NemotronH {
        return super::nemotron_h::gguf_name(name);
    }
    if family == Family::InternLm2 {
        return super::internlm2::gguf_name(name);
    }
    if family == Family::OpenElm {
        return super::openelm::gguf_name(name);
    }
    if family == Family::Exaone {
        return exaone_name(name);
    }
    match name {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "model.norm.bias"
            if matches!(
                family,
                Family::StarCoder2
                    | Family::StableLm
                    | Family::PhiMoe
                    | Family::Nemotron
                    | Family::Orion
                    | Family::Jais2
            ) =>
        {
            return Some("output_norm.bias".into())
        }
        "lm_head.weight" => return Some("output.weight".into()),
        "lm_head.bias" if matches!(family, Family::Phi2 | Family::PhiMoe) => {
            return Some("output.bias".into())
        }
        "model.final_layernorm.weight" if family == Family::Phi2 => {
            return Some("output_norm.weight".into())
        }
        "model.final_layernorm.bias" if family == Family::Phi2 => {
            return Some("output_norm.bias".into())
        }
        _ => {}
    }
    let (layer, module, kind) = crate::convert::layer_tensor(name, "model.layers.")?;
    // Gemma 2 and 3: norms before and after attention and feed-forward (Gemma 1 has Llama's).
    let gemma = matches!(family, Family::Gemma2 | Family::Gemma3);
    let qk_norm = matches!(
        family,
        Family::Qwen3
            | Family::Qwen3Vl
            | Family::Gemma3
            | Family::Qwen3Moe
            | Family::Olmo2
            | Family::Olmoe
            | Family::Exaone4
            | Family::CommandR
            | Family::MainCoder
    );
    // Norms after attention and feed-forward (OLMo 2, EXAONE 4), no pre-norms.
    let olmo2 = matches!(family, Family::Olmo2 | Family::Exaone4);
    let phi3 = family == Family::Phi3;
    let glm4 = family == Family::Glm4;
    let moe = matches!(
        family,
        Family::Llama | Family::Qwen2Moe | Family::Qwen3Moe | Family::Olmoe | Family::DeepSeek2
    );
    let mla = family == Family::DeepSeek2;
    let oss = family == Family::GptOss;
    let short = match module {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.linear_attn" if family == Family::Deci => "attn_output",
        "self_attn.query_layernorm" if family == Family::HunyuanDense => "attn_q_norm",
        "self_attn.key_layernorm" if family == Family::HunyuanDense => "attn_k_norm",
        "self_attn.q_norm" if qk_norm => "attn_q_norm",
        "self_attn.k_norm" if qk_norm => "attn_k_norm",
        "post_attention_layernorm" if gemma || oss || olmo2 || family == Family::SeedOss => {
            "post_attention_norm"
        }
        "post_self_attn_layernorm" if glm4 => "post_attention_norm",
        "post_mlp_layernorm" if glm4 => "post_ffw_norm",
        "self_attn.sinks" if oss || family == Family::GraniteSwa => "attn_sinks",
        "mlp.router" if oss => "ffn_gate_inp",
        "post_attention_layernorm" => "ffn_norm",
        "pre_feedforward_layernorm" if gemma => "ffn_norm",
        "post_feedforward_layernorm" if gemma || olmo2 => "post_ffw_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "self_attn.qkv_proj" if phi3 => "attn_qkv",
        "mlp.gate_up_proj" if phi3 || glm4 || family == Family::ChatGlm => "ffn_up",
        "block_sparse_moe.gate" if matches!(family, Family::Llama | Family::PhiMoe) => {
            "ffn_gate_inp"
        }
        "mlp.gate" if moe => "ffn_gate_inp",
        "mlp.shared_expert.gate_proj" if family == Family::Qwen2Moe => "ffn_gate_shexp",
        "mlp.shared_expert.up_proj" if family == Family::Qwen2Moe => "ffn_up_shexp",
        "mlp.shared_expert.down_proj" if family == Family::Qwen2Moe => "ffn_down_shexp",
        "mlp.shared_expert_gate" if family == Family::Qwen2Moe => "ffn_gate_inp_shexp",
        "self_attn.dense" if family == Family::Phi2 => "attn_output",
        // (Its fused expert tensors are split by `granite_moe.rs`.)
        "block_sparse_moe.router.layer" if family == Family::GraniteMoe => "ffn_gate_inp",
        "shared_mlp.output_linear" if family == Family::GraniteMoe => "ffn_down_shexp",
        // Stacked from per-head norms by `head_norms.rs`.
        "self_attn.q_layernorm" if family == Family::StableLm => "attn_q_norm",
        "self_attn.k_layernorm" if family == Family::StableLm => "attn_k_norm",
        "mlp.fc1" if family == Family::Phi2 => "ffn_up",
        "mlp.fc2" if family == Family::Phi2 => "ffn_down",
        "mlp.c_fc" if family == Family::StarCoder2 => "ffn_up",
        "mlp.c_proj" if family == Family::StarCoder2 => "ffn_down",
        "self_attn.q_a_proj" if mla => "attn_q_a",
        "self_attn.q_a_layernorm" if mla => "attn_q_a_norm",
        "self_attn.q_b_proj" if mla => "attn_q_b",
        "self_attn.kv_a_proj_with_mqa" if mla => "attn_kv_a_mqa",
        "self_attn.kv_a_layernorm" if mla => "attn_kv_a_norm",
        "self_attn.k_b_proj" if mla => "attn_k_b",
        "self_attn.v_b_proj" if mla => "attn_v_b",
        "mlp.gate.e_score_correction" if mla => "exp_probs_b",
        "mlp.shared_experts.gate_proj" if mla => "ffn_gate_shexp",
        "mlp.shared_experts.up_proj" if mla => "ffn_up_shexp",
        "mlp.shared_experts.down_proj" if mla => "ffn_down_shexp",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}.{kind}"))
}

/// GPT-2's and StarCoder 1's tensor names (`transformer.h.{L}.*`).
fn gpt2_name(name: &str) -> Option<String> {
    let whole = match name {
        "transformer.wte.weight" => Some("token_embd.weight"),
        "transformer.wpe.weight" => Some("position_embd.weight"),
        "transformer.ln_f.weight" => Some("output_norm.weight"),
        "transformer.ln_f.bias" => Some("output_norm.bias"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(n) = whole {
        return Some(n.into());
    }
    let (layer, module, kind) = crate::convert::layer_tensor(name, "transformer.h.")?;
    let short = match module {
        "ln_1" => "attn_norm",
        "attn.c_attn" => "attn_qkv",
        "attn.c_proj" => "attn_output",
        "ln_2" => "ffn_norm",
        "mlp.c_fc" => "ffn_up",
        "mlp.c_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}.{kind}"))
}

/// Qwen 1's tensor names: GPT-2's, with `mlp.w1` the up and `mlp.w2` the gate projection.
fn qwen_name(name: &str) -> Option<String> {
    if let Some((layer, module, kind)) = crate::convert::layer_tensor(name, "transformer.h.") {
        let short = match module {
            "mlp.w1" => "ffn_up",
            "mlp.w2" => "ffn_gate",
            "mlp.c_proj" => "ffn_down",
            "mlp.c_fc" => return None,
            _ => return gpt2_name(name),
        };
        return Some(format!("blk.{layer}.{short}.{kind}"));
    }
    match name {
        "transformer.wpe.weight" | "transformer.ln_f.bias" => None,
        _ => gpt2_name(name),
    }
}

/// Whether `name` is one of GPT-2's `Conv1D` weights, stored `[in, out]` (llama.cpp writes
/// them transposed, as every other matrix).
pub(crate) fn is_conv1d(family: Family, name: &str) -> bool {
    family == Family::Gpt2
        && name.starts_with("transformer.h.")
        && [".c_attn.weight", ".c_proj.weight", ".c_fc.weight"]
            .iter()
            .any(|s| name.ends_with(s))
}
