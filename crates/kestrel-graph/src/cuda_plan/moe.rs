//! The CUDA plan's mixture-of-experts FFN ([`Op::Moe`]).
//!
//! Two ways, the same arithmetic. Steps of up to 64 rows (decode, batched decode, short
//! prefills) of a layer the device can route route on the device (`moe/routed.rs`): nothing is
//! copied back, so such plans capture their decode steps in CUDA graphs. Other steps, and
//! layers with LoRA terms or rules the routing kernel does not take, route on the host: the
//! router's logits are computed on the GPU and copied back; the experts are chosen by the CPU
//! plan's own routing (`crate::moe::route`: every gating, expert groups, selection bias, weight
//! normalisation), so both engines choose the same experts. Each chosen expert then runs on the
//! GPU over the rows that chose it (gathered), its gate/up/down matrices uploaded one per expert
//! at compile time, still quantized; each row's output goes weighted into its (token, slot)
//! row, and a token's slots are added in the order chosen, as the CPU does. LoRA terms (llama.cpp's
//! `build_lora_mm_id` / `build_lora_mm`) add `factor · (x · A_eᵀ) · B_eᵀ` to an expert's
//! projection after its scale and before its bias, and to the router's logits before its bias,
//! each factor the step's bound adapter scale's, as the CPU plan's `moe/terms.rs`.

use std::sync::Arc;

use kestrel_tensor::cuda::{
    CudaDevice, DeviceIds, DeviceRoutes, DeviceTensor, ExpertTable, RouteGating, RouteSpec, Unary,
    MAX_WIDE_ROWS,
};
use kestrel_tensor::{Shape, Tensor};

use super::{internal, CudaPlan};
use crate::ir::{MoeActivation, MoeGating, MoeLowRank, MoeParams, MoeProj, Node, Op};
use crate::moe::{expert_bytes, route, MoeScratch};
use crate::{Graph, GraphError};

mod routed;

/// One MoE node's weights on the device: each expert's matrices, and the per-expert factors.
pub(super) struct ExpertWeights {
    /// The up projections (with a fused gate: gate and up stacked), one matrix an expert.
    up: ExpertTable,
    gate: Option<ExpertTable>,
    down: ExpertTable,
    /// Per-expert scales of up, gate and down (host values, and on the device).
    scales: [Option<Vec<f32>>; 3],
    d_scales: [Option<DeviceTensor>; 3],
    /// Per-expert biases of up, gate and down, one device vector an expert (and all experts'
    /// in one, `n_expert × m`, for the routed path).
    biases: [Option<Vec<DeviceTensor>>; 3],
    d_biases: [Option<DeviceTensor>; 3],
    router_bias: Option<Vec<f32>>,
    selection_bias: Option<Vec<f32>>,
    d_router_bias: Option<DeviceTensor>,
    d_selection_bias: Option<DeviceTensor>,
    /// The node's routing rule when the device can route it (no LoRA terms, a rule the
    /// routing kernel takes, experts the indirect matvec reads).
    route: Option<RouteSpec>,
    /// The LoRA terms of expert projections: each term's halves, one matrix an expert (router
    /// terms read the plan's own 2-D weights).
    terms: Vec<(MoeLowRank, Vec<DeviceTensor>, Vec<DeviceTensor>)>,
}

/// Device and host scratch of a plan's MoE nodes, sized for the largest step and node.
pub(super) struct MoeBuffers {
    host: MoeScratch,
    logits: DeviceTensor,
    /// Activation-sized buffers (rows × the widest of the node width and the expert's outputs).
    xg: DeviceTensor,
    both: DeviceTensor,
    gate: DeviceTensor,
    up: DeviceTensor,
    act: DeviceTensor,
    down: DeviceTensor,
    spare: DeviceTensor,
    /// A LoRA term's `x · Aᵀ` and `(x · Aᵀ) · Bᵀ`.
    low: DeviceTensor,
    term: DeviceTensor,
    /// Every (row, slot)'s weighted expert output (the routed path: its expert's output).
    outs: DeviceTensor,
    /// The routed path's routing (when any node routes on the device).
    routes: Option<DeviceRoutes>,
    rows: Vec<u32>,
    dst_rows: Vec<i32>,
    wts: Vec<f32>,
    d_rows: DeviceIds,
    d_wts: DeviceTensor,
}

