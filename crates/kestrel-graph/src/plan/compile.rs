//! Compiling a [`Graph`] for the CPU engine: each weight bound to its bytes (repacked where a
//! matmul reads it faster so, vectors as f32), the activation arena planned and allocated once.

use kestrel_tensor::cpu;
use kestrel_tensor::{DType, Tensor};

use super::adapters::{self, StepAdapters};
use super::{BoundWeight, ExecutionPlan};
use crate::ir::Op;
use crate::memory::plan_memory;
use crate::moe::MoeScratch;
use crate::{Graph, GraphError};

impl ExecutionPlan {
    /// Compile `graph` for steps of up to `max_tokens` tokens; `weight` finds a weight's tensor
    /// by name (a view of the model file).
    pub fn compile(
        graph: &Graph,
        max_tokens: usize,
        weight: &dyn Fn(&str) -> Option<Tensor>,
    ) -> Result<ExecutionPlan, GraphError> {
        ExecutionPlan::compile_batch(graph, max_tokens, 1, weight)
    }

    /// Compile `graph` for batched steps of up to `max_tokens` tokens in all and up to
    /// `max_outputs` output rows (sequences, or drafted tokens to verify).
    pub fn compile_batch(
        graph: &Graph,
        max_tokens: usize,
        max_outputs: usize,
        weight: &dyn Fn(&str) -> Option<Tensor>,
    ) -> Result<ExecutionPlan, GraphError> {
        let max_tokens = max_tokens.max(1);
        let max_outputs = max_outputs.clamp(1, max_tokens);
        let mem = plan_memory(graph, max_tokens, max_outputs)?;
        let output = *graph.outputs().first().ok_or(GraphError::NoOutput)?;
        // Weights a matmul reads may be repacked for it; a table rows are also looked up in (a
        // tied embedding) only where `packs_tables` says so: the lookups then read the packed
        // copy (the source pages are handed back once packed, and reading them again would
        // fault them in row by row).
        let mut matmul_reads = vec![false; graph.weights().len()];
        // Weights a state-space op reads as plain f32 values (taps, A, D: small matrices).
        let mut ssm_reads = vec![false; graph.weights().len()];
        for node in graph.nodes() {
            let ids = match &node.op {
                Op::SsmConv(p) => [Some(p.weight), p.bias],
                Op::SsmScan(p) => [Some(p.a), Some(p.d)],
                _ => continue,
            };
            for id in ids.into_iter().flatten() {
                if let Some(slot) = ssm_reads.get_mut(id) {
                    *slot = true;
                }
            }
        }
        let mut looked_up = vec![false; graph.weights().len()];
        for node in graph.nodes() {
            let (id, slots) = match &node.op {
                Op::MatMul { weight } => (*weight, &mut matmul_reads),
                Op::Embed { table, .. } => (*table, &mut looked_up),
                _ => continue,
            };
            if let Some(slot) = slots.get_mut(id) {
                *slot = true;
            }
        }
        let mut weights = Vec::with_capacity(graph.weights().len());
        for (id, w) in graph.weights().iter().enumerate() {
            let tensor = weight(&w.name).ok_or_else(|| GraphError::Weight {
                name: w.name.clone(),
                reason: "not found".into(),
            })?;
            let dims: Vec<u64> = tensor.shape().dims().iter().map(|&d| d as u64).collect();
            if dims != w.dims {
                return Err(GraphError::Weight {
                    name: w.name.clone(),
                    reason: format!("dims {dims:?}, the graph expects {:?}", w.dims),
                });
            }
            let is_vector = w.dims.iter().skip(1).all(|&d| d == 1) || ssm_reads[id];
            let vector = if is_vector && (tensor.dtype() != DType::F32 || tensor.as_f32().is_err())
            {
                Some(tensor.to_f32_vec()?)
            } else {
                None
            };
            let packed = if matmul_reads[id]
                && (!looked_up[id] || cpu::PackedWeight::packs_tables(tensor.dtype()))
            {
                cpu::PackedWeight::for_tensor(&tensor)
            } else {
                None
            };
            weights.push(BoundWeight {
                tensor,
                vector,
                packed,
            });
        }
        let mut arena = Vec::new();
        arena.try_reserve_exact(mem.arena_len).map_err(|_| {
            GraphError::Internal(format!(
                "arena of {} floats cannot be allocated",
                mem.arena_len
            ))
        })?;
        arena.resize(mem.arena_len, 0.0);
        Ok(ExecutionPlan {
            nodes: graph.nodes().to_vec(),
            output,
            mem,
            max_tokens,
            max_outputs,
            segs: Vec::with_capacity(max_tokens),
            out_rows: Vec::with_capacity(max_outputs),
            seg_rows: Vec::with_capacity(max_tokens),
            out_segs: Vec::with_capacity(max_outputs),
            arena,
            weights,
            weight_names: graph.weights().iter().map(|w| w.name.clone()).collect(),
            hook: None,
            positions: vec![0; max_tokens],
            mask_positions: vec![0; max_tokens],
            scratch: cpu::MatmulScratch::new(),
            moe_scratch: MoeScratch::default(),
            head_in: Vec::new(),
            low_rank: Vec::new(),
            moe_factors: Vec::new(),
            low_rank_in: Vec::new(),
            ahead: adapters::Ahead::new(graph.nodes()),
            adapters: StepAdapters::new(graph.nodes(), max_tokens),
            head_out: Vec::new(),
            rope_cache: cpu::RopeCache::default(),
            trace: std::env::var("KESTREL_TRACE")
                .ok()
                .filter(|v| !v.is_empty()),
        })
    }
}
