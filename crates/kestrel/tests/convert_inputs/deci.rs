//! DeciLM (Llama 3.1 Nemotron NAS) checkpoints: each layer as its `block_configs` entry makes
//! it in `modeling_decilm.py` — attention with `heads / n_heads_in_group` KV heads, a "linear
//! attention" (`self_attn.linear_attn`, a square matrix) when `replace_with_linear`, no
//! attention and no input norm otherwise when `n_heads_in_group` is null; no feed-forward and no
//! norm before it when `ffn_mult` is null (a dummy layer).

use super::{Case, Named, Rng};

pub fn layers(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    let h = case.hidden;
    let hd = h / case.heads;
    let q = case.heads * hd;
    let mut push = |rng: &mut Rng, name: String, shape: Vec<usize>, base: f32, a: f32| {
        let n = shape.iter().product::<usize>();
        t.push((name, shape, (0..n).map(|_| base + rng.uniform(a)).collect()));
    };
    for l in 0..case.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        let block = &case.extra["block_configs"][l];
        let attn = &block["attention"];
        let a = 1.0 / (h as f32).sqrt();
        match attn["n_heads_in_group"].as_u64() {
            Some(g) => {
                let kv = case.heads / g as usize * hd;
                push(rng, p("input_layernorm.weight"), vec![h], 1.0, 0.2);
                for (name, rows) in [("q_proj", q), ("k_proj", kv), ("v_proj", kv)] {
                    let name = p(&format!("self_attn.{name}.weight"));
                    push(rng, name, vec![rows, h], 0.0, a);
                }
                push(rng, p("self_attn.o_proj.weight"), vec![h, q], 0.0, a);
            }
            None if attn["replace_with_linear"] == true => {
                push(rng, p("input_layernorm.weight"), vec![h], 1.0, 0.2);
                push(rng, p("self_attn.linear_attn.weight"), vec![h, h], 0.0, a);
            }
            None => {}
        }
        if block["ffn"]["ffn_mult"].is_null() {
            continue;
        }
        let f = case.ff;
        push(rng, p("post_attention_layernorm.weight"), vec![h], 1.0, 0.2);
        push(rng, p("mlp.gate_proj.weight"), vec![f, h], 0.0, a);
        push(rng, p("mlp.up_proj.weight"), vec![f, h], 0.0, a);
        let b = 1.0 / (f as f32).sqrt();
        push(rng, p("mlp.down_proj.weight"), vec![h, f], 0.0, b);
    }
}

/// DeciLM-7B: Llama layers with each layer's own KV head count (`num_key_value_heads_per_layer`).
pub fn layers_7b(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    let h = case.hidden;
    let hd = h / case.heads;
    let q = case.heads * hd;
    let mut push = |rng: &mut Rng, name: String, shape: Vec<usize>, base: f32, a: f32| {
        let n = shape.iter().product::<usize>();
        t.push((name, shape, (0..n).map(|_| base + rng.uniform(a)).collect()));
    };
    for l in 0..case.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        let kv = case.extra["num_key_value_heads_per_layer"][l]
            .as_u64()
            .unwrap() as usize
            * hd;
        let a = 1.0 / (h as f32).sqrt();
        push(rng, p("input_layernorm.weight"), vec![h], 1.0, 0.2);
        for (name, rows) in [("q_proj", q), ("k_proj", kv), ("v_proj", kv)] {
            push(
                rng,
                p(&format!("self_attn.{name}.weight")),
                vec![rows, h],
                0.0,
                a,
            );
        }
        push(rng, p("self_attn.o_proj.weight"), vec![h, q], 0.0, a);
        let f = case.ff;
        push(rng, p("post_attention_layernorm.weight"), vec![h], 1.0, 0.2);
        push(rng, p("mlp.gate_proj.weight"), vec![f, h], 0.0, a);
        push(rng, p("mlp.up_proj.weight"), vec![f, h], 0.0, a);
        let b = 1.0 / (f as f32).sqrt();
        push(rng, p("mlp.down_proj.weight"), vec![h, f], 0.0, b);
    }
}
