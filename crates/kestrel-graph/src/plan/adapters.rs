//! LoRA terms in a CPU plan: the fused low-rank op ([`Op::LowRank`](crate::Op::LowRank)), the
//! unfused form's scale ([`Op::AdapterScale`](crate::Op::AdapterScale)), and the adapter scales
//! a step binds, per sequence, so one batch can run each sequence with its own adapters (a
//! multi-LoRA server's batch: the base matmul once for all rows, each row's own low-rank terms).
//!
//! A row whose factor is 0 gets the base output exactly (its term is not computed), so a
//! sequence without adapters in a batch with adapted ones gets the bits of a plan without them.

use half::f16;
use kestrel_tensor::cpu::low_rank::{self, LowRankHalf};
use kestrel_tensor::{cpu, DType, Tensor};

use super::BatchSeq;
use crate::ir::{AdapterTerm, Node, Op};
use crate::moe::grow;
use crate::GraphError;

/// The adapter scales of a plan's steps.
#[derive(Debug, Default)]
pub(super) struct StepAdapters {
    /// Adapter slots the graph's terms use (the largest index + 1).
    n: usize,
    /// Scales for steps that bind none (`None`: each node's own factor).
    defaults: Option<Vec<f32>>,
    /// The step's scales, `n` per segment (when bound).
    seg: Vec<f32>,
    bound: bool,
    /// Each token row's segment (when bound).
    row_seg: Vec<usize>,
    /// A node's per-row factors.
    factors: Vec<f32>,
}

