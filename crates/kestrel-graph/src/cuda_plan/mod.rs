//! `CudaPlan`: a graph compiled for the CUDA engine, one sequence a step (or a batched decode
//! step of several). Weights are uploaded
//! once, still quantized (vectors as f32); every node owns a device buffer sized for the
//! longest step. A sequence's keys and values live in a [`CudaKvCache`] the caller owns (one per
//! session, as the CPU plan's `ContiguousCache`), so one plan serves any number of sequences.
//! `run` writes the step's token ids and positions into device buffers the plan owns (two small
//! copies a step), enqueues the nodes in order and copies the output rows (the last token's
//! logits) into a host buffer the plan keeps: a step allocates nothing.
//!
//! Decode steps (one token) replay a CUDA graph: the first one-token step of a cache runs the
//! nodes as usual, the second captures them into a graph kept in that cache, every later one
//! launches it once. What changes between steps is read from device memory (ids, positions;
//! causal attention bounds its keys by the query's position, so it is handed the cache's
//! capacity), so one capture serves the whole sequence; a scratch reallocation (a new device
//! epoch) or another plan makes the cache capture again. `KESTREL_CUDA_GRAPHS=0` or
//! [`CudaPlan::set_graphs`] keeps plain launches, for comparison.
//!
//! It reads the same [`Graph`] as [`crate::ExecutionPlan`], op for op, except where `fuse.rs`
//! runs neighbouring ops as one launch (the same bits; `KESTREL_CUDA_FUSE=0` or
//! [`CudaPlan::set_fusion`] turns it off). Without kestrel-tensor's
//! `cuda` feature it compiles against the engine's stub (no `CudaDevice` can exist, so no plan
//! either). LoRA terms run in their unfused form, each factor bound per step
//! ([`CudaPlan::set_adapter_scales`]).
//!
//! Batched decode ([`CudaPlan::run_batch`], `batch.rs`): up to 64 sequences, one token each, in
//! one step, every weight read once for all of them (9-64 rows: the tensor-core matvec); each token reaches its own sequence's
//! cache through a device table of cache addresses the plan rewrites before each step, and the
//! step of each batch size is captured once and replayed. A token's logits are the bits of its
//! sequence decoding alone. A sequence's cache may be pages of a pool the plan keeps
//! ([`CudaPlan::new_pool`], `pool.rs`: paged attention over block tables), reached through the
//! same table, with the same bits.
//!
//! Plans of other graphs of the same model (all-positions logits, hidden states) are compiled
//! from a first one with [`CudaPlan::compile_sharing`] and use its weights: one upload per
//! model.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kestrel_tensor::cuda::{
    CudaDevice, DeviceGraph, DeviceIds, DeviceTensor, DeviceTopK, HostBuffer, KvTable, Q8Ticket,
    MAX_WIDE_ROWS,
};
use kestrel_tensor::{DType, Shape, Tensor, TensorError};

use crate::cuda_profile::{self, Profile};
use fuse::Fusions;

mod batch;
mod cache;
mod exec;
mod fuse;
mod moe;
mod pick;
mod pool;
mod ssm;
use crate::ir::{EmbedIndex, Node, Op, Rows};
use crate::{Graph, GraphError};
pub use cache::CudaKvCache;
use cache::{GraphSlot, StepKv};
use exec::unsupported;
pub use pick::{Picked, Picks};

