//! The ops encoders need, run through a compiled plan and checked against direct computation:
//! position and fixed-row embeddings, layer norm, exact GELU, and non-causal attention.

use kestrel_graph::{AttentionParams, EmbedIndex, ExecutionPlan, Graph};
use kestrel_kv::{ContiguousCache, KvDType, KvLayout};
use kestrel_tensor::cpu::gelu_erf_f32;
use kestrel_tensor::{CpuEngine, Shape, Tensor};

const W: usize = 4;

fn table(rows: usize) -> Vec<f32> {
    (0..rows * W)
        .map(|i| ((i * 7919) % 23) as f32 / 10.0 - 1.1)
        .collect()
}

fn cache(layers: usize) -> ContiguousCache {
    let layout = KvLayout {
        n_layers: layers,
        n_kv_head: 1,
        layer_kv_heads: Vec::new(),
        k_head_dim: W,
        v_head_dim: W,
        dtype: KvDType::F32,
        recurrent: kestrel_kv::RecurrentLayout::NONE,
    };
    ContiguousCache::new(layout, 8).unwrap()
}

#[test]
fn position_and_row_embeddings_layer_norm_and_gelu() {
    let t = table(8);
    let mut g = Graph::new();
    let tab = g.weight("tab", &[W as u64, 8]);
    let p = g.embed_by("pos", tab, EmbedIndex::Positions).unwrap();
    let r = g.embed_by("row", tab, EmbedIndex::Row(2)).unwrap();
    assert!(g.embed_by("bad", tab, EmbedIndex::Row(8)).is_err());
    let s = g.add("sum", p, r).unwrap();
    let n = g.layer_norm("ln", s, 1e-5, None, None).unwrap();
    let o = g.gelu_erf("gelu", n).unwrap();
    g.set_output(o).unwrap();
    let weight = |name: &str| {
        (name == "tab").then(|| Tensor::from_f32(Shape::matrix(8, W).unwrap(), &t).unwrap())
    };
    let mut plan = ExecutionPlan::compile(&g, 4, &weight).unwrap();
    let engine = CpuEngine::new(1).unwrap();
    let mut kv = cache(1);
    // Three tokens (ids ignored by these ops) at positions 3, 4, 5.
    let out = plan.run(&engine, &mut kv, &[0, 0, 0], 3).unwrap().to_vec();
    assert_eq!(out.len(), 3 * W);
    for (i, row) in out.chunks_exact(W).enumerate() {
        let pos = 3 + i;
        let s: Vec<f64> = (0..W)
            .map(|c| f64::from(t[pos * W + c]) + f64::from(t[2 * W + c]))
            .collect();
        let mean = s.iter().sum::<f64>() / W as f64;
        let var = s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / W as f64;
        for (c, &got) in row.iter().enumerate() {
            let want = gelu_erf_f32(((s[c] - mean) / (var + 1e-5).sqrt()) as f32);
            assert!(
                (got - want).abs() < 1e-5,
                "row {i} col {c}: {got} vs {want}"
            );
        }
    }
}

fn attention_graph(causal: bool) -> Graph {
    let mut g = Graph::new();
    let tab = g.weight("tab", &[W as u64, 8]);
    let x = g.embed("x", tab).unwrap();
    let p = AttentionParams {
        layer: 0,
        n_head: 1,
        n_kv_head: 1,
        head_dim_k: W,
        head_dim_v: W,
        scale: 0.5,
        window: None,
        softcap: None,
        causal,
        sinks: None,
        latent: false,
    };
    let a = g.attention("attn", x, x, x, p).unwrap();
    g.set_output(a).unwrap();
    g
}

#[test]
fn non_causal_attention_lets_every_token_see_every_other() {
    let t = table(8);
    let weight = |name: &str| {
        (name == "tab").then(|| Tensor::from_f32(Shape::matrix(8, W).unwrap(), &t).unwrap())
    };
    let engine = CpuEngine::new(1).unwrap();
    let ids = [1u32, 5, 2];
    let run = |causal: bool| {
        let mut plan = ExecutionPlan::compile(&attention_graph(causal), 4, &weight).unwrap();
        let mut kv = cache(1);
        plan.run(&engine, &mut kv, &ids, 0).unwrap().to_vec()
    };
    let row = |id: u32| &t[id as usize * W..(id as usize + 1) * W];
    let expect = |i: usize, visible: usize| -> Vec<f64> {
        let q = row(ids[i]);
        let scores: Vec<f64> = ids[..visible]
            .iter()
            .map(|&j| {
                0.5 * q
                    .iter()
                    .zip(row(j))
                    .map(|(a, b)| f64::from(a * b))
                    .sum::<f64>()
            })
            .collect();
        let m = scores.iter().cloned().fold(f64::MIN, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = e.iter().sum();
        (0..W)
            .map(|c| {
                ids[..visible]
                    .iter()
                    .zip(&e)
                    .map(|(&j, w)| w / z * f64::from(row(j)[c]))
                    .sum()
            })
            .collect()
    };
    let full = run(false);
    let causal = run(true);
    for i in 0..ids.len() {
        for (c, want) in expect(i, ids.len()).iter().enumerate() {
            assert!(
                (f64::from(full[i * W + c]) - want).abs() < 1e-5,
                "non-causal row {i}"
            );
        }
        for (c, want) in expect(i, i + 1).iter().enumerate() {
            assert!(
                (f64::from(causal[i * W + c]) - want).abs() < 1e-5,
                "causal row {i}"
            );
        }
    }
    assert_ne!(full[..W], causal[..W]);
}