impl StepAdapters {
    pub(super) fn new(nodes: &[Node], max_tokens: usize) -> StepAdapters {
        let n = nodes
            .iter()
            .filter_map(|n| match &n.op {
                Op::LowRank { term, .. } | Op::AdapterScale { term, .. } => Some(term.adapter + 1),
                Op::Moe(p) => p.low_rank.iter().map(|l| l.term.adapter + 1).max(),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        StepAdapters {
            n,
            defaults: None,
            seg: Vec::with_capacity(if n > 0 { max_tokens * n } else { 0 }),
            bound: false,
            row_seg: Vec::with_capacity(if n > 0 { max_tokens } else { 0 }),
            factors: Vec::with_capacity(if n > 0 { max_tokens } else { 0 }),
        }
    }

    pub(super) fn slots(&self) -> usize {
        self.n
    }

    pub(super) fn set_defaults(&mut self, scales: &[f32]) -> Result<(), GraphError> {
        check(scales, self.n, 1)?;
        match &mut self.defaults {
            Some(d) => d.copy_from_slice(scales),
            None => self.defaults = Some(scales.to_vec()),
        }
        Ok(())
    }

    /// Binds a step's scales: `scales` (`n` per segment of `seqs`), or the defaults for every
    /// segment when it is empty.
    pub(super) fn bind(&mut self, seqs: &[BatchSeq], scales: &[f32]) -> Result<(), GraphError> {
        self.bound = false;
        if self.n == 0 {
            return match scales.is_empty() {
                true => Ok(()),
                false => Err(GraphError::Batch(format!(
                    "{} adapter scales for a plan without adapters",
                    scales.len()
                ))),
            };
        }
        self.seg.clear();
        if scales.is_empty() {
            let Some(d) = &self.defaults else {
                return Ok(());
            };
            for _ in seqs {
                self.seg.extend_from_slice(d);
            }
        } else {
            check(scales, self.n, seqs.len())?;
            self.seg.extend_from_slice(scales);
        }
        self.row_seg.clear();
        for (i, s) in seqs.iter().enumerate() {
            self.row_seg.extend(std::iter::repeat_n(i, s.len));
        }
        self.bound = true;
        Ok(())
    }

    /// The factor of each of a node's `rows` (all `t` tokens, or the output rows `out_rows`).
    pub(super) fn factors(
        &mut self,
        term: &AdapterTerm,
        scale: f32,
        rows: usize,
        t: usize,
        out_rows: &[usize],
    ) -> &[f32] {
        let f = grow(&mut self.factors, rows);
        if !self.bound {
            f.fill(scale);
            return f;
        }
        for (r, slot) in f.iter_mut().enumerate() {
            let row = if rows == t { r } else { out_rows[r] };
            let seg = self.row_seg[row];
            *slot = term.factor(self.seg[seg * self.n + term.adapter]);
        }
        f
    }
}

fn check(scales: &[f32], n: usize, segs: usize) -> Result<(), GraphError> {
    if scales.len() != n * segs {
        return Err(GraphError::Batch(format!(
            "{} adapter scales given, the plan has {n} adapters for {segs} sequences",
            scales.len()
        )));
    }
    if let Some(s) = scales.iter().find(|s| !s.is_finite()) {
        return Err(GraphError::Batch(format!(
            "adapter scale {s} is not a finite number"
        )));
    }
    Ok(())
}

/// A half of a fused term as the kernels read it.
#[derive(Clone, Copy)]
pub(super) enum HalfRef<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl<'a> HalfRef<'a> {
    /// `t`'s values, F32 or F16 (the forms `derived_weight` makes).
    pub(super) fn of(t: &'a Tensor) -> Result<HalfRef<'a>, String> {
        match t.dtype() {
            DType::F16 => t.as_f16().map(HalfRef::F16).map_err(|e| e.to_string()),
            _ => t.as_f32().map(HalfRef::F32).map_err(|e| e.to_string()),
        }
    }

    fn len(&self) -> usize {
        match self {
            HalfRef::F32(v) => v.len(),
            HalfRef::F16(v) => v.len(),
        }
    }
}

/// The pieces of one fused low-rank term.
pub(super) struct LowRankIo<'a> {
    /// `A`: `rank` rows of `k`.
    pub(super) a: HalfRef<'a>,
    /// `Bᵀ`: `rank` rows of `m`.
    pub(super) bt: HalfRef<'a>,
    /// The input's width.
    pub(super) k: usize,
    /// The output's width.
    pub(super) m: usize,
    /// Each row's factor (0: the base output, the term not computed).
    pub(super) factors: &'a [f32],
    /// Round `x` and `x · Aᵀ` to these types before the products (F16, BF16: as ggml reads
    /// the input of a weight of that type; others: no rounding).
    pub(super) inputs: (DType, DType),
}

/// `out = acc + factor · (x · Aᵀ) · Bᵀ` row by row with the low-rank kernels
/// ([`cpu::low_rank_down`], [`cpu::low_rank_up`]): rows in parallel for a prefill, one row's
/// `A` rows and `Bᵀ` columns shared out among the threads when its term is large. Row-local,
/// so thread counts and batch neighbours never change a row's bits.
pub(super) fn low_rank(
    io: &LowRankIo<'_>,
    acc: &[f32],
    x: &[f32],
    out: &mut [f32],
    low: &mut Vec<f32>,
    rounded: &mut Vec<f32>,
) -> Result<(), GraphError> {
    let (k, m) = (io.k, io.m);
    let rank = io.a.len() / k.max(1);
    if k == 0 || rank == 0 || io.bt.len() != rank * m || io.a.len() != rank * k {
        return Err(GraphError::Internal(format!(
            "low-rank term: A of {} and B transposed of {} values for k {k}, m {m}",
            io.a.len(),
            io.bt.len()
        )));
    }
    let rows = io.factors.len();
    let low = grow(low, rows * rank);
    let x = if rounds(io.inputs.0) {
        let xs = grow(rounded, rows * k);
        xs.copy_from_slice(&x[..rows * k]);
        cpu::round_to(io.inputs.0, xs);
        &*xs
    } else {
        x
    };
    let run = Term {
        k,
        m,
        rank,
        factors: io.factors,
        round_t: io.inputs.1,
    };
    match (io.a, io.bt) {
        (HalfRef::F32(a), HalfRef::F32(bt)) => run.go(a, bt, acc, x, out, low),
        (HalfRef::F32(a), HalfRef::F16(bt)) => run.go(a, bt, acc, x, out, low),
        (HalfRef::F16(a), HalfRef::F32(bt)) => run.go(a, bt, acc, x, out, low),
        (HalfRef::F16(a), HalfRef::F16(bt)) => run.go(a, bt, acc, x, out, low),
    }
    Ok(())
}

/// One term's sizes, factors and the rounding of `x · Aᵀ`.
struct Term<'a> {
    k: usize,
    m: usize,
    rank: usize,
    factors: &'a [f32],
    round_t: DType,
}

impl Term<'_> {
    fn go<A: LowRankHalf, B: LowRankHalf>(
        &self,
        a: &[A],
        bt: &[B],
        acc: &[f32],
        x: &[f32],
        out: &mut [f32],
        low: &mut [f32],
    ) {
        use rayon::prelude::*;
        let (k, m, rank, f, round_t) = (self.k, self.m, self.rank, self.factors, self.round_t);
        if f.len() == 1 {
            if f[0] == 0.0 {
                out.copy_from_slice(acc);
                return;
            }
            let threads = rayon::current_num_threads();
            if threads == 1 || (k + m) * rank < PAR_MIN {
                cpu::low_rank_down(a, k, &x[..k], low);
                cpu::round_to(round_t, low);
                cpu::low_rank_up(bt, m, low, f[0], 0..m, acc, out);
                return;
            }
            // One token: `A`'s rows, then `Bᵀ`'s columns, shared out among the threads (the
            // term streams its halves from memory once per token, as a matmul its weight).
            let per = rank.div_ceil(threads);
            low.par_chunks_mut(per).enumerate().for_each(|(c, tc)| {
                cpu::low_rank_down(&a[c * per * k..], k, &x[..k], tc);
                cpu::round_to(round_t, tc);
            });
            let t: &[f32] = low;
            let cols = m.div_ceil(threads).next_multiple_of(low_rank::BT_BLOCK);
            out.par_chunks_mut(cols)
                .zip(acc.par_chunks(cols))
                .enumerate()
                .for_each(|(c, (o, cc))| {
                    let j0 = c * cols;
                    cpu::low_rank_up(bt, m, t, f[0], j0..j0 + o.len(), cc, o);
                });
            return;
        }
        out.par_chunks_mut(m)
            .zip(acc.par_chunks(m))
            .zip(x.par_chunks(k))
            .zip(low.par_chunks_mut(rank))
            .zip(f.par_iter())
            .for_each(|((((o, c), xr), tr), &fr)| {
                if fr == 0.0 {
                    o.copy_from_slice(c);
                } else {
                    cpu::low_rank_down(a, k, xr, tr);
                    cpu::round_to(round_t, tr);
                    cpu::low_rank_up(bt, m, tr, fr, 0..m, c, o);
                }
            });
    }
}

