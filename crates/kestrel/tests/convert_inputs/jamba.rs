//! The tensors of a Jamba test checkpoint (`JambaForCausalLM`): Mamba layers with RMS norms on
//! `dt`, B and C, attention layers every `attn_layer_period` from `attn_layer_offset`, experts
//! (a router and per-expert projections) every `expert_layer_period` from
//! `expert_layer_offset`, dense feed-forwards elsewhere, `model.final_layernorm`.

use super::mamba::{mamba1_mixer, Mixer1};
use super::{make, Case, Named, Rng};

/// Renames the final norm `t` holds to Jamba's name and appends every layer's tensors.
pub fn tensors(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    for (name, _, _) in t.iter_mut() {
        if name == "model.norm.weight" {
            *name = "model.final_layernorm.weight".into();
        }
    }
    let x = |k: &str| case.extra[k].as_u64().unwrap() as usize;
    let (h, ff) = (case.hidden, case.ff);
    let hd = case.head_dim.unwrap_or(h / case.heads);
    let (state, conv, dt_rank) = (x("mamba_d_state"), x("mamba_d_conv"), x("mamba_dt_rank"));
    let inner = x("mamba_expand") * h;
    let (a_off, a_per) = (x("attn_layer_offset"), x("attn_layer_period"));
    let (e_off, e_per) = (x("expert_layer_offset"), x("expert_layer_period"));
    let n_exp = x("num_experts");
    let lin = |rng: &mut Rng, name: String, rows: usize, cols: usize| {
        make(rng, name, vec![rows, cols], 0.0, 1.0 / (cols as f32).sqrt())
    };
    for l in 0..case.layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        t.push(make(rng, p("input_layernorm.weight"), vec![h], 1.0, 0.2));
        if l >= a_off && (l - a_off) % a_per == 0 {
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
        } else {
            let dims = Mixer1 {
                hidden: h,
                inner,
                state,
                conv,
                dt_rank,
            };
            mamba1_mixer(rng, &p("mamba."), dims, t);
            t.push(make(
                rng,
                p("mamba.dt_layernorm.weight"),
                vec![dt_rank],
                1.0,
                0.2,
            ));
            t.push(make(
                rng,
                p("mamba.b_layernorm.weight"),
                vec![state],
                1.0,
                0.2,
            ));
            t.push(make(
                rng,
                p("mamba.c_layernorm.weight"),
                vec![state],
                1.0,
                0.2,
            ));
        }
        t.push(make(rng, p("pre_ff_layernorm.weight"), vec![h], 1.0, 0.2));
        if l >= e_off && (l - e_off) % e_per == 0 {
            t.push(make(
                rng,
                p("feed_forward.router.weight"),
                vec![n_exp, h],
                0.0,
                1.0,
            ));
            for e in 0..n_exp {
                let q = |s: &str| p(&format!("feed_forward.experts.{e}.{s}"));
                t.push(lin(rng, q("gate_proj.weight"), ff, h));
                t.push(lin(rng, q("up_proj.weight"), ff, h));
                t.push(lin(rng, q("down_proj.weight"), h, ff));
            }
        } else {
            t.push(lin(rng, p("feed_forward.gate_proj.weight"), ff, h));
            t.push(lin(rng, p("feed_forward.up_proj.weight"), ff, h));
            t.push(lin(rng, p("feed_forward.down_proj.weight"), h, ff));
        }
    }
}
