//! LoRA terms on the expert projections of a mixture-of-experts FFN (llama.cpp's
//! `build_lora_mm_id`): each chosen expert's up, gate or down projection gets `+ factor ·
//! B_e·(A_e·x)`, and the router `+ factor · B·(A·x)`. One batched step where each sequence has its own scales gives every sequence
//! the bits it gets alone; scales 0 give the bits of the graph without adapters; the values
//! are those of a graph whose expert weights have the terms merged in.

mod common;

use kestrel_graph::{ExecutionPlan, Graph, LowRank, MoeActivation, MoeGating, MoeParams};
use kestrel_kv::{ContiguousCache, KvDType, KvLayout};
use kestrel_tensor::{CpuEngine, DType, Shape, Tensor};

/// Row width.
const K: usize = 24;
/// One expert's hidden size.
const FF: usize = 16;
const E: usize = 4;
const VOCAB: usize = 9;

fn val(i: usize, salt: usize) -> f32 {
    let v = ((i * 7919 + salt * 104_729) % 37) as f32 / 18.0 - 1.0;
    // f16-exact, so the F16 weights and the inputs they round hold the same values.
    half::f16::from_f32(v).to_f32()
}

/// A weight's ggml dims, value salt, and type.
fn spec(name: &str) -> Option<(Vec<usize>, usize, DType)> {
    Some(match name {
        "tab" => (vec![K, VOCAB], 1, DType::F32),
        "router" => (vec![K, E], 2, DType::F32),
        "up" => (vec![K, FF, E], 3, DType::F16),
        "gate" => (vec![K, FF, E], 4, DType::F16),
        "down" => (vec![FF, K, E], 5, DType::F16),
        // Adapter 0, rank 2, F32, alpha 8: on up and down.
        "up.a0" => (vec![K, 2, E], 6, DType::F32),
        "up.b0" => (vec![2, FF, E], 7, DType::F32),
        "down.a0" => (vec![FF, 2, E], 8, DType::F32),
        "down.b0" => (vec![2, K, E], 9, DType::F32),
        // Adapter 1, rank 4, F16, no alpha: on gate; rank 4, F32 on the router.
        "gate.a1" => (vec![K, 4, E], 10, DType::F16),
        "gate.b1" => (vec![4, FF, E], 11, DType::F16),
        "router.a1" => (vec![K, 4], 12, DType::F32),
        "router.b1" => (vec![4, E], 13, DType::F32),
        _ => return None,
    })
}

fn values(name: &str) -> Vec<f32> {
    let (dims, salt, _) = spec(name).unwrap();
    let n: usize = dims.iter().product();
    // Small adapter values, as trained adapters have.
    let s = if name.contains(".a") || name.contains(".b") {
        0.25
    } else {
        1.0
    };
    (0..n).map(|i| val(i, salt) * s).collect()
}

fn tensor(dtype: DType, dims: &[usize], v: &[f32]) -> Tensor {
    let shape = Shape::new(dims).unwrap();
    match dtype {
        DType::F16 => {
            let bytes: Vec<u8> = v
                .iter()
                .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                .collect();
            Tensor::from_bytes(DType::F16, shape, &bytes).unwrap()
        }
        _ => Tensor::from_f32(shape, v).unwrap(),
    }
}

fn weight(name: &str) -> Option<Tensor> {
    let (dims, _, dtype) = spec(name)?;
    Some(tensor(dtype, &dims, &values(name)))
}

fn moe_graph(weights: [&str; 5]) -> Graph {
    let [tab, router, up, gate, down] = weights;
    let mut g = Graph::new();
    let (k, f, e) = (K as u64, FF as u64, E as u64);
    let tab = g.weight(tab, &[k, VOCAB as u64]);
    let router = g.weight(router, &[k, e]);
    let up = g.weight(up, &[k, f, e]);
    let gate = g.weight(gate, &[k, f, e]);
    let down = g.weight(down, &[f, k, e]);
    let x = g.embed("x", tab).unwrap();
    let p = MoeParams {
        n_expert: E,
        n_used: 2,
        n_ff: FF,
        gating: MoeGating::Softmax,
        norm_weights: true,
        weights_scale: 1.0,
        activation: MoeActivation::Silu,
        router,
        router_bias: None,
        selection_bias: None,
        groups: None,
        up,
        gate: Some(gate),
        fused_gate_up: false,
        down,
        scales: [None; 3],
        biases: [None; 3],
        low_rank: Vec::new(),
    };
    let y = g.moe("moe", x, p).unwrap();
    g.set_output(y).unwrap();
    g
}

fn pair(w: &str, adapter: usize) -> LowRank {
    let (a, b) = (format!("{w}.a{adapter}"), format!("{w}.b{adapter}"));
    let dims = |n: &str| spec(n).unwrap().0.iter().map(|&d| d as u64).collect();
    let (alpha, scale, t) = match adapter {
        0 => (8.0, 4.0, DType::F32),
        _ => (0.0, 1.0, DType::F16),
    };
    LowRank {
        a: (a.clone(), dims(&a)),
        b: (b.clone(), dims(&b)),
        scale,
        adapter,
        alpha,
        types: (t, t),
    }
}

