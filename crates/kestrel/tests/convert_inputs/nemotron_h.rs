//! The tensors of a Nemotron-H test checkpoint (`NemotronHForCausalLM`): `backbone.*` names, one
//! norm and one mixer per layer by `hybrid_override_pattern` (`M`: Mamba 2 with a gated norm,
//! `*`: attention, `-`: a ReLU² MLP of up and down projections, `E`: a router with its
//! correction bias, ReLU² experts and a shared expert), and Nemotron 3 Super's multi-token-
//! prediction head (`mtp.layers.0/1`) where the case has one.

use super::mamba::{mamba2_mixer, Mixer2};
use super::{make, Case, Named, Rng};

/// Renames the embedding and final norm `t` holds to Nemotron-H's names and appends every
/// layer's tensors.
pub fn tensors(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    for (name, _, _) in t.iter_mut() {
        match name.as_str() {
            "model.embed_tokens.weight" => *name = "backbone.embeddings.weight".into(),
            "model.norm.weight" => *name = "backbone.norm_f.weight".into(),
            _ => {}
        }
    }
    let x = |k: &str| case.extra[k].as_u64().unwrap() as usize;
    let h = case.hidden;
    let (heads, head_dim, state) = (
        x("mamba_num_heads"),
        x("mamba_head_dim"),
        x("ssm_state_size"),
    );
    let inner = heads * head_dim;
    let dims = Mixer2 {
        hidden: h,
        inner,
        conv_dim: inner + 2 * x("n_groups") * state,
        heads,
        conv: x("conv_kernel"),
    };
    let pattern = case.extra["hybrid_override_pattern"].as_str().unwrap();
    for (l, kind) in pattern.chars().enumerate() {
        let prefix = format!("backbone.layers.{l}.");
        let p = |s: &str| format!("{prefix}{s}");
        t.push(make(rng, p("norm.weight"), vec![h], 1.0, 0.2));
        match kind {
            'M' => mamba2_mixer(rng, &p("mixer."), dims, true, t),
            '*' => attention(case, rng, &prefix, t),
            'E' => experts(case, rng, &prefix, t),
            _ => {
                t.push(lin(rng, p("mixer.up_proj.weight"), case.ff, h));
                t.push(lin(rng, p("mixer.down_proj.weight"), h, case.ff));
            }
        }
    }
    if case.extra["num_nextn_predict_layers"].as_u64() == Some(1) {
        // Nemotron 3 Super's multi-token-prediction head: `mtp.layers.0` fuses the embedding
        // and the hidden state (two norms, a projection from both) and holds an attention
        // sub-layer; `mtp.layers.1` an expert sub-layer and the head's final norm.
        let p0 = |s: &str| format!("mtp.layers.0.{s}");
        t.push(make(rng, p0("enorm.weight"), vec![h], 1.0, 0.2));
        t.push(make(rng, p0("hnorm.weight"), vec![h], 1.0, 0.2));
        t.push(lin(rng, p0("eh_proj.weight"), h, 2 * h));
        t.push(make(rng, p0("norm.weight"), vec![h], 1.0, 0.2));
        attention(case, rng, "mtp.layers.0.", t);
        let p1 = |s: &str| format!("mtp.layers.1.{s}");
        t.push(make(rng, p1("norm.weight"), vec![h], 1.0, 0.2));
        experts(case, rng, "mtp.layers.1.", t);
        t.push(make(rng, p1("final_layernorm.weight"), vec![h], 1.0, 0.2));
    }
}

fn lin(rng: &mut Rng, name: String, rows: usize, cols: usize) -> Named {
    make(rng, name, vec![rows, cols], 0.0, 1.0 / (cols as f32).sqrt())
}

/// An attention mixer under `prefix`.
fn attention(case: &Case, rng: &mut Rng, prefix: &str, t: &mut Vec<Named>) {
    let h = case.hidden;
    let hd = case.head_dim.unwrap_or(h / case.heads);
    let p = |s: &str| format!("{prefix}mixer.{s}");
    t.push(lin(rng, p("q_proj.weight"), case.heads * hd, h));
    t.push(lin(rng, p("k_proj.weight"), case.kv_heads * hd, h));
    t.push(lin(rng, p("v_proj.weight"), case.kv_heads * hd, h));
    t.push(lin(rng, p("o_proj.weight"), h, case.heads * hd));
}

/// An expert mixer under `prefix`: router and correction bias, the latent projections where
/// the case has a latent size, the experts, the shared expert.
fn experts(case: &Case, rng: &mut Rng, prefix: &str, t: &mut Vec<Named>) {
    let x = |k: &str| case.extra[k].as_u64().unwrap() as usize;
    let h = case.hidden;
    let p = |s: &str| format!("{prefix}mixer.{s}");
    let (n, ff, shared) = (
        x("n_routed_experts"),
        x("moe_intermediate_size"),
        x("moe_shared_expert_intermediate_size"),
    );
    t.push(lin(rng, p("gate.weight"), n, h));
    t.push(make(
        rng,
        p("gate.e_score_correction_bias"),
        vec![n],
        0.0,
        0.5,
    ));
    // Nemotron 3 Super: the experts work in a latent space of `moe_latent_size`.
    let width = match case.extra["moe_latent_size"].as_u64() {
        Some(lat) => {
            let lat = lat as usize;
            t.push(lin(rng, p("fc1_latent_proj.weight"), lat, h));
            t.push(lin(rng, p("fc2_latent_proj.weight"), h, lat));
            lat
        }
        None => h,
    };
    for e in 0..n {
        t.push(lin(
            rng,
            p(&format!("experts.{e}.up_proj.weight")),
            ff,
            width,
        ));
        t.push(lin(
            rng,
            p(&format!("experts.{e}.down_proj.weight")),
            width,
            ff,
        ));
    }
    t.push(lin(rng, p("shared_experts.up_proj.weight"), shared, h));
    t.push(lin(rng, p("shared_experts.down_proj.weight"), h, shared));
}
