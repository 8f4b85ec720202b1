//! LoRA terms with per-sequence scales: one batched step where each sequence has its own
//! adapters and scales gives every sequence the bits it gets alone at those scales, in one
//! step or one token a step (terms computed beside their matmul); a sequence
//! with every scale 0 gets the bits of the graph without adapters; the values are the low-rank
//! sum an f64 reference computes; bad scale lists are refused.

mod common;

use kestrel_graph::{derived_weight, BatchSeq, ExecutionPlan, Graph, LowRank};
use kestrel_kv::{ContiguousCache, KvDType, KvLayout, PagedCache};
use kestrel_tensor::{CpuEngine, DType, Shape, Tensor};

const K: usize = 40;
// Wider than one column block of the low-rank kernels' `Bᵀ` (64), with a partial one.
const M: usize = 100;
const VOCAB: usize = 7;

fn val(i: usize, salt: usize) -> f32 {
    ((i * 7919 + salt * 104_729) % 31) as f32 / 15.0 - 1.0
}

/// Each weight's ggml dims, value salt, and whether it is stored as F16.
fn spec(name: &str) -> Option<([usize; 2], usize, bool)> {
    Some(match name {
        "tab" => ([K, VOCAB], 1, false),
        "w" => ([K, M], 2, false),
        // Adapter 0 on `w`: rank 2, F32, alpha 8.
        "a0" => ([K, 2], 3, false),
        "b0" => ([2, M], 4, false),
        // Adapter 1 on `w`: rank 4, F16, no alpha.
        "a1" => ([K, 4], 5, true),
        "b1" => ([4, M], 6, true),
        // Adapter 1 on the embedding table: rank 3.
        "ea" => ([3, VOCAB], 7, false),
        "eb" => ([3, K], 8, false),
        _ => return None,
    })
}

/// A weight's values as the plan reads them.
fn values(name: &str) -> Vec<f32> {
    let (dims, salt, f16) = spec(name).unwrap();
    (0..dims[0] * dims[1])
        .map(|i| val(i, salt))
        .map(|v| {
            if f16 {
                half::f16::from_f32(v).to_f32()
            } else {
                v
            }
        })
        .collect()
}

/// A weight by name, the fused terms' derived halves (F32, `B` transposed) included.
fn weight(name: &str) -> Option<Tensor> {
    if let Some(t) = derived_weight(name, &plain) {
        return Some(t.unwrap());
    }
    plain(name)
}

fn plain(name: &str) -> Option<Tensor> {
    let (dims, _, f16) = spec(name)?;
    let shape = Shape::new(&dims).unwrap();
    let v = values(name);
    Some(if f16 {
        let bytes: Vec<u8> = v
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect();
        Tensor::from_bytes(DType::F16, shape, &bytes).unwrap()
    } else {
        Tensor::from_f32(shape, &v).unwrap()
    })
}