fn graphs() -> (Graph, Graph) {
    let g = moe_graph(["tab", "router", "up", "gate", "down"]);
    let pairs = |name: &str| match name {
        "up" => vec![pair("up", 0)],
        "down" => vec![pair("down", 0)],
        "gate" => vec![pair("gate", 1)],
        "router" => vec![pair("router", 1)],
        _ => vec![],
    };
    for fused in [true, false] {
        let (_, applied) = g.with_low_rank(&pairs, fused).unwrap();
        assert_eq!(applied.len(), 4);
    }
    let (h, _) = g.with_low_rank(&pairs, true).unwrap();
    (g, h)
}

/// The expert weights with each term merged in at user scales `s` (F32).
fn merged(s: [f32; 2]) -> impl Fn(&str) -> Option<Tensor> {
    move |name: &str| {
        let (proj, adapter, factor) = match name {
            "up_m" => ("up", 0, s[0] * 8.0 / 2.0),
            "down_m" => ("down", 0, s[0] * 8.0 / 2.0),
            "gate_m" => ("gate", 1, s[1]),
            "router_m" => ("router", 1, s[1]),
            _ => return weight(name),
        };
        let (dims, _, _) = spec(proj).unwrap();
        let (k, m) = (dims[0], dims[1]);
        let mut w = values(proj);
        let a = values(&format!("{proj}.a{adapter}"));
        let b = values(&format!("{proj}.b{adapter}"));
        let experts = dims.get(2).copied().unwrap_or(1);
        let r = a.len() / (k * experts);
        for e in 0..experts {
            for row in 0..m {
                for col in 0..k {
                    let d: f64 = (0..r)
                        .map(|j| {
                            f64::from(b[e * m * r + row * r + j])
                                * f64::from(a[e * r * k + j * k + col])
                        })
                        .sum();
                    w[e * m * k + row * k + col] += (f64::from(factor) * d) as f32;
                }
            }
        }
        Some(tensor(DType::F32, &dims, &w))
    }
}

/// Σ(a - b)² / Σb².
fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let d: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x - y).powi(2))
        .sum();
    d / b.iter().map(|&y| f64::from(y).powi(2)).sum::<f64>()
}

fn layout() -> KvLayout {
    KvLayout {
        n_layers: 1,
        n_kv_head: 1,
        layer_kv_heads: Vec::new(),
        k_head_dim: 4,
        v_head_dim: 4,
        dtype: KvDType::F32,
        recurrent: kestrel_kv::RecurrentLayout::NONE,
    }
}

#[test]
fn expert_terms_per_sequence_match_alone_base_and_merged() {
    let (base, adapted) = graphs();
    let engine = CpuEngine::new(2).unwrap();
    let scales = [[0.0f32, 0.0], [1.0, 0.0], [0.5, -2.0], [0.0, 1.5]];
    let prompts: [&[u32]; 4] = [&[1, 4, 2, 8], &[3, 3], &[6, 0, 5, 2, 7], &[8, 1]];
    let out = common::batch_equals_alone(&adapted, K, &prompts, &scales, &weight, layout());

    let mut plain = ExecutionPlan::compile(&base, 16, &weight).unwrap();
    let mut row = 0;
    for (p, s) in prompts.iter().zip(scales) {
        let mine = &out[row * K..(row + p.len()) * K];
        let mut kv = ContiguousCache::new(layout(), 16).unwrap();
        let base_out = plain.run(&engine, &mut kv, p, 0).unwrap().to_vec();
        if s == [0.0, 0.0] {
            assert_eq!(
                base_out, mine,
                "scales 0 differ from the graph without adapters"
            );
        }
        // The same FFN with the terms merged into F32 expert weights.
        let m = moe_graph(["tab", "router_m", "up_m", "gate_m", "down_m"]);
        let merged_w = merged(s);
        let mut mp = ExecutionPlan::compile(&m, 16, &merged_w).unwrap();
        let mut kv = ContiguousCache::new(layout(), 16).unwrap();
        let want = mp.run(&engine, &mut kv, p, 0).unwrap().to_vec();
        let (nmse, shift) = (nmse(mine, &want), nmse(&base_out, &want));
        eprintln!("scales {s:?}: NMSE applied vs merged {nmse:.2e}, base vs merged {shift:.2e}");
        assert!(nmse < 1e-6, "scales {s:?}: applied vs merged NMSE {nmse}");
        if s != [0.0, 0.0] {
            assert!(
                shift > 1e-3,
                "scales {s:?}: the terms barely move the output"
            );
        }
        row += p.len();
    }
}

#[test]
fn expert_terms_that_do_not_fit_are_refused() {
    let g = moe_graph(["tab", "router", "up", "gate", "down"]);
    let mut bad = pair("up", 0);
    bad.a.1 = vec![K as u64, 2, E as u64 - 1];
    let pairs = move |name: &str| match name {
        "up" => vec![bad.clone()],
        _ => vec![],
    };
    let err = g.with_low_rank(&pairs, true).unwrap_err().to_string();
    assert!(err.contains("do not fit"), "{err}");
}