/// The weight ids of MoE nodes' expert matrices (uploaded per expert, not whole).
pub(super) fn expert_weight_ids(graph: &Graph) -> Vec<usize> {
    let mut ids = Vec::new();
    for n in graph.nodes() {
        if let Op::Moe(p) = &n.op {
            ids.push(p.up);
            ids.push(p.down);
            ids.extend(p.gate);
            // The experts' LoRA halves, split likewise (the router's are plain matrices).
            for t in p.low_rank.iter().filter(|t| t.proj != MoeProj::Router) {
                ids.extend([t.a, t.b]);
            }
        }
    }
    ids
}

/// A plan's MoE nodes' experts: node `i`'s (with its up projection's name, by which plans
/// compiled from this one share them), `None` for other nodes.
pub(super) type NodeExperts = Vec<Option<(String, Arc<ExpertWeights>)>>;

/// Uploads each MoE node's experts (reusing `donor`'s for the same weight names) and sizes the
/// scratch for steps of `max_tokens` rows.
pub(super) fn prepare(
    graph: &Graph,
    dev: &Arc<CudaDevice>,
    max_tokens: usize,
    weight: &dyn Fn(&str) -> Option<Tensor>,
    donor: Option<&CudaPlan>,
) -> Result<(NodeExperts, Option<MoeBuffers>), GraphError> {
    let names: Vec<&str> = graph.weights().iter().map(|w| w.name.as_str()).collect();
    let mut experts = Vec::with_capacity(graph.nodes().len());
    // Most experts, the widest activation, the most slots × width of any MoE node; the most
    // slots of a node the device routes.
    let (mut ne_max, mut wide, mut slots_width, mut rank) = (0usize, 0usize, 0usize, 0usize);
    let mut routed_k = 0usize;
    for n in graph.nodes() {
        let Op::Moe(p) = &n.op else {
            experts.push(None);
            continue;
        };
        let key = names[p.up];
        let shared = donor.and_then(|d| {
            d.moe
                .iter()
                .flatten()
                .find(|(name, _)| name == key)
                .map(|(_, e)| Arc::clone(e))
        });
        let e = match shared {
            Some(e) => e,
            None => Arc::new(upload_experts(p, &names, dev, weight)?),
        };
        if e.route.is_some() {
            routed_k = routed_k.max(p.n_used);
        }
        experts.push(Some((key.to_string(), e)));
        ne_max = ne_max.max(p.n_expert);
        wide = wide.max(n.width).max(2 * p.n_ff);
        slots_width = slots_width.max(p.n_used * n.width);
        rank = p
            .low_rank
            .iter()
            .map(|t| t.term.rank)
            .fold(rank, usize::max);
    }
    let buffers = if ne_max == 0 {
        None
    } else {
        // The routed path's gate, up and activation rows are a row a (token, slot) pair: up to
        // 64 tokens' (its expert outputs fit `outs`), so those buffers and the ones they trade
        // places with (`spare`, in `project`) hold that many; its Q8_1 scratch is grown now for
        // them, so no step grows it and retires captured graphs.
        let routed_pairs = max_tokens.clamp(1, MAX_WIDE_ROWS) * routed_k;
        let rows = max_tokens.max(1);
        let pair_rows = rows.max(routed_pairs);
        if routed_k > 0 {
            dev.reserve_q8(routed_pairs, wide)?;
        }
        let act = |w: usize| dev.zeros_f32(Shape::matrix(rows, w.max(1))?);
        let pair_act = |w: usize| dev.zeros_f32(Shape::matrix(pair_rows, w.max(1))?);
        // The buffers a projection swaps with `spare` (the router's logits too, with terms)
        // hold the widest of them.
        let wide = wide.max(ne_max);
        Some(MoeBuffers {
            host: MoeScratch::default(),
            logits: pair_act(wide)?,
            xg: act(wide)?,
            both: pair_act(wide)?,
            gate: pair_act(wide)?,
            up: pair_act(wide)?,
            act: pair_act(wide)?,
            down: pair_act(wide)?,
            spare: pair_act(wide)?,
            low: act(rank)?,
            term: act(wide)?,
            outs: act(slots_width)?,
            routes: (routed_k > 0)
                .then(|| dev.new_routes(routed_pairs))
                .transpose()?,
            rows: Vec::with_capacity(rows),
            dst_rows: Vec::with_capacity(rows),
            wts: Vec::with_capacity(rows),
            d_rows: dev.new_ids(rows)?,
            d_wts: act(1)?,
        })
    };
    Ok((experts, buffers))
}

