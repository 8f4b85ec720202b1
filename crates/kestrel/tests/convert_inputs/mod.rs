//! Hugging Face checkpoints for the converter tests, written here: random weights (a fixed
//! seed) in safetensors, `config.json` as `transformers` writes it, and real tokenizers rebuilt
//! from the fetched test models: SmolLM2's BPE as a `tokenizer.json`, Gemma 3's SentencePiece
//! as a `tokenizer.model` protobuf.

mod cases;
mod chatglm;
mod deci;
mod deepseek;
mod exaone;
mod falcon_h1;
mod family_parts;
mod fp8;
mod glm4;
mod gpt2;
mod granitehybrid;
mod granitemoe;
mod internlm2;
mod jamba;
mod lfm2;
mod llama_hf;
pub mod lora;
mod mamba;
mod nemotron_h;
mod openelm;
mod phimoe;
mod qwen;
mod stablelm;
mod tokenizers;

pub use cases::{cases, Case};
use family_parts::{biased_layers, mistral3_config, model_card, qwen3vl_config, PHI2, STARCODER2};
pub use tokenizers::{write_gemma_tokenizer, write_smollm_tokenizer};

use std::collections::HashSet;
use std::path::Path;

use half::{bf16, f16};
use kestrel_gguf::models::{test_model, QWEN_TIKTOKEN};
use serde_json::{json, Value as Json};

/// A tensor to write: name, shape (PyTorch order), values.
pub type Named = (String, Vec<usize>, Vec<f32>);

/// Element type of a written tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dt {
    F32,
    F16,
    BF16,
}

impl Dt {
    fn name(self) -> &'static str {
        match self {
            Dt::F32 => "F32",
            Dt::F16 => "F16",
            Dt::BF16 => "BF16",
        }
    }
    fn encode(self, v: f32, out: &mut Vec<u8>) {
        match self {
            Dt::F32 => out.extend_from_slice(&v.to_le_bytes()),
            Dt::F16 => out.extend_from_slice(&f16::from_f32(v).to_bits().to_le_bytes()),
            Dt::BF16 => out.extend_from_slice(&bf16::from_f32(v).to_bits().to_le_bytes()),
        }
    }
}

/// A small deterministic generator (splitmix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-a, a).
    pub fn uniform(&mut self, a: f32) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a
    }
}

/// Writes `tensors` (name → shape, values) as one safetensors file; MXFP4 `*_blocks` and
/// `*_scales` tensors are written as U8 (their values are the bytes).
pub fn write_safetensors(path: &Path, tensors: &[Named], dt: Dt) {
    write_safetensors_fp8(path, tensors, dt, &HashSet::new());
}

/// [`write_safetensors`], the tensors named in `fp8` as `F8_E4M3` (their values are the
/// bytes) and FP8 scales (`*_scale_inv`) as F32.
pub fn write_safetensors_fp8(path: &Path, tensors: &[Named], dt: Dt, fp8: &HashSet<String>) {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({ "format": "pt" }));
    let mut data = Vec::new();
    let mut sorted: Vec<&Named> = tensors.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, shape, vals) in sorted {
        let start = data.len();
        let bytes = name.ends_with("_blocks") || name.ends_with("_scales");
        let f8 = fp8.contains(name);
        let tdt = if name.ends_with("_scale_inv") {
            Dt::F32
        } else {
            dt
        };
        for &v in vals {
            if bytes || f8 {
                data.push(v as u8);
            } else {
                tdt.encode(v, &mut data);
            }
        }
        let dtype = match (bytes, f8) {
            (true, _) => "U8",
            (_, true) => "F8_E4M3",
            _ => tdt.name(),
        };
        header.insert(
            name.clone(),
            json!({ "dtype": dtype, "shape": shape, "data_offsets": [start, data.len()] }),
        );
    }
    let mut h = serde_json::to_vec(&Json::Object(header)).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    std::fs::write(path, out).unwrap();
}

/// Writes the tensors as `shards` files with a `model.safetensors.index.json` (or one
/// `model.safetensors` when `shards == 1`).
pub fn write_weights(dir: &Path, tensors: Vec<Named>, dt: Dt, shards: usize) {
    write_weights_fp8(dir, tensors, dt, shards, &HashSet::new());
}

