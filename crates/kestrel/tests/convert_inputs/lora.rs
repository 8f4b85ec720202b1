//! PEFT LoRA adapters for the test checkpoints, as `peft`'s `save_pretrained` writes them:
//! `adapter_config.json` and `adapter_model.safetensors` with
//! `base_model.model.model.layers.{L}.{self_attn,mlp}.{module}.lora_{A,B}.weight` (Qwen 1's
//! under `transformer.h.{L}.`, InternLM2's under its own module names; `A`: `[rank, in]`, `B`: `[out, rank]`).

use std::path::Path;

use serde_json::json;

use super::{write_safetensors, Case, Dt, Named, Rng};

/// One test adapter: its name, base case, rank, alpha, target modules, element type, and
/// whether it also adapts `lm_head`.
pub struct Adapter {
    pub name: &'static str,
    pub base: &'static str,
    pub rank: usize,
    pub alpha: f32,
    pub targets: &'static [&'static str],
    pub dt: Dt,
    pub head: bool,
    /// An activated LoRA's `alora_invocation_tokens` and the older `invocation_string` (empty:
    /// not written).
    pub invocation: (&'static [u32], &'static str),
}

/// An adapter as a table row: name, base, rank, alpha, targets, element type.
type AdapterRow = (
    &'static str,
    &'static str,
    usize,
    f32,
    &'static [&'static str],
    Dt,
);