/// Each expert of `p` as its own device matrices, and the per-expert factors.
fn upload_experts(
    p: &MoeParams,
    names: &[&str],
    dev: &Arc<CudaDevice>,
    weight: &dyn Fn(&str) -> Option<Tensor>,
) -> Result<ExpertWeights, GraphError> {
    let get = |id: usize| {
        weight(names[id]).ok_or_else(|| GraphError::Weight {
            name: names[id].to_string(),
            reason: "not found".into(),
        })
    };
    let split = |id: usize| -> Result<Vec<DeviceTensor>, GraphError> {
        let t = get(id)?;
        (0..p.n_expert)
            .map(|e| {
                let (bytes, dtype, k, m) = expert_bytes(&t, e)?;
                let one = Tensor::from_bytes(dtype, Shape::matrix(m, k)?, bytes)?;
                Ok(dev.upload(&one)?)
            })
            .collect()
    };
    let values = |id: Option<usize>| -> Result<Option<Vec<f32>>, GraphError> {
        id.map(|i| Ok(get(i)?.to_f32_vec()?)).transpose()
    };
    let on_device = |v: &Option<Vec<f32>>| -> Result<Option<DeviceTensor>, GraphError> {
        v.as_ref()
            .map(|v| Ok(dev.upload(&Tensor::from_f32(Shape::vector(v.len()), v)?)?))
            .transpose()
    };
    let mut biases: [Option<Vec<DeviceTensor>>; 3] = [None, None, None];
    let mut d_biases: [Option<DeviceTensor>; 3] = [None, None, None];
    for (slot, id) in p.biases.iter().enumerate() {
        let v = values(*id)?;
        d_biases[slot] = on_device(&v)?;
        if let Some(v) = v {
            let m = v.len() / p.n_expert.max(1);
            biases[slot] = Some(
                v.chunks_exact(m.max(1))
                    .map(|b| dev.upload(&Tensor::from_f32(Shape::vector(b.len()), b)?))
                    .collect::<Result<_, _>>()?,
            );
        }
    }
    let mut terms = Vec::new();
    for t in p.low_rank.iter().filter(|t| t.proj != MoeProj::Router) {
        terms.push((t.clone(), split(t.a)?, split(t.b)?));
    }
    let table =
        |id: usize| -> Result<ExpertTable, GraphError> { Ok(dev.expert_table(split(id)?)?) };
    let (up, down) = (table(p.up)?, table(p.down)?);
    let gate = p.gate.map(table).transpose()?;
    let scales = [
        values(p.scales[0])?,
        values(p.scales[1])?,
        values(p.scales[2])?,
    ];
    let (router_bias, selection_bias) = (values(p.router_bias)?, values(p.selection_bias)?);
    let readable = [Some(&up), gate.as_ref(), Some(&down)]
        .into_iter()
        .flatten()
        .all(|t| CudaDevice::experts_supported(t.dtype()));
    let spec = route_spec(p);
    let route = (p.low_rank.is_empty() && readable && spec.unsupported().is_none()).then_some(spec);
    Ok(ExpertWeights {
        terms,
        up,
        gate,
        down,
        d_scales: [
            on_device(&scales[0])?,
            on_device(&scales[1])?,
            on_device(&scales[2])?,
        ],
        scales,
        biases,
        d_biases,
        d_router_bias: on_device(&router_bias)?,
        d_selection_bias: on_device(&selection_bias)?,
        router_bias,
        selection_bias,
        route,
    })
}

