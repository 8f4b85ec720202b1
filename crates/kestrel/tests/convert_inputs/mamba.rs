//! The tensors of Mamba test checkpoints: `MambaForCausalLM` (`backbone.*` names, one RMS norm
//! and one selective state-space mixer per layer, and an `lm_head` holding the embedding's
//! values, which llama.cpp's converter leaves out of the file) and `Mamba2ForCausalLM`
//! (multi-head mixers with `dt_bias`, per-head `A_log` and `D`, a gated norm).

use super::{make, Case, Named, Rng};

/// The embedding and final norm of `t` under Mamba's names.
fn rename_backbone(t: &mut [Named]) {
    for (name, _, _) in t.iter_mut() {
        match name.as_str() {
            "model.embed_tokens.weight" => *name = "backbone.embeddings.weight".into(),
            "model.norm.weight" => *name = "backbone.norm_f.weight".into(),
            _ => {}
        }
    }
}

/// Renames the embedding and final norm `t` holds to Mamba's names, makes `lm_head` (if any)
/// the embedding's copy, and appends every layer's tensors.
pub fn tensors(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    let embd = t
        .iter()
        .find(|(n, _, _)| n == "model.embed_tokens.weight")
        .map(|(_, _, v)| v.clone())
        .expect("an embedding");
    if let Some(head) = t.iter_mut().find(|(n, _, _)| n == "lm_head.weight") {
        head.2 = embd;
    }
    rename_backbone(t);
    let (h, inner) = (case.hidden, case.ff);
    let state = case.extra["state_size"].as_u64().unwrap() as usize;
    let conv = case.extra["conv_kernel"].as_u64().unwrap() as usize;
    let dt_rank = case.extra["time_step_rank"].as_u64().unwrap() as usize;
    for l in 0..case.layers {
        let p = |s: &str| format!("backbone.layers.{l}.{s}");
        t.push(make(rng, p("norm.weight"), vec![h], 1.0, 0.2));
        let dims = Mixer1 {
            hidden: h,
            inner,
            state,
            conv,
            dt_rank,
        };
        mamba1_mixer(rng, &p("mixer."), dims, t);
    }
}

/// Mamba 2's tensors: the embedding and final norm renamed, every layer's mixer appended.
pub fn tensors2(case: &Case, rng: &mut Rng, t: &mut Vec<Named>) {
    rename_backbone(t);
    let get = |k: &str| case.extra[k].as_u64().unwrap() as usize;
    let (h, inner) = (case.hidden, case.ff);
    let (state, conv, groups, heads) = (
        get("state_size"),
        get("conv_kernel"),
        get("n_groups"),
        get("num_heads"),
    );
    let conv_dim = inner + 2 * groups * state;
    for l in 0..case.layers {
        let p = |s: &str| format!("backbone.layers.{l}.{s}");
        t.push(make(rng, p("norm.weight"), vec![h], 1.0, 0.2));
        let dims = Mixer2 {
            hidden: h,
            inner,
            conv_dim,
            heads,
            conv,
        };
        mamba2_mixer(rng, &p("mixer."), dims, true, t);
    }
}

/// A hybrid's Mamba 2 mixer under `prefix` (`model.layers.{L}.mamba.`): `in_proj` (z, x, B,
/// C, dt rows), the depthwise convolution and its bias, `dt_bias`, per-head `A_log` and `D`,
/// the gated norm when `norm`, `out_proj`.
pub fn mamba2_mixer(rng: &mut Rng, prefix: &str, dims: Mixer2, norm: bool, t: &mut Vec<Named>) {
    let Mixer2 {
        hidden: h,
        inner,
        conv_dim,
        heads,
        conv,
    } = dims;
    let p = |s: &str| format!("{prefix}{s}");
    let lin = |rng: &mut Rng, name: String, rows: usize, cols: usize| {
        make(rng, name, vec![rows, cols], 0.0, 1.0 / (cols as f32).sqrt())
    };
    t.push(lin(rng, p("in_proj.weight"), inner + conv_dim + heads, h));
    t.push(make(
        rng,
        p("conv1d.weight"),
        vec![conv_dim, 1, conv],
        0.0,
        0.5,
    ));
    t.push(make(rng, p("conv1d.bias"), vec![conv_dim], 0.0, 0.1));
    t.push(make(rng, p("dt_bias"), vec![heads], -2.0, 1.0));
    let a_log: Vec<f32> = (0..heads)
        .map(|i| ((i + 1) as f32).ln() + rng.uniform(0.05))
        .collect();
    t.push((p("A_log"), vec![heads], a_log));
    t.push(make(rng, p("D"), vec![heads], 1.0, 0.2));
    if norm {
        t.push(make(rng, p("norm.weight"), vec![inner], 1.0, 0.2));
    }
    t.push(lin(rng, p("out_proj.weight"), h, inner));
}

/// The sizes of a [`mamba2_mixer`]: width, inner size, convolved channels (inner + 2 ·
/// groups · state), heads, convolution taps.
#[derive(Clone, Copy)]
pub struct Mixer2 {
    pub hidden: usize,
    pub inner: usize,
    pub conv_dim: usize,
    pub heads: usize,
    pub conv: usize,
}

/// A Mamba 1 mixer under `prefix` (`backbone.layers.{L}.mixer.`, Jamba's `model.layers.{L}.
/// mamba.`): `in_proj` (x and z rows), the depthwise convolution and its bias, `x_proj`,
/// `dt_proj` and its bias, `A_log` (Mamba's `log(1..=state)` per row, jittered), `D`,
/// `out_proj`.
pub fn mamba1_mixer(rng: &mut Rng, prefix: &str, dims: Mixer1, t: &mut Vec<Named>) {
    let Mixer1 {
        hidden: h,
        inner,
        state,
        conv,
        dt_rank,
    } = dims;
    let p = |s: &str| format!("{prefix}{s}");
    let lin = |rng: &mut Rng, name: String, rows: usize, cols: usize| {
        make(rng, name, vec![rows, cols], 0.0, 1.0 / (cols as f32).sqrt())
    };
    t.push(lin(rng, p("in_proj.weight"), 2 * inner, h));
    t.push(make(
        rng,
        p("conv1d.weight"),
        vec![inner, 1, conv],
        0.0,
        0.5,
    ));
    t.push(make(rng, p("conv1d.bias"), vec![inner], 0.0, 0.1));
    t.push(lin(rng, p("x_proj.weight"), dt_rank + 2 * state, inner));
    t.push(make(
        rng,
        p("dt_proj.weight"),
        vec![inner, dt_rank],
        0.0,
        0.5,
    ));
    t.push(make(rng, p("dt_proj.bias"), vec![inner], -4.0, 1.0));
    let a_log: Vec<f32> = (0..inner * state)
        .map(|i| (((i % state) + 1) as f32).ln() + rng.uniform(0.05))
        .collect();
    t.push((p("A_log"), vec![inner, state], a_log));
    t.push(make(rng, p("D"), vec![inner], 1.0, 0.2));
    t.push(lin(rng, p("out_proj.weight"), h, inner));
}

/// The sizes of a [`mamba1_mixer`]: width, inner size, state size, convolution taps,
/// time-step rank.
#[derive(Clone, Copy)]
pub struct Mixer1 {
    pub hidden: usize,
    pub inner: usize,
    pub state: usize,
    pub conv: usize,
    pub dt_rank: usize,
}