/// A graph compiled for one GPU.
pub struct CudaPlan {
    dev: Arc<CudaDevice>,
    nodes: Vec<Node>,
    output: usize,
    max_tokens: usize,
    /// Uploaded weights, by graph weight index (shared with the plans compiled from this one
    /// by [`CudaPlan::compile_sharing`]), and their names.
    weights: Vec<Arc<DeviceTensor>>,
    weight_names: Vec<String>,
    /// Each node's output buffer (`None` only while the node runs).
    acts: Vec<Option<DeviceTensor>>,
    /// Each layer's K/V row width, and the element type (F16 or Q8_0), of the caches this
    /// plan makes.
    kv_widths: Vec<Option<usize>>,
    kv_dtype: DType,
    /// Layers whose cache is DeepSeek's latent one (keys only: the values are their front), and
    /// each layer's value row (its own head size in DeepSeek's decompressed form).
    kv_latent: Vec<bool>,
    kv_v_widths: Vec<usize>,
    positions: Vec<i32>,
    mask: Vec<i32>,
    ids: Vec<u32>,
    tokens: Vec<i32>,
    /// The step's token ids, positions and (non-causal attention) mask on the device.
    d_tokens: DeviceIds,
    d_positions: DeviceIds,
    d_mask: DeviceIds,
    /// The greedy step's argmax ids (one a sequence), on the device and copied back.
    d_argmax: DeviceIds,
    /// The top-k candidates of `run_top_k` (made at its first call).
    d_topk: Option<DeviceTopK>,
    /// Whether one-token steps replay CUDA graphs, and whether this graph allows it (only
    /// causal attention and embeddings of tokens or positions).
    graphs: bool,
    graphable: bool,
    /// Why graphs were turned off after a failed capture.
    graph_off: Option<String>,
    /// Tells this plan's graphs from another's.
    id: u64,
    /// Per-op GPU times (`KESTREL_CUDA_PROFILE=1`).
    profile: Option<Profile>,
    /// The node whose output the device's matvec scratch holds as Q8_1 this step, and the
    /// ticket naming it: the next matmul of the same node (q, k and v share one input; gate
    /// and up another) skips quantizing it again. Cleared at every step's start.
    q8: Option<(usize, Q8Ticket)>,
    /// What may fuse (`fuse.rs`), whether this plan fuses (`KESTREL_CUDA_FUSE=0` or
    /// [`CudaPlan::set_fusion`] turns it off, for comparison), and the nodes a fused launch
    /// has already written this step.
    fusions: Fusions,
    fuse: bool,
    done: Vec<bool>,
    /// The attention about to run had its keys and values appended by a fused launch.
    appended: bool,
    /// The output rows of the last step, copied back.
    out: HostBuffer,
    /// Adapters the graph's terms belong to, and the scales bound to them (`None`: each
    /// term's built-in factor, the scales the graph was built with).
    adapter_slots: usize,
    adapter_scales: Option<Vec<f32>>,
    /// The plan id of each set of scales bound so far (a few: a cache's graph captured at
    /// some scales replays whenever those scales are bound again).
    scale_ids: Vec<(Vec<f32>, u64)>,
    /// Most sequences of a batched decode step ([`CudaPlan::run_batch`]; output nodes have as
    /// many rows), the table their caches are reached through (made at the first such step),
    /// and each batch size's captured graph.
    max_batch: usize,
    kv_table: Option<KvTable>,
    /// The pool of KV pages paged caches map into (`pool.rs`).
    pool: Option<pool::KvPool>,
    batch_slots: Vec<GraphSlot>,
    /// Each MoE node's experts (`moe.rs`) and the scratch they run in, and whether steps of up
    /// to 64 rows route on the device (else every step waits for its router's logits on the
    /// host, and no step is captured as a graph).
    moe: moe::NodeExperts,
    moe_buf: Option<moe::MoeBuffers>,
    moe_device: bool,
    /// Each recurrent layer's state sizes (`ssm.rs`), for the caches this plan makes, and the
    /// rows of a recurrent graph's batched step (run one sequence at a time).
    ssm_sizes: Vec<Option<(usize, usize)>>,
    each_out: Vec<f32>,
    /// The ids of a greedy batched step (`run_batch_greedy`).
    each_ids: Vec<u32>,
    /// Rows of the smallest token-embedding table: every step's ids are checked against it on
    /// the host (a replayed graph checks nothing).
    vocab: usize,
}

/// Most sets of adapter scales a plan remembers an id for.
const MAX_SCALE_IDS: usize = 64;

