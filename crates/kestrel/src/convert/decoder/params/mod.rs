//! A decoder's hyperparameters as GGUF metadata, key for key and in the order llama.cpp's
//! converter writes them: `TextModel.set_gguf_parameters` (the base most families extend) and
//! the families that write their own (`own.rs`: Gemma 1 and 2, Phi-2, Phi-3, StableLM).

use std::path::Path;

use serde_json::Value;

mod deepseek2;
pub(in crate::convert::decoder) mod hparams;
mod own;

use super::family::{self, Family};
use super::{bad, u32_of, uint};
use crate::convert::meta::Meta;
use crate::convert::ConvertError;
use hparams::{need, need_u32, Hparams};
use own::{codeshell, gemma, gemma2, gpt2, orion, phi2, phi3, stablelm};
pub(super) use own::{phi3_rope_factors, LongRope};

/// Writes `family`'s hyperparameters.
pub(super) fn write(meta: &mut Meta, family: Family, hp: &Hparams) -> Result<(), ConvertError> {
    match family {
        Family::Gemma2 => return gemma2(meta, hp),
        Family::Gemma => return gemma(meta, hp),
        Family::Phi3 => return phi3(meta, hp),
        Family::PhiMoe => {
            // `PhiMoeModel`: Phi-3's keys, then the experts used and their count.
            phi3(meta, hp)?;
            let k = |s: &str| format!("{}.{s}", hp.arch);
            meta.u32(
                k("expert_used_count"),
                need_u32(hp, &["num_experts_per_tok", "num_experts_per_token"])?,
            );
            meta.u32(
                k("expert_count"),
                need_u32(hp, &["num_local_experts", "num_experts"])?,
            );
            return Ok(());
        }
        Family::Phi2 => return phi2(meta, hp),
        Family::StableLm => return stablelm(meta, hp),
        Family::Orion => return orion(meta, hp),
        Family::CodeShell => return codeshell(meta, hp),
        Family::Deci if super::deci::has_blocks(hp.h) => return super::deci::params(meta, hp),
        Family::OpenElm => return super::openelm::params(meta, hp),
        Family::Gpt2 | Family::StarCoder => return gpt2(meta, family, hp),
        Family::Mamba => return super::mamba::params(meta, hp),
        Family::Mamba2 => return super::mamba::mamba2_params(meta, hp),
        Family::Jamba => return super::jamba::params(meta, hp),
        Family::FalconH1 => return super::falcon_h1::params(meta, hp),
        Family::ChatGlm => return super::chatglm::params(meta, hp),
        _ => {}
    }
    let (h, rp, cfg, arch) = (hp.h, hp.rp, hp.cfg, hp.arch);
    let (n_layer, n_embd, n_head, vocab_size) = (hp.n_layer, hp.n_embd, hp.n_head, hp.vocab_size);
    let k = |s: &str| format!("{arch}.{s}");
    meta.u32(k("block_count"), u32_of(n_layer, "num_hidden_layers", cfg)?);
    let ctx = uint(
        h,
        &[
            "max_position_embeddings",
            "n_ctx",
            "n_positions",
            "max_length",
            "max_sequence_length",
            "model_max_length",
        ],
        cfg,
    )?;
    if let Some(v) = ctx {
        meta.u32(
            k("context_length"),
            u32_of(v, "max_position_embeddings", cfg)?,
        );
    }
    if let Some(v) = n_embd {
        meta.u32(k("embedding_length"), u32_of(v, "hidden_size", cfg)?);
    }
    let ff = uint(
        h,
        &[
            "prefix_dense_intermediate_size",
            "dense_intermediate_size",
            "intermediate_size",
            "n_inner",
            "hidden_dim",
        ],
        cfg,
    )?;
    if let Some(v) = ff {
        meta.u32(
            k("feed_forward_length"),
            u32_of(v, "intermediate_size", cfg)?,
        );
    }
    if let Some(v) = uint(h, &["num_attention_heads", "n_head", "n_heads"], cfg)? {
        meta.u32(
            k("attention.head_count"),
            u32_of(v, "num_attention_heads", cfg)?,
        );
    }
    // DeepSeek's latent attention is written as one shared key-value head (MQA).
    let kv_heads = match family {
        Family::DeepSeek2 => Some(1),
        _ => uint(h, &["num_key_value_heads", "n_kv_heads"], cfg)?,
    };
    if let Some(v) = kv_heads {
        meta.u32(
            k("attention.head_count_kv"),
            u32_of(v, "num_key_value_heads", cfg)?,
        );
    }
    if h.get("is_causal") == Some(&Value::Bool(false)) {
        meta.bool(k("attention.causal"), false);
    }
    let rope_params = rp
        .get("full_attention")
        .and_then(|v| v.as_object())
        .cloned()
        .unwrap_or_else(|| rp.clone());
    if let Some(rope_type) = rope_params.get("rope_type").and_then(|v| v.as_str()) {
        let factor = rope_params.get("factor").and_then(|v| v.as_f64());
        match (rope_type, factor) {
            ("linear", Some(f)) => {
                meta.str(k("rope.scaling.type"), "linear");
                meta.f32(k("rope.scaling.factor"), f as f32);
            }
            ("yarn", Some(f)) => {
                meta.str(k("rope.scaling.type"), "yarn");
                meta.f32(k("rope.scaling.factor"), f as f32);
                let orig = rope_params
                    .get("original_max_position_embeddings")
                    .and_then(|v| v.as_u64())
                    .ok_or_else(|| {
                        bad(cfg, "yarn RoPE without original_max_position_embeddings")
                    })?;
                meta.u32(
                    k("rope.scaling.original_context_length"),
                    u32_of(orig, "original_max_position_embeddings", cfg)?,
                );
                for (src, dst) in [
                    ("extrapolation_factor", "rope.scaling.yarn_ext_factor"),
                    ("attention_factor", "rope.scaling.yarn_attn_factor"),
                    ("beta_fast", "rope.scaling.yarn_beta_fast"),
                    ("beta_slow", "rope.scaling.yarn_beta_slow"),
                ] {
                    let v = rope_params.get(src).or_else(|| {
                        (src == "attention_factor")
                            .then(|| rope_params.get("attn_factor"))
                            .flatten()
                    });
                    if let Some(v) = v.and_then(|v| v.as_f64()) {
                        meta.f32(k(dst), v as f32);
                    }
                }
            }
            ("su" | "longrope", _) => meta.str(k("rope.scaling.type"), "longrope"),
            _ => {}
        }
    }
    if let Some(sections) = rp.get("mrope_section") {
        // M-RoPE's sections (time, height, width, extra), padded to four with 0.
        let mut v: Vec<i32> = sections
            .as_array()
            .ok_or_else(|| bad(cfg, "mrope_section is not a list"))?
            .iter()
            .map(|x| x.as_i64().and_then(|x| i32::try_from(x).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| bad(cfg, "mrope_section holds a non-integer"))?;
        v.resize(v.len().max(4), 0);
        meta.i32s(k("rope.dimension_sections"), &v[..4]);
    }
    if let Some(t) = rope_params.get("rope_theta").and_then(|v| v.as_f64()) {
        meta.f32(k("rope.freq_base"), t as f32);
    }
    if let Some(t) = rp
        .get("sliding_attention")
        .and_then(|s| s.get("rope_theta"))
        .and_then(|v| v.as_f64())
    {
        meta.f32(k("rope.freq_base_swa"), t as f32);
    }
    if let Some(v) = family::find(h, &["rms_norm_eps", "norm_eps"]).and_then(|v| v.as_f64()) {
        meta.f32(k("attention.layer_norm_rms_epsilon"), v as f32);
    }
    if let Some(v) = family::find(h, &["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"])
        .and_then(|v| v.as_f64())
    {
        meta.f32(k("attention.layer_norm_epsilon"), v as f32);
    }
    if let Some(v) = uint(
        h,
        &["num_local_experts", "num_experts", "n_routed_experts"],
        cfg,
    )? {
        // HunYuanModel drops a `num_experts` of 1 (not a mixture of experts).
        if !(family == Family::HunyuanDense && v <= 1) {
            meta.u32(k("expert_count"), u32_of(v, "num_experts", cfg)?);
        }
    }
    if let Some(v) = uint(
        h,
        &[
            "num_experts_per_tok",
            "num_experts_per_token",
            "top_k_experts",
        ],
        cfg,
    )? {
        meta.u32(
            k("expert_used_count"),
            u32_of(v, "num_experts_per_tok", cfg)?,
        );
    }
    if let Some(v) = uint(h, &["n_group"], cfg)? {
        meta.u32(k("expert_group_count"), u32_of(v, "n_group", cfg)?);
    }
    if let Some(v) = uint(h, &["topk_group"], cfg)? {
        meta.u32(k("expert_group_used_count"), u32_of(v, "topk_group", cfg)?);
    }
    let score = family::find(
        h,
        &[
            "score_function",
            "scoring_func",
            "score_func",
            "moe_router_activation",
            "moe_router_activation_func",
            "expert_selection_fn",
        ],
    )
    .filter(|v| !v.is_null());
    if let Some(f) = score {
        // gguf-py's ExpertGatingFuncType.
        let id = match f.as_str() {
            Some("softmax") => 1,
            Some("sigmoid") => 2,
            Some("sqrtsoftplus") => 4,
            _ => return Err(bad(cfg, format!("unsupported expert gating function {f}"))),
        };
        meta.u32(k("expert_gating_func"), id);
    }
    // Granite's converter drops head_dim before writing (RoPE over hidden / heads).
    let head_dim = match family {
        Family::Granite
        | Family::GraniteSwa
        | Family::GraniteMoe
        | Family::GraniteHybrid
        | Family::NemotronH => None,
        _ => uint(h, &["head_dim"], cfg)?,
    };
    if let Some(v) = head_dim {
        meta.u32(k("attention.key_length"), u32_of(v, "head_dim", cfg)?);
        meta.u32(k("attention.value_length"), u32_of(v, "head_dim", cfg)?);
    }
    meta.u32("general.file_type", hp.file_type);
    match family {
        Family::Llama
        | Family::SmolLm3
        | Family::Granite
        | Family::GraniteSwa
        | Family::GraniteMoe
        | Family::Mistral3
        | Family::Arcee
        | Family::Nanbeige
        | Family::GraniteHybrid
        | Family::NemotronH => {
            let v = vocab_size.ok_or_else(|| bad(cfg, "no vocab_size"))?;
            meta.u32(k("vocab_size"), u32_of(v, "vocab_size", cfg)?);
            let rope_dim = match head_dim {
                Some(d) => d,
                None => head_size(n_embd, n_head, cfg)?,
            };
            meta.u32(
                k("rope.dimension_count"),
                u32_of(rope_dim, "head_dim", cfg)?,
            );
            if h.get("model_type").and_then(|v| v.as_str()) == Some("ministral3") {
                // Ministral 3: YaRN with `mscale_all_dim` as the log multiplier (not x 0.1
                // as DeepSeek's) and Llama 4's attention temperature.
                let need_f = |key: &str| {
                    rope_params
                        .get(key)
                        .and_then(|v| v.as_f64())
                        .ok_or_else(|| bad(cfg, format!("ministral3 RoPE parameters need {key}")))
                };
                if rope_params.get("rope_type").and_then(|v| v.as_str()) != Some("yarn") {
                    return Err(bad(cfg, "ministral3's rope_type must be yarn"));
                }
                meta.f32(
                    k("rope.scaling.yarn_log_multiplier"),
                    need_f("mscale_all_dim")? as f32,
                );
                meta.f32(
                    k("attention.temperature_scale"),
                    need_f("llama_4_scaling_beta")? as f32,
                );
            }
            if matches!(
                family,
                Family::Granite
                    | Family::GraniteSwa
                    | Family::GraniteMoe
                    | Family::GraniteHybrid
                    | Family::NemotronH
            ) {
                // The `*_multiplier`s under llama.cpp's `*_scale` names, when not 0.
                for (src, dst) in [
                    ("attention_multiplier", "attention.scale"),
                    ("embedding_multiplier", "embedding_scale"),
                    ("residual_multiplier", "residual_scale"),
                    ("logits_scaling", "logit_scale"),
                ] {
                    if let Some(v) = h.get(src).and_then(|v| v.as_f64()).filter(|&v| v != 0.0) {
                        meta.f32(k(dst), v as f32);
                    }
                }
            }
            if matches!(
                family,
                Family::GraniteMoe | Family::GraniteHybrid | Family::NemotronH
            ) {
                // GraniteMoeShared's shared expert, when its size is not 0.
                if let Some(v) = uint(h, &["shared_intermediate_size"], cfg)?.filter(|&v| v > 0) {
                    meta.u32(
                        k("expert_shared_feed_forward_length"),
                        u32_of(v, "shared_intermediate_size", cfg)?,
                    );
                }
            }
            if family == Family::GraniteHybrid {
                super::granite_hybrid::params(meta, hp)?;
            }
            if family == Family::NemotronH {
                super::nemotron_h::params(meta, hp)?;
            }
            if family == Family::GraniteSwa {
                // `GraniteSWAModel`: the window (128 by default), which layers slide (from
                // layer_types, else every layer but each fourth), which rotate (no_rope_layers).
                let window = uint(h, &["sliding_window"], cfg)?.unwrap_or(128);
                meta.u32(
                    k("attention.sliding_window"),
                    u32_of(window, "sliding_window", cfg)?,
                );
                let swa: Vec<bool> = match h.get("layer_types").and_then(Value::as_array) {
                    Some(t) if !t.is_empty() => t
                        .iter()
                        .map(|v| v.as_str() == Some("sliding_attention"))
                        .collect(),
                    _ => (0..hp.n_layer).map(|i| i % 4 != 0).collect(),
                };
                meta.bools(k("attention.sliding_window_pattern"), &swa);
                if let Some(nr) = h
                    .get("no_rope_layers")
                    .and_then(Value::as_array)
                    .filter(|a| !a.is_empty())
                {
                    let rope: Vec<bool> = nr
                        .iter()
                        .map(|v| v.as_f64().is_some_and(|x| x != 0.0) || v.as_bool() == Some(true))
                        .collect();
                    meta.bools(k("attention.rope_pattern"), &rope);
                }
            }
            if family == Family::Nanbeige {
                // `NanbeigeModel`: the loop count (at least 1) and whether the loops skip the
                // final norm.
                let loops = h
                    .get("num_loops")
                    .and_then(Value::as_i64)
                    .filter(|&n| n >= 1)
                    .unwrap_or(1);
                meta.u32(k("num_loops"), u32_of(loops as u64, "num_loops", cfg)?);
                let skip = h
                    .get("skip_loop_final_norm")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                meta.bool(k("skip_loop_final_norm"), skip);
            }
        }
        Family::Baichuan | Family::Xverse => {
            // `BaichuanModel`, `XverseModel`: Meta's layout tag, the rotary dimension of
            // hidden / heads.
            meta.str(k("tensor_data_layout"), "Meta AI original pth");
            let d = head_size(n_embd, n_head, cfg)?;
            meta.u32(k("rope.dimension_count"), u32_of(d, "head size", cfg)?);
        }
        Family::PanguEmbedded => {
            // `PanguEmbeddedModel`: the vocabulary size, the rotary dimension (hidden / heads
            // without head_dim, then also as the key and value lengths).
            let v = vocab_size.ok_or_else(|| bad(cfg, "no vocab_size"))?;
            meta.u32(k("vocab_size"), u32_of(v, "vocab_size", cfg)?);
            let head_dim = uint(h, &["head_dim"], cfg)?;
            let rope_dim = match head_dim {
                Some(d) => d,
                None => head_size(n_embd, n_head, cfg)?,
            };
            let rope_dim = u32_of(rope_dim, "head_dim", cfg)?;
            meta.u32(k("rope.dimension_count"), rope_dim);
            if head_dim.is_none() {
                meta.u32(k("attention.key_length"), rope_dim);
                meta.u32(k("attention.value_length"), rope_dim);
            }
        }
        Family::Jais2 => {
            // `Jais2Model`: the rotary dimension, head_dim or hidden / heads.
            let d = match uint(h, &["head_dim"], cfg)? {
                Some(d) => d,
                None => head_size(n_embd, n_head, cfg)?,
            };
            meta.u32(k("rope.dimension_count"), u32_of(d, "head_dim", cfg)?);
        }
        Family::MainCoder => {
            // `MaincoderModel`: the rotary dimension from head_dim.
            if let Some(d) = uint(h, &["head_dim"], cfg)? {
                meta.u32(k("rope.dimension_count"), u32_of(d, "head_dim", cfg)?);
            }
        }
        Family::Qwen2
        | Family::Qwen2Vl
        | Family::Qwen3
        | Family::Gemma
        | Family::Gemma2
        | Family::Phi2
        | Family::Phi3
        | Family::PhiMoe
        | Family::StableLm
        | Family::Gpt2
        | Family::StarCoder
        | Family::StarCoder2
        | Family::SeedOss
        | Family::Mamba
        | Family::Mamba2
        | Family::Jamba
        | Family::FalconH1
        | Family::Orion
        | Family::CodeShell
        | Family::OpenElm
        | Family::ChatGlm
        | Family::InternLm2 => {}
        Family::Qwen => rms_eps_as_before(meta, hp, "Qwen")?,
        Family::Deci => super::deci::params_7b(meta, hp)?,
        Family::HunyuanDense => super::hunyuan::params(meta, hp)?,
        Family::Lfm2 => super::lfm2::params(meta, hp)?,
        Family::MiniCpm => {
            // `MiniCPMModel`: the embedding, residual and logit scales, computed in f64.
            let f = |key: &str| {
                family::find(h, &[key])
                    .and_then(Value::as_f64)
                    .ok_or_else(|| bad(cfg, format!("MiniCPM needs {key}")))
            };
            meta.f32(k("embedding_scale"), f("scale_emb")? as f32);
            let residual = f("scale_depth")? / (f("num_hidden_layers")?).sqrt();
            meta.f32(k("residual_scale"), residual as f32);
            meta.f32(
                k("logit_scale"),
                (f("hidden_size")? / f("dim_model_base")?) as f32,
            );
        }
        Family::Exaone => {
            // `ExaoneModel`: SiLU only; the rotated dims of hidden / heads.
            if h.get("activation_function").and_then(Value::as_str) != Some("silu") {
                return Err(bad(cfg, "EXAONE with an activation other than silu"));
            }
            rms_eps_as_before(meta, hp, "EXAONE")?;
            let head = need(hp, &["hidden_size"])? / need(hp, &["num_attention_heads"])?.max(1);
            let factor = rp
                .get("partial_rotary_factor")
                .and_then(Value::as_f64)
                .unwrap_or(1.0);
            let dims = (factor * head as f64).trunc() as u64;
            meta.u32(k("rope.dimension_count"), u32_of(dims, "hidden_size", cfg)?);
        }
        Family::Qwen3Vl => {
            // The vision tower's deepstack layers (their features join the text model's
            // first layers; 0 without a vision config).
            let vision = h
                .get("thinker_config")
                .and_then(|t| t.get("vision_config"))
                .or_else(|| h.get("vision_config"));
            let n = vision
                .and_then(|v| v.get("deepstack_visual_indexes"))
                .and_then(|v| v.as_array())
                .map_or(0, |a| a.len());
            meta.u32(
                k("n_deepstack_layers"),
                u32::try_from(n).map_err(|_| bad(cfg, "too many deepstack_visual_indexes"))?,
            );
        }
        Family::Olmo2 => {
            if let Some(sw) = uint(h, &["sliding_window"], cfg)? {
                meta.u32(
                    k("attention.sliding_window"),
                    u32_of(sw, "sliding_window", cfg)?,
                );
                let pattern: Vec<bool> = match h.get("layer_types").and_then(|v| v.as_array()) {
                    Some(types) => types
                        .iter()
                        .map(|t| t.as_str() == Some("sliding_attention"))
                        .collect(),
                    // OLMo 3's default: every fourth layer global.
                    None => (0..n_layer).map(|i| (i + 1) % 4 != 0).collect(),
                };
                meta.bools(k("attention.sliding_window_pattern"), &pattern);
            }
        }
        Family::DeepSeek2 => deepseek2::write(meta, hp)?,
        Family::Exaone4 => {
            meta.u32(k("vocab_size"), need_u32(hp, &["vocab_size"])?);
            if let Some(sw) = uint(h, &["sliding_window"], cfg)? {
                meta.u32(
                    k("attention.sliding_window"),
                    u32_of(sw, "sliding_window", cfg)?,
                );
                match h.get("layer_types") {
                    Some(Value::Array(types)) => {
                        let p: Vec<bool> = types
                            .iter()
                            .map(|t| t.as_str() == Some("sliding_attention"))
                            .collect();
                        meta.bools(k("attention.sliding_window_pattern"), &p);
                    }
                    _ => {
                        if let Some(p) = exaone4_pattern(h, n_layer) {
                            meta.bools(k("attention.sliding_window_pattern"), &p);
                        }
                    }
                }
            }
        }
        Family::Cohere2 => {
            logit_scale(meta, hp)?;
            meta.u32(
                k("attention.sliding_window"),
                need_u32(hp, &["sliding_window"])?,
            );
            meta.u32(k("vocab_size"), need_u32(hp, &["vocab_size"])?);
            let pct = h
                .get("rotary_pct")
                .and_then(|v| v.as_f64())
                .ok_or_else(|| bad(cfg, "no rotary_pct"))?;
            let embd = need(hp, &["hidden_size"])?;
            let heads = need(hp, &["num_attention_heads"])?;
            if heads == 0 {
                return Err(bad(cfg, "num_attention_heads is 0"));
            }
            let dims = (pct * (embd / heads) as f64) as u64;
            meta.u32(
                k("rope.dimension_count"),
                u32_of(dims, "rope dimensions", cfg)?,
            );
            meta.str(k("rope.scaling.type"), "none");
        }
        Family::Glm4 => {
            // RoPE over `partial_rotary_factor` (0.5 unless given) of each head.
            let head_dim = match uint(h, &["head_dim"], cfg)? {
                Some(d) => d,
                None => {
                    let heads = need(hp, &["num_attention_heads"])?;
                    if heads == 0 {
                        return Err(bad(cfg, "num_attention_heads is 0"));
                    }
                    need(hp, &["hidden_size"])? / heads
                }
            };
            let factor = match hp.rp.get("partial_rotary_factor") {
                None => 0.5,
                Some(v) => v
                    .as_f64()
                    .ok_or_else(|| bad(cfg, "partial_rotary_factor is not a number"))?,
            };
            let dims = (head_dim as f64 * factor).trunc();
            if !(0.0..=f64::from(u32::MAX)).contains(&dims) {
                return Err(bad(cfg, format!("partial_rotary_factor = {factor}")));
            }
            meta.u32(k("rope.dimension_count"), dims as u32);
        }
        Family::Nemotron => {
            let v = vocab_size.ok_or_else(|| bad(cfg, "no vocab_size"))?;
            meta.u32(k("vocab_size"), u32_of(v, "vocab_size", cfg)?);
            if let Some(eps) = family::find(h, &["norm_eps"]).and_then(|v| v.as_f64()) {
                if family::find(h, &["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"])
                    .is_none()
                {
                    meta.f32(k("attention.layer_norm_epsilon"), eps as f32);
                }
            }
            // Partial RoPE: `partial_rotary_factor` of the width, split over the heads.
            let factor = match hp.rp.get("partial_rotary_factor") {
                None => 0.5,
                Some(v) => v
                    .as_f64()
                    .ok_or_else(|| bad(cfg, "partial_rotary_factor is not a number"))?,
            };
            let e = n_embd.ok_or_else(|| bad(cfg, "no hidden_size"))?;
            let nh = n_head
                .filter(|&n| n > 0)
                .ok_or_else(|| bad(cfg, "no num_attention_heads"))?;
            let dims = (factor * e as f64).trunc();
            if !(0.0..=f64::from(u32::MAX)).contains(&dims) {
                return Err(bad(cfg, format!("partial_rotary_factor = {factor}")));
            }
            meta.u32(k("rope.dimension_count"), (dims as u64 / nh) as u32);
            match h
                .get("factor")
                .or_else(|| hp.rp.get("factor"))
                .filter(|v| !v.is_null())
            {
                None => meta.str(k("rope.scaling.type"), "none"),
                Some(f) => {
                    let f = f
                        .as_f64()
                        .ok_or_else(|| bad(cfg, "rope scaling factor is not a number"))?;
                    meta.str(k("rope.scaling.type"), "linear");
                    meta.f32(k("rope.scaling.factor"), f as f32);
                }
            }
        }
        Family::Olmo => {
            // OLMo's layer norms have no weights and a fixed epsilon.
            meta.f32(k("attention.layer_norm_epsilon"), 1e-5);
            if let Some(v) = h.get("clip_qkv").and_then(|v| v.as_f64()) {
                meta.f32(k("attention.clamp_kqv"), v as f32);
            }
        }
        Family::CommandR => {
            logit_scale(meta, hp)?;
            meta.str(k("rope.scaling.type"), "none");
        }
        Family::Olmoe => {
            // llama.cpp's OlmoeModel writes 1e-5 whatever the config says.
            meta.f32(k("attention.layer_norm_rms_epsilon"), 1e-5);
        }
        Family::GptOss => {
            let sw =
                uint(h, &["sliding_window"], cfg)?.ok_or_else(|| bad(cfg, "no sliding_window"))?;
            meta.u32(
                k("attention.sliding_window"),
                u32_of(sw, "sliding_window", cfg)?,
            );
            let ff = uint(h, &["intermediate_size"], cfg)?
                .ok_or_else(|| bad(cfg, "no intermediate_size"))?;
            meta.u32(
                k("expert_feed_forward_length"),
                u32_of(ff, "intermediate_size", cfg)?,
            );
        }
        Family::Qwen2Moe | Family::Qwen3Moe => {
            if let Some(v) = uint(h, &["moe_intermediate_size"], cfg)? {
                meta.u32(
                    k("expert_feed_forward_length"),
                    u32_of(v, "moe_intermediate_size", cfg)?,
                );
            }
            if let Some(v) = uint(h, &["shared_expert_intermediate_size"], cfg)? {
                meta.u32(
                    k("expert_shared_feed_forward_length"),
                    u32_of(v, "shared_expert_intermediate_size", cfg)?,
                );
            }
        }
        Family::Gemma3 => {
            let g = |key: &str, d: u64| -> Result<u32, ConvertError> {
                u32_of(uint(h, &[key], cfg)?.unwrap_or(d), key, cfg)
            };
            meta.u32(k("context_length"), g("max_position_embeddings", 131072)?);
            meta.u32(k("attention.head_count"), g("num_attention_heads", 8)?);
            let eps = h
                .get("rms_norm_eps")
                .and_then(|v| v.as_f64())
                .unwrap_or(1e-6);
            meta.f32(k("attention.layer_norm_rms_epsilon"), eps as f32);
            meta.u32(k("attention.key_length"), g("head_dim", 256)?);
            meta.u32(k("attention.value_length"), g("head_dim", 256)?);
            let theta = rope_params
                .get("rope_theta")
                .and_then(|v| v.as_f64())
                .unwrap_or(1_000_000.0);
            meta.f32(k("rope.freq_base"), theta as f32);
            if h.get("attn_logit_softcapping")
                .is_some_and(|v| !v.is_null())
            {
                return Err(bad(
                    cfg,
                    "Gemma 3 has no attn_logit_softcapping; refusing a config that sets it",
                ));
            }
            if let Some(c) = h.get("final_logit_softcapping").and_then(|v| v.as_f64()) {
                if c != 0.0 {
                    meta.f32(k("final_logit_softcapping"), c as f32);
                }
            }
            if h.get("sliding_window_pattern").and_then(|v| v.as_i64()) != Some(1) {
                let sw = uint(h, &["sliding_window"], cfg)?
                    .ok_or_else(|| bad(cfg, "no sliding_window"))?;
                meta.u32(
                    k("attention.sliding_window"),
                    u32_of(sw, "sliding_window", cfg)?,
                );
            }
            meta.u32(k("attention.head_count_kv"), g("num_key_value_heads", 4)?);
        }
    }
    Ok(())
}

/// EXAONE 4's per-layer window flags from a `sliding_window_pattern` (`"LLLG"` repeated, or
/// every `n`-th layer global), when the config has no `layer_types`.
fn exaone4_pattern(h: &Value, n_layer: u64) -> Option<Vec<bool>> {
    let n = usize::try_from(n_layer).ok().filter(|&n| n <= 1 << 16)?;
    let p: Vec<bool> = match h.get("sliding_window_pattern")? {
        Value::String(s) if !s.is_empty() => {
            let b = s.as_bytes();
            (0..n).map(|i| b[i % b.len()] == b'L').collect()
        }
        Value::Number(x) => {
            let m = x.as_u64().filter(|&m| m > 0)? as usize;
            (0..n).map(|i| (i + 1) % m != 0).collect()
        }
        _ => return None,
    };
    Some(p)
}

/// A value the family's converter reads without a default: missing is an error, as the
/// Python `KeyError` is.
/// `layer_norm_epsilon` as `{arch}.attention.layer_norm_rms_epsilon`, after the common keys:
/// llama.cpp's Qwen 1 and EXAONE 3 loaders need that key, which b11434's converter no longer
/// writes for them (its files fail to load: "key not found"), so it is written as the
/// converter did before (docs/convert.md).
fn rms_eps_as_before(meta: &mut Meta, hp: &Hparams, who: &str) -> Result<(), ConvertError> {
    let eps = family::find(hp.h, &["layer_norm_epsilon"])
        .and_then(Value::as_f64)
        .ok_or_else(|| bad(hp.cfg, format!("{who} without layer_norm_epsilon")))?;
    meta.f32(
        format!("{}.attention.layer_norm_rms_epsilon", hp.arch),
        eps as f32,
    );
    Ok(())
}

/// Cohere's `logit_scale` (Command R, R7B), required.
fn logit_scale(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let scale =
        hp.h.get("logit_scale")
            .and_then(|v| v.as_f64())
            .ok_or_else(|| bad(hp.cfg, "no logit_scale"))?;
    meta.f32(format!("{}.logit_scale", hp.arch), scale as f32);
    Ok(())
}

/// hidden / heads, the head size llama.cpp's converters fall back to without `head_dim`.
fn head_size(n_embd: Option<u64>, n_head: Option<u64>, cfg: &Path) -> Result<u64, ConvertError> {
    let e = n_embd.ok_or_else(|| bad(cfg, "no hidden_size"))?;
    let nh = n_head
        .filter(|&n| n > 0)
        .ok_or_else(|| bad(cfg, "no num_attention_heads"))?;
    Ok(e / nh)
}
