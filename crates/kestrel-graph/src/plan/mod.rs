//! `ExecutionPlan`: a graph compiled for the CPU engine: weights bound to their (quantized,
//! memory-mapped) bytes, every activation at a fixed offset in one arena, and a `run` that binds
//! the step's token count and executes the nodes in order. Running allocates nothing.
//!
//! [`run_batch`](ExecutionPlan::run_batch) runs several sequences in one step, as vLLM does: a
//! flat token list split into consecutive per-sequence segments, each at its own positions. Every
//! matmul covers all rows at once (each weight is read once per step for the whole batch);
//! attention runs per segment over that sequence's own cache.
//!
//! `compile.rs` binds the weights and plans the arena; `attention.rs` and `ssm.rs` run the
//! nodes that read and write each sequence's cache or state; `adapters.rs` the LoRA terms.

use std::ops::Range;
use std::sync::Arc;

use kestrel_kv::{BatchKv, KvCache, SeqId, SingleSeq};
use kestrel_tensor::cpu;
use kestrel_tensor::{CpuEngine, Tensor};

use crate::ir::{EmbedIndex, Node, NodeId, Op, Rows};
use crate::memory::{split_arena, MemoryPlan};
use crate::moe::{self, grow, MoeScratch, MoeTerms, MoeWeights};
use crate::GraphError;

mod adapters;
mod attention;
mod compile;
mod ssm;
use adapters::StepAdapters;

/// A weight bound to its bytes, with an f32 view for vectors (norm weights, biases, rope
/// frequency factors). Matrices stay in their stored type.
struct BoundWeight {
    tensor: Tensor,
    /// f32 values of a vector weight when it is not an aligned F32 tensor (tiny: one row).
    vector: Option<Vec<f32>>,
    /// The matrix repacked for a faster kernel, when a matmul reads it and a packed layout
    /// serves its type on this CPU (shared by every plan of the model); row lookups (`Embed`)
    /// then read the packed copy too (see `PackedWeight::get_rows`).
    packed: Option<Arc<cpu::PackedWeight>>,
}

impl BoundWeight {
    fn vector(&self) -> Result<&[f32], GraphError> {
        match &self.vector {
            Some(v) => Ok(v),
            None => Ok(self.tensor.as_f32()?),
        }
    }
}

/// One sequence's part of a batched step: `len` consecutive tokens of the flat list, at
/// positions `pos0..pos0 + len` of sequence `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchSeq {
    /// The sequence (its index in the [`BatchKv`]).
    pub seq: SeqId,
    /// Position of its first token in this step.
    pub pos0: usize,
    /// Tokens it has in this step.
    pub len: usize,
}

/// Watches the inputs of a plan's weight matmuls, as llama-imatrix's callback does: how an
/// importance matrix is collected. Installed with [`ExecutionPlan::set_activation_hook`]; a
/// plan without one pays a branch per matmul.
pub trait ActivationHook: Send {
    /// `x` holds the `rows` input rows (`width` values each) of the matmul with `weight`.
    fn dense(&mut self, weight: &str, x: &[f32], rows: usize, width: usize);

    /// `x` holds the rows routed to `expert` (of `n_expert`) of the stacked expert `weight`,
    /// in token order, `slots[i]` the routing slot that chose it for row `i`.
    fn expert(
        &mut self,
        weight: &str,
        n_expert: usize,
        expert: usize,
        x: &[f32],
        width: usize,
        slots: &[usize],
    );
}