/// A MoE node's routing rule in the device's terms.
fn route_spec(p: &MoeParams) -> RouteSpec {
    RouteSpec {
        n_expert: p.n_expert,
        n_used: p.n_used,
        gating: match p.gating {
            MoeGating::Softmax => RouteGating::Softmax,
            MoeGating::Sigmoid => RouteGating::Sigmoid,
            MoeGating::SoftmaxWeight => RouteGating::SoftmaxWeight,
        },
        groups: p.groups,
        norm_weights: p.norm_weights,
        weights_scale: p.weights_scale,
    }
}

/// `act = activation(gate, up)` over `n` rows (ungated: of `up` alone), as the CPU's experts.
fn activate(
    dev: &CudaDevice,
    p: &MoeParams,
    n: usize,
    (gate, up, act): (&DeviceTensor, &DeviceTensor, &mut DeviceTensor),
) -> Result<(), GraphError> {
    let gated = p.gate.is_some() || p.fused_gate_up;
    act.set_shape(Shape::matrix(n, p.n_ff)?)?;
    match (gated, p.activation) {
        (true, MoeActivation::Silu) => dev.swiglu(gate, up, act)?,
        (true, MoeActivation::Gelu) => dev.geglu(gate, up, act)?,
        (true, MoeActivation::SwiGluOai) => dev.swiglu_oai(gate, up, act)?,
        (false, MoeActivation::Silu) => dev.unary_op(Unary::Silu, up, act)?,
        (false, MoeActivation::Gelu) => dev.unary_op(Unary::Gelu, up, act)?,
        (false, MoeActivation::ReluSqr) => dev.unary_op(Unary::ReluSqr, up, act)?,
        (gated, act) => {
            return Err(GraphError::Internal(format!(
                "MoE activation {act:?} with gate {gated}"
            )))
        }
    }
    Ok(())
}

/// Expert `e`'s matrix of a projection.
fn expert(t: &ExpertTable, e: usize) -> Result<&DeviceTensor, GraphError> {
    t.expert(e)
        .ok_or_else(|| internal("an expert past its projection's table"))
}

/// One LoRA term of a projection, ready: its halves and the step's factor.
struct Term<'a> {
    a: &'a DeviceTensor,
    b: &'a DeviceTensor,
    factor: f32,
}

/// Scratch of a LoRA term: `x · Aᵀ` and the term's rows.
struct TermBufs<'a> {
    low: &'a mut DeviceTensor,
    term: &'a mut DeviceTensor,
}

/// `dst += factor · (input · Aᵀ) · Bᵀ` (through `spare`, which then holds the old buffer):
/// ggml_scale then ggml_add, two roundings, as the CPU.
fn add_term(
    dev: &CudaDevice,
    input: &DeviceTensor,
    t: &Term<'_>,
    bufs: &mut TermBufs<'_>,
    (dst, spare): (&mut DeviceTensor, &mut DeviceTensor),
) -> Result<(), GraphError> {
    let rows = input.shape().n_rows();
    let (rank, m) = (t.a.shape().n_rows(), t.b.shape().n_rows());
    bufs.low.set_shape(Shape::matrix(rows, rank)?)?;
    dev.matmul_reusing(input, t.a, bufs.low, None)?;
    bufs.term.set_shape(Shape::matrix(rows, m)?)?;
    dev.matmul_reusing(bufs.low, t.b, bufs.term, None)?;
    dev.scale(bufs.term, t.factor)?;
    spare.set_shape(Shape::matrix(rows, m)?)?;
    dev.add(dst, bufs.term, spare)?;
    std::mem::swap(dst, spare);
    Ok(())
}

