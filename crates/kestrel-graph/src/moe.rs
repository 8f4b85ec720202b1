//! The CPU execution of [`Op::Moe`](crate::Op::Moe): routing, then the experts run grouped.
//!
//! Each token's router picks `n_used` experts; the step's rows are then grouped by expert, so
//! each chosen expert's weights are read once per step (for a prefill or a batch), not once per
//! token. Within an expert's group the rows keep token order and are split by sequence, so a
//! row's numerics are those of its own sequence's rows alone (the batched == single invariant of
//! the matmuls, see `cpu::matmul_segmented`). Buffers live in [`MoeScratch`] and grow to the
//! largest step once.

use kestrel_tensor::cpu;
use kestrel_tensor::{DType, Tensor};

use crate::ir::{MoeActivation, MoeGating, MoeParams, MoeProj};

mod terms;
use crate::GraphError;
pub(crate) use terms::MoeTerms;
use terms::{add_terms, router_terms, TermScratch};

/// Reused buffers of the expert FFNs (no allocation once grown to the step's size).
#[derive(Default)]
pub(crate) struct MoeScratch {
    logits: Vec<f32>,
    probs: Vec<f32>,
    /// Chosen expert of each (row, slot).
    chosen: Vec<usize>,
    /// Weight of each (row, slot).
    weights: Vec<f32>,
    /// The routing slot of each row of the current group (for an activation hook).
    slots: Vec<usize>,
    /// Rows of the current expert's group, and the (row, slot) each came from.
    group: Vec<(usize, usize)>,
    segs: Vec<usize>,
    x: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    down: Vec<f32>,
    /// Each (row, slot)'s expert output, weighted.
    outs: Vec<f32>,
    order: Vec<usize>,
    /// Fused gate/up outputs of an expert's rows.
    gate_up: Vec<f32>,
    /// One row's selection scores (masked to the chosen expert groups).
    scores: Vec<f32>,
    /// Expert groups of one row, best first, with their scores.
    group_order: Vec<(usize, f32)>,
    matmul: cpu::MatmulScratch,
    terms: TermScratch,
    /// Expert groups run so far (each reads its expert's weights once): how a test sees that
    /// a step reads each chosen expert once, not once per token.
    pub(crate) expert_runs: usize,
}

impl MoeScratch {
    /// Room for `n` router logits, for [`route`] to read (the CUDA plan copies its own in).
    pub(crate) fn logits_mut(&mut self, n: usize) -> &mut [f32] {
        grow(&mut self.logits, n)
    }

    /// The experts [`route`] chose, `n_used` a row, best first.
    pub(crate) fn chosen(&self) -> &[usize] {
        &self.chosen
    }

    /// Their weights, as [`route`] left them.
    pub(crate) fn weights(&self) -> &[f32] {
        &self.weights
    }
}