/// A compiled plan for steps of at most `max_tokens` tokens.
pub struct ExecutionPlan {
    nodes: Vec<Node>,
    output: NodeId,
    mem: MemoryPlan,
    max_tokens: usize,
    max_outputs: usize,
    /// The step's segments (capacity `max_tokens`: a segment has at least one token).
    segs: Vec<BatchSeq>,
    /// The step's output rows (capacity `max_outputs`).
    out_rows: Vec<usize>,
    /// Rows per segment of the step, for matmuls over all its tokens (capacity `max_tokens`).
    seg_rows: Vec<usize>,
    /// The step's output rows as segments for matmuls over them (capacity `max_outputs`):
    /// consecutive output rows of one sequence form one segment.
    out_segs: Vec<usize>,
    arena: Vec<f32>,
    weights: Vec<BoundWeight>,
    /// The weights' GGUF names (for the activation hook).
    weight_names: Vec<String>,
    /// Sees each weight matmul's inputs, when installed.
    hook: Option<Box<dyn ActivationHook>>,
    positions: Vec<i32>,
    /// Mask positions for non-causal attention (every query "at" the last key).
    mask_positions: Vec<i32>,
    /// The matmuls' converted activations. Owned by the plan, not by whichever pool thread
    /// runs a step, so once it has grown no step allocates (a thread-local scratch allocated
    /// again whenever a step landed on a worker that had not run one before).
    scratch: cpu::MatmulScratch,
    moe_scratch: MoeScratch,
    /// One head's inputs and outputs of a per-head matmul (grown once to the largest step).
    head_in: Vec<f32>,
    /// A LoRA term's `x · Aᵀ` rows (grown once to the largest step).
    low_rank: Vec<f32>,
    /// The expert LoRA terms' factors of an MoE node's rows (grown once).
    moe_factors: Vec<f32>,
    /// A LoRA term's input rounded as its `A` reads it (grown once).
    low_rank_in: Vec<f32>,
    /// One-row steps' LoRA terms computed beside their matmuls.
    ahead: adapters::Ahead,
    /// The adapter scales of the step's sequences.
    adapters: StepAdapters,
    head_out: Vec<f32>,
    /// RoPE angles of the step's positions, computed by the first layer and reused by the rest.
    rope_cache: cpu::RopeCache,
    /// Node tracing for numerics work, read from the environment once at compile time:
    /// `KESTREL_TRACE=1` prints each node's output sum (f32, in memory order, as llama.cpp's
    /// eval callback prints it), `KESTREL_TRACE=<dir>` also writes each node's output to
    /// `<dir>/n<node>.f32` (the last step's, little-endian). Off: one branch per node.
    trace: Option<String>,
}

impl std::fmt::Debug for ExecutionPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionPlan")
            .field("nodes", &self.nodes.len())
            .field("max_tokens", &self.max_tokens)
            .field("arena_bytes", &(self.arena.len() * 4))
            .finish()
    }
}

impl ExecutionPlan {
    /// Installs (or with `None` removes) the hook that sees every weight matmul's inputs;
    /// returns the one installed before.
    pub fn set_activation_hook(
        &mut self,
        hook: Option<Box<dyn ActivationHook>>,
    ) -> Option<Box<dyn ActivationHook>> {
        std::mem::replace(&mut self.hook, hook)
    }

    /// The most tokens one step may hold.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Bytes of the activation arena.
    pub fn arena_bytes(&self) -> usize {
        self.arena.len() * std::mem::size_of::<f32>()
    }

    /// The most output rows one step may ask for.
    pub fn max_outputs(&self) -> usize {
        self.max_outputs
    }

    /// LoRA adapters the graph's low-rank terms belong to (each step's scales give one scale per
    /// adapter and sequence).
    pub fn adapter_slots(&self) -> usize {
        self.adapters.slots()
    }

    /// The adapter scales of steps that give none ([`run`](Self::run), and
    /// [`run_batch`](Self::run_batch) without scales): one per
    /// [adapter slot](Self::adapter_slots), 0 leaving an adapter out. Until this is called each
    /// term has the factor its graph gave it. Allocates only the first time.
    ///
    /// # Errors
    /// A count other than the plan's adapters, or a scale that is not finite.
    pub fn set_adapter_scales(&mut self, scales: &[f32]) -> Result<(), GraphError> {
        self.adapters.set_defaults(scales)
    }