/// Plan ids (a cache's graph belongs to the plan that captured it).
static NEXT_PLAN_ID: AtomicU64 = AtomicU64::new(1);

impl std::fmt::Debug for CudaPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaPlan")
            .field("device", &self.dev)
            .field("nodes", &self.nodes.len())
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

fn internal(why: &str) -> GraphError {
    GraphError::Internal(why.to_string())
}

impl Drop for CudaPlan {
    fn drop(&mut self) {
        if let Some(p) = &self.profile {
            eprint!("{}", p.report());
        }
    }
}

impl CudaPlan {
    /// Compiles `graph` for steps of up to `max_tokens` tokens; `weight` finds a weight's tensor
    /// by name.
    ///
    /// # Errors
    /// A missing or misshapen weight, an op the CUDA engine lacks, out of device memory.
    pub fn compile(
        graph: &Graph,
        dev: Arc<CudaDevice>,
        max_tokens: usize,
        weight: &dyn Fn(&str) -> Option<Tensor>,
    ) -> Result<CudaPlan, GraphError> {
        Self::compile_with(graph, dev, max_tokens, weight, None)
    }

    /// Compiles another graph of the same model (all positions' logits for speculative
    /// verification, hidden states for embeddings) on `donor`'s GPU, reusing the weights
    /// `donor` uploaded (same name and dims) instead of uploading them again; `weight` finds
    /// the others.
    ///
    /// # Errors
    /// As [`CudaPlan::compile`].
    pub fn compile_sharing(
        graph: &Graph,
        donor: &CudaPlan,
        max_tokens: usize,
        weight: &dyn Fn(&str) -> Option<Tensor>,
    ) -> Result<CudaPlan, GraphError> {
        Self::compile_with(graph, donor.dev.clone(), max_tokens, weight, Some(donor))
    }