/// The weights of one MoE node, bound.
pub(crate) struct MoeWeights<'a> {
    pub router: &'a Tensor,
    pub router_bias: Option<&'a [f32]>,
    pub selection_bias: Option<&'a [f32]>,
    pub up: &'a Tensor,
    pub gate: Option<&'a Tensor>,
    pub down: &'a Tensor,
    pub scales: [Option<&'a [f32]>; 3],
    pub biases: [Option<&'a [f32]>; 3],
    /// The LoRA terms of [`MoeParams::low_rank`], bound (none: no terms).
    pub low_rank: Option<MoeTerms<'a>>,
}

pub(crate) fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// The bytes of expert `e` of a 3-d weight `[k, m, n_expert]` (or of head `e` of a per-head
/// weight).
pub(crate) fn expert_bytes(
    w: &Tensor,
    e: usize,
) -> Result<(&[u8], DType, usize, usize), GraphError> {
    let shape = w.shape();
    let (k, m) = (shape.dims()[0], shape.dims()[1]);
    let row = w
        .dtype()
        .row_bytes(k)
        .ok_or_else(|| GraphError::Internal(format!("rows of {k} {:?} values", w.dtype())))?;
    let per = row * m;
    let bytes = w.as_bytes();
    let start = e * per;
    let slice = bytes.get(start..start + per).ok_or_else(|| {
        GraphError::Internal(format!("expert {e} lies past the end of its weight"))
    })?;
    Ok((slice, w.dtype(), k, m))
}

/// llama.cpp's expert-group selection: each of `groups` equal groups of `scores` is scored by
/// the sum of its two highest scores; every score outside the `used` best groups becomes -inf.
fn mask_groups(scores: &mut [f32], groups: usize, used: usize, order: &mut Vec<(usize, f32)>) {
    let per = scores.len() / groups;
    order.clear();
    for (g, grp) in scores.chunks_exact(per).enumerate() {
        let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for &v in grp {
            if v > a {
                b = a;
                a = v;
            } else if v > b {
                b = v;
            }
        }
        order.push((g, a + b));
    }
    order.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    for &(g, _) in &order[used.min(order.len())..] {
        scores[g * per..(g + 1) * per].fill(f32::NEG_INFINITY);
    }
}

/// gpt-oss's activation, as ggml's `swiglu_oai` computes it in f32.
fn swiglu_oai(gate: &[f32], up: &[f32], out: &mut [f32]) {
    const ALPHA: f32 = 1.702;
    const LIMIT: f32 = 7.0;
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        let x = g.min(LIMIT);
        let y = u.clamp(-LIMIT, LIMIT);
        *o = x / (1.0 + (ALPHA * -x).exp()) * (y + 1.0);
    }
}

/// Routes `rows` rows from their router logits (`s.logits`, `rows × n_expert`; the router bias
/// is added in place): each row's `n_used` experts, best first, into `s.chosen` and their
/// weights into `s.weights`. Shared by the CPU plan and the CUDA plan (which copies its router
/// logits back for it), so both choose the same experts.
pub(crate) fn route(
    p: &MoeParams,
    (router_bias, selection_bias): (Option<&[f32]>, Option<&[f32]>),
    rows: usize,
    s: &mut MoeScratch,
) {
    let (ne, k) = (p.n_expert, p.n_used);
    let logits = grow(&mut s.logits, rows * ne);
    let probs = grow(&mut s.probs, rows * ne);
    s.chosen.clear();
    s.chosen.resize(rows * k, 0);
    let weights = grow(&mut s.weights, rows * k);
    for r in 0..rows {
        let l = &mut logits[r * ne..(r + 1) * ne];
        if let Some(b) = router_bias {
            for (v, &b) in l.iter_mut().zip(b) {
                *v += b;
            }
        }
        let pr = &mut probs[r * ne..(r + 1) * ne];
        match p.gating {
            MoeGating::Softmax => {
                let m = l.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                let mut sum = 0.0f64;
                for (o, &v) in pr.iter_mut().zip(l.iter()) {
                    *o = (v - m).exp();
                    sum += *o as f64;
                }
                let inv = (1.0 / sum) as f32;
                pr.iter_mut().for_each(|v| *v *= inv);
            }
            MoeGating::Sigmoid => {
                for (o, &v) in pr.iter_mut().zip(l.iter()) {
                    *o = 1.0 / (1.0 + (-v).exp());
                }
            }
            MoeGating::SoftmaxWeight => pr.copy_from_slice(l),
        }
        // Top k of the selection scores, highest first (ties: the lower expert first).
        s.scores.clear();
        s.scores
            .extend((0..ne).map(|e| pr[e] + selection_bias.map_or(0.0, |b| b[e])));
        if let Some((groups, used)) = p.groups {
            mask_groups(&mut s.scores, groups, used, &mut s.group_order);
        }
        s.order.clear();
        s.order.extend(0..ne);
        let score = &s.scores;
        s.order
            .sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
        let wr = &mut weights[r * k..(r + 1) * k];
        for (slot, &e) in s.order[..k].iter().enumerate() {
            s.chosen[r * k + slot] = e;
            wr[slot] = pr[e];
        }
        if p.gating == MoeGating::SoftmaxWeight {
            let m = wr.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let mut sum = 0.0f64;
            for v in wr.iter_mut() {
                *v = (*v - m).exp();
                sum += *v as f64;
            }
            let inv = (1.0 / sum) as f32;
            wr.iter_mut().for_each(|v| *v *= inv);
        }
        if p.norm_weights {
            // llama.cpp clamps the sum to the smallest normal f16.
            let sum = wr.iter().sum::<f32>().max(6.103_515_6e-5);
            wr.iter_mut().for_each(|v| *v /= sum);
        }
        if p.weights_scale != 0.0 && p.weights_scale != 1.0 {
            wr.iter_mut().for_each(|v| *v *= p.weights_scale);
        }
    }
}