    /// Run one step: `tokens` at positions `pos0..`, reading and extending `kv` (committed to
    /// `pos0 + tokens.len()` on success). Returns the output node's rows (the last token's
    /// logits, or every token's for a graph without an output-row selection).
    pub fn run(
        &mut self,
        engine: &CpuEngine,
        kv: &mut dyn KvCache,
        tokens: &[u32],
        pos0: usize,
    ) -> Result<&[f32], GraphError> {
        let t = tokens.len();
        let end = pos0
            .checked_add(t)
            .filter(|&e| e <= kv.capacity() && e <= i32::MAX as usize)
            .ok_or(GraphError::ContextFull {
                needed: pos0.saturating_add(t),
                capacity: kv.capacity(),
            })?;
        let seg = [BatchSeq {
            seq: 0,
            pos0,
            len: t,
        }];
        let last = [t.saturating_sub(1)];
        self.execute(engine, &mut SingleSeq(&mut *kv), tokens, &seg, &last, &[])?;
        kv.commit(end)?;
        Ok(self.output_rows(t))
    }

    /// Run one batched step: `tokens` is the concatenation of the segments `seqs` (in order),
    /// and `outputs` lists the flat rows to return outputs for (e.g. each segment's last row).
    /// Keys and values are written to `kv` at each segment's positions, which must already have
    /// room; committing the new lengths is the caller's (so a rejected draft is not kept).
    /// Returns `outputs.len()` rows of the output node (every token's row for a graph without an
    /// output-row selection).
    ///
    /// `adapter_scales` holds each segment's scale of each of the graph's LoRA adapters
    /// ([`adapter_slots`](Self::adapter_slots) per segment, in order; 0 leaves an adapter out
    /// of that sequence); empty: every segment at the plan's scales.
    pub fn run_batch(
        &mut self,
        engine: &CpuEngine,
        kv: &mut dyn BatchKv,
        tokens: &[u32],
        seqs: &[BatchSeq],
        outputs: &[usize],
        adapter_scales: &[f32],
    ) -> Result<&[f32], GraphError> {
        self.execute(engine, kv, tokens, seqs, outputs, adapter_scales)?;
        Ok(self.output_rows(tokens.len()))
    }

    fn output_rows(&self, t: usize) -> &[f32] {
        &self.arena[self.range(self.output, t)]
    }

    fn execute(
        &mut self,
        engine: &CpuEngine,
        kv: &mut dyn BatchKv,
        tokens: &[u32],
        seqs: &[BatchSeq],
        outputs: &[usize],
        adapter_scales: &[f32],
    ) -> Result<(), GraphError> {
        let t = tokens.len();
        if t == 0 || t > self.max_tokens {
            return Err(GraphError::TooManyTokens {
                tokens: t,
                max: self.max_tokens,
            });
        }
        let bad = |why: String| Err(GraphError::Batch(why));
        if outputs.is_empty() || outputs.len() > self.max_outputs {
            return bad(format!(
                "{} output rows asked, the plan allows 1..={}",
                outputs.len(),
                self.max_outputs
            ));
        }
        if let Some(&r) = outputs.iter().find(|&&r| r >= t) {
            return bad(format!("output row {r} is past the step's {t} tokens"));
        }
        let covered = seqs.iter().try_fold(0usize, |acc, s| {
            (s.len > 0 && s.pos0.checked_add(s.len)? <= i32::MAX as usize)
                .then(|| acc.checked_add(s.len))
                .flatten()
        });
        if covered != Some(t) {
            return bad(format!(
                "the segments must have at least one token each, positions below 2^31, and cover the step's {t} tokens"
            ));
        }
        self.adapters.bind(seqs, adapter_scales)?;
        self.segs.clear();
        self.segs.extend_from_slice(seqs);
        self.seg_rows.clear();
        self.seg_rows.extend(seqs.iter().map(|s| s.len));
        self.out_rows.clear();
        self.out_rows.extend_from_slice(outputs);
        self.out_segs.clear();
        let mut last_seq = usize::MAX;
        for &r in outputs {
            let mut end = 0;
            let seq = seqs
                .iter()
                .position(|s| {
                    end += s.len;
                    r < end
                })
                .unwrap_or(usize::MAX);
            match self.out_segs.last_mut() {
                Some(n) if seq == last_seq => *n += 1,
                _ => self.out_segs.push(1),
            }
            last_seq = seq;
        }
        let mut row = 0;
        for s in seqs {
            for (i, p) in self.positions[row..row + s.len].iter_mut().enumerate() {
                *p = (s.pos0 + i) as i32;
            }
            row += s.len;
        }
        self.ahead.clear();
        engine.install(|| -> Result<(), GraphError> {
            for i in 0..self.nodes.len() {
                self.exec(i, kv, tokens)?;
                if self.trace.is_some() {
                    self.trace_node(i, tokens.len());
                }
            }
            Ok(())
        })
    }

