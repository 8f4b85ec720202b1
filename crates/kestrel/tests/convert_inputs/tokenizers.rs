//! The fetched test models' tokenizers rewritten as Hugging Face files: SmolLM2's BPE as a
//! `tokenizer.json` (with `tokenizer_config.json`), Gemma 3's SentencePiece as a `tokenizer.model`
//! protobuf.

use std::path::Path;

use kestrel_gguf::{GgufFile, Value};
use serde_json::{json, Value as Json};

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