/// The adapters the tests convert.
pub fn adapters() -> Vec<Adapter> {
    // One-to-one bases beyond the first seven: attention (and MLP where named as Llama's).
    let more: [AdapterRow; 20] = [
        ("lora-commandr", "command-r", 8, 16.0, &ATTN_MLP, Dt::F32),
        ("lora-olmo", "olmo", 4, 8.0, &ATTN, Dt::F16),
        (
            "lora-phi2",
            "phi2",
            4,
            8.0,
            &["q_proj", "k_proj", "v_proj"],
            Dt::F32,
        ),
        ("lora-stablelm", "stablelm", 8, 16.0, &ATTN_MLP, Dt::BF16),
        ("lora-starcoder2", "starcoder2", 4, 4.0, &ATTN, Dt::F32),
        (
            "lora-cohere2",
            "cohere2",
            4,
            8.0,
            &["q_proj", "v_proj"],
            Dt::F32,
        ),
        ("lora-exaone4", "exaone4", 4, 8.0, &ATTN, Dt::F16),
        ("lora-glm4", "glm4", 4, 8.0, &ATTN, Dt::F32),
        ("lora-mixtral", "mixtral", 4, 8.0, &ATTN, Dt::F32),
        ("lora-qwen", "qwen", 4, 8.0, &QWEN, Dt::BF16),
        (
            "lora-glm-hf",
            "glm-hf",
            4,
            8.0,
            &["q_proj", "v_proj", "gate_up_proj", "down_proj"],
            Dt::F32,
        ),
        (
            "lora-internlm2",
            "internlm2",
            4,
            8.0,
            &["attention.wqkv", "attention.wo", "feed_forward.w2"],
            Dt::F16,
        ),
        (
            "lora-embed",
            "llama-bpe",
            8,
            16.0,
            &["embed_tokens", "q_proj"],
            Dt::F32,
        ),
        // As mergekit-extract-lora writes them: norm vectors beside the pairs.
        (
            "lora-norms",
            "llama-bpe",
            4,
            8.0,
            &["q_proj", "o_proj", "input_layernorm", "norm"],
            Dt::BF16,
        ),
        // Mixture-of-experts adapters: every expert's projections, the router, and Qwen 2
        // MoE's shared expert and its gate.
        (
            "lora-qwen3moe-experts",
            "qwen3moe",
            4,
            8.0,
            &["q_proj", "experts", "router"],
            Dt::F32,
        ),
        (
            "lora-mixtral-experts",
            "mixtral",
            4,
            8.0,
            &["experts", "router"],
            Dt::BF16,
        ),
        (
            "lora-olmoe-experts",
            "olmoe",
            2,
            4.0,
            &["experts", "router", "k_proj"],
            Dt::F32,
        ),
        (
            "lora-phimoe-experts",
            "phimoe",
            4,
            8.0,
            &["experts", "q_proj"],
            Dt::BF16,
        ),
        (
            "lora-qwen2moe-experts",
            "qwen2moe",
            2,
            4.0,
            &[
                "experts",
                "shared_expert",
                "shared_expert_gate",
                "router",
                "o_proj",
            ],
            Dt::F16,
        ),
        // Gemma's norms go through its `1 + w`, as the base's do.
        (
            "lora-gemma2-norms",
            "gemma2",
            2,
            4.0,
            &["q_proj", "input_layernorm", "norm"],
            Dt::BF16,
        ),
    ];
    let more = more
        .into_iter()
        .map(|(name, base, rank, alpha, targets, dt)| Adapter {
            name,
            base,
            rank,
            alpha,
            targets,
            dt,
            head: false,
            invocation: (&[], ""),
        });
    let mut all = vec![
        Adapter {
            name: "lora-llama",
            base: "llama-bpe",
            rank: 8,
            alpha: 16.0,
            targets: &[
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
            ],
            dt: Dt::F32,
            head: false,
            invocation: (&[], ""),
        },
        Adapter {
            name: "lora-gemma3",
            base: "gemma3",
            rank: 32,
            alpha: 8.0,
            targets: &["q_proj", "k_proj", "v_proj", "o_proj"],
            dt: Dt::BF16,
            head: false,
            invocation: (&[], ""),
        },
        Adapter {
            name: "lora-qwen3",
            base: "qwen3",
            rank: 4,
            alpha: 4.0,
            targets: &["k_proj", "down_proj"],
            dt: Dt::F16,
            head: false,
            invocation: (&[], ""),
        },
        Adapter {
            name: "lora-phi3",
            base: "phi3",
            rank: 8,
            alpha: 32.0,
            targets: &["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
            dt: Dt::BF16,
            head: false,
            invocation: (&[], ""),
        },
        Adapter {
            name: "lora-qwen3moe",
            base: "qwen3moe",
            rank: 8,
            alpha: 16.0,
            targets: &["q_proj", "k_proj", "v_proj", "o_proj"],
            dt: Dt::F32,
            head: false,
            invocation: (&[], ""),
        },
        Adapter {
            name: "lora-olmo2",
            base: "olmo2",
            rank: 4,
            alpha: 8.0,
            targets: &[
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
            ],
            dt: Dt::F16,
            head: false,
            invocation: (&[], ""),
        },
        // Gemma 2 ties its output: llama.cpp filters `lm_head` out by name, so its adapter is
        // left out too (not refused).
        Adapter {
            name: "lora-gemma2",
            base: "gemma2",
            rank: 2,
            alpha: 4.0,
            targets: &["q_proj", "v_proj"],
            dt: Dt::F16,
            head: true,
            invocation: (&[], ""),
        },
        // OpenELM: its fused QKV as it is, `proj_1` split into gate and up as the base's.
        Adapter {
            name: "lora-openelm",
            base: "openelm",
            rank: 4,
            alpha: 8.0,
            targets: &["attn.qkv_proj", "attn.out_proj", "ffn.proj_1", "ffn.proj_2"],
            dt: Dt::F32,
            head: false,
            invocation: (&[], ""),
        },
        // Activated LoRA: PEFT's invocation tokens, and the older invocation string that the
        // converter tokenizes with the base's tokenizer.
        Adapter {
            name: "lora-alora",
            base: "llama-bpe",
            rank: 4,
            alpha: 8.0,
            targets: &["q_proj", "k_proj", "v_proj"],
            dt: Dt::BF16,
            head: false,
            invocation: (&[31, 7, 250], "ignored when the tokens are given"),
        },
        Adapter {
            name: "lora-alora-text",
            base: "llama-bpe",
            rank: 4,
            alpha: 8.0,
            targets: &["q_proj", "v_proj"],
            dt: Dt::F32,
            head: false,
            invocation: (&[], "<|start_of_role|>certainty<|end_of_role|> Ok"),
        },
    ];
    all.extend(more);
    all
}

/// Attention's four projections.
const ATTN: [&str; 4] = ["q_proj", "k_proj", "v_proj", "o_proj"];
/// Attention's and the MLP's seven projections.
const ATTN_MLP: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// Qwen 1's five matrices, under `transformer.h.{L}.`.
const QWEN: [&str; 5] = [
    "attn.c_attn",
    "attn.c_proj",
    "mlp.w1",
    "mlp.w2",
    "mlp.c_proj",
];

/// Writes `a` for the base `case` (written at `base_dir`) into `dir`.
pub fn write_adapter(a: &Adapter, case: &Case, base_dir: &Path, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let hd = case.head_dim.unwrap_or(case.hidden / case.heads);
    let (h, q, kv, ff) = (case.hidden, case.heads * hd, case.kv_heads * hd, case.ff);
    let mut rng = Rng::new(0x6c6f_7261 ^ a.name.len() as u64);
    let mut t: Vec<Named> = Vec::new();
    let n_experts = ["num_local_experts", "num_experts"]
        .iter()
        .find_map(|k| case.extra[*k].as_u64())
        .unwrap_or(0) as usize;
    let expert_ff = case.extra["moe_intermediate_size"]
        .as_u64()
        .map_or(ff, |v| v as usize);
    let moe = if matches!(case.model_type, "mixtral" | "phimoe") {
        "block_sparse_moe"
    } else {
        "mlp"
    };
    let pair = |t: &mut Vec<Named>, rng: &mut Rng, p: String, out: usize, inp: usize| {
        for (ab, shape, scale) in [
            ("A", vec![a.rank, inp], 1.0 / (inp as f32).sqrt()),
            ("B", vec![out, a.rank], 0.05),
        ] {
            let n = shape[0] * shape[1];
            let v = (0..n).map(|_| rng.uniform(scale)).collect();
            t.push((format!("{p}.lora_{ab}.weight"), shape, v));
        }
    };
    for l in 0..case.layers {
        for &m in a.targets {
            if case.model_type == "openelm" {
                // Per-layer sizes, under `transformer.layers.{l}`.
                let list = |k: &str| case.extra[k][l].as_f64().unwrap();
                let (nh, nkv) = (
                    list("num_query_heads") as usize,
                    list("num_kv_heads") as usize,
                );
                let divisor = case.extra["ffn_dim_divisor"].as_u64().unwrap() as usize;
                let ff = super::openelm::ffn_dim(list("ffn_multipliers"), h, divisor);
                let (out, inp) = match m {
                    "attn.qkv_proj" => ((nh + 2 * nkv) * hd, h),
                    "attn.out_proj" => (h, nh * hd),
                    "ffn.proj_1" => (2 * ff, h),
                    _ => (h, ff),
                };
                let p = format!("base_model.model.transformer.layers.{l}.{m}");
                pair(&mut t, &mut rng, p, out, inp);
                continue;
            }
            let layer = format!("base_model.model.model.layers.{l}");
            match m {
                // Every expert's three projections (PEFT names them one by one).
                "experts" => {
                    let projs = if moe == "mlp" {
                        [
                            ("gate_proj", expert_ff, h),
                            ("up_proj", expert_ff, h),
                            ("down_proj", h, expert_ff),
                        ]
                    } else {
                        [
                            ("w1", expert_ff, h),
                            ("w2", h, expert_ff),
                            ("w3", expert_ff, h),
                        ]
                    };
                    for e in 0..n_experts {
                        for (proj, out, inp) in projs {
                            pair(
                                &mut t,
                                &mut rng,
                                format!("{layer}.{moe}.experts.{e}.{proj}"),
                                out,
                                inp,
                            );
                        }
                    }
                    continue;
                }
                // The experts' gate and up only (llama.cpp's script cannot stack them).
                "experts-partial" => {
                    for e in 0..n_experts {
                        for proj in ["gate_proj", "up_proj"] {
                            pair(
                                &mut t,
                                &mut rng,
                                format!("{layer}.mlp.experts.{e}.{proj}"),
                                expert_ff,
                                h,
                            );
                        }
                    }
                    continue;
                }
                "router" => {
                    pair(
                        &mut t,
                        &mut rng,
                        format!("{layer}.{moe}.gate"),
                        n_experts,
                        h,
                    );
                    continue;
                }
                "shared_expert_gate" => {
                    pair(
                        &mut t,
                        &mut rng,
                        format!("{layer}.mlp.shared_expert_gate"),
                        1,
                        h,
                    );
                    continue;
                }
                "shared_expert" => {
                    let sff = case.extra["shared_expert_intermediate_size"]
                        .as_u64()
                        .unwrap() as usize;
                    for (proj, out, inp) in [
                        ("gate_proj", sff, h),
                        ("up_proj", sff, h),
                        ("down_proj", h, sff),
                    ] {
                        pair(
                            &mut t,
                            &mut rng,
                            format!("{layer}.mlp.shared_expert.{proj}"),
                            out,
                            inp,
                        );
                    }
                    continue;
                }
                _ => {}
            }
            let (block, out, inp) = match m {
                "attention.wqkv" => ("", q + 2 * kv, h),
                "attention.wo" => ("", h, q),
                "feed_forward.w2" => ("", h, ff),
                "attn.c_attn" => ("", 3 * h, h),
                "attn.c_proj" => ("", h, h),
                "mlp.w1" | "mlp.w2" => ("", ff / 2, h),
                "mlp.c_proj" => ("", h, ff / 2),
                "q_proj" => ("self_attn", q, h),
                "qkv_proj" => ("self_attn", q + 2 * kv, h),
                "gate_up_proj" => ("mlp", 2 * ff, h),
                "k_proj" | "v_proj" => ("self_attn", kv, h),
                "o_proj" => ("self_attn", h, q),
                "gate_proj" | "up_proj" => ("mlp", ff, h),
                _ => ("mlp", h, ff),
            };
            if m == "input_layernorm" || m == "norm" {
                // One vector per layer, or the final norm once.
                if m == "norm" && l > 0 {
                    continue;
                }
                let name = if m == "norm" {
                    "base_model.model.model.norm.weight".to_string()
                } else {
                    format!("base_model.model.model.layers.{l}.input_layernorm.weight")
                };
                t.push((
                    name,
                    vec![h],
                    (0..h).map(|_| 1.0 + rng.uniform(0.2)).collect(),
                ));
                continue;
            }
            if m == "embed_tokens" {
                // PEFT's embedding adapter: `lora_embedding_A` `[rank, vocab]`,
                // `lora_embedding_B` `[hidden, rank]`, once for the model.
                if l > 0 {
                    continue;
                }
                let cfg: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(base_dir.join("config.json")).unwrap())
                        .unwrap();
                let vocab = cfg["vocab_size"].as_u64().unwrap() as usize;
                let p = "base_model.model.model.embed_tokens";
                for (ab, shape) in [("A", vec![a.rank, vocab]), ("B", vec![h, a.rank])] {
                    let v = (0..shape[0] * shape[1]).map(|_| rng.uniform(0.1)).collect();
                    t.push((format!("{p}.lora_embedding_{ab}"), shape, v));
                }
                continue;
            }
            let p = if case.model_type == "internlm2" {
                format!("base_model.model.model.layers.{l}.{m}")
            } else if block.is_empty() {
                format!("base_model.model.transformer.h.{l}.{m}")
            } else {
                format!("base_model.model.model.layers.{l}.{block}.{m}")
            };
            pair(&mut t, &mut rng, p, out, inp);
        }
    }
    if a.head {
        let cfg: serde_json::Value =
            serde_json::from_slice(&std::fs::read(base_dir.join("config.json")).unwrap()).unwrap();
        let vocab = cfg["vocab_size"].as_u64().unwrap() as usize;
        let p = "base_model.model.lm_head";
        for (ab, shape) in [("A", vec![a.rank, h]), ("B", vec![vocab, a.rank])] {
            let v = (0..shape[0] * shape[1])
                .map(|_| rng.uniform(0.05))
                .collect();
            t.push((format!("{p}.lora_{ab}.weight"), shape, v));
        }
    }
    write_safetensors(&dir.join("adapter_model.safetensors"), &t, a.dt);
    let mut cfg = json!({
        "base_model_name_or_path": base_dir.to_string_lossy(),
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": a.rank, "lora_alpha": a.alpha,
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": false,
        "target_modules": a.targets.iter().chain(a.head.then_some(&"lm_head")).collect::<Vec<_>>(), "use_dora": false, "use_rslora": false,
        "inference_mode": true,
    });
    let (tokens, text) = a.invocation;
    if !tokens.is_empty() {
        cfg["alora_invocation_tokens"] = json!(tokens);
    }
    if !text.is_empty() {
        cfg["invocation_string"] = json!(text);
    }
    // As peft's save_pretrained writes it, with the base as a hub id.
    std::fs::write(
        dir.join("README.md"),
        "---\nbase_model: HuggingFaceTB/SmolLM2-135M\nlibrary_name: peft\ntags:\n- lora\n---\n\n\
         # Model Card for Model ID\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("adapter_config.json"),
        serde_json::to_vec_pretty(&cfg).unwrap(),
    )
    .unwrap();
}