    fn compile_with(
        graph: &Graph,
        dev: Arc<CudaDevice>,
        max_tokens: usize,
        weight: &dyn Fn(&str) -> Option<Tensor>,
        donor: Option<&CudaPlan>,
    ) -> Result<CudaPlan, GraphError> {
        Self::check(graph)?;
        let max_tokens = max_tokens.max(1);
        let max_batch = MAX_WIDE_ROWS.min(max_tokens);
        let output = *graph.outputs().first().ok_or(GraphError::NoOutput)?;
        let mut weights = Vec::with_capacity(graph.weights().len());
        let mut weight_names = Vec::with_capacity(graph.weights().len());
        // Weights an elementwise product reads (a per-head factor may be a matrix, of any
        // type): uploaded as f32 values, as vectors are.
        let mut factors: Vec<usize> = graph
            .nodes()
            .iter()
            .filter_map(|n| match n.op {
                Op::MulWeight { weight } => Some(weight),
                _ => None,
            })
            .collect();
        factors.extend(ssm::f32_weights(graph.nodes()));
        // Per-head matrices (DeepSeek's absorbed k_b / v_b): f32 for `head_matmul`.
        factors.extend(graph.nodes().iter().filter_map(|n| match n.op {
            Op::HeadMatMul { weight, .. } => Some(weight),
            _ => None,
        }));
        let experts = moe::expert_weight_ids(graph);
        for (index, w) in graph.weights().iter().enumerate() {
            weight_names.push(w.name.clone());
            if experts.contains(&index) {
                // Uploaded one matrix an expert (`moe::prepare`); never read whole.
                weights.push(Arc::new(dev.zeros_f32(Shape::vector(1))?));
                continue;
            }
            let shared = donor.and_then(|d| d.shared_weight(&w.name, &w.dims));
            if let Some(t) = shared {
                weights.push(t);
                continue;
            }
            let t = weight(&w.name).ok_or_else(|| GraphError::Weight {
                name: w.name.clone(),
                reason: "not found".into(),
            })?;
            let dims: Vec<u64> = t.shape().dims().iter().map(|&d| d as u64).collect();
            if dims != w.dims {
                return Err(GraphError::Weight {
                    name: w.name.clone(),
                    reason: format!("dims {dims:?}, the graph expects {:?}", w.dims),
                });
            }
            let is_vector = w.dims.iter().skip(1).all(|&d| d == 1) || factors.contains(&index);
            let t = if is_vector && t.dtype() != DType::F32 {
                let v = t.to_f32_vec()?;
                Tensor::from_f32(Shape::vector(v.len()), &v)?
            } else {
                t
            };
            weights.push(Arc::new(dev.upload(&t)?));
        }
        let (moe, moe_buf) = moe::prepare(graph, &dev, max_tokens, weight, donor)?;
        let mut acts = Vec::with_capacity(graph.nodes().len());
        let mut kv_widths: Vec<Option<usize>> = Vec::new();
        let mut kv_latent: Vec<bool> = Vec::new();
        let mut kv_v_widths: Vec<usize> = Vec::new();
        for node in graph.nodes() {
            let rows = match node.rows {
                Rows::Tokens => max_tokens,
                Rows::Outputs => max_batch,
            };
            acts.push(Some(dev.zeros_f32(Shape::matrix(rows, node.width)?)?));
            if let Op::Attention(p) = &node.op {
                if kv_widths.len() <= p.layer {
                    kv_widths.resize(p.layer + 1, None);
                    kv_latent.resize(p.layer + 1, false);
                }
                kv_widths[p.layer] = Some(p.n_kv_head * p.head_dim_k);
                kv_latent[p.layer] = p.latent;
                kv_v_widths.resize(kv_widths.len(), 0);
                kv_v_widths[p.layer] = p.n_kv_head * p.head_dim_v;
            }
        }
        let graphable = graph.nodes().iter().all(|n| match &n.op {
            Op::Attention(p) => p.causal,
            Op::Embed { index, .. } => !matches!(index, EmbedIndex::Row(_)),
            _ => true,
        });
        let profile = if cuda_profile::wanted() {
            let labels = graph
                .nodes()
                .iter()
                .map(|n| match &n.op {
                    Op::MatMul { weight } => {
                        let w = &weights[*weight];
                        let s = w.shape();
                        format!("MatMul {} {}x{}", w.dtype(), s.row_len(), s.n_rows())
                    }
                    op => cuda_profile::op_kind(op),
                })
                .collect();
            Some(Profile::new(&dev, labels)?)
        } else {
            None
        };
        let graphs =
            profile.is_none() && std::env::var("KESTREL_CUDA_GRAPHS").map_or(true, |v| v != "0");
        let types: Vec<DType> = weights.iter().map(|w| w.dtype()).collect();
        let mut fusions = Fusions::find(graph.nodes(), &types, graph.outputs());
        // The GPU run measures each matvec tail against the separate launches.
        fusions.keep_tails(std::env::var("KESTREL_CUDA_TAILS").ok().as_deref());
        let fuse = std::env::var("KESTREL_CUDA_FUSE").map_or(true, |v| v != "0");
        let out_node = &graph.nodes()[output];
        let vocab = graph
            .nodes()
            .iter()
            .filter_map(|n| match n.op {
                Op::Embed {
                    table,
                    index: EmbedIndex::Tokens,
                } => Some(weights[table].shape().n_rows()),
                _ => None,
            })
            .min()
            .unwrap_or(usize::MAX);
        let out_rows = match out_node.rows {
            Rows::Tokens => max_tokens,
            Rows::Outputs => max_batch,
        };
        Ok(CudaPlan {
            nodes: graph.nodes().to_vec(),
            output,
            max_tokens,
            weights,
            weight_names,
            acts,
            kv_widths,
            kv_latent,
            kv_v_widths,
            // A plan sharing another's weights makes caches of its type too.
            kv_dtype: donor.map_or(DType::F16, |d| d.kv_dtype),
            positions: Vec::with_capacity(max_tokens),
            mask: Vec::with_capacity(max_tokens),
            ids: Vec::with_capacity(max_tokens),
            q8: None,
            fusions,
            fuse,
            done: vec![false; graph.nodes().len()],
            appended: false,
            tokens: Vec::with_capacity(max_tokens),
            d_tokens: dev.new_ids(max_tokens)?,
            d_positions: dev.new_ids(max_tokens)?,
            d_mask: dev.new_ids(max_tokens)?,
            d_argmax: dev.new_ids(out_rows.max(1))?,
            d_topk: None,
            graphs,
            graphable,
            graph_off: None,
            profile,
            id: NEXT_PLAN_ID.fetch_add(1, Ordering::Relaxed),
            out: dev.new_host_buffer(out_rows * out_node.width)?,
            adapter_slots: graph
                .nodes()
                .iter()
                .filter_map(|n| match &n.op {
                    Op::AdapterScale { term, .. } => Some(term.adapter + 1),
                    // An adapter on experts or routers only counts too (as the CPU plan's).
                    Op::Moe(p) => p.low_rank.iter().map(|l| l.term.adapter + 1).max(),
                    _ => None,
                })
                .max()
                .unwrap_or(0),
            adapter_scales: None,
            scale_ids: Vec::new(),
            max_batch,
            kv_table: None,
            pool: None,
            batch_slots: (0..max_batch).map(|_| GraphSlot::default()).collect(),
            moe,
            moe_buf,
            moe_device: std::env::var("KESTREL_CUDA_MOE_ROUTE").map_or(true, |v| v != "host"),
            ssm_sizes: ssm::state_sizes(graph.nodes()),
            each_out: Vec::new(),
            each_ids: Vec::with_capacity(max_batch),
            vocab,
            dev,
        })
    }

