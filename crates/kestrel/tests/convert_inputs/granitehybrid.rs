//! The tensors of a Granite 4.0-H test checkpoint (`GraniteMoeHybridForCausalLM`): Mamba 2
//! mixers (`mamba.*`, with `dt_bias`, per-head `A_log` and `D`, a gated norm) and attention
//! layers by `layer_types`, each followed by Granite MoE's fused experts and shared expert.

use super::mamba::{mamba2_mixer, Mixer2};
use super::{make, Case, Named, Rng};

/// Appends every layer's tensors (the embedding and final norm are `t`'s already).
pub fn tensors(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    let x = |k: &str| case.extra[k].as_u64().unwrap() as usize;
    let h = case.hidden;
    let hd = case.head_dim.unwrap_or(h / case.heads);
    let (n_heads, state, conv) = (x("mamba_n_heads"), x("mamba_d_state"), x("mamba_d_conv"));
    let groups = x("mamba_n_groups");
    let inner = x("mamba_expand") * h;
    let conv_dim = inner + 2 * groups * state;
    let (n_exp, ff, sff) = (
        x("num_local_experts"),
        case.ff,
        x("shared_intermediate_size"),
    );
    let types = case.extra["layer_types"].as_array().unwrap();
    let lin = |rng: &mut Rng, name: String, shape: Vec<usize>| {
        let cols = *shape.last().unwrap();
        make(rng, name, shape, 0.0, 1.0 / (cols as f32).sqrt())
    };
    for (l, ty) in types.iter().enumerate().take(case.layers) {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        t.push(make(rng, p("input_layernorm.weight"), vec![h], 1.0, 0.2));
        if ty == "attention" {
            t.push(lin(
                rng,
                p("self_attn.q_proj.weight"),
                vec![case.heads * hd, h],
            ));
            t.push(lin(
                rng,
                p("self_attn.k_proj.weight"),
                vec![case.kv_heads * hd, h],
            ));
            t.push(lin(
                rng,
                p("self_attn.v_proj.weight"),
                vec![case.kv_heads * hd, h],
            ));
            t.push(lin(
                rng,
                p("self_attn.o_proj.weight"),
                vec![h, case.heads * hd],
            ));
        } else {
            let dims = Mixer2 {
                hidden: h,
                inner,
                conv_dim,
                heads: n_heads,
                conv,
            };
            mamba2_mixer(rng, &p("mamba."), dims, true, t);
        }
        t.push(make(
            rng,
            p("post_attention_layernorm.weight"),
            vec![h],
            1.0,
            0.2,
        ));
        t.push(lin(
            rng,
            p("block_sparse_moe.input_linear.weight"),
            vec![n_exp, 2 * ff, h],
        ));
        t.push(lin(
            rng,
            p("block_sparse_moe.output_linear.weight"),
            vec![n_exp, h, ff],
        ));
        t.push(make(
            rng,
            p("block_sparse_moe.router.layer.weight"),
            vec![n_exp, h],
            0.0,
            1.0,
        ));
        t.push(lin(
            rng,
            p("shared_mlp.input_linear.weight"),
            vec![2 * sff, h],
        ));
        t.push(lin(rng, p("shared_mlp.output_linear.weight"), vec![h, sff]));
    }
}
