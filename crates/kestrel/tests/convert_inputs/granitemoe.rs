//! Granite MoE's feed-forward as `transformers` saves it: a router, the experts' fused
//! gate-and-up rows (`block_sparse_moe.input_linear`, `[experts, 2 · ff, hidden]`) and down
//! projections (`output_linear`, `[experts, hidden, ff]`), and GraniteMoeShared's shared
//! expert (`shared_mlp.input_linear` `[2 · ff, hidden]`, `shared_mlp.output_linear`).

use super::{Case, Named, Rng};

/// Appends layer `l`'s feed-forward tensors to `t`.
pub fn ffn(case: &Case, l: usize, rng: &mut Rng, t: &mut Vec<Named>) {
    let (h, ff) = (case.hidden, case.ff);
    let n_exp = case.extra["num_local_experts"].as_u64().unwrap() as usize;
    let mut push = |rng: &mut Rng, s: &str, shape: Vec<usize>| {
        let a = 1.0 / (*shape.last().unwrap() as f32).sqrt();
        let n = shape.iter().product::<usize>();
        let name = format!("model.layers.{l}.{s}");
        t.push((name, shape, (0..n).map(|_| rng.uniform(a)).collect()));
    };
    push(rng, "block_sparse_moe.router.layer.weight", vec![n_exp, h]);
    push(
        rng,
        "block_sparse_moe.input_linear.weight",
        vec![n_exp, 2 * ff, h],
    );
    push(
        rng,
        "block_sparse_moe.output_linear.weight",
        vec![n_exp, h, ff],
    );
    if let Some(sh) = case.extra["shared_intermediate_size"].as_u64() {
        let sh = sh as usize;
        push(rng, "shared_mlp.input_linear.weight", vec![2 * sh, h]);
        push(rng, "shared_mlp.output_linear.weight", vec![h, sh]);
    }
}