    /// Whether the CUDA plan runs `graph`: `Err` names the first op it cannot run yet, the
    /// error [`CudaPlan::compile`] gives (checked before anything is uploaded). Needs no GPU
    /// (nor the `cuda` feature): a caller can tell which models a GPU would take.
    ///
    /// # Errors
    /// [`GraphError::Unsupported`] with the op and the node.
    pub fn check(graph: &Graph) -> Result<(), GraphError> {
        match graph
            .nodes()
            .iter()
            .find_map(|n| unsupported(&n.op).map(|op| (op, n)))
        {
            Some((op, node)) => Err(GraphError::Unsupported {
                op,
                node: node.name.clone(),
                backend: "CUDA",
            }),
            None => Ok(()),
        }
    }

    /// LoRA adapters whose terms the graph holds (the length [`set_adapter_scales`]
    /// takes).
    ///
    /// [`set_adapter_scales`]: CudaPlan::set_adapter_scales
    pub fn adapter_slots(&self) -> usize {
        self.adapter_slots
    }

    /// Runs the next steps at `scales` (one per adapter; 0 leaves an adapter out) instead of
    /// the scales the graph was built with. Each term's factor is a launch argument, so the
    /// plan takes an id per set of scales: a cache's captured decode graph, which recorded the
    /// factors of its scales, replays only while those are bound (sequences of a batch at
    /// different scales each keep their graph). Setting the same scales again costs nothing.
    ///
    /// # Errors
    /// Not one scale per adapter, or a scale that is not finite.
    pub fn set_adapter_scales(&mut self, scales: &[f32]) -> Result<(), GraphError> {
        if scales.len() != self.adapter_slots {
            return Err(GraphError::Batch(format!(
                "{} adapter scales given, the plan has {} adapters",
                scales.len(),
                self.adapter_slots
            )));
        }
        if let Some(s) = scales.iter().find(|s| !s.is_finite()) {
            return Err(GraphError::Batch(format!(
                "adapter scale {s} is not finite"
            )));
        }
        if self.adapter_scales.as_deref() == Some(scales) {
            return Ok(());
        }
        self.id = match self.scale_ids.iter().find(|(s, _)| s == scales) {
            Some(&(_, id)) => id,
            None => {
                if self.scale_ids.len() == MAX_SCALE_IDS {
                    self.scale_ids.clear();
                }
                let id = NEXT_PLAN_ID.fetch_add(1, Ordering::Relaxed);
                self.scale_ids.push((scales.to_vec(), id));
                id
            }
        };
        self.adapter_scales = Some(scales.to_vec());
        Ok(())
    }

