//! Apple OpenELM checkpoints (`OpenELMForCausalLM`, remote code on the Hub): `config.json` in
//! its own keys (`model_dim`, `num_transformer_layers`, per-layer `num_query_heads`,
//! `num_kv_heads` and `ffn_multipliers`), tensors under `transformer.`: a fused QKV of each
//! layer's heads, per-head Q/K norms, `ffn.proj_1` (gate and up stacked) and `ffn.proj_2`.

use serde_json::{json, Value as Json};

use super::{Case, Named, Rng};

/// The case's config in OpenELM's keys (the generic Llama ones removed).
pub fn config(case: &Case, mut cfg: Json) -> Json {
    let o = cfg.as_object_mut().unwrap();
    for k in [
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "num_hidden_layers",
        "hidden_act",
    ] {
        o.remove(k);
    }
    o.insert("model_dim".into(), json!(case.hidden));
    o.insert("num_transformer_layers".into(), json!(case.layers));
    cfg
}

/// `make_divisible` of OpenELM's configuration code.
pub fn ffn_dim(mult: f64, dim: usize, divisor: usize) -> usize {
    let v = mult * dim as f64;
    let mut n = ((v + divisor as f64 / 2.0) as usize / divisor * divisor).max(divisor);
    if (n as f64) < 0.9 * v {
        n += divisor;
    }
    n
}

pub fn tensors(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    // The generic embedding and final norm under OpenELM's names.
    for (name, _, _) in t.iter_mut() {
        *name = match name.as_str() {
            "model.embed_tokens.weight" => "transformer.token_embeddings.weight".into(),
            "model.norm.weight" => "transformer.norm.weight".into(),
            other => other.to_string(),
        };
    }
    let h = case.hidden;
    let hd = case.head_dim.unwrap();
    let list = |k: &str| -> Vec<f64> {
        case.extra[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let (heads, kv, mult) = (
        list("num_query_heads"),
        list("num_kv_heads"),
        list("ffn_multipliers"),
    );
    let divisor = case.extra["ffn_dim_divisor"].as_u64().unwrap() as usize;
    let mut push = |rng: &mut Rng, name: String, shape: Vec<usize>, base: f32, a: f32| {
        let n = shape.iter().product::<usize>();
        t.push((name, shape, (0..n).map(|_| base + rng.uniform(a)).collect()));
    };
    for l in 0..case.layers {
        let p = |s: &str| format!("transformer.layers.{l}.{s}");
        let (nh, nkv) = (heads[l] as usize, kv[l] as usize);
        let ff = ffn_dim(mult[l], h, divisor);
        let a = 1.0 / (h as f32).sqrt();
        push(rng, p("attn_norm.weight"), vec![h], 1.0, 0.2);
        push(
            rng,
            p("attn.qkv_proj.weight"),
            vec![(nh + 2 * nkv) * hd, h],
            0.0,
            a,
        );
        push(rng, p("attn.q_norm.weight"), vec![hd], 1.0, 0.2);
        push(rng, p("attn.k_norm.weight"), vec![hd], 1.0, 0.2);
        push(rng, p("attn.out_proj.weight"), vec![h, nh * hd], 0.0, a);
        push(rng, p("ffn_norm.weight"), vec![h], 1.0, 0.2);
        push(rng, p("ffn.proj_1.weight"), vec![2 * ff, h], 0.0, a);
        let b = 1.0 / (ff as f32).sqrt();
        push(rng, p("ffn.proj_2.weight"), vec![h, ff], 0.0, b);
    }
}
