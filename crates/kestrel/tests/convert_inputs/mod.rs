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

pub use cases::{cases, Case};

use std::collections::HashSet;
use std::path::Path;

use half::{bf16, f16};
use kestrel_gguf::models::{test_model, QWEN_TIKTOKEN};
use kestrel_gguf::{GgufFile, Value};
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

fn strings(f: &GgufFile, key: &str) -> Vec<String> {
    match f.metadata().get(key) {
        Some(Value::Array(a)) => a
            .strings()
            .unwrap()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
        _ => panic!("{key} missing"),
    }
}

fn ints(f: &GgufFile, key: &str) -> Vec<i32> {
    match f.metadata().get(key) {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::I32(x) => x,
                Value::U32(x) => x as i32,
                _ => 0,
            })
            .collect(),
        _ => panic!("{key} missing"),
    }
}

fn chat_template(f: &GgufFile) -> String {
    match f.metadata().get("tokenizer.chat_template") {
        Some(Value::String(s)) => String::from_utf8_lossy(s).into_owned(),
        _ => String::new(),
    }
}

/// SmolLM2's tokenizer as Hugging Face files (`tokenizer.json`, `tokenizer_config.json`).
pub fn write_smollm_tokenizer(gguf: &Path, dir: &Path) {
    let f = GgufFile::open(gguf).unwrap();
    let tokens = strings(&f, "tokenizer.ggml.tokens");
    let types = ints(&f, "tokenizer.ggml.token_type");
    let merges = strings(&f, "tokenizer.ggml.merges");
    let mut vocab = serde_json::Map::new();
    for (i, t) in tokens.iter().enumerate() {
        vocab.insert(t.clone(), json!(i));
    }
    let mut added = Vec::new();
    let mut decoder = serde_json::Map::new();
    for (i, t) in tokens.iter().enumerate() {
        if types[i] == 3 {
            let a = json!({ "id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true });
            added.push(a.clone());
            let mut d = a.as_object().unwrap().clone();
            d.remove("id");
            decoder.insert(i.to_string(), Json::Object(d));
        }
    }
    let merges: Vec<Json> = merges
        .iter()
        .map(|m| {
            let (a, b) = m.split_once(' ').unwrap();
            json!([a, b])
        })
        .collect();
    let tj = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": { "type": "Sequence", "pretokenizers": [
            { "type": "Digits", "individual_digits": true },
            { "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true }
        ]},
        "post_processor": { "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true },
        "decoder": { "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true },
        "model": { "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "ignore_merges": false, "vocab": vocab, "merges": merges }
    });
    std::fs::write(dir.join("tokenizer.json"), serde_json::to_vec(&tj).unwrap()).unwrap();
    let tc = json!({
        "add_prefix_space": false,
        "added_tokens_decoder": decoder,
        "bos_token": "<|im_start|>",
        "chat_template": chat_template(&f),
        "clean_up_tokenization_spaces": false,
        "eos_token": "<|im_end|>",
        "model_max_length": 8192,
        "pad_token": "<|im_end|>",
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": "<|endoftext|>",
        "vocab_size": 49152
    });
    std::fs::write(
        dir.join("tokenizer_config.json"),
        serde_json::to_vec_pretty(&tc).unwrap(),
    )
    .unwrap();
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn field_bytes(field: u64, payload: &[u8], out: &mut Vec<u8>) {
    varint(field << 3 | 2, out);
    varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

/// Gemma 3's tokenizer as a SentencePiece `tokenizer.model` (+ `tokenizer_config.json`).
pub fn write_gemma_tokenizer(gguf: &Path, dir: &Path) {
    let f = GgufFile::open(gguf).unwrap();
    let tokens = strings(&f, "tokenizer.ggml.tokens");
    let types = ints(&f, "tokenizer.ggml.token_type");
    let scores: Vec<f32> = match f.metadata().get("tokenizer.ggml.scores") {
        Some(Value::Array(a)) => a.to_f32_vec().unwrap(),
        _ => panic!("scores"),
    };
    let mut model = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let mut p = Vec::new();
        field_bytes(1, t.as_bytes(), &mut p);
        p.push(2 << 3 | 5);
        p.extend_from_slice(&scores[i].to_le_bytes());
        let ty = if t == "<unk>" { 2 } else { types[i] as u64 };
        if ty != 1 {
            varint(3 << 3, &mut p);
            varint(ty, &mut p);
        }
        field_bytes(1, &p, &mut model);
    }
    // trainer_spec: model_type BPE (3 = 2), byte_fallback (35 = true).
    let mut ts = Vec::new();
    varint(3 << 3, &mut ts);
    varint(2, &mut ts);
    varint(35 << 3, &mut ts);
    varint(1, &mut ts);
    field_bytes(2, &ts, &mut model);
    // normalizer_spec: name "identity", add_dummy_prefix false, remove_extra_whitespaces false.
    let mut ns = Vec::new();
    field_bytes(1, b"identity", &mut ns);
    varint(3 << 3, &mut ns);
    varint(0, &mut ns);
    varint(4 << 3, &mut ns);
    varint(0, &mut ns);
    field_bytes(3, &ns, &mut model);
    std::fs::write(dir.join("tokenizer.model"), model).unwrap();
    // As Gemma's own tokenizer_config.json: every control and user-defined token.
    let mut decoder = serde_json::Map::new();
    for (i, t) in tokens.iter().enumerate() {
        if types[i] == 3 || types[i] == 4 {
            decoder.insert(
                i.to_string(),
                json!({ "content": t, "lstrip": false, "normalized": false,
                    "rstrip": false, "single_word": false, "special": types[i] == 3 }),
            );
        }
    }
    let tc = json!({
        "add_bos_token": true,
        "add_eos_token": false,
        "added_tokens_decoder": decoder,
        "bos_token": "<bos>",
        "chat_template": chat_template(&f),
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "spaces_between_special_tokens": false,
        "tokenizer_class": "GemmaTokenizer",
    });
    std::fs::write(
        dir.join("tokenizer_config.json"),
        serde_json::to_vec_pretty(&tc).unwrap(),
    )
    .unwrap();
}

/// Writes `case`'s checkpoint into `dir` (tokenizers from the fetched models).
/// Whether the files `case` is built from have been fetched (Qwen 1's vocabulary is a test model
/// of its own; `test_model` says why not, or panics when the models are required).
pub fn available(case: &Case) -> bool {
    case.model_type != "qwen" || test_model(QWEN_TIKTOKEN).is_some()
}

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

/// A flat test config as Mistral 3's: the text model's keys under `text_config` (a Mistral
/// model), a small Pixtral `vision_config` and the multimodal keys at the top.
fn mistral3_config(flat: Json) -> Json {
    let mut text = flat.clone();
    let top = ["architectures", "torch_dtype"];
    for k in top {
        text.as_object_mut().unwrap().remove(k);
    }
    let text_type = flat
        .get("text_model_type")
        .cloned()
        .unwrap_or(json!("mistral"));
    text.as_object_mut().unwrap().remove("text_model_type");
    text["model_type"] = text_type;
    json!({
        "architectures": flat["architectures"],
        "model_type": "mistral3",
        "torch_dtype": flat["torch_dtype"],
        "image_token_index": 10,
        "multimodal_projector_bias": false,
        "projector_hidden_act": "gelu",
        "spatial_merge_size": 2,
        "vision_feature_layer": -1,
        "text_config": text,
        "vision_config": { "model_type": "pixtral", "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2, "head_dim": 16, "image_size": 64,
            "patch_size": 16, "num_channels": 3, "rope_theta": 10000.0 },
    })
}

/// A flat test config as Qwen3-VL's: the text model's keys under `text_config`
/// (`qwen3_vl_text`), a small vision config with one deepstack layer, and the multimodal
/// keys (and the tied-embedding flag) at the top.
fn qwen3vl_config(flat: Json) -> Json {
    let mut text = flat.clone();
    for k in ["architectures", "torch_dtype", "tie_word_embeddings"] {
        text.as_object_mut().unwrap().remove(k);
    }
    text["model_type"] = json!("qwen3_vl_text");
    json!({
        "architectures": flat["architectures"],
        "model_type": "qwen3_vl",
        "torch_dtype": flat["torch_dtype"],
        "tie_word_embeddings": flat["tie_word_embeddings"],
        "image_token_id": 100, "video_token_id": 101,
        "vision_start_token_id": 102, "vision_end_token_id": 103,
        "text_config": text,
        "vision_config": { "model_type": "qwen3_vl", "depth": 1, "hidden_size": 32,
            "intermediate_size": 64, "num_heads": 2, "in_channels": 3, "patch_size": 16,
            "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64,
            "num_position_embeddings": 64, "deepstack_visual_indexes": [0] },
    })
}

/// StarCoder 2's layers: LayerNorms and every projection with biases, a two-matrix GELU MLP
/// (`c_fc`, `c_proj`), and the final norm's bias.
/// Names of a layer whose every projection and norm has a bias (StarCoder 2, Phi-2).
struct BiasedNames {
    /// The output norm (`model.norm` or Phi-2's `model.final_layernorm`).
    final_norm: &'static str,
    norms: &'static [&'static str],
    out_proj: &'static str,
    up: &'static str,
    down: &'static str,
}

const STARCODER2: BiasedNames = BiasedNames {
    final_norm: "model.norm",
    norms: &["input_layernorm", "post_attention_layernorm"],
    out_proj: "self_attn.o_proj",
    up: "mlp.c_fc",
    down: "mlp.c_proj",
};

/// Phi-2: one norm before its parallel attention and MLP, `dense`/`fc1`/`fc2`, an output bias.
const PHI2: BiasedNames = BiasedNames {
    final_norm: "model.final_layernorm",
    norms: &["input_layernorm"],
    out_proj: "self_attn.dense",
    up: "mlp.fc1",
    down: "mlp.fc2",
};

/// The layers (and the output norm's bias; the caller wrote `model.norm.weight`, renamed here)
/// of a family whose projections and norms all have biases.
fn biased_layers(
    case: &Case,
    vocab: usize,
    rng: &mut Rng,
    t: &mut Vec<Named>,
    names: &BiasedNames,
) {
    let h = case.hidden;
    let hd = case.head_dim.unwrap_or(h / case.heads);
    let (q, kv) = (case.heads * hd, case.kv_heads * hd);
    for (name, _, _) in t.iter_mut() {
        if name == "model.norm.weight" {
            *name = format!("{}.weight", names.final_norm);
        }
    }
    let mut push = |rng: &mut Rng, name: String, shape: Vec<usize>, base: f32, a: f32| {
        let n = shape.iter().product::<usize>();
        t.push((name, shape, (0..n).map(|_| base + rng.uniform(a)).collect()));
    };
    push(rng, format!("{}.bias", names.final_norm), vec![h], 0.0, 0.1);
    if !case.tied && names.final_norm != "model.norm" {
        push(rng, "lm_head.bias".into(), vec![vocab], 0.0, 0.05);
    }
    for l in 0..case.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        for norm in names.norms {
            push(rng, p(&format!("{norm}.weight")), vec![h], 1.0, 0.2);
            push(rng, p(&format!("{norm}.bias")), vec![h], 0.0, 0.1);
        }
        let a = 1.0 / (h as f32).sqrt();
        for (name, rows, cols) in [
            ("self_attn.q_proj", q, h),
            ("self_attn.k_proj", kv, h),
            ("self_attn.v_proj", kv, h),
            (names.out_proj, h, q),
            (names.up, case.ff, h),
            (names.down, h, case.ff),
        ] {
            let a = if cols == h {
                a
            } else {
                1.0 / (cols as f32).sqrt()
            };
            push(rng, p(&format!("{name}.weight")), vec![rows, cols], 0.0, a);
            push(rng, p(&format!("{name}.bias")), vec![rows], 0.0, 0.05);
        }
    }
}

/// A model card (`README.md` with YAML front matter) for some cases: the fields llama.cpp's
/// converter copies into `general.*` (license, languages with Norway's `no`, tags and the
/// pipeline tag, base models as an id, a URL and a mapping, a dataset, names that override the
/// folder's) beside fields it ignores.
fn model_card(case: &str) -> Option<&'static str> {
    match case {
        "llama-bpe" => Some(
            "---\nlicense: apache-2.0\nlicense_name: kestrel-test\nlanguage:\n- en\n- no\n- fr\n\
             tags:\n- text-generation\n- 'llama 3'\npipeline_tag: text-generation\nbase_model:\n\
             - meta-llama/Llama-3.2-1B-Instruct\n- https://huggingface.co/HuggingFaceTB/SmolLM2-135M\n\
             - name: Hand Written\n  author: Someone\n  url: https://example.com/model\n\
             datasets: HuggingFaceFW/fineweb-edu\nmodel_creator: Kestrel Tests\n\
             description: A random-weight test checkpoint.\nlibrary_name: transformers\n\
             model-index:\n- name: x\n  results:\n  - task: {type: text-generation}\n\
             \x20   metrics:\n    - {type: acc, value: 0.5}\n---\n# Test model\n\nNot a real model.\n",
        ),
        "qwen3" => Some(
            "---\nname: Qwen Test\nversion: v2.5\norganization: kestrel\nlicense:\n- mit\n- apache-2.0\n\
             license_link: https://example.com/LICENSE\nlanguage: zh\nurl: https://example.com\n\
             dataset:\n- org/data-v1\n- {name: Mixed, version: '2'}\n---\n",
        ),
        _ => None,
    }
}
