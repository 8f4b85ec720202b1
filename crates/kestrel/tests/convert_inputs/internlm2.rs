//! An InternLM2 test checkpoint (`InternLM2ForCausalLM`): its own tensor names, the fused
//! `attention.wqkv` (groups of `q_per_kv` query heads, one key head, one value head), and a
//! chat end of turn `<|im_end|>` among the added tokens (which the converter makes the EOS).

use std::path::Path;

use super::{make, Case, Named, Rng};

/// Renames the embedding and output `t` holds to InternLM2's names and appends every layer's
/// tensors.
pub fn tensors(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    for (name, _, _) in t.iter_mut() {
        match name.as_str() {
            "model.embed_tokens.weight" => *name = "model.tok_embeddings.weight".into(),
            "lm_head.weight" => *name = "output.weight".into(),
            _ => {}
        }
    }
    let h = case.hidden;
    let hd = h / case.heads;
    let q_per_kv = case.heads / case.kv_heads;
    let lin = |rng: &mut Rng, name: String, rows: usize, cols: usize| {
        make(rng, name, vec![rows, cols], 0.0, 1.0 / (cols as f32).sqrt())
    };
    for l in 0..case.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        t.push(make(rng, p("attention_norm.weight"), vec![h], 1.0, 0.2));
        let qkv = case.kv_heads * (q_per_kv + 2) * hd;
        t.push(lin(rng, p("attention.wqkv.weight"), qkv, h));
        t.push(lin(rng, p("attention.wo.weight"), h, h));
        t.push(make(rng, p("ffn_norm.weight"), vec![h], 1.0, 0.2));
        t.push(lin(rng, p("feed_forward.w1.weight"), case.ff, h));
        t.push(lin(rng, p("feed_forward.w3.weight"), case.ff, h));
        t.push(lin(rng, p("feed_forward.w2.weight"), h, case.ff));
    }
}

/// Makes the Gemma tokenizer's end of turn (id 106) InternLM2's `<|im_end|>`.
pub fn tokenizer(dir: &Path) {
    let path = dir.join("tokenizer_config.json");
    let mut tc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    tc["added_tokens_decoder"]["106"]["content"] = "<|im_end|>".into();
    std::fs::write(&path, serde_json::to_vec_pretty(&tc).unwrap()).unwrap();
}
