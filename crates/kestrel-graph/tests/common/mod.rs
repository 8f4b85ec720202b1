//! Shared by the adapter tests: one batched step where each sequence has its own adapter
//! scales against each sequence alone.

use kestrel_graph::{BatchSeq, ExecutionPlan, Graph};
use kestrel_kv::{ContiguousCache, KvLayout, PagedCache};
use kestrel_tensor::{CpuEngine, Tensor};

/// Runs `prompts` as one batched step of `graph` (`width` outputs per token), sequence `i` at
/// adapter scales `scales[i]`, and checks that every sequence gets the bits it gets alone at its
/// scales, in one step and one token a step. Returns the batched step's output rows.
pub fn batch_equals_alone(
    graph: &Graph,
    width: usize,
    prompts: &[&[u32]],
    scales: &[[f32; 2]],
    weight: &dyn Fn(&str) -> Option<Tensor>,
    layout: KvLayout,
) -> Vec<f32> {
    let engine = CpuEngine::new(2).unwrap();
    let mut batch = ExecutionPlan::compile_batch(graph, 16, 16, weight).unwrap();
    assert_eq!(batch.adapter_slots(), 2);
    let tokens: Vec<u32> = prompts.concat();
    let seqs: Vec<BatchSeq> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| BatchSeq {
            seq: i,
            pos0: 0,
            len: p.len(),
        })
        .collect();
    let outputs: Vec<usize> = (0..tokens.len()).collect();
    let mut kv = PagedCache::new(layout.clone(), 16, 8).unwrap();
    for _ in prompts {
        kv.add_seq();
    }
    let flat: Vec<f32> = scales.concat();
    let out = batch
        .run_batch(&engine, &mut kv, &tokens, &seqs, &outputs, &flat)
        .unwrap()
        .to_vec();
    assert_eq!(out.len(), tokens.len() * width);

    let mut alone = ExecutionPlan::compile(graph, 16, weight).unwrap();
    let mut row = 0;
    for (p, s) in prompts.iter().zip(scales) {
        alone.set_adapter_scales(s).unwrap();
        let mut kv = ContiguousCache::new(layout.clone(), 16).unwrap();
        let got = alone.run(&engine, &mut kv, p, 0).unwrap().to_vec();
        let mine = &out[row * width..(row + p.len()) * width];
        assert_eq!(got, mine, "scales {s:?}: batched differs from alone");
        // One token a step (the fused terms are computed beside their matmul): the same bits.
        let mut kv = ContiguousCache::new(layout.clone(), 16).unwrap();
        for (i, &id) in p.iter().enumerate() {
            let got = alone.run(&engine, &mut kv, &[id], i).unwrap();
            assert_eq!(
                got,
                &mine[i * width..(i + 1) * width],
                "scales {s:?}: token {i} decoded alone differs from the batch"
            );
        }
        row += p.len();
    }
    out
}
