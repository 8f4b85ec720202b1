//! A SentencePiece-style BPE `tokenizer.json` without `tokenizer.model` (what DeciLM-7B, some
//! Jamba and many Llama fine-tunes ship; llama.cpp reads it with `LlamaHfVocab`): `<unk>`, `<s>`,
//! `</s>`, the 256 byte-fallback pieces, some merged pieces, then three added tokens past the
//! model's pieces: one named in `additional_special_tokens`, one marked special in
//! `tokenizer.json` only (not special to `transformers`, so user-defined in llama.cpp's file),
//! one plain.

use std::path::Path;

use serde_json::{json, Value as Json};

/// The merged pieces after the bytes, with the merges that make them.
const PIECES: &[&str] = &[
    "\u{2581}",
    "t",
    "h",
    "e",
    "\u{2581}t",
    "he",
    "\u{2581}the",
    "a",
    "n",
    "d",
    "\u{2581}a",
    "nd",
    "\u{2581}and",
    "\u{fc}",
    "b",
    "r",
    "\u{2581}\u{fc}",
    "be",
    "\u{2581}\u{fc}ber",
    "\u{65e5}",
    "\u{672c}",
    "\u{65e5}\u{672c}",
    "\u{2581}\u{65e5}\u{672c}",
];
const MERGES: &[(&str, &str)] = &[
    ("\u{2581}", "t"),
    ("h", "e"),
    ("\u{2581}t", "he"),
    ("\u{2581}", "a"),
    ("n", "d"),
    ("\u{2581}a", "nd"),
    ("\u{2581}", "\u{fc}"),
    ("b", "e"),
    ("\u{65e5}", "\u{672c}"),
    ("\u{2581}", "\u{65e5}\u{672c}"),
];
/// Added tokens past the pieces: (content, special in tokenizer.json).
const ADDED: &[(&str, bool)] = &[
    ("<|im_start|>", true),
    ("<|im_end|>", true),
    ("<tool>", false),
];

/// Writes `tokenizer.json` and `tokenizer_config.json` into `dir`; returns the vocabulary size
/// (pieces and added tokens).
pub fn tokenizer(dir: &Path) -> usize {
    let mut vocab = serde_json::Map::new();
    let mut pieces: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    pieces.extend((0..=255u32).map(|b| format!("<0x{b:02X}>")));
    pieces.extend(PIECES.iter().map(|p| p.to_string()));
    // "▁über" comes from "▁ü" + "ber" ("be" + "r").
    pieces.push("ber".into());
    for (i, p) in pieces.iter().enumerate() {
        vocab.insert(p.clone(), json!(i));
    }
    let mut merges: Vec<Json> = MERGES.iter().map(|(a, b)| json!([a, b])).collect();
    merges.push(json!(["be", "r"]));
    merges.push(json!(["\u{2581}\u{fc}", "ber"]));
    let token = |id: usize, content: &str, special: bool| {
        json!({ "id": id, "content": content, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": special })
    };
    let mut added = vec![
        token(0, "<unk>", true),
        token(1, "<s>", true),
        token(2, "</s>", true),
    ];
    for (k, (c, s)) in ADDED.iter().enumerate() {
        added.push(token(pieces.len() + k, c, *s));
    }
    let tj = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added,
        "normalizer": { "type": "Sequence", "normalizers": [
            { "type": "Prepend", "prepend": "\u{2581}" },
            { "type": "Replace", "pattern": { "String": " " }, "content": "\u{2581}" } ] },
        "pre_tokenizer": null,
        "post_processor": { "type": "TemplateProcessing",
            "single": [ { "SpecialToken": { "id": "<s>", "type_id": 0 } },
                { "Sequence": { "id": "A", "type_id": 0 } } ],
            "pair": [ { "SpecialToken": { "id": "<s>", "type_id": 0 } },
                { "Sequence": { "id": "A", "type_id": 0 } },
                { "SpecialToken": { "id": "<s>", "type_id": 1 } },
                { "Sequence": { "id": "B", "type_id": 1 } } ],
            "special_tokens": { "<s>": { "id": "<s>", "ids": [1], "tokens": ["<s>"] } } },
        "decoder": { "type": "Sequence", "decoders": [
            { "type": "Replace", "pattern": { "String": "\u{2581}" }, "content": " " },
            { "type": "ByteFallback" }, { "type": "Fuse" },
            { "type": "Strip", "content": " ", "start": 1, "stop": 0 } ] },
        "model": { "type": "BPE", "dropout": null, "unk_token": "<unk>",
            "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": true,
            "byte_fallback": true, "ignore_merges": false, "vocab": vocab, "merges": merges },
    });
    std::fs::write(dir.join("tokenizer.json"), tj.to_string()).unwrap();
    // The unknown token in the serialized-token form, the others as strings.
    let cfg = json!({
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": { "content": "<unk>", "lstrip": false, "normalized": false,
            "rstrip": false, "single_word": false, "__type": "AddedToken" },
        "pad_token": null,
        "additional_special_tokens": ["<|im_start|>"],
        "add_bos_token": true, "add_eos_token": false,
        "legacy": false, "model_max_length": 4096,
        "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}",
    });
    std::fs::write(
        dir.join("tokenizer_config.json"),
        serde_json::to_vec_pretty(&cfg).unwrap(),
    )
    .unwrap();
    pieces.len() + ADDED.len()
}
