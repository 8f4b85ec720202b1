//! LoRA terms in a CPU plan: the fused low-rank op ([`Op::LowRank`](crate::Op::LowRank)), the
//! unfused form's scale ([`Op::AdapterScale`](crate::Op::AdapterScale)), and the adapter scales
//! a step binds, per sequence, so one batch can run each sequence with its own adapters (a
//! multi-LoRA server's batch: the base matmul once for all rows, each row's own low-rank terms).
//!
//! A row whose factor is 0 gets the base output exactly (its term is not computed), so a
//! sequence without adapters in a batch with adapted ones gets the bits of a plan without them.

use half::f16;
use kestrel_tensor::cpu::low_rank::LowRankHalf;
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
            let cols = m.div_ceil(threads).next_multiple_of(16);
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