/// [`write_weights`] with the tensors named in `fp8` as `F8_E4M3`.
pub fn write_weights_fp8(
    dir: &Path,
    tensors: Vec<Named>,
    dt: Dt,
    shards: usize,
    fp8: &HashSet<String>,
) {
    if shards <= 1 {
        write_safetensors_fp8(&dir.join("model.safetensors"), &tensors, dt, fp8);
        return;
    }
    let mut parts: Vec<Vec<Named>> = vec![Vec::new(); shards];
    let mut map = serde_json::Map::new();
    for (i, t) in tensors.into_iter().enumerate() {
        let s = i % shards;
        map.insert(
            t.0.clone(),
            json!(format!("model-{:05}-of-{:05}.safetensors", s + 1, shards)),
        );
        parts[s].push(t);
    }
    for (s, p) in parts.iter().enumerate() {
        write_safetensors_fp8(
            &dir.join(format!("model-{:05}-of-{:05}.safetensors", s + 1, shards)),
            p,
            dt,
            fp8,
        );
    }
    let index = json!({ "metadata": { "total_size": 0 }, "weight_map": map });
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_vec_pretty(&index).unwrap(),
    )
    .unwrap();
}

/// Writes `v` as pretty JSON at `path`.
pub fn write_json(path: &Path, v: &Json) {
    std::fs::write(path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

/// Writes `dir/config.json`: `cfg` with the case's extra keys over it (the families whose
/// writers build their own configs).
pub fn write_config(case: &Case, dir: &Path, mut cfg: Json) {
    for (k, v) in case.extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    write_json(&dir.join("config.json"), &cfg);
}

/// A tensor of `shape` with values `base` ± `a` (the per-family layer writers).
pub fn make(rng: &mut Rng, name: String, shape: Vec<usize>, base: f32, a: f32) -> Named {
    let n = shape.iter().product::<usize>();
    (name, shape, (0..n).map(|_| base + rng.uniform(a)).collect())
}

/// Whether the files `case` is built from have been fetched (Qwen 1's vocabulary is a test model
/// of its own; `test_model` says why not, or panics when the models are required).
pub fn available(case: &Case) -> bool {
    case.model_type != "qwen" || test_model(QWEN_TIKTOKEN).is_some()
}

/// Writes `case`'s checkpoint into `dir` (tokenizers from the fetched models).
pub fn write_case(case: &Case, dir: &Path, smollm: &Path, gemma: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    if let Some(card) = model_card(case.name) {
        std::fs::write(dir.join("README.md"), card).unwrap();
    }
    if case.model_type == "chatglm" {
        chatglm::write_chatglm3(case, dir, gemma);
        return;
    }
    if case.model_type == "qwen" {
        let tiktoken = test_model(QWEN_TIKTOKEN).expect("the Qwen vocabulary (see `available`)");
        qwen::write(case, dir, &tiktoken);
        return;
    }
    let vocab = if matches!(case.name, "llama-hf" | "deci-7b" | "jamba-hf") {
        llama_hf::tokenizer(dir)
    } else if case.spm {
        write_gemma_tokenizer(gemma, dir);
        if case.model_type == "phi3" {
            // Phi-3 ships a tokenizer.json beside tokenizer.model; its converter applies the
            // added tokens from it (one replaces an ordinary piece here).
            let added = json!({ "added_tokens": [
                { "id": 105, "content": "<start_of_turn>", "special": true },
                { "id": 106, "content": "<end_of_turn>", "special": true },
                { "id": 300, "content": "<|placeholder1|>", "special": false },
            ] });
            std::fs::write(dir.join("tokenizer.json"), added.to_string()).unwrap();
        }
        262144
    } else {
        write_smollm_tokenizer(smollm, dir);
        49152
    };
    // A larger vocab_size than the tokenizer's (DeciLM's Llama 3 size): padded tokens.
    let vocab = case.extra["vocab_size"]
        .as_u64()
        .map_or(vocab, |v| v as usize);
    let mut cfg = json!({
        "architectures": [case.arch],
        "model_type": case.model_type,
        "hidden_size": case.hidden,
        "intermediate_size": case.ff,
        "num_attention_heads": case.heads,
        "num_key_value_heads": case.kv_heads,
        "num_hidden_layers": case.layers,
        "vocab_size": vocab,
        "tie_word_embeddings": case.tied,
        "torch_dtype": match case.dt { Dt::F32 => "float32", Dt::F16 => "float16", Dt::BF16 => "bfloat16" },
        "hidden_act": "silu",
    });
    if let Some(hd) = case.head_dim {
        cfg["head_dim"] = json!(hd);
    }
    for (k, v) in case.extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    if case.model_type == "mistral3" {
        cfg = mistral3_config(cfg);
    }
    if case.model_type == "qwen3_vl" {
        cfg = qwen3vl_config(cfg);
    }
    if matches!(case.model_type, "gpt2" | "gpt_bigcode" | "codeshell") {
        cfg = gpt2::config(case, cfg);
    }
    if case.model_type == "exaone" {
        cfg = exaone::config(cfg);
    }
    if case.model_type == "openelm" {
        cfg = openelm::config(case, cfg);
    }
    if case.model_type == "deci" {
        // DeciLM-7B's config counts KV heads per layer only.
        cfg.as_object_mut().unwrap().remove("num_key_value_heads");
    }
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&cfg).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join("generation_config.json"),
        serde_json::to_vec_pretty(
            &json!({ "do_sample": true, "temperature": 0.6, "top_p": 0.9, "top_k": 40 }),
        )
        .unwrap(),
    )
    .unwrap();

    if case.model_type == "hunyuan_v1_dense" {
        // Two EOS ids: HunYuanModel takes the first as the end of turn.
        std::fs::write(
            dir.join("generation_config.json"),
            serde_json::to_vec_pretty(&json!({ "do_sample": true, "eos_token_id": [2, 0] }))
                .unwrap(),
        )
        .unwrap();
    }
    let mut rng = Rng::new(0x6b65_7374 ^ case.name.len() as u64);
    let hd = case.head_dim.unwrap_or(case.hidden / case.heads);
    let q = case.heads * hd;
    let kv = case.kv_heads * hd;
    let gemma = case.model_type.starts_with("gemma");
    let mt = case.model_type;
    let qwen2 = matches!(mt, "qwen2" | "qwen2_moe" | "qwen2_vl");
    let qk_norm = matches!(
        mt,
        "gemma3_text" | "qwen3" | "qwen3_moe" | "exaone4" | "qwen3_vl" | "maincoder"
    );
    let phi3 = mt == "phi3";
    let olmo2 = mt == "olmo2" || mt == "olmo3";
    // Norms after attention and feed-forward only (OLMo 2, EXAONE 4).
    let post_norms = olmo2 || mt == "exaone4";
    let oss = mt == "gpt_oss";
    let mxfp4 = case.extra.get("quantization_config").is_some();
    let n_exp = ["num_local_experts", "num_experts"]
        .iter()
        .find_map(|k| case.extra.get(*k).and_then(|v| v.as_u64()))
        .unwrap_or(0) as usize;
    let moe_ff = case.extra["moe_intermediate_size"]
        .as_u64()
        .map_or(case.ff, |v| v as usize);
    let mut t: Vec<Named> = Vec::new();
    let mat = |rng: &mut Rng, name: String, shape: Vec<usize>, a: f32| {
        let n = shape.iter().product::<usize>();
        let v: Vec<f32> = (0..n).map(|_| rng.uniform(a)).collect();
        (name, shape, v)
    };
    let norm = |rng: &mut Rng, name: String, n: usize| {
        // Gemma's and Nemotron's norms scale by `1 + w`.
        let base = if gemma || mt == "nemotron" { 0.0 } else { 1.0 };
        let v: Vec<f32> = (0..n).map(|_| base + rng.uniform(0.2)).collect();
        (name, vec![n], v)
    };
    t.push(mat(
        &mut rng,
        "model.embed_tokens.weight".into(),
        vec![vocab, case.hidden],
        0.5,
    ));
    t.push(norm(&mut rng, "model.norm.weight".into(), case.hidden));
    if !case.tied {
        t.push(mat(
            &mut rng,
            "lm_head.weight".into(),
            vec![vocab, case.hidden],
            0.1,
        ));
    }
    if mt == "starcoder2" || mt == "phi" {
        let names = if mt == "phi" { &PHI2 } else { &STARCODER2 };
        biased_layers(case, vocab, &mut rng, &mut t, names);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "gpt2" || mt == "gpt_bigcode" || mt == "codeshell" {
        gpt2::tensors(case, vocab, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "stablelm" {
        stablelm::layers(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "lfm2" {
        lfm2::tensors(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "mamba2" {
        mamba::tensors2(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "internlm2" {
        internlm2::tokenizer(dir);
        internlm2::tensors(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "nemotron_h" {
        nemotron_h::tensors(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "falcon_h1" {
        falcon_h1::tensors(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "granitemoehybrid" {
        granitehybrid::tensors(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "jamba" {
        jamba::tensors(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "openelm" {
        openelm::tensors(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "deci" {
        deci::layers_7b(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "nemotron-nas" {
        deci::layers(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "mamba" {
        mamba::tensors(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt == "glm4" || mt == "glm" {
        glm4::tokenizer(dir);
        glm4::layers(case, &mut rng, &mut t);
        write_weights(dir, t, case.dt, case.shards);
        return;
    }
    if mt.starts_with("deepseek") {
        deepseek::layers(case, &mut rng, &mut t);
        let block = case.extra["quantization_config"]["weight_block_size"]
            .as_array()
            .map(|b| {
                (
                    b[0].as_u64().unwrap() as usize,
                    b[1].as_u64().unwrap() as usize,
                )
            });
        let f8 = match block {
            Some(b) => fp8::quantize(&mut t, b),
            None => HashSet::new(),
        };
        write_weights_fp8(dir, t, case.dt, case.shards, &f8);
        return;
    }
    if mt == "phimoe" {
        phimoe::head_biases(case, vocab, &mut rng, &mut t);
    }
    for l in 0..case.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        if mt == "phimoe" {
            phimoe::layer_biases(case, l, &mut rng, &mut t);
        }
        if !post_norms {
            t.push(norm(&mut rng, p("input_layernorm.weight"), case.hidden));
        }
        // Command R's and R7B's blocks are parallel: one norm.
        if mt != "cohere2" && mt != "cohere" {
            t.push(norm(
                &mut rng,
                p("post_attention_layernorm.weight"),
                case.hidden,
            ));
        }
        if post_norms {
            t.push(norm(
                &mut rng,
                p("post_feedforward_layernorm.weight"),
                case.hidden,
            ));
        }
        // Gemma 2 and 3 add norms around the feed-forward; Gemma 1 has Llama's two.
        if gemma && mt != "gemma" {
            t.push(norm(
                &mut rng,
                p("pre_feedforward_layernorm.weight"),
                case.hidden,
            ));
            t.push(norm(
                &mut rng,
                p("post_feedforward_layernorm.weight"),
                case.hidden,
            ));
        }
        let a = 1.0 / (case.hidden as f32).sqrt();
        if phi3 {
            t.push(mat(
                &mut rng,
                p("self_attn.qkv_proj.weight"),
                vec![q + 2 * kv, case.hidden],
                a,
            ));
        } else {
            for (name, rows) in [("q_proj", q), ("k_proj", kv), ("v_proj", kv)] {
                t.push(mat(
                    &mut rng,
                    p(&format!("self_attn.{name}.weight")),
                    vec![rows, case.hidden],
                    a,
                ));
            }
        }
        t.push(mat(
            &mut rng,
            p("self_attn.o_proj.weight"),
            vec![case.hidden, q],
            a,
        ));
        if oss {
            t.push(mat(
                &mut rng,
                p("self_attn.o_proj.bias"),
                vec![case.hidden],
                0.1,
            ));
            t.push(mat(&mut rng, p("self_attn.sinks"), vec![case.heads], 1.0));
        }
        if mt == "pangu_embedded" || mt == "jais2" {
            t.push(mat(
                &mut rng,
                p("self_attn.o_proj.bias"),
                vec![case.hidden],
                0.1,
            ));
        }
        if mt == "granite_swa" {
            t.push(mat(&mut rng, p("self_attn.sinks"), vec![case.heads], 1.0));
        }
        if qwen2 || oss || mt == "seed_oss" || mt == "pangu_embedded" || mt == "jais2" {
            t.push(mat(&mut rng, p("self_attn.q_proj.bias"), vec![q], 0.1));
            t.push(mat(&mut rng, p("self_attn.k_proj.bias"), vec![kv], 0.1));
            t.push(mat(&mut rng, p("self_attn.v_proj.bias"), vec![kv], 0.1));
        }
        if qk_norm {
            t.push(norm(&mut rng, p("self_attn.q_norm.weight"), hd));
            t.push(norm(&mut rng, p("self_attn.k_norm.weight"), hd));
        }
        if mt == "cohere" && case.extra["use_qk_norm"] == true {
            // Command R+: a layer norm per head, weights [heads, head_dim].
            for (name, heads) in [("q_norm", case.heads), ("k_norm", case.kv_heads)] {
                let (n, _, v) = norm(&mut rng, p(&format!("self_attn.{name}.weight")), heads * hd);
                t.push((n, vec![heads, hd], v));
            }
        }
        if mt == "hunyuan_v1_dense" {
            t.push(norm(&mut rng, p("self_attn.query_layernorm.weight"), hd));
            t.push(norm(&mut rng, p("self_attn.key_layernorm.weight"), hd));
        }
        if olmo2 || mt == "olmoe" {
            // OLMo normalizes the whole Q and K rows, not each head.
            t.push(norm(&mut rng, p("self_attn.q_norm.weight"), q));
            t.push(norm(&mut rng, p("self_attn.k_norm.weight"), kv));
        }
        // (name, rows, cols) of one feed-forward block's matrices.
        let ffn = |prefix: &str, ff: usize, names: [&str; 3]| {
            [
                (format!("{prefix}{}.weight", names[0]), ff, case.hidden),
                (format!("{prefix}{}.weight", names[1]), ff, case.hidden),
                (format!("{prefix}{}.weight", names[2]), case.hidden, ff),
            ]
        };
        let mut mats: Vec<(String, usize, usize)> = Vec::new();
        if mt.starts_with("granitemoe") {
            granitemoe::ffn(case, l, &mut rng, &mut t);
        } else if oss {
            let (h, f) = (case.hidden, case.ff);
            t.push(mat(&mut rng, p("mlp.router.bias"), vec![n_exp], 0.1));
            t.push(mat(
                &mut rng,
                p("mlp.experts.gate_up_proj_bias"),
                vec![n_exp, 2 * f],
                0.1,
            ));
            t.push(mat(
                &mut rng,
                p("mlp.experts.down_proj_bias"),
                vec![n_exp, h],
                0.1,
            ));
            mats.push(("mlp.router.weight".into(), n_exp, h));
            if mxfp4 {
                // Random MXFP4 bytes, block scales 2^-9 .. 2^-4 (e8m0 118 .. 123).
                let mut bytes = |name: &str, shape: Vec<usize>, lo: u32, n: u32| {
                    let len = shape.iter().product::<usize>();
                    let v = (0..len)
                        .map(|_| (lo + (rng.uniform(1.0).abs() * n as f32) as u32 % n) as f32)
                        .collect();
                    t.push((p(name), shape, v));
                };
                bytes(
                    "mlp.experts.gate_up_proj_blocks",
                    vec![n_exp, 2 * f, h / 32, 16],
                    0,
                    256,
                );
                bytes(
                    "mlp.experts.gate_up_proj_scales",
                    vec![n_exp, 2 * f, h / 32],
                    118,
                    6,
                );
                bytes(
                    "mlp.experts.down_proj_blocks",
                    vec![n_exp, h, f / 32, 16],
                    0,
                    256,
                );
                bytes(
                    "mlp.experts.down_proj_scales",
                    vec![n_exp, h, f / 32],
                    118,
                    6,
                );
            } else {
                let a = 1.0 / (h as f32).sqrt();
                let b = 1.0 / (f as f32).sqrt();
                t.push(mat(
                    &mut rng,
                    p("mlp.experts.gate_up_proj"),
                    vec![n_exp, h, 2 * f],
                    a,
                ));
                t.push(mat(
                    &mut rng,
                    p("mlp.experts.down_proj"),
                    vec![n_exp, f, h],
                    b,
                ));
            }
        } else if n_exp > 0 {
            let (router, experts, names) = if mt == "mixtral" || mt == "phimoe" {
                (
                    "block_sparse_moe.gate",
                    "block_sparse_moe.experts",
                    ["w1", "w3", "w2"],
                )
            } else {
                (
                    "mlp.gate",
                    "mlp.experts",
                    ["gate_proj", "up_proj", "down_proj"],
                )
            };
            mats.push((format!("{router}.weight"), n_exp, case.hidden));
            for e in 0..n_exp {
                mats.extend(ffn(&format!("{experts}.{e}."), moe_ff, names));
            }
            if let Some(sh) = case.extra["shared_expert_intermediate_size"].as_u64() {
                mats.extend(ffn(
                    "mlp.shared_expert.",
                    sh as usize,
                    ["gate_proj", "up_proj", "down_proj"],
                ));
                mats.push(("mlp.shared_expert_gate.weight".into(), 1, case.hidden));
            }
        } else if phi3 {
            mats.push(("mlp.gate_up_proj.weight".into(), 2 * case.ff, case.hidden));
            mats.push(("mlp.down_proj.weight".into(), case.hidden, case.ff));
        } else if mt == "arcee" || mt == "nemotron" || mt == "jais2" {
            // Arcee's, Nemotron's and Jais 2's feed-forward has no gate: down(act(up(x))).
            mats.push(("mlp.up_proj.weight".into(), case.ff, case.hidden));
            mats.push(("mlp.down_proj.weight".into(), case.hidden, case.ff));
            if mt == "jais2" {
                t.push(mat(&mut rng, p("mlp.up_proj.bias"), vec![case.ff], 0.1));
                t.push(mat(
                    &mut rng,
                    p("mlp.down_proj.bias"),
                    vec![case.hidden],
                    0.1,
                ));
            }
        } else {
            mats.extend(ffn("mlp.", case.ff, ["gate_proj", "up_proj", "down_proj"]));
        }
        for (name, rows, cols) in mats {
            let scale = 1.0 / (cols as f32).sqrt();
            t.push(mat(&mut rng, p(&name), vec![rows, cols], scale));
        }
    }
    if mt == "qwen3_vl" || mt == "mistral3" {
        // The text model of Qwen3VLForConditionalGeneration and Mistral3ForConditional-
        // Generation as transformers saves it, beside vision tensors (left out by converters
        // of the text model).
        for (name, _, _) in &mut t {
            if let Some(rest) = name.strip_prefix("model.") {
                *name = format!("model.language_model.{rest}");
            }
        }
    }
    if mt == "qwen3_vl" {
        t.push(mat(
            &mut rng,
            "model.visual.merger.norm.weight".into(),
            vec![32],
            1.0,
        ));
    }
    if mt == "mistral3" {
        t.push(mat(
            &mut rng,
            "model.vision_tower.ln_pre.weight".into(),
            vec![32],
            1.0,
        ));
        t.push(mat(
            &mut rng,
            "model.multi_modal_projector.linear_1.weight".into(),
            vec![case.hidden, 32],
            0.1,
        ));
    }
    if mt == "nemotron" || mt == "orion" || mt == "jais2" {
        // Nemotron's, Orion's and Jais 2's norms are layer norms with biases.
        let norms: Vec<(String, usize)> = t
            .iter()
            .filter(|(n, _, _)| n.ends_with("layernorm.weight") || n == "model.norm.weight")
            .map(|(n, sh, _)| (n.replace(".weight", ".bias"), sh[0]))
            .collect();
        for (name, n) in norms {
            t.push(mat(&mut rng, name, vec![n], 0.1));
        }
    }
    if mt == "olmo" {
        // OLMo 1's layer norms have no parameters.
        t.retain(|(name, _, _)| !name.ends_with("layernorm.weight") && name != "model.norm.weight");
    }
    if mt == "exaone" {
        exaone::rename(&mut t);
    }
    write_weights(dir, t, case.dt, case.shards);
}
