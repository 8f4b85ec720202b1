//! Phi-3.5-MoE's tensors beyond the common decoder's: LayerNorm biases, Q/K/V/O biases
//! (`attention_bias`), the final norm's and the output's biases (`lm_head_bias`). Its experts
//! are Mixtral's (`block_sparse_moe.experts.{E}.w1/w2/w3`).

use super::{Case, Named, Rng};

/// Appends layer `l`'s biases to `t`.
pub fn layer_biases(case: &Case, l: usize, rng: &mut Rng, t: &mut Vec<Named>) {
    let h = case.hidden;
    let hd = case.head_dim.unwrap_or(h / case.heads);
    let (q, kv) = (case.heads * hd, case.kv_heads * hd);
    for (name, n) in [
        ("input_layernorm", h),
        ("post_attention_layernorm", h),
        ("self_attn.q_proj", q),
        ("self_attn.k_proj", kv),
        ("self_attn.v_proj", kv),
        ("self_attn.o_proj", h),
    ] {
        let v = (0..n).map(|_| rng.uniform(0.1)).collect();
        t.push((format!("model.layers.{l}.{name}.bias"), vec![n], v));
    }
}

/// Appends the final norm's and the output's biases to `t`.
pub fn head_biases(case: &Case, vocab: usize, rng: &mut Rng, t: &mut Vec<Named>) {
    let h = case.hidden;
    t.push((
        "model.norm.bias".into(),
        vec![h],
        (0..h).map(|_| rng.uniform(0.1)).collect(),
    ));
    let v = (0..vocab).map(|_| rng.uniform(0.05)).collect();
    t.push(("lm_head.bias".into(), vec![vocab], v));
}
