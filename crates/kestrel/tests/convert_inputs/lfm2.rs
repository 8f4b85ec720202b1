//! The tensors of LFM2 test checkpoints (`Lfm2ForCausalLM`): `model.embedding_norm` as the
//! final norm, then per layer an `operator_norm` and either a short convolution (`conv.in_proj`
//! to three times the width, a depthwise `conv.conv` of `conv_L_cache` taps, `conv.out_proj`) or
//! attention with per-head `q_layernorm` / `k_layernorm`, and a SwiGLU feed-forward
//! (`feed_forward.w1` gate, `w3` up, `w2` down) whose width the model computes from `block_*`.

use super::{make, Case, Named, Rng};

/// The feed-forward width `Lfm2MLP` uses.
fn ff_width(case: &Case) -> usize {
    let e = &case.extra;
    let mut ff = case.ff;
    if e["block_auto_adjust_ff_dim"].as_bool().unwrap() {
        ff = 2 * ff / 3;
        if let Some(m) = e["block_ffn_dim_multiplier"].as_f64() {
            ff = (m * ff as f64) as usize;
        }
        let multiple = e["block_multiple_of"].as_u64().unwrap() as usize;
        ff = multiple * ff.div_ceil(multiple);
    }
    ff
}

/// Renames the final norm `t` holds and appends every layer's tensors.
pub fn tensors(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    for (name, _, _) in t.iter_mut() {
        if name == "model.norm.weight" {
            *name = "model.embedding_norm.weight".into();
        }
    }
    let h = case.hidden;
    let hd = case.head_dim.unwrap_or(h / case.heads);
    let (q, kv) = (case.heads * hd, case.kv_heads * hd);
    let ff = ff_width(case);
    let taps = case.extra["conv_L_cache"].as_u64().unwrap() as usize;
    let types = case.extra["layer_types"].as_array().unwrap();
    let s = |n: usize| 1.0 / (n as f32).sqrt();
    for (l, ty) in types.iter().enumerate().take(case.layers) {
        let p = |x: &str| format!("model.layers.{l}.{x}");
        t.push(make(rng, p("operator_norm.weight"), vec![h], 1.0, 0.2));
        if ty == "conv" {
            t.push(make(
                rng,
                p("conv.in_proj.weight"),
                vec![3 * h, h],
                0.0,
                s(h),
            ));
            t.push(make(rng, p("conv.conv.weight"), vec![h, 1, taps], 0.0, 0.5));
            t.push(make(rng, p("conv.out_proj.weight"), vec![h, h], 0.0, s(h)));
        } else {
            t.push(make(
                rng,
                p("self_attn.q_proj.weight"),
                vec![q, h],
                0.0,
                s(h),
            ));
            t.push(make(
                rng,
                p("self_attn.k_proj.weight"),
                vec![kv, h],
                0.0,
                s(h),
            ));
            t.push(make(
                rng,
                p("self_attn.v_proj.weight"),
                vec![kv, h],
                0.0,
                s(h),
            ));
            t.push(make(
                rng,
                p("self_attn.out_proj.weight"),
                vec![h, q],
                0.0,
                s(q),
            ));
            t.push(make(
                rng,
                p("self_attn.q_layernorm.weight"),
                vec![hd],
                1.0,
                0.2,
            ));
            t.push(make(
                rng,
                p("self_attn.k_layernorm.weight"),
                vec![hd],
                1.0,
                0.2,
            ));
        }
        t.push(make(rng, p("ffn_norm.weight"), vec![h], 1.0, 0.2));
        t.push(make(
            rng,
            p("feed_forward.w1.weight"),
            vec![ff, h],
            0.0,
            s(h),
        ));
        t.push(make(
            rng,
            p("feed_forward.w3.weight"),
            vec![ff, h],
            0.0,
            s(h),
        ));
        t.push(make(
            rng,
            p("feed_forward.w2.weight"),
            vec![h, ff],
            0.0,
            s(ff),
        ));
    }
}
