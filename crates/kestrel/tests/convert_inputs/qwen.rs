//! A Qwen 1 test checkpoint (`QWenLMHeadModel`): the real tiktoken vocabulary (`qwen.tiktoken`,
//! fetched as a test model) with the remote-code tokenizer the reference converter loads (our
//! stand-in, `fixtures/convert/tokenization_qwen.py`), Qwen's config keys, GPT-2-style names
//! (`transformer.h.{L}.*`), a fused Q/K/V matrix with biases, and a SwiGLU feed-forward whose
//! two halves (`w1` up, `w2` gate) are each `intermediate_size / 2` wide.

use std::path::Path;

use serde_json::json;

use super::{make, write_config, write_json, write_weights, Case, Named, Rng};

/// Qwen 1's vocab_size: 151,643 ranks and 208 special tokens, padded.
const VOCAB: usize = 151_936;

/// Writes the whole checkpoint into `dir`; `tiktoken` is the fetched vocabulary file.
pub fn write(case: &Case, dir: &Path, tiktoken: &Path) {
    std::fs::copy(tiktoken, dir.join("qwen.tiktoken")).unwrap();
    std::fs::write(
        dir.join("tokenization_qwen.py"),
        include_str!("../fixtures/convert/tokenization_qwen.py"),
    )
    .unwrap();
    let tc = json!({
        "model_max_length": 8192,
        "tokenizer_class": "QWenTokenizer",
        "auto_map": { "AutoTokenizer": ["tokenization_qwen.QWenTokenizer", null] },
    });
    write_json(&dir.join("tokenizer_config.json"), &tc);
    let cfg = json!({
        "architectures": [case.arch],
        "model_type": case.model_type,
        "auto_map": { "AutoModelForCausalLM": "modeling_qwen.QWenLMHeadModel" },
        "hidden_size": case.hidden,
        "intermediate_size": case.ff,
        "kv_channels": case.hidden / case.heads,
        "num_attention_heads": case.heads,
        "num_hidden_layers": case.layers,
        "vocab_size": VOCAB,
        "tie_word_embeddings": false,
        "tokenizer_class": "QWenTokenizer",
        "torch_dtype": "bfloat16",
    });
    write_config(case, dir, cfg);
    let mut rng = Rng::new(0x7177_656e);
    let h = case.hidden;
    let half = case.ff / 2;
    let mut t: Vec<Named> = Vec::new();
    let lin = |rng: &mut Rng, name: String, rows: usize, cols: usize| {
        make(rng, name, vec![rows, cols], 0.0, 1.0 / (cols as f32).sqrt())
    };
    t.push(make(
        &mut rng,
        "transformer.wte.weight".into(),
        vec![VOCAB, h],
        0.0,
        0.5,
    ));
    t.push(make(
        &mut rng,
        "transformer.ln_f.weight".into(),
        vec![h],
        1.0,
        0.2,
    ));
    t.push(lin(&mut rng, "lm_head.weight".into(), VOCAB, h));
    for l in 0..case.layers {
        let p = |s: &str| format!("transformer.h.{l}.{s}");
        t.push(make(&mut rng, p("ln_1.weight"), vec![h], 1.0, 0.2));
        t.push(lin(&mut rng, p("attn.c_attn.weight"), 3 * h, h));
        t.push(make(&mut rng, p("attn.c_attn.bias"), vec![3 * h], 0.0, 0.1));
        t.push(lin(&mut rng, p("attn.c_proj.weight"), h, h));
        t.push(make(&mut rng, p("ln_2.weight"), vec![h], 1.0, 0.2));
        t.push(lin(&mut rng, p("mlp.w1.weight"), half, h));
        t.push(lin(&mut rng, p("mlp.w2.weight"), half, h));
        t.push(lin(&mut rng, p("mlp.c_proj.weight"), h, half));
    }
    write_weights(dir, t, case.dt, case.shards);
}
