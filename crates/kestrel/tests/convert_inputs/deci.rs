//! DeciLM (Llama 3.1 Nemotron NAS) checkpoints: each layer as its `block_configs` entry makes
//! it in `modeling_decilm.py` — attention with `heads / n_heads_in_group` KV heads, a "linear
//! attention" (`self_attn.linear_attn`, a square matrix) when `replace_with_linear`, no
//! attention and no input norm otherwise when `n_heads_in_group` is null; no feed-forward and no
//! norm before it when `ffn_mult` is null (a dummy layer).

use super::{make, Case, Named, Rng};

/// Writes `name` of `shape`, values `base` ± `a`.
fn push(t: &mut Vec<Named>, rng: &mut Rng, name: String, shape: Vec<usize>, base: f32, a: f32) {
    t.push(make(rng, name, shape, base, a));
}

/// Layer `l`'s norm and attention with `kv` KV heads.
fn attention(case: &Case, l: usize, kv: usize, rng: &mut Rng, t: &mut Vec<Named>) {
    let h = case.hidden;
    let hd = h / case.heads;
    let (q, kv) = (case.heads * hd, kv * hd);
    let p = |s: &str| format!("model.layers.{l}.{s}");
    let a = 1.0 / (h as f32).sqrt();
    push(t, rng, p("input_layernorm.weight"), vec![h], 1.0, 0.2);
    for (name, rows) in [("q_proj", q), ("k_proj", kv), ("v_proj", kv)] {
        push(
            t,
            rng,
            p(&format!("self_attn.{name}.weight")),
            vec![rows, h],
            0.0,
            a,
        );
    }
    push(t, rng, p("self_attn.o_proj.weight"), vec![h, q], 0.0, a);
}

/// Layer `l`'s norm and gated feed-forward.
fn ffn(case: &Case, l: usize, rng: &mut Rng, t: &mut Vec<Named>) {
    let (h, f) = (case.hidden, case.ff);
    let p = |s: &str| format!("model.layers.{l}.{s}");
    let a = 1.0 / (h as f32).sqrt();
    push(
        t,
        rng,
        p("post_attention_layernorm.weight"),
        vec![h],
        1.0,
        0.2,
    );
    push(t, rng, p("mlp.gate_proj.weight"), vec![f, h], 0.0, a);
    push(t, rng, p("mlp.up_proj.weight"), vec![f, h], 0.0, a);
    push(
        t,
        rng,
        p("mlp.down_proj.weight"),
        vec![h, f],
        0.0,
        1.0 / (f as f32).sqrt(),
    );
}

pub fn layers(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    let h = case.hidden;
    for l in 0..case.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        let block = &case.extra["block_configs"][l];
        let attn = &block["attention"];
        match attn["n_heads_in_group"].as_u64() {
            Some(g) => attention(case, l, case.heads / g as usize, rng, t),
            None if attn["replace_with_linear"] == true => {
                let a = 1.0 / (h as f32).sqrt();
                push(t, rng, p("input_layernorm.weight"), vec![h], 1.0, 0.2);
                push(
                    t,
                    rng,
                    p("self_attn.linear_attn.weight"),
                    vec![h, h],
                    0.0,
                    a,
                );
            }
            None => {}
        }
        if !block["ffn"]["ffn_mult"].is_null() {
            ffn(case, l, rng, t);
        }
    }
}

/// DeciLM-7B: Llama layers with each layer's own KV head count (`num_key_value_heads_per_layer`).
pub fn layers_7b(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    for l in 0..case.layers {
        let kv = case.extra["num_key_value_heads_per_layer"][l]
            .as_u64()
            .unwrap() as usize;
        attention(case, l, kv, rng, t);
        ffn(case, l, rng, t);
    }
}
