//! The layers of a GLM-4-0414 test checkpoint (`Glm4ForCausalLM`): RMS norms before and after
//! attention and the feed-forward (before only for GLM-4 `-hf`, `GlmForCausalLM`), Q/K/V with biases, one fused gate-up matrix; and its
//! tokenizer's `<|user|>` token (the converter takes it as the end of turn), standing in for
//! SmolLM2's `<empty_output>`.

use std::path::Path;

use serde_json::Value as Json;

use super::{Case, Named, Rng};

/// Appends every layer's tensors to `t`.
pub fn layers(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    let h = case.hidden;
    let hd = case.head_dim.unwrap_or(h / case.heads);
    let (q, kv) = (case.heads * hd, case.kv_heads * hd);
    let mut push = |rng: &mut Rng, name: String, shape: Vec<usize>, base: f32, a: f32| {
        let n = shape.iter().product::<usize>();
        t.push((name, shape, (0..n).map(|_| base + rng.uniform(a)).collect()));
    };
    for l in 0..case.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        // GLM-4 `-hf` (`glm`) has Llama's two norms only.
        let norms: &[&str] = if case.model_type == "glm" {
            &["input_layernorm", "post_attention_layernorm"]
        } else {
            &[
                "input_layernorm",
                "post_self_attn_layernorm",
                "post_attention_layernorm",
                "post_mlp_layernorm",
            ]
        };
        for norm in norms {
            push(rng, p(&format!("{norm}.weight")), vec![h], 1.0, 0.2);
        }
        let a = 1.0 / (h as f32).sqrt();
        for (name, rows) in [("q_proj", q), ("k_proj", kv), ("v_proj", kv)] {
            push(
                rng,
                p(&format!("self_attn.{name}.weight")),
                vec![rows, h],
                0.0,
                a,
            );
            push(
                rng,
                p(&format!("self_attn.{name}.bias")),
                vec![rows],
                0.0,
                0.1,
            );
        }
        push(rng, p("self_attn.o_proj.weight"), vec![h, q], 0.0, a);
        push(
            rng,
            p("mlp.gate_up_proj.weight"),
            vec![2 * case.ff, h],
            0.0,
            a,
        );
        let a = 1.0 / (case.ff as f32).sqrt();
        push(rng, p("mlp.down_proj.weight"), vec![h, case.ff], 0.0, a);
    }
}

/// Renames SmolLM2's `<empty_output>` (id 16) to `<|user|>` in the written tokenizer files.
pub fn tokenizer(dir: &Path) {
    let rename = |v: &mut Json| {
        if v.as_str() == Some("<empty_output>") {
            *v = Json::from("<|user|>");
        }
    };
    let tj = dir.join("tokenizer.json");
    let mut j: Json = serde_json::from_slice(&std::fs::read(&tj).unwrap()).unwrap();
    for a in j["added_tokens"].as_array_mut().unwrap() {
        rename(&mut a["content"]);
    }
    let vocab = j["model"]["vocab"].as_object_mut().unwrap();
    let id = vocab.remove("<empty_output>").unwrap();
    vocab.insert("<|user|>".into(), id);
    std::fs::write(&tj, serde_json::to_vec(&j).unwrap()).unwrap();
    let tc = dir.join("tokenizer_config.json");
    let mut c: Json = serde_json::from_slice(&std::fs::read(&tc).unwrap()).unwrap();
    for (_, d) in c["added_tokens_decoder"].as_object_mut().unwrap() {
        rename(&mut d["content"]);
    }
    std::fs::write(&tc, serde_json::to_vec_pretty(&c).unwrap()).unwrap();
}