/// `out[rows, width]` = the MoE FFN of `x[rows, width]`, routed by `router_x` (rows of its own
/// width; `x` itself for most families); `segments` are the step's rows per sequence
/// (consecutive).
/// `hook`: an activation hook with the up, gate (`""` without one) and down weights' names.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    p: &MoeParams,
    w: &MoeWeights<'_>,
    x: &[f32],
    (router_x, router_width): (&[f32], usize),
    width: usize,
    segments: &[usize],
    s: &mut MoeScratch,
    out: &mut [f32],
    mut hook: Option<(&mut (dyn crate::ActivationHook + 'static), [&str; 3])>,
) -> Result<(), GraphError> {
    let rows = x.len() / width.max(1);
    let (ne, k, nf) = (p.n_expert, p.n_used, p.n_ff);
    // Router.
    let logits = grow(&mut s.logits, rows * ne);
    cpu::matmul_segmented(
        router_x,
        rows,
        router_width,
        w.router.as_bytes(),
        w.router.dtype(),
        ne,
        logits,
        segments,
        &mut s.matmul,
    )?;
    if let Some(terms) = &w.low_rank {
        let (ts, mm) = (&mut s.terms, &mut s.matmul);
        router_terms(terms, router_x, router_width, logits, ne, segments, ts, mm)?;
    }
    route(p, (w.router_bias, w.selection_bias), rows, s);
    let weights = &s.weights[..rows * k];

    // The experts, each over the rows that chose it.
    let outs = grow(&mut s.outs, rows * k * width);
    for e in 0..ne {
        s.group.clear();
        for r in 0..rows {
            for slot in 0..k {
                if s.chosen[r * k + slot] == e {
                    s.group.push((r, slot));
                }
            }
        }
        let n = s.group.len();
        if n == 0 {
            continue;
        }
        s.expert_runs += 1;
        // Rows per sequence within the group.
        s.segs.clear();
        let mut seg_end = 0;
        let mut seg = segments.iter();
        let mut count = 0;
        for &(r, _) in &s.group {
            while r >= seg_end {
                if count > 0 {
                    s.segs.push(count);
                    count = 0;
                }
                seg_end += seg.next().copied().unwrap_or(rows);
            }
            count += 1;
        }
        s.segs.push(count);
        let xs = grow(&mut s.x, n * width);
        for (i, &(r, _)) in s.group.iter().enumerate() {
            xs[i * width..(i + 1) * width].copy_from_slice(&x[r * width..(r + 1) * width]);
        }
        if let Some((h, names)) = hook.as_mut() {
            s.slots.clear();
            s.slots.extend(s.group.iter().map(|&(_, slot)| slot));
            h.expert(names[0], ne, e, &xs[..n * width], width, &s.slots);
            if w.gate.is_some() {
                h.expert(names[1], ne, e, &xs[..n * width], width, &s.slots);
            }
        }
        let group = &s.group;
        let project = |proj: MoeProj,
                       t: &Tensor,
                       input: &[f32],
                       kin: usize,
                       out: &mut [f32],
                       segs: &[usize],
                       mm: &mut cpu::MatmulScratch,
                       ts: &mut TermScratch|
         -> Result<(), GraphError> {
            let i = proj.index().unwrap_or(0);
            let (scale, bias) = (w.scales[i], w.biases[i]);
            let (bytes, dtype, kk, m) = expert_bytes(t, e)?;
            if kk != kin {
                return Err(GraphError::Internal(format!("expert weight of width {kk}")));
            }
            cpu::matmul_segmented(input, n, kin, bytes, dtype, m, out, segs, mm)?;
            if let Some(sc) = scale {
                let f = sc[e];
                out.iter_mut().for_each(|v| *v *= f);
            }
            if let Some(terms) = &w.low_rank {
                add_terms(terms, proj, e, group, segs, input, kin, out, m, ts, mm)?;
            }
            if let Some(b) = bias {
                let b = &b[e * m..(e + 1) * m];
                for row in out.chunks_exact_mut(m) {
                    row.iter_mut().zip(b).for_each(|(v, &b)| *v += b);
                }
            }
            Ok(())
        };
        if p.fused_gate_up {
            // One projection of both; then the gate's half and the up half of every row.
            let both = grow(&mut s.gate_up, n * 2 * nf);
            project(
                MoeProj::Up,
                w.up,
                xs,
                width,
                both,
                &s.segs,
                &mut s.matmul,
                &mut s.terms,
            )?;
            let gate = grow(&mut s.down, n * nf);
            for (g, b) in gate.chunks_exact_mut(nf).zip(both.chunks_exact(2 * nf)) {
                g.copy_from_slice(&b[..nf]);
            }
            let up = grow(&mut s.up, n * nf);
            for (u, b) in up.chunks_exact_mut(nf).zip(both.chunks_exact(2 * nf)) {
                u.copy_from_slice(&b[nf..]);
            }
        } else {
            let up = grow(&mut s.up, n * nf);
            project(
                MoeProj::Up,
                w.up,
                xs,
                width,
                up,
                &s.segs,
                &mut s.matmul,
                &mut s.terms,
            )?;
            if let Some(g) = w.gate {
                let gate = grow(&mut s.down, n * nf);
                project(
                    MoeProj::Gate,
                    g,
                    xs,
                    width,
                    gate,
                    &s.segs,
                    &mut s.matmul,
                    &mut s.terms,
                )?;
            }
        }
        let up = &s.up[..n * nf];
        let act = grow(&mut s.gate, n * nf);
        match (w.gate.is_some() || p.fused_gate_up).then_some(()) {
            Some(()) => {
                let gate = &s.down[..n * nf];
                match p.activation {
                    MoeActivation::Silu => cpu::swiglu(gate, up, act)?,
                    MoeActivation::Gelu => cpu::geglu(gate, up, act)?,
                    MoeActivation::SwiGluOai => swiglu_oai(gate, up, act),
                    MoeActivation::ReluSqr => {
                        return Err(GraphError::Internal("relu² with a gate".into()))
                    }
                }
            }
            None => {
                act.copy_from_slice(up);
                match p.activation {
                    MoeActivation::Silu => cpu::silu(act),
                    MoeActivation::Gelu => cpu::gelu(act),
                    MoeActivation::SwiGluOai => {
                        return Err(GraphError::Internal("swiglu_oai without a gate".into()))
                    }
                    MoeActivation::ReluSqr => act.iter_mut().for_each(|v| {
                        let r = v.max(0.0);
                        *v = r * r;
                    }),
                }
            }
        }
        if let Some((h, names)) = hook.as_mut() {
            h.expert(names[2], ne, e, &act[..n * nf], nf, &s.slots);
        }
        let down = grow(&mut s.down, n * width);
        project(
            MoeProj::Down,
            w.down,
            act,
            nf,
            down,
            &s.segs,
            &mut s.matmul,
            &mut s.terms,
        )?;
        for (i, &(r, slot)) in s.group.iter().enumerate() {
            let wt = weights[r * k + slot];
            let o = &mut outs[(r * k + slot) * width..(r * k + slot + 1) * width];
            for (o, &d) in o.iter_mut().zip(&down[i * width..(i + 1) * width]) {
                *o = d * wt;
            }
        }
    }
    // The chosen experts summed in the order chosen, as llama.cpp adds its views.
    for r in 0..rows {
        let o = &mut out[r * width..(r + 1) * width];
        o.copy_from_slice(&outs[r * k * width..(r * k + 1) * width]);
        for slot in 1..k {
            let src = &outs[(r * k + slot) * width..(r * k + slot + 1) * width];
            for (o, &v) in o.iter_mut().zip(src) {
                *o += v;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_tensor::Shape;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
        fn vec(&mut self, n: usize) -> Vec<f32> {
            (0..n).map(|_| self.next()).collect()
        }
    }

    /// F16 weights: the quantized matmul path, whose rows follow their own sequence only (F32
    /// weights take a path whose numerics depend on the row count).
    fn tensor(dims: &[usize], v: &[f32]) -> Tensor {
        let bytes: Vec<u8> = v
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect();
        Tensor::from_bytes(DType::F16, Shape::new(dims).unwrap(), &bytes).unwrap()
    }

    const W: usize = 12;
    const FF: usize = 8;
    const E: usize = 6;

    struct Model {
        router: Vec<f32>,
        up: Vec<f32>,
        gate: Vec<f32>,
        down: Vec<f32>,
        scales: [Vec<f32>; 3],
        sel_bias: Vec<f32>,
    }

    /// Per token, in f64: the definition in llama.cpp's `build_moe_ffn`.
    fn reference(p: &MoeParams, m: &Model, x: &[f32]) -> Vec<f64> {
        let dot = |w: &[f32], row: usize, k: usize, v: &[f64]| -> f64 {
            (0..k).map(|i| w[row * k + i] as f64 * v[i]).sum()
        };
        let xv: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let logits: Vec<f64> = (0..E).map(|e| dot(&m.router, e, W, &xv)).collect();
        let probs: Vec<f64> = match p.gating {
            MoeGating::Softmax => {
                let mx = logits.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = logits.iter().map(|l| (l - mx).exp()).sum();
                logits.iter().map(|l| (l - mx).exp() / z).collect()
            }
            MoeGating::Sigmoid => logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect(),
            MoeGating::SoftmaxWeight => logits.clone(),
        };
        let bias = |e: usize| p.selection_bias.map_or(0.0, |_| m.sel_bias[e] as f64);
        let mut sel: Vec<f64> = (0..E).map(|e| probs[e] + bias(e)).collect();
        if let Some((groups, used)) = p.groups {
            // Groups by the sum of their two best scores; the others cannot be chosen.
            let per = E / groups;
            let mut gs: Vec<(usize, f64)> = (0..groups)
                .map(|g| {
                    let mut v = sel[g * per..(g + 1) * per].to_vec();
                    v.sort_by(|a, b| b.total_cmp(a));
                    (g, v[0] + v[1])
                })
                .collect();
            gs.sort_by(|a, b| b.1.total_cmp(&a.1));
            for &(g, _) in &gs[used..] {
                sel[g * per..(g + 1) * per].fill(f64::NEG_INFINITY);
            }
        }
        let mut order: Vec<usize> = (0..E).collect();
        order.sort_by(|&a, &b| sel[b].total_cmp(&sel[a]));
        let chosen = &order[..p.n_used];
        let mut w: Vec<f64> = chosen.iter().map(|&e| probs[e]).collect();
        if p.gating == MoeGating::SoftmaxWeight {
            let mx = w.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = w.iter().map(|v| (v - mx).exp()).sum();
            w = w.iter().map(|v| (v - mx).exp() / z).collect();
        }
        if p.norm_weights {
            let s: f64 = w.iter().sum();
            w.iter_mut().for_each(|v| *v /= s);
        }
        w.iter_mut().for_each(|v| *v *= p.weights_scale as f64);
        let mut out = vec![0f64; W];
        for (&e, &wt) in chosen.iter().zip(&w) {
            let sc = |i: usize| p.scales[i].map_or(1.0, |_| m.scales[i][e] as f64);
            let up: Vec<f64> = (0..FF)
                .map(|f| dot(&m.up, e * FF + f, W, &xv) * sc(0))
                .collect();
            let act: Vec<f64> = (0..FF)
                .map(|f| {
                    let g = dot(&m.gate, e * FF + f, W, &xv) * sc(1);
                    g / (1.0 + (-g).exp()) * up[f]
                })
                .collect();
            for (o, r) in out.iter_mut().enumerate() {
                *r += wt * dot(&m.down, e * W + o, FF, &act) * sc(2);
            }
        }
        out
    }

    fn setup(seed: u64) -> (Model, Vec<f32>) {
        let mut r = Rng(seed);
        // Expert weights exactly representable in f16 (they are stored as F16).
        let mut h = |n: usize| -> Vec<f32> {
            r.vec(n)
                .into_iter()
                .map(|v| half::f16::from_f32(v).to_f32())
                .collect()
        };
        let (up, gate, down) = (h(E * FF * W), h(E * FF * W), h(E * W * FF));
        let m = Model {
            router: r.vec(E * W),
            up,
            gate,
            down,
            scales: [r.vec(E), r.vec(E), r.vec(E)],
            sel_bias: r.vec(E),
        };
        let x = r.vec(512 * W);
        (m, x)
    }

    fn params(gating: MoeGating, norm: bool, scale: f32, ids: bool) -> MoeParams {
        MoeParams {
            n_expert: E,
            n_used: 2,
            n_ff: FF,
            gating,
            norm_weights: norm,
            weights_scale: scale,
            activation: MoeActivation::Silu,
            router: 0,
            router_bias: None,
            selection_bias: ids.then_some(1),
            groups: None,
            up: 0,
            fused_gate_up: false,
            gate: Some(0),
            down: 0,
            scales: [ids.then_some(0), ids.then_some(0), ids.then_some(0)],
            biases: [None; 3],
            low_rank: Vec::new(),
        }
    }

    fn run_rows(
        p: &MoeParams,
        m: &Model,
        x: &[f32],
        segs: &[usize],
        s: &mut MoeScratch,
    ) -> Vec<f32> {
        let router = Tensor::from_f32(Shape::new(&[W, E]).unwrap(), &m.router).unwrap();
        let up = tensor(&[W, FF, E], &m.up);
        let gate = tensor(&[W, FF, E], &m.gate);
        let down = tensor(&[FF, W, E], &m.down);
        let w = MoeWeights {
            router: &router,
            router_bias: None,
            selection_bias: p.selection_bias.map(|_| &m.sel_bias[..]),
            up: &up,
            gate: Some(&gate),
            down: &down,
            scales: [
                p.scales[0].map(|_| &m.scales[0][..]),
                p.scales[1].map(|_| &m.scales[1][..]),
                p.scales[2].map(|_| &m.scales[2][..]),
            ],
            biases: [None; 3],
            low_rank: None,
        };
        let rows = x.len() / W;
        let mut out = vec![0f32; rows * W];
        run(p, &w, x, (x, W), W, segs, s, &mut out, None).unwrap();
        out
    }

    #[test]
    fn matches_the_f64_definition_for_every_gating() {
        for (i, p) in [
            params(MoeGating::Softmax, true, 1.0, false),
            params(MoeGating::Softmax, false, 2.5, true),
            params(MoeGating::Sigmoid, true, 1.0, true),
            params(MoeGating::SoftmaxWeight, false, 1.0, false),
            // DeepSeek V3's routing: sigmoid, selection bias, the best 1 of 3 groups.
            MoeParams {
                groups: Some((3, 1)),
                ..params(MoeGating::Sigmoid, true, 2.5, true)
            },
        ]
        .iter()
        .enumerate()
        {
            let (m, x) = setup(7 + i as u64);
            let x = &x[..5 * W];
            let got = run_rows(p, &m, x, &[5], &mut MoeScratch::default());
            for r in 0..5 {
                let want = reference(p, &m, &x[r * W..(r + 1) * W]);
                for (g, w) in got[r * W..(r + 1) * W].iter().zip(&want) {
                    // F16 matmuls round the activations to f16.
                    assert!(
                        (*g as f64 - w).abs() <= 5e-3 * (1.0 + w.abs()),
                        "case {i}: {g} vs {w}"
                    );
                }
            }
        }
    }

    /// Experts whose gate and up projections are one stacked tensor (`ffn_gate_up_exps`) give
    /// what the two tensors give.
    #[test]
    fn fused_gate_up_experts_equal_separate_ones() {
        let (m, x) = setup(11);
        let x = &x[..7 * W];
        let p = params(MoeGating::Sigmoid, true, 1.0, false);
        let separate = run_rows(&p, &m, x, &[7], &mut MoeScratch::default());
        let mut stacked = Vec::with_capacity(2 * E * FF * W);
        for e in 0..E {
            stacked.extend_from_slice(&m.gate[e * FF * W..(e + 1) * FF * W]);
            stacked.extend_from_slice(&m.up[e * FF * W..(e + 1) * FF * W]);
        }
        let router = Tensor::from_f32(Shape::new(&[W, E]).unwrap(), &m.router).unwrap();
        let up = tensor(&[W, 2 * FF, E], &stacked);
        let down = tensor(&[FF, W, E], &m.down);
        let w = MoeWeights {
            router: &router,
            router_bias: None,
            selection_bias: None,
            up: &up,
            gate: None,
            down: &down,
            scales: [None; 3],
            biases: [None; 3],
            low_rank: None,
        };
        let p = MoeParams {
            fused_gate_up: true,
            gate: None,
            ..p
        };
        let mut fused = vec![0f32; 7 * W];
        run(
            &p,
            &w,
            x,
            (x, W),
            W,
            &[7],
            &mut MoeScratch::default(),
            &mut fused,
            None,
        )
        .unwrap();
        for (a, b) in fused.iter().zip(&separate) {
            assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }

    #[test]
    fn a_prefill_of_512_tokens_runs_each_expert_once() {
        let (m, x) = setup(5);
        let p = params(MoeGating::Softmax, true, 1.0, false);
        let mut s = MoeScratch::default();
        run_rows(&p, &m, &x, &[512], &mut s);
        // 512 tokens choose 2 of 6 experts each: 1024 expert rows, in at most 6 matmul groups.
        assert!(s.expert_runs <= E, "{} expert runs", s.expert_runs);
        assert!(s.expert_runs >= 2);
    }

    #[test]
    fn a_batch_gives_each_sequence_its_own_results_and_reads_each_expert_once() {
        let (m, x) = setup(3);
        let x = &x[..64 * W];
        let p = params(MoeGating::Softmax, true, 1.0, true);
        // Three sequences of 20, 1 and 43 rows in one step...
        let mut s = MoeScratch::default();
        let all = run_rows(&p, &m, x, &[20, 1, 43], &mut s);
        assert!(
            s.expert_runs <= E,
            "{} expert runs for one step",
            s.expert_runs
        );
        // ...equal bit for bit to each run alone.
        let mut r0 = 0;
        for len in [20, 1, 43] {
            let alone = run_rows(
                &p,
                &m,
                &x[r0 * W..(r0 + len) * W],
                &[len],
                &mut MoeScratch::default(),
            );
            assert_eq!(
                alone,
                all[r0 * W..(r0 + len) * W],
                "rows {r0}..{}",
                r0 + len
            );
            r0 += len;
        }
    }
}