/// The LoRA terms of one expert's projection: the node's expert terms, which projection and
/// expert, and each term's factor this step.
struct TermsOf<'a> {
    all: &'a [(MoeLowRank, Vec<DeviceTensor>, Vec<DeviceTensor>)],
    proj: MoeProj,
    e: usize,
    factor: &'a dyn Fn(&MoeLowRank) -> f32,
}

/// `dst = input · wᵀ`, times `scale`, plus its LoRA terms, plus `bias` (through `spare`,
/// which then holds the old buffer): one expert projection as the CPU's `project`.
fn project(
    dev: &CudaDevice,
    input: &DeviceTensor,
    w: &DeviceTensor,
    (dst, spare): (&mut DeviceTensor, &mut DeviceTensor),
    scale: Option<f32>,
    (terms, bufs): (&TermsOf<'_>, &mut TermBufs<'_>),
    bias: Option<&DeviceTensor>,
) -> Result<(), GraphError> {
    let rows = input.shape().n_rows();
    let m = w.shape().n_rows();
    dst.set_shape(Shape::matrix(rows, m)?)?;
    dev.matmul_reusing(input, w, dst, None)?;
    if let Some(f) = scale {
        dev.scale(dst, f)?;
    }
    for (t, a, b) in terms.all.iter().filter(|(t, ..)| t.proj == terms.proj) {
        let factor = (terms.factor)(t);
        if factor == 0.0 {
            continue; // the rows keep the base bits
        }
        let (a, b) = (
            a.get(terms.e)
                .ok_or_else(|| internal("expert LoRA half missing"))?,
            b.get(terms.e)
                .ok_or_else(|| internal("expert LoRA half missing"))?,
        );
        add_term(
            dev,
            input,
            &Term { a, b, factor },
            bufs,
            (&mut *dst, &mut *spare),
        )?;
    }
    if let Some(b) = bias {
        spare.set_shape(Shape::matrix(rows, m)?)?;
        dev.add(dst, b, spare)?;
        std::mem::swap(dst, spare);
    }
    Ok(())
}

impl CudaPlan {
    /// Runs MoE node `i` (its buffer `out`, `rows` rows) as the module docs say.
    pub(super) fn exec_moe(
        &mut self,
        i: usize,
        node: &Node,
        p: &MoeParams,
        out: &mut DeviceTensor,
        rows: usize,
    ) -> Result<(), GraphError> {
        let ew = self
            .moe
            .get(i)
            .and_then(|e| e.as_ref().map(|(_, w)| Arc::clone(w)))
            .ok_or_else(|| internal("MoE experts missing"))?;
        let mut b = self
            .moe_buf
            .take()
            .ok_or_else(|| internal("MoE buffers missing"))?;
        let r = if self.moe_device && rows <= MAX_WIDE_ROWS && ew.route.is_some() {
            self.moe_step_routed(node, p, &ew, &mut b, out, rows)
        } else {
            self.moe_step(node, p, &ew, &mut b, out, rows)
        };
        self.moe_buf = Some(b);
        // The experts' matmuls quantized other activations since.
        self.q8 = None;
        r
    }

