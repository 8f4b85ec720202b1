//! The tensors of a Falcon-H1 test checkpoint (`FalconH1ForCausalLM`): in every layer attention
//! and a Mamba 2 mixer side by side (`mamba.*` with `dt_bias`, per-head `A_log` and `D`, no
//! gated norm), then a SwiGLU feed-forward under `feed_forward.*`, `model.final_layernorm`.

use super::mamba::{mamba2_mixer, Mixer2};
use super::{make, Case, Named, Rng};

/// Renames the final norm `t` holds to Falcon-H1's name and appends every layer's tensors.
pub fn tensors(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    for (name, _, _) in t.iter_mut() {
        if name == "model.norm.weight" {
            *name = "model.final_layernorm.weight".into();
        }
    }
    let x = |k: &str| case.extra[k].as_u64().unwrap() as usize;
    let h = case.hidden;
    let hd = case.head_dim.unwrap_or(h / case.heads);
    let (n_heads, state, conv) = (x("mamba_n_heads"), x("mamba_d_state"), x("mamba_d_conv"));
    let inner = x("mamba_d_ssm");
    let conv_dim = inner + 2 * x("mamba_n_groups") * state;
    let lin = |rng: &mut Rng, name: String, rows: usize, cols: usize| {
        make(rng, name, vec![rows, cols], 0.0, 1.0 / (cols as f32).sqrt())
    };
    for l in 0..case.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        t.push(make(rng, p("input_layernorm.weight"), vec![h], 1.0, 0.2));
        t.push(lin(rng, p("self_attn.q_proj.weight"), case.heads * hd, h));
        t.push(lin(
            rng,
            p("self_attn.k_proj.weight"),
            case.kv_heads * hd,
            h,
        ));
        t.push(lin(
            rng,
            p("self_attn.v_proj.weight"),
            case.kv_heads * hd,
            h,
        ));
        t.push(lin(rng, p("self_attn.o_proj.weight"), h, case.heads * hd));
        let dims = Mixer2 {
            hidden: h,
            inner,
            conv_dim,
            heads: n_heads,
            conv,
        };
        mamba2_mixer(rng, &p("mamba."), dims, false, t);
        t.push(make(rng, p("pre_ff_layernorm.weight"), vec![h], 1.0, 0.2));
        t.push(lin(rng, p("feed_forward.gate_proj.weight"), case.ff, h));
        t.push(lin(rng, p("feed_forward.up_proj.weight"), case.ff, h));
        t.push(lin(rng, p("feed_forward.down_proj.weight"), h, case.ff));
    }
}