fn graphs() -> (Graph, Graph) {
    let mut g = Graph::new();
    let tab = g.weight("tab", &[K as u64, VOCAB as u64]);
    let w = g.weight("w", &[K as u64, M as u64]);
    let x = g.embed("x", tab).unwrap();
    let y = g.matmul("y", x, w).unwrap();
    g.set_output(y).unwrap();
    let pairs = |name: &str| match name {
        "w" => vec![
            LowRank {
                a: ("a0".into(), vec![K as u64, 2]),
                b: ("b0".into(), vec![2, M as u64]),
                scale: 8.0 / 2.0,
                adapter: 0,
                alpha: 8.0,
                types: (DType::F32, DType::F32),
            },
            LowRank {
                a: ("a1".into(), vec![K as u64, 4]),
                b: ("b1".into(), vec![4, M as u64]),
                scale: 1.0,
                adapter: 1,
                alpha: 0.0,
                types: (DType::F16, DType::F16),
            },
        ],
        "tab" => vec![LowRank {
            a: ("ea".into(), vec![3, VOCAB as u64]),
            b: ("eb".into(), vec![3, K as u64]),
            scale: 1.0,
            adapter: 1,
            alpha: 0.0,
            types: (DType::F32, DType::F32),
        }],
        _ => vec![],
    };
    let (h, applied) = g.with_low_rank(&pairs, true).unwrap();
    assert_eq!(applied.len(), 2);
    (g, h)
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

fn pool(seqs: usize) -> PagedCache {
    let mut p = PagedCache::new(layout(), 16, 8).unwrap();
    for _ in 0..seqs {
        p.add_seq();
    }
    p
}

/// `y = W·e + Σ factor · B·(A·e)`, `e` the token's row plus its adapter-1 term, in f64.
fn reference(id: usize, s0: f32, s1: f32) -> Vec<f64> {
    let t = |name: &str| -> Vec<f64> { values(name).into_iter().map(f64::from).collect() };
    let (tab, w, a0, b0, a1, b1, ea, eb) = (
        t("tab"),
        t("w"),
        t("a0"),
        t("b0"),
        t("a1"),
        t("b1"),
        t("ea"),
        t("eb"),
    );
    let mut e: Vec<f64> = tab[id * K..(id + 1) * K].to_vec();
    // Embedding term: A's row `id` (rank 3) times Bᵀ (`eb` is K rows of 3).
    for (j, ej) in e.iter_mut().enumerate() {
        let low: f64 = (0..3).map(|r| ea[id * 3 + r] * eb[j * 3 + r]).sum();
        *ej += f64::from(s1) * low;
    }
    let mv = |m: &[f64], rows: usize, x: &[f64]| -> Vec<f64> {
        (0..rows)
            .map(|r| (0..x.len()).map(|i| m[r * x.len() + i] * x[i]).sum())
            .collect()
    };
    let mut y = mv(&w, M, &e);
    // An F16 half reads its input rounded to f16 (as ggml's matmul does); sums in f32.
    let h = |v: &[f64]| -> Vec<f64> {
        v.iter()
            .map(|&x| f64::from(half::f16::from_f64(x).to_f32()))
            .collect()
    };
    for (a, b, rank, f, f16) in [
        (&a0, &b0, 2, f64::from(s0) * 4.0, false),
        (&a1, &b1, 4, f64::from(s1), true),
    ] {
        let low = mv(a, rank, &if f16 { h(&e) } else { e.clone() });
        let up = mv(b, M, &if f16 { h(&low) } else { low });
        for (yj, u) in y.iter_mut().zip(up) {
            *yj += f * u;
        }
    }
    y
}

#[test]
fn each_sequence_of_a_batch_gets_its_own_adapters_bit_for_bit() {
    let (base, adapted) = graphs();
    let engine = CpuEngine::new(2).unwrap();
    // Three sequences: no adapters, adapter 0 alone, both at other scales.
    let scales = [[0.0f32, 0.0], [1.0, 0.0], [0.5, 2.0]];
    let prompts: [&[u32]; 3] = [&[1, 4, 2], &[3, 3], &[6, 0, 5, 2]];
    let out = common::batch_equals_alone(&adapted, M, &prompts, &scales, &weight, layout());

    let mut plain = ExecutionPlan::compile(&base, 16, &weight).unwrap();
    let mut row = 0;
    for (p, s) in prompts.iter().zip(scales) {
        let mine = &out[row * M..(row + p.len()) * M];
        if s == [0.0, 0.0] {
            let mut kv = ContiguousCache::new(layout(), 16).unwrap();
            let base_out = plain.run(&engine, &mut kv, p, 0).unwrap();
            assert_eq!(
                base_out, mine,
                "scales 0 differ from the graph without adapters"
            );
        }
        for (r, &id) in p.iter().enumerate() {
            let want = reference(id as usize, s[0], s[1]);
            for (j, (&g, w)) in mine[r * M..(r + 1) * M].iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(g) - w).abs() < 1e-3 * (1.0 + w.abs()),
                    "scales {s:?} token {id} col {j}: {g} vs {w}"
                );
            }
        }
        row += p.len();
    }

    let mut batch = ExecutionPlan::compile_batch(&adapted, 16, 16, &weight).unwrap();
    // Without per-step scales a batch runs at the plan's scales.
    batch.set_adapter_scales(&[0.5, 2.0]).unwrap();
    let p = prompts[2];
    let one = [BatchSeq {
        seq: 0,
        pos0: 0,
        len: p.len(),
    }];
    let rows: Vec<usize> = (0..p.len()).collect();
    let got = batch
        .run_batch(&engine, &mut pool(1), p, &one, &rows, &[])
        .unwrap();
    assert_eq!(got, &out[5 * M..9 * M]);
}

#[test]
fn bad_adapter_scales_are_refused() {
    let (base, adapted) = graphs();
    let engine = CpuEngine::new(1).unwrap();
    let mut plan = ExecutionPlan::compile_batch(&adapted, 8, 8, &weight).unwrap();
    assert!(plan.set_adapter_scales(&[1.0]).is_err());
    assert!(plan.set_adapter_scales(&[1.0, f32::NAN]).is_err());
    let one = [BatchSeq {
        seq: 0,
        pos0: 0,
        len: 2,
    }];
    let mut kv = pool(1);
    let r = plan.run_batch(&engine, &mut kv, &[1, 2], &one, &[1], &[1.0, 2.0, 3.0]);
    assert!(r.is_err());
    let r = plan.run_batch(&engine, &mut kv, &[1, 2], &one, &[1], &[1.0, f32::INFINITY]);
    assert!(r.is_err());
    let mut plain = ExecutionPlan::compile_batch(&base, 8, 8, &weight).unwrap();
    assert_eq!(plain.adapter_slots(), 0);
    assert!(plain
        .run_batch(&engine, &mut kv, &[1, 2], &one, &[1], &[1.0])
        .is_err());
    assert!(plain
        .run_batch(&engine, &mut kv, &[1, 2], &one, &[1], &[])
        .is_ok());
}