    fn moe_step(
        &self,
        node: &Node,
        p: &MoeParams,
        ew: &ExpertWeights,
        b: &mut MoeBuffers,
        out: &mut DeviceTensor,
        rows: usize,
    ) -> Result<(), GraphError> {
        let dev = &*self.dev;
        let (ne, k, nf, width) = (p.n_expert, p.n_used, p.n_ff, node.width);
        let x = self.input(node, 0)?;
        let rx = match node.inputs.get(1) {
            Some(_) => self.input(node, 1)?,
            None => x,
        };
        // Route on the host, as the CPU does.
        // Each term's factor: the bound adapter scale's, else the one the graph was built with.
        let factor = |t: &MoeLowRank| match &self.adapter_scales {
            Some(s) => t.term.factor(s.get(t.term.adapter).copied().unwrap_or(0.0)),
            None => t.scale,
        };
        b.logits.set_shape(Shape::matrix(rows, ne)?)?;
        dev.matmul_reusing(rx, &self.weights[p.router], &mut b.logits, None)?;
        for t in p.low_rank.iter().filter(|t| t.proj == MoeProj::Router) {
            let f = factor(t);
            if f != 0.0 {
                let term = Term {
                    a: &self.weights[t.a],
                    b: &self.weights[t.b],
                    factor: f,
                };
                let mut bufs = TermBufs {
                    low: &mut b.low,
                    term: &mut b.term,
                };
                add_term(dev, rx, &term, &mut bufs, (&mut b.logits, &mut b.spare))?;
            }
        }
        dev.download_f32_into(&b.logits, b.host.logits_mut(rows * ne))?;
        route(
            p,
            (ew.router_bias.as_deref(), ew.selection_bias.as_deref()),
            rows,
            &mut b.host,
        );
        b.outs.set_shape(Shape::matrix(rows * k, width)?)?;
        for e in 0..ne {
            b.rows.clear();
            b.dst_rows.clear();
            b.wts.clear();
            for (j, &c) in b.host.chosen()[..rows * k].iter().enumerate() {
                if c == e {
                    b.rows.push((j / k) as u32);
                    b.dst_rows.push(j as i32);
                    b.wts.push(b.host.weights()[j]);
                }
            }
            let n = b.rows.len();
            if n == 0 {
                continue;
            }
            b.xg.set_shape(Shape::matrix(n, width)?)?;
            dev.get_rows(x, &b.rows, &mut b.xg)?;
            let factor_of = |slot: usize| ew.scales[slot].as_ref().map(|s| s[e]);
            let bias = |slot: usize| ew.biases[slot].as_ref().map(|v| &v[e]);
            let terms = |proj| TermsOf {
                all: &ew.terms,
                proj,
                e,
                factor: &factor,
            };
            let mut bufs = TermBufs {
                low: &mut b.low,
                term: &mut b.term,
            };
            if p.fused_gate_up {
                project(
                    dev,
                    &b.xg,
                    expert(&ew.up, e)?,
                    (&mut b.both, &mut b.spare),
                    factor_of(0),
                    (&terms(MoeProj::Up), &mut bufs),
                    bias(0),
                )?;
                for (t, off) in [(&mut b.gate, 0), (&mut b.up, nf)] {
                    t.set_shape(Shape::matrix(n, nf)?)?;
                    dev.slice_cols(&b.both, off, t)?;
                }
            } else {
                project(
                    dev,
                    &b.xg,
                    expert(&ew.up, e)?,
                    (&mut b.up, &mut b.spare),
                    factor_of(0),
                    (&terms(MoeProj::Up), &mut bufs),
                    bias(0),
                )?;
                if let Some(g) = &ew.gate {
                    project(
                        dev,
                        &b.xg,
                        expert(g, e)?,
                        (&mut b.gate, &mut b.spare),
                        factor_of(1),
                        (&terms(MoeProj::Gate), &mut bufs),
                        bias(1),
                    )?;
                }
            }
            activate(dev, p, n, (&b.gate, &b.up, &mut b.act))?;
            project(
                dev,
                &b.act,
                expert(&ew.down, e)?,
                (&mut b.down, &mut b.spare),
                factor_of(2),
                (&terms(MoeProj::Down), &mut bufs),
                bias(2),
            )?;
            dev.set_ids(&mut b.d_rows, &b.dst_rows)?;
            b.d_wts.set_shape(Shape::matrix(n, 1)?)?;
            dev.write_f32(&mut b.d_wts, &b.wts)?;
            dev.scatter_rows_scaled(&b.down, &b.d_rows, &b.d_wts, &mut b.outs)?;
        }
        dev.sum_slots(&b.outs, k, out)?;
        Ok(())
    }
}
