//! The layers of a DeepSeek V2/V3 test checkpoint: latent attention (V2-Lite's plain `q_proj`
//! or V3's low-rank `q_a_proj`/`q_b_proj`), `first_k_dense_replace` dense layers, then routed
//! experts with shared ones and V3's selection bias, and V3's multi-token-prediction block past
//! the last layer (which converters leave out).

use super::{Case, Named, Rng};

fn dim(case: &Case, key: &str) -> usize {
    case.extra[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{}: no {key}", case.name)) as usize
}

/// Appends every layer's tensors (and the prediction block) to `t`.
pub fn layers(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    let h = case.hidden;
    let heads = case.heads;
    let nope = dim(case, "qk_nope_head_dim");
    let rope = dim(case, "qk_rope_head_dim");
    let v = dim(case, "v_head_dim");
    let kv_lora = dim(case, "kv_lora_rank");
    let q_lora = case.extra["q_lora_rank"].as_u64().map(|q| q as usize);
    let experts = dim(case, "n_routed_experts");
    let shared = dim(case, "n_shared_experts");
    let moe_ff = dim(case, "moe_intermediate_size");
    let dense = dim(case, "first_k_dense_replace");
    let v3 = case.model_type == "deepseek_v3";
    let mut mat = |rng: &mut Rng, name: String, shape: Vec<usize>| {
        let a = 1.0 / (*shape.last().unwrap() as f32).sqrt();
        let n = shape.iter().product::<usize>();
        t.push((name, shape, (0..n).map(|_| rng.uniform(a)).collect()));
    };
    let norms =
        |rng: &mut Rng, n: usize| -> Vec<f32> { (0..n).map(|_| 1.0 + rng.uniform(0.2)).collect() };
    let mut extra: Vec<Named> = Vec::new();
    for l in 0..case.layers + usize::from(v3) {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        if l == case.layers {
            // V3's prediction block: a few of its tensors are enough to be skipped.
            mat(rng, p("eh_proj.weight"), vec![h, 2 * h]);
            extra.push((p("enorm.weight"), vec![h], norms(rng, h)));
            extra.push((p("hnorm.weight"), vec![h], norms(rng, h)));
            mat(rng, p("mlp.experts.0.gate_proj.weight"), vec![moe_ff, h]);
            break;
        }
        extra.push((p("input_layernorm.weight"), vec![h], norms(rng, h)));
        extra.push((p("post_attention_layernorm.weight"), vec![h], norms(rng, h)));
        match q_lora {
            Some(q) => {
                mat(rng, p("self_attn.q_a_proj.weight"), vec![q, h]);
                extra.push((p("self_attn.q_a_layernorm.weight"), vec![q], norms(rng, q)));
                mat(
                    rng,
                    p("self_attn.q_b_proj.weight"),
                    vec![heads * (nope + rope), q],
                );
            }
            None => mat(
                rng,
                p("self_attn.q_proj.weight"),
                vec![heads * (nope + rope), h],
            ),
        }
        mat(
            rng,
            p("self_attn.kv_a_proj_with_mqa.weight"),
            vec![kv_lora + rope, h],
        );
        extra.push((
            p("self_attn.kv_a_layernorm.weight"),
            vec![kv_lora],
            norms(rng, kv_lora),
        ));
        mat(
            rng,
            p("self_attn.kv_b_proj.weight"),
            vec![heads * (nope + v), kv_lora],
        );
        mat(rng, p("self_attn.o_proj.weight"), vec![h, heads * v]);
        let ffn = |mat: &mut dyn FnMut(&mut Rng, String, Vec<usize>),
                   rng: &mut Rng,
                   pre: String,
                   ff: usize| {
            mat(rng, format!("{pre}gate_proj.weight"), vec![ff, h]);
            mat(rng, format!("{pre}up_proj.weight"), vec![ff, h]);
            mat(rng, format!("{pre}down_proj.weight"), vec![h, ff]);
        };
        if l < dense {
            ffn(&mut mat, rng, p("mlp."), case.ff);
            continue;
        }
        mat(rng, p("mlp.gate.weight"), vec![experts, h]);
        if v3 {
            let b = (0..experts).map(|_| rng.uniform(0.5)).collect();
            extra.push((p("mlp.gate.e_score_correction_bias"), vec![experts], b));
        }
        for e in 0..experts {
            ffn(&mut mat, rng, p(&format!("mlp.experts.{e}.")), moe_ff);
        }
        ffn(&mut mat, rng, p("mlp.shared_experts."), moe_ff * shared);
    }
    t.extend(extra);
}
