//! The layers of a StableLM 2 test checkpoint: LayerNorms with biases (one per block when the
//! block is parallel), optional Q/K/V biases, per-head Q/K layer norms (`qk_layernorm`, no
//! biases), a SwiGLU feed-forward, and the final norm's bias.

use super::{Case, Named, Rng};

/// Appends every layer's tensors and `model.norm.bias` to `t`.
pub fn layers(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    let h = case.hidden;
    let hd = case.head_dim.unwrap_or(h / case.heads);
    let (q, kv) = (case.heads * hd, case.kv_heads * hd);
    let flag = |k: &str| case.extra[k].as_bool().unwrap_or(false);
    let parallel = flag("use_parallel_residual");
    let mut push = |rng: &mut Rng, name: String, shape: Vec<usize>, base: f32, a: f32| {
        let n = shape.iter().product::<usize>();
        t.push((name, shape, (0..n).map(|_| base + rng.uniform(a)).collect()));
    };
    push(rng, "model.norm.bias".into(), vec![h], 0.0, 0.1);
    for l in 0..case.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        let norms: &[&str] = if parallel {
            &["input_layernorm"]
        } else {
            &["input_layernorm", "post_attention_layernorm"]
        };
        for norm in norms {
            push(rng, p(&format!("{norm}.weight")), vec![h], 1.0, 0.2);
            push(rng, p(&format!("{norm}.bias")), vec![h], 0.0, 0.1);
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
            if flag("use_qkv_bias") {
                push(
                    rng,
                    p(&format!("self_attn.{name}.bias")),
                    vec![rows],
                    0.0,
                    0.1,
                );
            }
        }
        push(rng, p("self_attn.o_proj.weight"), vec![h, q], 0.0, a);
        if flag("qk_layernorm") {
            for (name, heads) in [("q_layernorm", case.heads), ("k_layernorm", case.kv_heads)] {
                for i in 0..heads {
                    let n = p(&format!("self_attn.{name}.norms.{i}.weight"));
                    push(rng, n, vec![hd], 1.0, 0.2);
                }
            }
        }
        for (name, rows, cols) in [
            ("gate_proj", case.ff, h),
            ("up_proj", case.ff, h),
            ("down_proj", h, case.ff),
        ] {
            let a = 1.0 / (cols as f32).sqrt();
            push(
                rng,
                p(&format!("mlp.{name}.weight")),
                vec![rows, cols],
                0.0,
                a,
            );
        }
    }
}