/// Halves' values (`(k + m) · rank`) from which one token's term is shared out among threads.
const PAR_MIN: usize = 1 << 13;

fn rounds(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
}

/// `out = x · factor` row by row (the unfused term's scale).
pub(super) fn scale_rows(x: &[f32], factors: &[f32], out: &mut [f32]) {
    let m = out.len() / factors.len().max(1);
    for ((o, xr), &f) in out
        .chunks_exact_mut(m.max(1))
        .zip(x.chunks(m.max(1)))
        .zip(factors)
    {
        o.copy_from_slice(xr);
        cpu::scale(o, f);
    }
}

/// The bytes of a term's `Bᵀ` prefetched before its `A` is read.
const BT_HEAD: usize = 4096;

/// Most terms one matmul computes beside it (more are computed by their own nodes).
pub(super) const MAX_AHEAD: usize = 8;

/// One term to compute beside a matmul: its node, halves, sizes and input roundings.
#[derive(Clone, Copy)]
pub(super) struct AheadTerm<'a> {
    node: usize,
    a: HalfRef<'a>,
    bt: HalfRef<'a>,
    k: usize,
    m: usize,
    rank: usize,
    inputs: (DType, DType),
}

impl AheadTerm<'_> {
    /// A placeholder for unused slots.
    pub(super) const NONE: AheadTerm<'static> = AheadTerm {
        node: 0,
        a: HalfRef::F32(&[]),
        bt: HalfRef::F32(&[]),
        k: 0,
        m: 0,
        rank: 0,
        inputs: (DType::F32, DType::F32),
    };
}

