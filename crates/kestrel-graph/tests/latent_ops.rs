//! The ops of multi-head latent attention (DeepSeek), run through a compiled plan and checked
//! against direct computation: per-head slices, per-head concatenation (with a one-head input
//! repeated), per-head matmuls over a 3-d weight, and attention over a keys-only latent cache.

use kestrel_graph::{AttentionParams, ExecutionPlan, Graph};
use kestrel_kv::{ContiguousCache, KvDType, KvLayout};
use kestrel_tensor::{CpuEngine, Shape, Tensor};

/// Heads, per-head input width.
const H: usize = 2;
const D: usize = 6;

fn val(i: usize) -> f32 {
    ((i * 7919) % 29) as f32 / 9.0 - 1.5
}

#[test]
fn head_slice_concat_and_matmul() {
    let n_vocab = 5;
    let table: Vec<f32> = (0..n_vocab * H * D).map(val).collect();
    // Per head: a 4×3 matrix (ggml dims [3, 4, H]: k = 3 inputs, m = 4 outputs).
    let wk: Vec<f32> = (0..H * 4 * 3).map(|i| val(i + 3)).collect();
    let mut g = Graph::new();
    let tab = g.weight("tab", &[(H * D) as u64, n_vocab as u64]);
    let w = g.weight("w", &[3, 4, H as u64]);
    let x = g.embed("x", tab).unwrap();
    let a = g.head_slice("a", x, H, 1, 3).unwrap();
    assert!(g.head_slice("bad", x, H, 4, 3).is_err());
    let m = g.head_matmul("m", a, w, H).unwrap();
    assert!(g.head_matmul("bad", x, w, H).is_err());
    let one = g.head_slice("one", x, 1, 0, 2).unwrap();
    let c = g.head_concat("c", m, one, H, [H, 1]).unwrap();
    g.set_output(c).unwrap();
    let weight = |name: &str| match name {
        "tab" => Some(Tensor::from_f32(Shape::matrix(n_vocab, H * D).unwrap(), &table).unwrap()),
        "w" => Some(Tensor::from_f32(Shape::new(&[3, 4, H]).unwrap(), &wk).unwrap()),
        _ => None,
    };
    let mut plan = ExecutionPlan::compile(&g, 4, &weight).unwrap();
    let engine = CpuEngine::new(1).unwrap();
    let layout = KvLayout {
        n_layers: 1,
        n_kv_head: 1,
        layer_kv_heads: Vec::new(),
        k_head_dim: 4,
        v_head_dim: 4,
        dtype: KvDType::F32,
        recurrent: kestrel_kv::RecurrentLayout::NONE,
    };
    let mut kv = ContiguousCache::new(layout, 8).unwrap();
    let ids = [3u32, 1];
    let out = plan.run(&engine, &mut kv, &ids, 0).unwrap().to_vec();
    let w_out = 4 + 2;
    assert_eq!(out.len(), ids.len() * H * w_out);
    for (r, &id) in ids.iter().enumerate() {
        let row = &table[id as usize * H * D..(id as usize + 1) * H * D];
        for h in 0..H {
            let o = &out[(r * H + h) * w_out..(r * H + h + 1) * w_out];
            for j in 0..4 {
                let want: f32 = (0..3)
                    .map(|i| wk[(h * 4 + j) * 3 + i] * row[h * D + 1 + i])
                    .sum();
                assert!((o[j] - want).abs() < 1e-5, "row {r} head {h} out {j}");
            }
            // The one-head input (the row's first 2 values) repeated for every head.
            assert_eq!(&o[4..], &row[..2], "row {r} head {h}");
        }
    }
}

#[test]
fn latent_attention_reads_values_from_the_keys() {
    let (n_vocab, dk, dv) = (6usize, 8usize, 5usize);
    let table: Vec<f32> = (0..n_vocab * H * dk).map(val).collect();
    let mut g = Graph::new();
    let tab = g.weight("tab", &[(H * dk) as u64, n_vocab as u64]);
    let q = g.embed("q", tab).unwrap();
    let k = g.head_slice("k", q, H, 0, dk).unwrap();
    let k = g.head_slice("k1", k, 1, 0, dk).unwrap();
    let params = AttentionParams {
        layer: 0,
        n_head: H,
        n_kv_head: 1,
        head_dim_k: dk,
        head_dim_v: dv,
        scale: 0.4,
        window: None,
        softcap: None,
        causal: true,
        sinks: None,
        latent: true,
    };
    // The values must be the keys themselves.
    assert!(g.attention("bad", q, k, q, params.clone()).is_err());
    let a = g.attention("attn", q, k, k, params).unwrap();
    g.set_output(a).unwrap();
    let weight = |name: &str| {
        (name == "tab")
            .then(|| Tensor::from_f32(Shape::matrix(n_vocab, H * dk).unwrap(), &table).unwrap())
    };
    let mut plan = ExecutionPlan::compile(&g, 4, &weight).unwrap();
    let engine = CpuEngine::new(1).unwrap();
    // A keys-only cache: no values stored.
    let layout = KvLayout {
        n_layers: 1,
        n_kv_head: 1,
        layer_kv_heads: Vec::new(),
        k_head_dim: dk,
        v_head_dim: 0,
        dtype: KvDType::F32,
        recurrent: kestrel_kv::RecurrentLayout::NONE,
    };
    let mut kv = ContiguousCache::new(layout, 8).unwrap();
    let ids = [4u32, 0, 2];
    let out = plan.run(&engine, &mut kv, &ids, 0).unwrap().to_vec();
    let row = |id: u32| &table[id as usize * H * dk..(id as usize + 1) * H * dk];
    for (i, &id) in ids.iter().enumerate() {
        for h in 0..H {
            let qh = &row(id)[h * dk..(h + 1) * dk];
            // Keys: the first head of each earlier token's row.
            let keys: Vec<&[f32]> = ids[..=i].iter().map(|&j| &row(j)[..dk]).collect();
            let s: Vec<f64> = keys
                .iter()
                .map(|k| {
                    0.4 * qh
                        .iter()
                        .zip(*k)
                        .map(|(a, b)| f64::from(a * b))
                        .sum::<f64>()
                })
                .collect();
            let m = s.iter().cloned().fold(f64::MIN, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for c in 0..dv {
                let want: f64 = keys
                    .iter()
                    .zip(&e)
                    .map(|(k, w)| w / z * f64::from(k[c]))
                    .sum();
                let got = f64::from(out[(i * H + h) * dv + c]);
                assert!((got - want).abs() < 1e-5, "token {i} head {h} value {c}");
            }
        }
    }
}