    /// The uploaded weight `name`, when its dims are `dims`.
    fn shared_weight(&self, name: &str, dims: &[u64]) -> Option<Arc<DeviceTensor>> {
        let i = self.weight_names.iter().position(|n| n == name)?;
        let t = &self.weights[i];
        let have: Vec<u64> = t.shape().dims().iter().map(|&d| d as u64).collect();
        // Vectors, and the weights read as plain f32 values (factors, state-space and per-head
        // matrices), were uploaded as f32 vectors: compare element counts for them.
        let as_values = dims.iter().skip(1).all(|&d| d == 1)
            || (t.dtype() == DType::F32 && t.shape().rank() == 1 && dims.len() > 1);
        let same = have == dims
            || (as_values && t.shape().elem_count() as u64 == dims.iter().product::<u64>());
        same.then(|| Arc::clone(t))
    }

    /// Whether this plan uses the very weight buffer `other` uses for `name` (a plan made by
    /// [`CudaPlan::compile_sharing`] from `other` does; for tests).
    pub fn shares_weight(&self, other: &CudaPlan, name: &str) -> bool {
        let find = |p: &CudaPlan| {
            p.weight_names
                .iter()
                .position(|n| n == name)
                .map(|i| Arc::as_ptr(&p.weights[i]))
        };
        matches!((find(self), find(other)), (Some(a), Some(b)) if a == b)
    }