/// The fused terms ([`Op::LowRank`]) of one-row steps, computed while a matmul runs
/// (`rayon::join`) instead of after it: each term reads only its input `x` and its halves, so
/// it is computed beside the first matmul that reads the same `x` (q, k and v's terms beside
/// q's matmul; gate and up's beside gate's), its halves streaming on some threads while the
/// others stream the weight. Each term in its own node would be two more passes of every
/// thread; in a decode step of a small model, hundreds of such passes cost more in fork and
/// join than in arithmetic. Each term's sum `Σ_r Bᵀ[r]·t[r]` waits here for its node, which
/// adds it as the plain path does (`fma(sum, factor, acc)`): the same bits.
#[derive(Debug, Default)]
pub(super) struct Ahead {
    /// Per node: the range of `terms` a matmul computes beside it.
    of: Vec<std::ops::Range<usize>>,
    /// Term nodes, grouped by the matmul that computes them.
    terms: Vec<usize>,
    /// Ready sums: the term's node and where its sum starts in `sums`.
    ready: Vec<(usize, usize)>,
    /// Where the next sum goes (0 once every ready sum is used).
    end: usize,
    sums: Vec<f32>,
    /// Each computing term's `x · Aᵀ` and rounded input.
    scratch: Vec<f32>,
    zeros: Vec<f32>,
}

impl Ahead {
    /// Assigns each fused term of `nodes` to the first matmul that reads its input.
    pub(super) fn new(nodes: &[Node]) -> Ahead {
        let mut by: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        let mut any = false;
        for (j, node) in nodes.iter().enumerate() {
            let (Op::LowRank { .. }, Some(&x)) = (&node.op, node.inputs.get(1)) else {
                continue;
            };
            let first = nodes[..j]
                .iter()
                .position(|n| matches!(n.op, Op::MatMul { .. }) && n.inputs.first() == Some(&x));
            if let Some(i) = first {
                by[i].push(j);
                any = true;
            }
        }
        if !any {
            return Ahead::default();
        }
        let mut ahead = Ahead::default();
        for list in by {
            let start = ahead.terms.len();
            ahead.terms.extend(list);
            ahead.of.push(start..ahead.terms.len());
        }
        ahead.ready = Vec::with_capacity(ahead.terms.len());
        ahead
    }

    /// Whether node `i` has terms to compute beside it.
    pub(super) fn assigned(&self, i: usize) -> bool {
        self.of.get(i).is_some_and(|r| !r.is_empty())
    }

    /// Forgets every ready sum (a new step).
    pub(super) fn clear(&mut self) {
        self.ready.clear();
        self.end = 0;
    }

