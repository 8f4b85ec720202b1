//! GPT-2, StarCoder 1 (GPTBigCode) and CodeShell test checkpoints: their own config keys
//! (`n_embd`, `n_head`, ...) and tensor names (`transformer.h.{L}.*`), learned positions (RoPE
//! for CodeShell), a fused QKV matrix (GPT-2's `Conv1D` weights stored `[in, out]`; StarCoder's
//! and CodeShell's `Linear` ones `[out, in]`, with one KV head or `num_query_groups`),
//! LayerNorms and projections with biases, a 4 × width GELU MLP.

use serde_json::{json, Value as Json};

use super::{Case, Named, Rng};

/// `cfg` (written with the common names) as GPT2Config / GPTBigCodeConfig save it.
pub fn config(case: &Case, mut cfg: Json) -> Json {
    let o = cfg.as_object_mut().unwrap();
    for (common, own) in [
        ("hidden_size", "n_embd"),
        ("num_attention_heads", "n_head"),
        ("num_hidden_layers", "n_layer"),
    ] {
        let v = o.remove(common).unwrap();
        o.insert(own.into(), v);
    }
    for k in ["intermediate_size", "num_key_value_heads", "hidden_act"] {
        o.remove(k);
    }
    if case.model_type == "gpt2" {
        o.insert("activation_function".into(), json!("gelu_new"));
    } else if case.model_type == "codeshell" {
        o.insert("activation_function".into(), json!("gelu_pytorch_tanh"));
        o.insert("num_query_groups".into(), json!(case.kv_heads));
        o.insert("group_query_attention".into(), json!(true));
        o.insert("position_embedding_type".into(), json!("rope"));
    } else {
        o.insert("activation_function".into(), json!("gelu_pytorch_tanh"));
        o.insert("multi_query".into(), json!(true));
    }
    cfg
}

/// Every tensor of the checkpoint (`t` is cleared first).
pub fn tensors(case: &Case, vocab: usize, rng: &mut Rng, t: &mut Vec<Named>) {
    t.clear();
    let h = case.hidden;
    let hd = h / case.heads;
    let gpt2 = case.model_type == "gpt2";
    let n_pos = case.extra["n_positions"].as_u64().unwrap() as usize;
    let mut push = |rng: &mut Rng, name: String, shape: Vec<usize>, base: f32, a: f32| {
        let n = shape.iter().product::<usize>();
        t.push((name, shape, (0..n).map(|_| base + rng.uniform(a)).collect()));
    };
    push(
        rng,
        "transformer.wte.weight".into(),
        vec![vocab, h],
        0.0,
        0.5,
    );
    if case.model_type != "codeshell" {
        push(
            rng,
            "transformer.wpe.weight".into(),
            vec![n_pos, h],
            0.0,
            0.1,
        );
    }
    push(rng, "transformer.ln_f.weight".into(), vec![h], 1.0, 0.2);
    push(rng, "transformer.ln_f.bias".into(), vec![h], 0.0, 0.1);
    if !case.tied {
        push(rng, "lm_head.weight".into(), vec![vocab, h], 0.0, 0.1);
    }
    // One KV head for StarCoder (multi-query), every head for GPT-2, the query groups for
    // CodeShell.
    let qkv = if gpt2 {
        3 * h
    } else if case.model_type == "codeshell" {
        h + 2 * case.kv_heads * hd
    } else {
        h + 2 * hd
    };
    for l in 0..case.layers {
        let p = |s: &str| format!("transformer.h.{l}.{s}");
        for norm in ["ln_1", "ln_2"] {
            push(rng, p(&format!("{norm}.weight")), vec![h], 1.0, 0.2);
            push(rng, p(&format!("{norm}.bias")), vec![h], 0.0, 0.1);
        }
        for (name, out, inp) in [
            ("attn.c_attn", qkv, h),
            ("attn.c_proj", h, h),
            ("mlp.c_fc", case.ff, h),
            ("mlp.c_proj", h, case.ff),
        ] {
            let a = 1.0 / (inp as f32).sqrt();
            let shape = if gpt2 { vec![inp, out] } else { vec![out, inp] };
            push(rng, p(&format!("{name}.weight")), shape, 0.0, a);
            push(rng, p(&format!("{name}.bias")), vec![out], 0.0, 0.1);
        }
    }
}