    /// See the `trace` field.
    fn trace_node(&self, i: usize, t: usize) {
        let d = &self.arena[self.range(i, t)];
        let sum: f32 = d.iter().sum();
        let op = format!("{:?}", self.nodes[i].op);
        let op = op.get(..op.len().min(60)).unwrap_or(&op);
        eprintln!("kestrel trace: node {i} {op} len={} sum={sum:.6}", d.len());
        if let Some(dir) = self.trace.as_deref().filter(|v| *v != "1") {
            let bytes: Vec<u8> = d.iter().flat_map(|v| v.to_le_bytes()).collect();
            if let Err(e) = std::fs::write(format!("{dir}/n{i}.f32"), bytes) {
                eprintln!("kestrel trace: cannot write node {i} to {dir}: {e}");
            }
        }
    }

    fn rows(&self, id: NodeId, t: usize) -> usize {
        match self.nodes[id].rows {
            Rows::Tokens => t,
            Rows::Outputs => self.out_rows.len(),
        }
    }

    fn range(&self, id: NodeId, t: usize) -> Range<usize> {
        let off = self.mem.offsets[id];
        off..off + self.rows(id, t) * self.nodes[id].width
    }

    fn exec(&mut self, i: usize, kv: &mut dyn BatchKv, tokens: &[u32]) -> Result<(), GraphError> {
        let t = tokens.len();
        let node = &self.nodes[i];
        let rows = self.rows(i, t);
        let width = node.width;
        let mut ins = [0..0, 0..0, 0..0];
        for (slot, &inp) in ins.iter_mut().zip(&node.inputs) {
            *slot = self.range(inp, t);
        }
        let in_rows = node
            .inputs
            .first()
            .map(|&x| self.rows(x, t))
            .unwrap_or(rows);
        let in_width = node
            .inputs
            .first()
            .map(|&x| self.nodes[x].width)
            .unwrap_or(width);
        let out_range = self.range(i, t);
        let (out, [a, b, c]) = split_arena(&mut self.arena, out_range, ins)?;
        let positions = &self.positions[..t];
        match &node.op {
            Op::Embed { table, index } => {
                let bound = &self.weights[*table];
                let w = &bound.tensor;
                let dims = w.shape();
                let get = |ids: &[u32], out: &mut [f32]| match &bound.packed {
                    Some(p) => p.get_rows(ids, out),
                    None => cpu::get_rows(
                        w.as_bytes(),
                        w.dtype(),
                        dims.n_rows(),
                        dims.row_len(),
                        ids,
                        out,
                    ),
                };
                match index {
                    EmbedIndex::Tokens => get(tokens, out)?,
                    EmbedIndex::Positions => {
                        // Positions are below 2^31 (checked when the step was bound).
                        for (o, &p) in out.chunks_exact_mut(width).zip(positions) {
                            get(&[p as u32], o)?;
                        }
                    }
                    EmbedIndex::Row(r) => {
                        let (first, rest) = out.split_at_mut(width);
                        get(&[*r], first)?;
                        for o in rest.chunks_exact_mut(width) {
                            o.copy_from_slice(first);
                        }
                    }
                }
            }
            Op::MatMul { weight } => {
                if let Some(h) = self.hook.as_mut() {
                    h.dense(
                        &self.weight_names[*weight],
                        &a[..in_rows * in_width],
                        in_rows,
                        in_width,
                    );
                }
                let bound = &self.weights[*weight];
                // Each row's numerics follow its own sequence's rows only (see
                // `matmul_segmented`): all of the step's tokens by segment, or the output rows
                // by their sequences' runs.
                let segments = if in_rows == t {
                    &self.seg_rows[..]
                } else {
                    &self.out_segs[..]
                };
                let scratch = &mut self.scratch;
                let x = &a[..in_rows * in_width];
                let mut base = || -> Result<(), GraphError> {
                    if let Some(p) = &bound.packed {
                        cpu::matmul_packed(x, in_rows, p, out, segments, scratch)?;
                    } else {
                        let w = &bound.tensor;
                        cpu::matmul_segmented(
                            x,
                            in_rows,
                            in_width,
                            w.as_bytes(),
                            w.dtype(),
                            width,
                            out,
                            segments,
                            scratch,
                        )?;
                    }
                    Ok(())
                };
                if in_rows != 1 || !self.ahead.assigned(i) {
                    return base();
                }
                let mut terms = [adapters::AheadTerm::NONE; adapters::MAX_AHEAD];
                let n = adapters::terms_ahead(
                    &self.ahead,
                    &self.nodes,
                    &self.weights,
                    &mut self.adapters,
                    &self.out_rows,
                    (i, t),
                    &mut terms,
                );
                match n {
                    0 => base()?,
                    _ => {
                        let ahead = &mut self.ahead;
                        rayon::join(base, || ahead.compute(&terms[..n], x)).0?;
                    }
                }
            }
            Op::AddBias { bias } => {
                let bv = self.weights[*bias].vector()?;
                for (o, x) in out.chunks_exact_mut(width).zip(a.chunks_exact(width)) {
                    for ((o, &x), &b) in o.iter_mut().zip(x).zip(bv) {
                        *o = x + b;
                    }
                }
            }
            Op::RmsNorm { group, eps, weight } => {
                let wv = match weight {
                    Some(w) => Some(self.weights[*w].vector()?),
                    None => None,
                };
                cpu::rms_norm(a, *group, wv, *eps, out)?;
            }
            Op::LayerNorm {
                group,
                eps,
                weight,
                bias,
            } => {
                let vec = |w: &Option<usize>| match w {
                    Some(w) => self.weights[*w].vector().map(Some),
                    None => Ok(None),
                };
                cpu::layer_norm(a, *group, vec(weight)?, vec(bias)?, *eps, out)?;
            }
            Op::Rope(p) => {
                out.copy_from_slice(a);
                let params = p.engine_params();
                let ff = match p.freq_factors {
                    Some(w) => Some(self.weights[w].vector()?),
                    None => None,
                };
                let cache = &mut self.rope_cache;
                cpu::rope_with(out, p.n_head, p.head_dim, positions, &params, ff, cache)?;
            }
            Op::Attention(p) if p.latent || p.head_dim_k != p.head_dim_v => {
                attention::latent(p, &self.segs, kv, [a, b, c], positions, out)?
            }
            Op::Attention(p) => {
                let sinks = match p.sinks {
                    Some(w) => Some(self.weights[w].vector()?),
                    None => None,
                };
                let mask = &mut self.mask_positions[..t];
                attention::standard(p, &self.segs, kv, [a, b, c], positions, mask, sinks, out)?
            }
            Op::Add => cpu::add(a, b, out)?,
            Op::Mul => cpu::mul(a, b, out)?,
            Op::Scale(s) => {
                out.copy_from_slice(a);
                cpu::scale(out, *s);
            }
            Op::LowRank {
                a: wa,
                bt,
                scale,
                term,
                inputs,
            } => {
                let half = |w: usize| {
                    adapters::HalfRef::of(&self.weights[w].tensor).map_err(|e| {
                        GraphError::Internal(format!(
                            "low-rank term {}: {} is neither F32 nor F16 ({e})",
                            node.name, self.weight_names[w]
                        ))
                    })
                };
                let f = self.adapters.factors(term, *scale, rows, t, &self.out_rows);
                if rows == 1 && self.ahead.finish(i, f[0], a, out) {
                    return Ok(());
                }
                let io = adapters::LowRankIo {
                    a: half(*wa)?,
                    bt: half(*bt)?,
                    k: self.nodes[node.inputs[1]].width,
                    m: width,
                    factors: f,
                    inputs: *inputs,
                };
                let (low, rounded) = (&mut self.low_rank, &mut self.low_rank_in);
                adapters::low_rank(&io, a, b, out, low, rounded)?;
            }
            Op::AdapterScale { scale, term } => {
                let f = self.adapters.factors(term, *scale, rows, t, &self.out_rows);
                adapters::scale_rows(a, f, out);
            }
            Op::SoftCap(cap) => {
                for (o, &x) in out.iter_mut().zip(a) {
                    *o = cap * (x / cap).tanh();
                }
            }
            Op::SwiGlu => cpu::swiglu(a, b, out)?,
            Op::GeGlu => cpu::geglu(a, b, out)?,
            Op::GeluErf => {
                out.copy_from_slice(a);
                cpu::gelu_erf(out);
            }
            Op::Gelu => {
                out.copy_from_slice(a);
                cpu::gelu(out);
            }
            Op::Silu => {
                out.copy_from_slice(a);
                cpu::silu(out);
            }
            Op::Sigmoid => {
                for (o, &x) in out.iter_mut().zip(a) {
                    *o = 1.0 / (1.0 + (-x).exp());
                }
            }
            Op::MulRowScalar => {
                for (o, (x, &f)) in out
                    .chunks_exact_mut(width)
                    .zip(a.chunks_exact(width).zip(b))
                {
                    for (o, &x) in o.iter_mut().zip(x) {
                        *o = x * f;
                    }
                }
            }
            Op::AttnTemperature(t) => {
                for (o, (x, &pos)) in out
                    .chunks_exact_mut(width)
                    .zip(a.chunks_exact(width).zip(positions))
                {
                    let f = t.factor(pos);
                    for (o, &x) in o.iter_mut().zip(x) {
                        *o = x * f;
                    }
                }
            }
            Op::ReluSqr => {
                for (o, &x) in out.iter_mut().zip(a) {
                    let r = x.max(0.0);
                    *o = r * r;
                }
            }
            Op::MulWeight { weight } => {
                let f = self.weights[*weight].vector()?;
                if let [s] = f {
                    for (o, &x) in out.iter_mut().zip(a) {
                        *o = x * s;
                    }
                } else {
                    for (o, x) in out.chunks_exact_mut(width).zip(a.chunks_exact(width)) {
                        for ((o, &x), &f) in o.iter_mut().zip(x).zip(f) {
                            *o = x * f;
                        }
                    }
                }
            }
            Op::Moe(p) => {
                let segments = if in_rows == t {
                    &self.seg_rows[..]
                } else {
                    &self.out_segs[..]
                };
                // Each LoRA term's factor per row, from the step's scales.
                let nt = p.low_rank.len();
                let fs = grow(&mut self.moe_factors, nt * rows);
                for (j, pair) in p.low_rank.iter().enumerate() {
                    let f = self
                        .adapters
                        .factors(&pair.term, pair.scale, rows, t, &self.out_rows);
                    fs[j * rows..(j + 1) * rows].copy_from_slice(f);
                }
                let ws = &self.weights;
                let vec = |id: Option<usize>| -> Result<Option<&[f32]>, GraphError> {
                    id.map(|i| ws[i].vector()).transpose()
                };
                let tensor = |id: usize| &ws[id].tensor;
                let bound = MoeWeights {
                    router: &ws[p.router].tensor,
                    router_bias: vec(p.router_bias)?,
                    selection_bias: vec(p.selection_bias)?,
                    up: &ws[p.up].tensor,
                    gate: p.gate.map(|g| &ws[g].tensor),
                    down: &ws[p.down].tensor,
                    scales: [vec(p.scales[0])?, vec(p.scales[1])?, vec(p.scales[2])?],
                    biases: [vec(p.biases[0])?, vec(p.biases[1])?, vec(p.biases[2])?],
                    low_rank: (nt > 0).then_some(MoeTerms {
                        pairs: &p.low_rank,
                        tensor: &tensor,
                        factors: &self.moe_factors[..nt * rows],
                    }),
                };
                let names = &self.weight_names;
                let hook = self.hook.as_deref_mut().map(|h| {
                    let gate = p.gate.map(|g| names[g].as_str()).unwrap_or("");
                    (h, [names[p.up].as_str(), gate, names[p.down].as_str()])
                });
                // The router's input: a second input where the graph gives one.
                let (rx, rw) = match node.inputs.get(1) {
                    Some(&r) => {
                        let rw = self.nodes[r].width;
                        (&b[..in_rows * rw], rw)
                    }
                    None => (&a[..in_rows * width], width),
                };
                moe::run(
                    p,
                    &bound,
                    &a[..in_rows * width],
                    (rx, rw),
                    width,
                    segments,
                    &mut self.moe_scratch,
                    out,
                    hook,
                )?;
            }
            Op::Clamp(limit) => {
                for (o, &x) in out.iter_mut().zip(a) {
                    *o = x.clamp(-limit, *limit);
                }
            }
            Op::Slice { offset } => {
                for (o, x) in out.chunks_exact_mut(width).zip(a.chunks_exact(in_width)) {
                    o.copy_from_slice(&x[*offset..*offset + width]);
                }
            }
            Op::HeadMatMul { weight, n_head } => {
                let segments = if in_rows == t {
                    &self.seg_rows[..]
                } else {
                    &self.out_segs[..]
                };
                let (hk, hm) = (in_width / n_head, width / n_head);
                let xin = grow(&mut self.head_in, in_rows * hk);
                let xout = grow(&mut self.head_out, in_rows * hm);
                for h in 0..*n_head {
                    let (bytes, dtype, k, m) = moe::expert_bytes(&self.weights[*weight].tensor, h)?;
                    if (k, m) != (hk, hm) {
                        return Err(GraphError::Internal(format!(
                            "{}: head matrix {k}×{m} for heads of {hk} and {hm}",
                            node.name
                        )));
                    }
                    for (d, x) in xin.chunks_exact_mut(hk).zip(a.chunks_exact(in_width)) {
                        d.copy_from_slice(&x[h * hk..(h + 1) * hk]);
                    }
                    cpu::matmul_segmented(
                        xin,
                        in_rows,
                        hk,
                        bytes,
                        dtype,
                        hm,
                        xout,
                        segments,
                        &mut self.scratch,
                    )?;
                    for (o, y) in out.chunks_exact_mut(width).zip(xout.chunks_exact(hm)) {
                        o[h * hm..(h + 1) * hm].copy_from_slice(y);
                    }
                }
            }
            Op::HeadSlice {
                n_head,
                head_in,
                offset,
            } => {
                let w = width / n_head;
                for (o, x) in out.chunks_exact_mut(width).zip(a.chunks_exact(in_width)) {
                    for (oh, xh) in o.chunks_exact_mut(w).zip(x.chunks_exact(*head_in)) {
                        oh.copy_from_slice(&xh[*offset..*offset + w]);
                    }
                }
            }
            Op::HeadConcat { n_head, heads } => {
                let wb_all = self.nodes[node.inputs[1]].width;
                let (wa, wb) = (in_width / heads[0], wb_all / heads[1]);
                for ((o, x), y) in out
                    .chunks_exact_mut(width)
                    .zip(a.chunks_exact(in_width))
                    .zip(b.chunks_exact(wb_all))
                {
                    for (h, oh) in o.chunks_exact_mut(wa + wb).enumerate().take(*n_head) {
                        let (ha, hb) = (h % heads[0], h % heads[1]);
                        oh[..wa].copy_from_slice(&x[ha * wa..(ha + 1) * wa]);
                        oh[wa..].copy_from_slice(&y[hb * wb..(hb + 1) * wb]);
                    }
                }
            }
            Op::OutputRows => {
                for (o, &r) in out.chunks_exact_mut(width).zip(&self.out_rows) {
                    o.copy_from_slice(&a[r * width..(r + 1) * width]);
                }
            }
            Op::SsmConv(p) => {
                let w = self.weights[p.weight].vector()?;
                let bias = match p.bias {
                    Some(b) => Some(self.weights[b].vector()?),
                    None => None,
                };
                ssm::conv(p, &self.segs, kv, a, (w, bias), width, out)?
            }
            Op::SsmScan(p) => {
                let (av, dv) = (self.weights[p.a].vector()?, self.weights[p.d].vector()?);
                ssm::scan(p, &self.segs, kv, [a, b, c], (av, dv), width, out)?
            }
        }
        Ok(())
    }
}