    /// Most tokens one step takes.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The GPU the plan runs on.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.dev
    }

    /// The element type of the KV caches [`Self::new_cache`] makes from now on: `F16` (the
    /// default) or `Q8_0` (blocks of 32 values, written and read as the CPU engine's q8_0
    /// cache; half the memory). A batched step takes caches of this type only.
    ///
    /// # Errors
    /// Another dtype; `Q8_0` for a graph with an attention head that is not a multiple of 32
    /// values.
    pub fn set_kv_dtype(&mut self, dtype: DType) -> Result<(), GraphError> {
        let op = match dtype {
            DType::F16 => None,
            DType::Q8_0 => self.nodes.iter().find_map(|n| match &n.op {
                Op::Attention(p)
                    if !p.head_dim_k.is_multiple_of(32)
                        || (!p.latent && !p.head_dim_v.is_multiple_of(32)) =>
                {
                    Some(n.name.clone())
                }
                _ => None,
            }),
            _ => Some(String::new()),
        };
        if let Some(node) = op {
            return Err(GraphError::Unsupported {
                op: if dtype == DType::Q8_0 {
                    "a q8_0 KV cache with heads that are not a multiple of 32 values"
                } else {
                    "a KV cache of this dtype (F16 and Q8_0 are)"
                },
                node,
                backend: "CUDA",
            });
        }
        if dtype != self.kv_dtype {
            // The batched steps' graphs launch the kernels of the old type.
            self.batch_slots
                .iter_mut()
                .for_each(|s| *s = GraphSlot::default());
        }
        self.kv_dtype = dtype;
        Ok(())
    }

    /// The element type of the KV caches this plan makes ([`Self::set_kv_dtype`]).
    pub fn kv_dtype(&self) -> DType {
        self.kv_dtype
    }

    /// Turns CUDA graphs for one-token steps on or off (on unless `KESTREL_CUDA_GRAPHS=0`).
    pub fn set_graphs(&mut self, on: bool) {
        self.graphs = on;
    }

    /// Turns the fused launches on or off (on unless `KESTREL_CUDA_FUSE=0`; the outputs are
    /// the same bits either way). A cache's captured graph keeps the launches it recorded.
    pub fn set_fusion(&mut self, on: bool) {
        if on != self.fuse {
            // The batched steps' graphs recorded the other launches.
            self.batch_slots
                .iter_mut()
                .for_each(|s| *s = GraphSlot::default());
        }
        self.fuse = on;
    }

    /// Whether one-token steps replay CUDA graphs.
    pub fn graphs(&self) -> bool {
        self.graphs && self.graphable && self.moe_graphable()
    }

    /// Why a capture failed and turned graphs off for this plan (`None`: it did not).
    pub fn graph_error(&self) -> Option<&str> {
        self.graph_off.as_deref()
    }

    /// Runs one step of the sequence `cache` holds: `tokens` at the positions after the cached
    /// ones. Returns the output node's rows (the last token's logits for a decoder graph),
    /// copied back into a buffer the plan reuses.
    ///
    /// # Errors
    /// No tokens or more than the plan takes, a cache made by another plan, a full context, a
    /// device error.
    pub fn run(&mut self, cache: &mut CudaKvCache, tokens: &[u32]) -> Result<&[f32], GraphError> {
        let (rows, t) = self.step_one(cache, tokens)?;
        self.copy_out(rows, t == 1)
    }

    /// Checks a step's token ids against the embedding table.
    pub(super) fn check_tokens(&self, tokens: &[u32]) -> Result<(), GraphError> {
        match tokens.iter().position(|&t| t as usize >= self.vocab) {
            Some(index) => Err(GraphError::Tensor(TensorError::IdOutOfRange {
                op: "token embedding",
                index,
                id: i64::from(tokens[index]),
                rows: self.vocab,
            })),
            None => Ok(()),
        }
    }

    /// Runs one step of `cache`'s sequence (as [`Self::run`]) and returns the output node's rows
    /// in it and the step's tokens.
    fn step_one(
        &mut self,
        cache: &mut CudaKvCache,
        tokens: &[u32],
    ) -> Result<(usize, usize), GraphError> {
        let t = tokens.len();
        self.check_tokens(tokens)?;
        if t == 0 || t > self.max_tokens {
            return Err(GraphError::TooManyTokens {
                tokens: t,
                max: self.max_tokens,
            });
        }
        if cache.widths != self.kv_widths {
            return Err(internal("the KV cache was made by a plan of another graph"));
        }
        let pos0 = cache.len;
        let end = pos0.saturating_add(t);
        if end > cache.capacity || end > i32::MAX as usize {
            return Err(GraphError::ContextFull {
                needed: end,
                capacity: cache.capacity,
            });
        }
        self.positions.clear();
        self.positions.extend((pos0..end).map(|p| p as i32));
        self.tokens.clear();
        self.tokens.extend(tokens.iter().map(|&t| t as i32));
        self.dev.set_ids(&mut self.d_positions, &self.positions)?;
        self.dev.set_ids(&mut self.d_tokens, &self.tokens)?;
        self.start_states(cache, pos0)?;
        let paged = cache.is_paged();
        if paged {
            // Its pages are reached through the plan's table, one sequence's.
            self.write_sequence_table(cache, t)?;
        }
        if !self.graphable {
            // Non-causal attention: every query sees every key, as if at the last position.
            self.mask.clear();
            self.mask.extend(std::iter::repeat_n((end - 1) as i32, t));
            self.dev.set_ids(&mut self.d_mask, &self.mask)?;
        }
        // The slot leaves the cache for the step (the step borrows the cache).
        let mut slot = std::mem::take(&mut cache.slot);
        let r = {
            let mut kv = if paged {
                StepKv::Paged
            } else {
                StepKv::One(&mut *cache)
            };
            if t == 1 && self.graphs() {
                self.step_graph(&mut kv, &mut slot, tokens, pos0)
            } else {
                self.step_plain(&mut kv, tokens, pos0)
            }
        };
        cache.slot = slot;
        r?;
        cache.len = end;
        cache.dirty = false;
        // One output row a sequence, either way.
        Ok((Self::rows(&self.nodes[self.output], t, &StepKv::Paged), t))
    }

    /// Copies the step's `rows` output rows back into the plan's host buffer (page-locked when
    /// small enough, so a vocabulary of logits comes back at the link's speed) and returns them;
    /// collects the step's profile. The rows are set here, not left from the last plain step: a
    /// replayed graph sets no shape, and the step before may have had another size (a batched
    /// step of 8, then one sequence's).
    fn copy_out(&mut self, rows: usize, decode: bool) -> Result<&[f32], GraphError> {
        self.output_rows(rows)?;
        let out = self.acts[self.output]
            .as_ref()
            .ok_or_else(|| internal("output buffer missing"))?;
        self.dev.download_into_host(out, &mut self.out)?;
        if let Some(p) = self.profile.as_mut() {
            p.collect(decode)?;
        }
        Ok(self.out.values()?)
    }

    /// Shapes the output node's buffer to the step's `rows`.
    fn output_rows(&mut self, rows: usize) -> Result<(), GraphError> {
        let width = self.nodes[self.output].width;
        let out = self.acts[self.output]
            .as_mut()
            .ok_or_else(|| internal("output buffer missing"))?;
        Ok(out.set_shape(Shape::matrix(rows, width)?)?)
    }

    /// Enqueues every node, in order.
    fn step_plain(
        &mut self,
        kv: &mut StepKv<'_>,
        tokens: &[u32],
        pos0: usize,
    ) -> Result<(), GraphError> {
        // The nodes leave the plan for the step, so each op borrows its node without a copy.
        let nodes = std::mem::take(&mut self.nodes);
        self.q8 = None;
        self.done.fill(false);
        // A step that failed part way may have left it set.
        self.appended = false;
        let result = nodes.iter().enumerate().try_for_each(|(i, node)| {
            if let Some(p) = &self.profile {
                p.mark(&self.dev, i, false)?;
            }
            self.exec(i, node, tokens, pos0, kv)?;
            match &self.profile {
                Some(p) => p.mark(&self.dev, i, true),
                None => Ok(()),
            }
        });
        self.nodes = nodes;
        result
    }

    /// A step of one token a sequence through `slot`'s graph: replayed when it is current,
    /// captured when a plain step has run in this epoch, else a plain step that prepares the
    /// capture.
    fn step_graph(
        &mut self,
        kv: &mut StepKv<'_>,
        slot: &mut GraphSlot,
        tokens: &[u32],
        pos0: usize,
    ) -> Result<(), GraphError> {
        let epoch = self.dev.epoch();
        if let Some((id, e, t, g)) = &slot.graph {
            if *id == self.id && *e == epoch && *t == tokens.len() {
                return Ok(g.launch()?);
            }
        }
        slot.graph = None;
        if slot.warm != Some((self.id, epoch)) {
            self.step_plain(kv, tokens, pos0)?;
            slot.warm = Some((self.id, self.dev.epoch()));
            return Ok(());
        }
        let captured = self.capture(kv, tokens, pos0);
        match captured {
            Ok(Some(g)) if self.dev.epoch() == epoch => {
                g.launch()?;
                slot.graph = Some((self.id, epoch, tokens.len(), g));
                Ok(())
            }
            // Nothing recorded, or a scratch buffer moved while recording: plainly this time.
            Ok(_) => {
                slot.warm = None;
                self.step_plain(kv, tokens, pos0)
            }
            // The step cannot be captured: this plan keeps plain launches from now on.
            Err(e) => {
                self.graphs = false;
                self.graph_off = Some(e.to_string());
                self.step_plain(kv, tokens, pos0)
            }
        }
    }

    /// Records one plain step into a graph (not run).
    fn capture(
        &mut self,
        kv: &mut StepKv<'_>,
        tokens: &[u32],
        pos0: usize,
    ) -> Result<Option<DeviceGraph>, GraphError> {
        self.dev.begin_capture()?;
        let recorded = self.step_plain(kv, tokens, pos0);
        let graph = self.dev.end_capture();
        recorded?;
        Ok(graph?)
    }
}