    /// Computes the sums of `terms` for the one-row input `x`, the terms shared out among the
    /// pool's threads (buffers grow in the first steps only).
    pub(super) fn compute(&mut self, terms: &[AheadTerm<'_>], x: &[f32]) {
        let m: usize = terms.iter().map(|t| t.m).sum();
        let scratch: usize = terms.iter().map(|t| t.rank + t.k).sum();
        let widest = terms.iter().map(|t| t.m).max().unwrap_or(0);
        grow(&mut self.zeros, widest);
        grow(&mut self.sums, self.end + m);
        let sums = &mut self.sums[self.end..self.end + m];
        sums_of(
            terms,
            x,
            sums,
            grow(&mut self.scratch, scratch),
            &self.zeros,
        );
        for t in terms {
            self.ready.push((t.node, self.end));
            self.end += t.m;
        }
    }

    /// `out = fma(sum, factor, acc)` with node `node`'s sum when it is ready (`false`
    /// otherwise: the node computes its term itself).
    pub(super) fn finish(&mut self, node: usize, f: f32, acc: &[f32], out: &mut [f32]) -> bool {
        let Some(at) = self.ready.iter().position(|r| r.0 == node) else {
            return false;
        };
        let (_, off) = self.ready.swap_remove(at);
        let m = out.len();
        // A one-row "up" product over the sum with t = [1]: fma(sum, 1, 0) = sum, then
        // fma(sum, f, acc), the plain path's last step.
        cpu::low_rank_up(&self.sums[off..off + m], m, &[1.0], f, 0..m, acc, out);
        if self.ready.is_empty() {
            self.end = 0;
        }
        true
    }
}

/// The sums of `terms` into `sums` (theirs one after another), halves split in two and run
/// side by side until one term is left.
fn sums_of(
    terms: &[AheadTerm<'_>],
    x: &[f32],
    sums: &mut [f32],
    scratch: &mut [f32],
    zeros: &[f32],
) {
    if let [term] = terms {
        // `Bᵀ`'s first bytes come in while `A` is read (the up kernel prefetches the rest).
        match term.bt {
            HalfRef::F32(bt) => low_rank::prefetch_head(bt, BT_HEAD),
            HalfRef::F16(bt) => low_rank::prefetch_head(bt, BT_HEAD),
        }
        let (low, xs) = scratch.split_at_mut(term.rank);
        let x = if rounds(term.inputs.0) {
            let xs = &mut xs[..term.k];
            xs.copy_from_slice(&x[..term.k]);
            cpu::round_to(term.inputs.0, xs);
            &*xs
        } else {
            &x[..term.k]
        };
        match term.a {
            HalfRef::F32(a) => cpu::low_rank_down(a, term.k, x, low),
            HalfRef::F16(a) => cpu::low_rank_down(a, term.k, x, low),
        }
        cpu::round_to(term.inputs.1, low);
        // `Σ + 0` is `Σ`: a sum of fused multiply-adds from +0 is never -0.
        let (zeros, m) = (&zeros[..term.m], term.m);
        match term.bt {
            HalfRef::F32(bt) => cpu::low_rank_up(bt, m, low, 1.0, 0..m, zeros, sums),
            HalfRef::F16(bt) => cpu::low_rank_up(bt, m, low, 1.0, 0..m, zeros, sums),
        }
        return;
    }
    let (first, second) = terms.split_at(terms.len() / 2);
    let m: usize = first.iter().map(|t| t.m).sum();
    let sc: usize = first.iter().map(|t| t.rank + t.k).sum();
    let (s1, s2) = sums.split_at_mut(m);
    let (c1, c2) = scratch.split_at_mut(sc);
    rayon::join(
        || sums_of(first, x, s1, c1, zeros),
        || sums_of(second, x, s2, c2, zeros),
    );
}

/// The fused terms one-row matmul `i` computes beside it (into `terms`; returns how many):
/// those assigned to it whose factor for the row is not 0 (a term at 0 copies its input, as
/// before) and whose halves are readable (the node reports any that is not).
pub(super) fn terms_ahead<'a>(
    ahead: &Ahead,
    nodes: &[Node],
    weights: &'a [super::BoundWeight],
    adapters: &mut StepAdapters,
    out_rows: &[usize],
    (i, t): (usize, usize),
    terms: &mut [AheadTerm<'a>; MAX_AHEAD],
) -> usize {
    let Some(list) = ahead.of.get(i) else {
        return 0;
    };

    let mut n = 0;
    for &j in &ahead.terms[list.clone()] {
        let node = &nodes[j];
        let Op::LowRank {
            a,
            bt,
            scale,
            term,
            inputs,
        } = &node.op
        else {
            continue;
        };
        if n == MAX_AHEAD || adapters.factors(term, *scale, 1, t, out_rows)[0] == 0.0 {
            continue;
        }
        let (Ok(ha), Ok(hb)) = (
            HalfRef::of(&weights[*a].tensor),
            HalfRef::of(&weights[*bt].tensor),
        ) else {
            continue;
        };
        let (k, m) = (nodes[node.inputs[1]].width, node.width);
        let rank = ha.len() / k.max(1);
        if k == 0 || rank == 0 || ha.len() != rank * k || hb.len() != rank * m {
            continue;
        }
        terms[n] = AheadTerm {
            node: j,
            a: ha,
            bt: hb,
            k,
            m,
            rank,
            inputs: *inputs,
        };
        n += 1;
    }
    n
}
