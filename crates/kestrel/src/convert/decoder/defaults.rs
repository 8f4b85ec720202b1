//! The config as `transformers` would read it: each `model_type`'s class defaults for the keys
//! llama.cpp's converter reads, where `config.json` leaves them out, and the values the config
//! classes derive in `__init__` (`head_dim`, KV heads, layer types).

use serde_json::Value;

/// The config as `transformers`' `AutoConfig` would read it (what llama.cpp's converter
/// sees): the class defaults of `model_type` for the keys the converter reads, where the
/// file leaves them out, and the values its `__init__` derives (`head_dim`, KV heads).
pub(crate) fn with_defaults(config: &Value) -> Value {
    let mut c = config.clone();
    let model_type = c
        .get("model_type")
        .and_then(|m| m.as_str())
        .unwrap_or("")
        .to_string();
    // Multimodal configs: the defaults of their text model's type.
    let text_type = match model_type.as_str() {
        "gemma3" => Some("gemma3_text"),
        "mistral3" => Some("mistral"),
        "qwen3_vl" => Some("qwen3_vl_text"),
        _ => None,
    };
    if let Some(text_type) = text_type {
        if let Some(text) = c.get("text_config").cloned() {
            let mut t = text;
            if t.get("model_type").is_none() {
                t["model_type"] = Value::from(text_type);
            }
            c["text_config"] = with_defaults(&t);
        }
        return c;
    }
    let defaults: &[(&str, Value)] = match model_type.as_str() {
        "llama" => &[
            ("vocab_size", Value::from(32000)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(11008)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("max_position_embeddings", Value::from(2048)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(10000.0)),
        ],
        "mistral" => &[
            ("vocab_size", Value::from(32000)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(14336)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("num_key_value_heads", Value::from(8)),
            ("max_position_embeddings", Value::from(131072)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(10000.0)),
            ("sliding_window", Value::from(4096)),
        ],
        "qwen2" | "qwen3" => &[
            ("vocab_size", Value::from(151936)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(22016)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("max_position_embeddings", Value::from(32768)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(10000.0)),
        ],
        "gemma3_text" => &[
            ("vocab_size", Value::from(262208)),
            ("hidden_size", Value::from(2304)),
            ("intermediate_size", Value::from(9216)),
            ("num_hidden_layers", Value::from(26)),
            ("num_attention_heads", Value::from(8)),
            ("num_key_value_heads", Value::from(4)),
            ("head_dim", Value::from(256)),
            ("max_position_embeddings", Value::from(131072)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(1_000_000.0)),
            ("rope_local_base_freq", Value::from(10000.0)),
            ("sliding_window", Value::from(4096)),
        ],
        "starcoder2" => &[
            ("vocab_size", Value::from(49152)),
            ("hidden_size", Value::from(3072)),
            ("intermediate_size", Value::from(12288)),
            ("num_hidden_layers", Value::from(30)),
            ("num_attention_heads", Value::from(24)),
            ("num_key_value_heads", Value::from(2)),
            ("max_position_embeddings", Value::from(4096)),
            ("norm_epsilon", Value::from(1e-5)),
            ("rope_theta", Value::from(10000.0)),
        ],
        "exaone4" => &[
            ("vocab_size", Value::from(102400)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(16384)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("num_key_value_heads", Value::from(32)),
            ("max_position_embeddings", Value::from(2048)),
            ("rms_norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(10000.0)),
            ("sliding_window", Value::from(4096)),
            ("sliding_window_pattern", Value::from(4)),
        ],
        "phi" => &[
            ("vocab_size", Value::from(51200)),
            ("hidden_size", Value::from(2048)),
            ("intermediate_size", Value::from(8192)),
            ("num_hidden_layers", Value::from(24)),
            ("num_attention_heads", Value::from(32)),
            ("max_position_embeddings", Value::from(2048)),
            ("layer_norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(10000.0)),
            ("partial_rotary_factor", Value::from(0.5)),
        ],
        // GPT2Config's and GPTBigCodeConfig's (keys renamed by their `attribute_map` below).
        "gpt2" | "gpt_bigcode" => &[
            ("vocab_size", Value::from(50257)),
            ("n_positions", Value::from(1024)),
            ("n_embd", Value::from(768)),
            ("n_layer", Value::from(12)),
            ("n_head", Value::from(12)),
            ("layer_norm_epsilon", Value::from(1e-5)),
        ],
        "stablelm" => &[
            ("vocab_size", Value::from(50304)),
            ("hidden_size", Value::from(2560)),
            ("intermediate_size", Value::from(6912)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("num_key_value_heads", Value::from(32)),
            ("max_position_embeddings", Value::from(4096)),
            ("layer_norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(10000)),
            ("use_qkv_bias", Value::from(false)),
            ("qk_layernorm", Value::from(false)),
            ("use_parallel_residual", Value::from(false)),
            ("partial_rotary_factor", Value::from(0.25)),
        ],
        "olmo" => &[
            ("vocab_size", Value::from(50304)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(11008)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("max_position_embeddings", Value::from(2048)),
            ("rope_theta", Value::from(10000.0)),
        ],
        // CohereConfig's and Cohere2Config's (which adds `sliding_window`, below).
        "cohere" | "cohere2" => &[
            ("vocab_size", Value::from(256000)),
            ("hidden_size", Value::from(8192)),
            ("intermediate_size", Value::from(22528)),
            ("num_hidden_layers", Value::from(40)),
            ("num_attention_heads", Value::from(64)),
            ("max_position_embeddings", Value::from(8192)),
            ("layer_norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(10000.0)),
            ("logit_scale", Value::from(0.0625)),
        ],
        "gemma" => &[
            ("vocab_size", Value::from(256000)),
            ("hidden_size", Value::from(3072)),
            ("intermediate_size", Value::from(24576)),
            ("num_hidden_layers", Value::from(28)),
            ("num_attention_heads", Value::from(16)),
            ("num_key_value_heads", Value::from(16)),
            ("head_dim", Value::from(256)),
            ("max_position_embeddings", Value::from(8192)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(10000.0)),
        ],
        "gemma2" => &[
            ("vocab_size", Value::from(256000)),
            ("hidden_size", Value::from(2304)),
            ("intermediate_size", Value::from(9216)),
            ("num_hidden_layers", Value::from(26)),
            ("num_attention_heads", Value::from(8)),
            ("num_key_value_heads", Value::from(4)),
            ("head_dim", Value::from(256)),
            ("max_position_embeddings", Value::from(8192)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(10000.0)),
            ("sliding_window", Value::from(4096)),
            ("attn_logit_softcapping", Value::from(50.0)),
            ("final_logit_softcapping", Value::from(30.0)),
        ],
        "phi3" => &[
            ("vocab_size", Value::from(32064)),
            ("hidden_size", Value::from(3072)),
            ("intermediate_size", Value::from(8192)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("max_position_embeddings", Value::from(4096)),
            ("original_max_position_embeddings", Value::from(4096)),
            ("rms_norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(10000.0)),
            ("partial_rotary_factor", Value::from(1.0)),
        ],
        "phimoe" => &[
            ("vocab_size", Value::from(32064)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(6400)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("num_key_value_heads", Value::from(8)),
            ("max_position_embeddings", Value::from(131072)),
            ("rms_norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(1_000_000.0)),
            ("sliding_window", Value::Null),
            ("num_experts_per_tok", Value::from(2)),
            ("num_local_experts", Value::from(16)),
        ],
        "mixtral" => &[
            ("vocab_size", Value::from(32000)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(14336)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("num_key_value_heads", Value::from(8)),
            ("max_position_embeddings", Value::from(131072)),
            ("rms_norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(1_000_000.0)),
            ("num_local_experts", Value::from(8)),
            ("num_experts_per_tok", Value::from(2)),
        ],
        "qwen2_moe" => &[
            ("vocab_size", Value::from(151936)),
            ("hidden_size", Value::from(2048)),
            ("intermediate_size", Value::from(5632)),
            ("num_hidden_layers", Value::from(24)),
            ("num_attention_heads", Value::from(16)),
            ("max_position_embeddings", Value::from(32768)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(10000.0)),
            ("moe_intermediate_size", Value::from(1408)),
            ("shared_expert_intermediate_size", Value::from(5632)),
            ("num_experts_per_tok", Value::from(4)),
            ("num_experts", Value::from(60)),
        ],
        "qwen3_moe" => &[
            ("vocab_size", Value::from(151936)),
            ("hidden_size", Value::from(2048)),
            ("intermediate_size", Value::from(6144)),
            ("num_hidden_layers", Value::from(24)),
            ("num_attention_heads", Value::from(32)),
            ("num_key_value_heads", Value::from(4)),
            ("max_position_embeddings", Value::from(32768)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(10000.0)),
            ("moe_intermediate_size", Value::from(768)),
            ("num_experts_per_tok", Value::from(8)),
            ("num_experts", Value::from(128)),
        ],
        "granite" => &[
            ("vocab_size", Value::from(32000)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(11008)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("max_position_embeddings", Value::from(2048)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(10000.0)),
            ("embedding_multiplier", Value::from(1.0)),
            ("logits_scaling", Value::from(1.0)),
            ("residual_multiplier", Value::from(1.0)),
            ("attention_multiplier", Value::from(1.0)),
        ],
        // GraniteMoeConfig's and GraniteMoeSharedConfig's (which adds the shared size).
        "granitemoe" | "granitemoeshared" => &[
            ("vocab_size", Value::from(32000)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(11008)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("max_position_embeddings", Value::from(2048)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(10000.0)),
            ("embedding_multiplier", Value::from(1.0)),
            ("logits_scaling", Value::from(1.0)),
            ("residual_multiplier", Value::from(1.0)),
            ("attention_multiplier", Value::from(1.0)),
            ("num_local_experts", Value::from(8)),
            ("num_experts_per_tok", Value::from(2)),
        ],
        "smollm3" => &[
            ("vocab_size", Value::from(128256)),
            ("hidden_size", Value::from(2048)),
            ("intermediate_size", Value::from(11008)),
            ("num_hidden_layers", Value::from(36)),
            ("num_attention_heads", Value::from(16)),
            ("num_key_value_heads", Value::from(4)),
            ("max_position_embeddings", Value::from(32768)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(2_000_000.0)),
        ],
        "olmo2" | "olmo3" => &[
            ("vocab_size", Value::from(50304)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(11008)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("max_position_embeddings", Value::from(2048)),
            ("rms_norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(10000.0)),
        ],
        "olmoe" => &[
            ("vocab_size", Value::from(50304)),
            ("hidden_size", Value::from(2048)),
            ("intermediate_size", Value::from(2048)),
            ("num_hidden_layers", Value::from(16)),
            ("num_attention_heads", Value::from(16)),
            ("max_position_embeddings", Value::from(4096)),
            ("rms_norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(10000.0)),
            ("num_experts", Value::from(64)),
            ("num_experts_per_tok", Value::from(8)),
        ],
        "gpt_oss" => &[
            ("vocab_size", Value::from(201088)),
            ("hidden_size", Value::from(2880)),
            ("intermediate_size", Value::from(2880)),
            ("num_hidden_layers", Value::from(36)),
            ("num_attention_heads", Value::from(64)),
            ("num_key_value_heads", Value::from(8)),
            ("head_dim", Value::from(64)),
            ("num_local_experts", Value::from(128)),
            ("num_experts_per_tok", Value::from(4)),
            ("sliding_window", Value::from(128)),
            ("max_position_embeddings", Value::from(131072)),
            ("rms_norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(150000.0)),
            (
                "rope_scaling",
                serde_json::json!({ "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                    "beta_slow": 1.0, "truncate": false, "original_max_position_embeddings": 4096 }),
            ),
        ],
        "deepseek_v2" => &[
            ("vocab_size", Value::from(32000)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(11008)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("max_position_embeddings", Value::from(2048)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(10000.0)),
            ("first_k_dense_replace", Value::from(0)),
            ("kv_lora_rank", Value::from(512)),
            ("q_lora_rank", Value::from(1536)),
            ("n_group", Value::Null),
            ("n_routed_experts", Value::from(64)),
            ("n_shared_experts", Value::from(2)),
            ("qk_nope_head_dim", Value::from(128)),
            ("qk_rope_head_dim", Value::from(64)),
            ("routed_scaling_factor", Value::from(1.0)),
            ("topk_group", Value::Null),
            ("v_head_dim", Value::from(128)),
            ("num_experts_per_tok", Value::Null),
            ("norm_topk_prob", Value::from(false)),
            ("moe_intermediate_size", Value::from(1407)),
        ],
        "deepseek_v3" => &[
            ("vocab_size", Value::from(129280)),
            ("hidden_size", Value::from(7168)),
            ("intermediate_size", Value::from(18432)),
            ("num_hidden_layers", Value::from(61)),
            ("num_attention_heads", Value::from(128)),
            ("max_position_embeddings", Value::from(4096)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(10000.0)),
            ("first_k_dense_replace", Value::from(3)),
            ("kv_lora_rank", Value::from(512)),
            ("q_lora_rank", Value::from(1536)),
            ("n_group", Value::from(8)),
            ("n_routed_experts", Value::from(256)),
            ("n_shared_experts", Value::from(1)),
            ("qk_nope_head_dim", Value::from(128)),
            ("qk_rope_head_dim", Value::from(64)),
            ("routed_scaling_factor", Value::from(2.5)),
            ("topk_group", Value::from(4)),
            ("v_head_dim", Value::from(128)),
            ("num_experts_per_tok", Value::from(8)),
            ("norm_topk_prob", Value::from(true)),
            ("moe_intermediate_size", Value::from(2048)),
        ],
        "lfm2" => &[
            ("vocab_size", Value::from(65536)),
            ("hidden_size", Value::from(2560)),
            ("intermediate_size", Value::from(12288)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("num_key_value_heads", Value::from(8)),
            ("max_position_embeddings", Value::from(128000)),
            ("norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(1_000_000.0)),
            ("conv_bias", Value::from(false)),
            ("conv_L_cache", Value::from(3)),
            ("block_multiple_of", Value::from(256)),
            ("block_ffn_dim_multiplier", Value::from(1.0)),
            ("block_auto_adjust_ff_dim", Value::from(true)),
        ],
        "arcee" => &[
            ("vocab_size", Value::from(32000)),
            ("hidden_size", Value::from(2560)),
            ("intermediate_size", Value::from(18432)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("max_position_embeddings", Value::from(4096)),
            ("rms_norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(10000.0)),
        ],
        "nemotron" => &[
            ("vocab_size", Value::from(256000)),
            ("hidden_size", Value::from(6144)),
            ("intermediate_size", Value::from(24576)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(48)),
            ("max_position_embeddings", Value::from(4096)),
            ("norm_eps", Value::from(1e-5)),
            ("rope_theta", Value::from(10000.0)),
            ("partial_rotary_factor", Value::from(0.5)),
        ],
        "qwen3_vl_text" => &[
            ("vocab_size", Value::from(151936)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(22016)),
            ("num_hidden_layers", Value::from(32)),
            ("num_attention_heads", Value::from(32)),
            ("num_key_value_heads", Value::from(32)),
            ("head_dim", Value::from(128)),
            ("max_position_embeddings", Value::from(128000)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(5000000.0)),
        ],
        "seed_oss" => &[
            ("vocab_size", Value::from(155136)),
            ("hidden_size", Value::from(4096)),
            ("intermediate_size", Value::from(27648)),
            ("num_hidden_layers", Value::from(64)),
            ("num_attention_heads", Value::from(80)),
            ("num_key_value_heads", Value::from(8)),
            ("max_position_embeddings", Value::from(524288)),
            ("rms_norm_eps", Value::from(1e-6)),
            ("rope_theta", Value::from(10000.0)),
            ("head_dim", Value::from(128)),
        ],
        _ => &[],
    };
    let Some(obj) = c.as_object_mut() else {
        return c;
    };
    if matches!(model_type.as_str(), "gpt2" | "gpt_bigcode") {
        // Their `attribute_map`: a config written with the common names holds GPT-2's.
        for (common, own) in [
            ("hidden_size", "n_embd"),
            ("max_position_embeddings", "n_positions"),
            ("num_attention_heads", "n_head"),
            ("num_hidden_layers", "n_layer"),
        ] {
            if let Some(v) = obj.remove(common) {
                obj.insert(own.to_string(), v);
            }
        }
    }
    for (k, v) in defaults {
        if !obj.contains_key(*k) {
            obj.insert((*k).to_string(), v.clone());
        }
    }
    let missing =
        |o: &serde_json::Map<String, Value>, k: &str| o.get(k).is_none_or(|v| v.is_null());
    if model_type == "olmo3" {
        if missing(obj, "sliding_window") {
            obj.insert("sliding_window".into(), Value::from(4096));
        }
        let n = obj
            .get("num_hidden_layers")
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        if missing(obj, "layer_types") && n <= 1 << 16 {
            let types: Vec<Value> = (0..n)
                .map(|i| {
                    Value::from(if (i + 1) % 4 != 0 {
                        "sliding_attention"
                    } else {
                        "full_attention"
                    })
                })
                .collect();
            obj.insert("layer_types".into(), Value::Array(types));
        }
    }
    if matches!(
        model_type.as_str(),
        "llama"
            | "qwen2"
            | "qwen3"
            | "mixtral"
            | "qwen2_moe"
            | "phi3"
            | "olmo2"
            | "olmo3"
            | "olmoe"
            | "deepseek_v2"
            | "deepseek_v3"
            | "olmo"
            | "phi"
            | "cohere"
            | "cohere2"
            | "granitemoe"
            | "granitemoeshared"
            | "arcee"
            | "nemotron"
    ) && missing(obj, "num_key_value_heads")
    {
        if let Some(h) = obj.get("num_attention_heads").cloned() {
            obj.insert("num_key_value_heads".into(), h);
        }
    }
    if model_type == "granitemoeshared" && !obj.contains_key("shared_intermediate_size") {
        obj.insert("shared_intermediate_size".into(), Value::from(0));
    }
    if model_type == "cohere2" && !obj.contains_key("sliding_window") {
        obj.insert("sliding_window".into(), Value::from(4096));
    }
    if model_type == "cohere" {
        // llama.cpp's CommandR2Model: Command R's config says 8192 but it was trained on 128k,
        // which `model_max_length` holds (Aya 23's configs have none).
        if let Some(v) = obj.get("model_max_length").cloned() {
            obj.insert("max_position_embeddings".into(), v);
        }
    }
    if model_type == "cohere2" {
        // Cohere2Config sets `head_dim = hidden_size // num_attention_heads`.
        let hd = obj
            .get("hidden_size")
            .and_then(|v| v.as_u64())
            .zip(
                obj.get("num_attention_heads")
                    .and_then(|v| v.as_u64())
                    .filter(|&n| n > 0),
            )
            .map(|(h, n)| h / n);
        if let Some(hd) = hd {
            obj.insert("head_dim".into(), Value::from(hd));
        }
    }
    if matches!(model_type.as_str(), "exaone4" | "cohere2") && missing(obj, "layer_types") {
        // Their configs derive the layer types from an integer `sliding_window_pattern`
        // (EXAONE 4: none without a window).
        let n = obj
            .get("num_hidden_layers")
            .and_then(|v| v.as_u64())
            .unwrap_or(0);
        // A pattern string ("LLLG") fails the config class: llama.cpp reads config.json as is.
        let pattern = match obj.get("sliding_window_pattern") {
            None => Some(4),
            Some(v) => v.as_u64(),
        };
        let windowed = model_type == "cohere2" || !missing(obj, "sliding_window");
        if let Some(pattern) = pattern.filter(|&p| windowed && p > 0 && n <= 1 << 16) {
            let types: Vec<Value> = (0..n)
                .map(|i| {
                    Value::from(if (i + 1) % pattern != 0 {
                        "sliding_attention"
                    } else {
                        "full_attention"
                    })
                })
                .collect();
            obj.insert("layer_types".into(), Value::Array(types));
        }
    }
    if model_type == "deepseek_v2" || model_type == "deepseek_v3" {
        // Their configs set `head_dim = qk_rope_head_dim`, whatever the file says.
        if let Some(r) = obj.get("qk_rope_head_dim").cloned() {
            obj.insert("head_dim".into(), r);
        }
    }
    if model_type == "qwen3" && !obj.contains_key("head_dim") {
        obj.insert("head_dim".into(), Value::from(128));
    }
    if matches!(
        model_type.as_str(),
        "llama" | "arcee" | "seed_oss" | "nemotron"
    ) && missing(obj, "head_dim")
    {
        let hd = obj
            .get("hidden_size")
            .and_then(|v| v.as_u64())
            .zip(
                obj.get("num_attention_heads")
                    .and_then(|v| v.as_u64())
                    .filter(|&n| n > 0),
            )
            .map(|(h, n)| h / n);
        if let Some(hd) = hd {
            obj.insert("head_dim".into(), Value::from(hd));
        }
    }
    c
}
