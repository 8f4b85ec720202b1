//! The test checkpoints: one `Case` per family and variant (sizes, `config.json` keys), small
//! enough to convert in a second, shaped so that every rule of the family's conversion applies.

use serde_json::{json, Value as Json};

use super::Dt;

mod llama_like;
mod mixture_of_experts;
mod other_dense;
mod state_space;

/// One test checkpoint: its family settings.
#[derive(Clone)]
pub struct Case {
    pub name: &'static str,
    pub arch: &'static str,
    pub model_type: &'static str,
    pub spm: bool,
    pub dt: Dt,
    pub shards: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: Option<usize>,
    pub layers: usize,
    pub ff: usize,
    pub tied: bool,
    pub extra: Json,
}

/// The checkpoints the tests convert.
pub fn cases() -> Vec<Case> {
    let mut all = llama_like::cases();
    all.extend(other_dense::cases());
    all.extend(mixture_of_experts::cases());
    all.extend(state_space::cases());
    // Mamba 2 with two groups: the gated norm stored as [2, 64] (checked against llama.cpp's
    // bytes only: transformers' reference path normalizes over all of d_inner).
    let mut g2 = all
        .iter()
        .find(|c| c.name == "mamba2")
        .expect("the mamba2 case")
        .clone();
    g2.name = "mamba2-g2";
    g2.extra["n_groups"] = json!(2);
    all.push(g2);
    // Nemotron 3 Super's shape, small: nemotron-h-moe with its experts in a latent space of 32
    // (`fc1_latent_proj` down, `fc2_latent_proj` up), in one shard.
    let mut latent = all
        .iter()
        .find(|c| c.name == "nemotron-h-moe")
        .unwrap()
        .clone();
    latent.name = "nemotron-h-latent";
    latent.shards = 1;
    latent.extra["moe_latent_size"] = json!(32);
    all.push(latent.clone());
    // Nemotron 3 Super's multi-token-prediction head (one NextN block, written as a last layer).
    let mut mtp = latent;
    mtp.name = "nemotron-h-mtp";
    mtp.extra["num_nextn_predict_layers"] = json!(1);
    all.push(mtp);
    // A Llama whose SentencePiece-style vocabulary comes as tokenizer.json alone
    // (llama.cpp's `LlamaHfVocab`).
    let mut hf = all.iter().find(|c| c.name == "llama-bpe").unwrap().clone();
    hf.name = "llama-hf";
    hf.shards = 1;
    hf.extra = json!({ "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096, "bos_token_id": 1, "eos_token_id": 2 });
    all.push(hf);
    // Jamba likewise (its converter then writes `add_space_prefix` false).
    let mut jamba = all.iter().find(|c| c.name == "jamba").unwrap().clone();
    jamba.name = "jamba-hf";
    jamba.spm = false;
    all.push(jamba);
    all.push(Case {
        name: "deci-7b",
        arch: "DeciLMForCausalLM",
        model_type: "deci",
        spm: false,
        dt: Dt::BF16,
        shards: 1,
        hidden: 64,
        heads: 4,
        kv_heads: 4,
        head_dim: None,
        layers: 3,
        ff: 160,
        tied: false,
        // DeciLM-7B's shape, small: 4, 2 and 1 KV heads, a Llama HF vocabulary.
        extra: json!({ "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
            "max_position_embeddings": 8192, "num_key_value_heads_per_layer": [4, 2, 1],
            "bos_token_id": 1, "eos_token_id": 2 }),
    });
    all.push(Case {
        name: "qwen",
        arch: "QWenLMHeadModel",
        model_type: "qwen",
        spm: false,
        dt: Dt::BF16,
        shards: 1,
        hidden: 32,
        heads: 4,
        kv_heads: 4,
        head_dim: None,
        layers: 2,
        ff: 96,
        tied: false,
        // Qwen-7B's config keys (`qwen.rs` writes the checkpoint around the real vocabulary).
        extra: json!({ "layer_norm_epsilon": 1e-6, "max_position_embeddings": 8192,
            "seq_length": 8192, "rotary_emb_base": 10000, "rotary_pct": 1.0, "no_bias": true,
            "scale_attn_weights": true, "use_dynamic_ntk": true, "use_logn_attn": true,
            "bf16": true, "fp16": false, "fp32": false, "emb_dropout_prob": 0.0,
            "attn_dropout_prob": 0.0, "initializer_range": 0.02, "use_cache": true,
            "use_flash_attn": "auto", "softmax_in_fp32": false }),
    });
    all.push(Case {
        name: "chatglm3",
        arch: "ChatGLMModel",
        model_type: "chatglm",
        spm: true,
        dt: Dt::F16,
        shards: 1,
        hidden: 32,
        heads: 4,
        kv_heads: 2,
        head_dim: None,
        layers: 2,
        ff: 48,
        tied: false,
        // ChatGLM3-6B's keys (`chatglm.rs` writes the checkpoint); Gemma's 262144 pieces and
        // the nine specials, padded as ChatGLM3 pads its vocabulary.
        extra: json!({ "padded_vocab_size": 262160, "seq_length": 8192,
            "layernorm_epsilon": 1e-5, "add_qkv_bias": true, "add_bias_linear": false,
            "apply_query_key_layer_scaling": true, "apply_residual_connection_post_layernorm": false,
            "attention_softmax_in_fp32": true, "original_rope": true, "post_layer_norm": true,
            "rmsnorm": true, "use_cache": true, "eos_token_id": 2, "pad_token_id": 0 }),
    });
    all.push(Case {
        name: "glm-hf",
        arch: "GlmForCausalLM",
        model_type: "glm",
        spm: false,
        dt: Dt::BF16,
        shards: 1,
        hidden: 64,
        heads: 4,
        kv_heads: 2,
        head_dim: Some(16),
        layers: 2,
        ff: 96,
        tied: false,
        // GLM-4-9B-chat-hf's keys: the RMS epsilon and RoPE base that llama.cpp's ChatGLM
        // converter leaves for its own.
        extra: json!({ "rope_theta": 10000.0, "rms_norm_eps": 1.5625e-7,
            "max_position_embeddings": 4096, "partial_rotary_factor": 0.5,
            "attention_bias": true, "pad_token_id": 0, "eos_token_id": [0, 16] }),
    });
    all
}
