//! LoRA terms of an MoE FFN (llama.cpp's `build_lora_mm_id` for the experts, `build_lora_mm`
//! for the router): each term adds `factor · (x · Aᵀ) · Bᵀ` to its projection's rows, every row
//! with its sequence's factor (0: the row keeps the base bits), the halves read in their stored
//! types by the matmul kernels.

use kestrel_tensor::{cpu, Tensor};

use super::{expert_bytes, grow};
use crate::ir::{MoeLowRank, MoeProj};
use crate::GraphError;

/// The LoRA terms of one MoE node, bound for a step.
pub(crate) struct MoeTerms<'a> {
    /// The terms.
    pub pairs: &'a [MoeLowRank],
    /// A weight's tensor (the terms' halves).
    pub tensor: &'a dyn Fn(usize) -> &'a Tensor,
    /// Each term's factor for each of the step's rows (`pairs.len()` runs of `rows`; 0: the
    /// row gets no term).
    pub factors: &'a [f32],
}

/// Buffers of the LoRA terms of one expert's rows.
#[derive(Default)]
pub(super) struct TermScratch {
    /// `x · A_eᵀ` of the group's rows.
    low: Vec<f32>,
    /// `(x · A_eᵀ) · B_eᵀ`.
    up: Vec<f32>,
}

/// Adds the router's terms to `logits` (`ne` per row of `x`, rows of `width`), every row with
/// its own factor (0: left as it is), before the router's bias, as llama.cpp's `build_lora_mm`.
#[allow(clippy::too_many_arguments)]
pub(super) fn router_terms(
    terms: &MoeTerms<'_>,
    x: &[f32],
    width: usize,
    logits: &mut [f32],
    ne: usize,
    segments: &[usize],
    ts: &mut TermScratch,
    mm: &mut cpu::MatmulScratch,
) -> Result<(), GraphError> {
    let rows = logits.len() / ne.max(1);
    for (j, pair) in terms.pairs.iter().enumerate() {
        if pair.proj != MoeProj::Router {
            continue;
        }
        let f = &terms.factors[j * rows..(j + 1) * rows];
        if f.iter().all(|&v| v == 0.0) {
            continue;
        }
        let (a, b) = ((terms.tensor)(pair.a), (terms.tensor)(pair.b));
        let rank = pair.term.rank;
        let low = grow(&mut ts.low, rows * rank);
        let (ab, bb) = (a.as_bytes(), b.as_bytes());
        cpu::matmul_segmented(x, rows, width, ab, a.dtype(), rank, low, segments, mm)?;
        let up = grow(&mut ts.up, rows * ne);
        cpu::matmul_segmented(low, rows, rank, bb, b.dtype(), ne, up, segments, mm)?;
        for (r, &fr) in f.iter().enumerate() {
            if fr == 0.0 {
                continue;
            }
            let row = &mut logits[r * ne..(r + 1) * ne];
            for (o, &u) in row.iter_mut().zip(&up[r * ne..(r + 1) * ne]) {
                *o += u * fr;
            }
        }
    }
    Ok(())
}

/// Adds the terms of projection `proj` of expert `e` to `out` (`group.len()` rows of `m`), the
/// projection of `input` (rows of `kin`), after the projection's scale and before its bias, as
/// llama.cpp's `build_lora_mm_id`: `out + factor · (x · A_eᵀ) · B_eᵀ`, rows at factor 0 left
/// as they are.
#[allow(clippy::too_many_arguments)]
pub(super) fn add_terms(
    terms: &MoeTerms<'_>,
    proj: MoeProj,
    e: usize,
    group: &[(usize, usize)],
    segs: &[usize],
    input: &[f32],
    kin: usize,
    out: &mut [f32],
    m: usize,
    s: &mut TermScratch,
    mm: &mut cpu::MatmulScratch,
) -> Result<(), GraphError> {
    let n = group.len();
    let rows = terms.factors.len() / terms.pairs.len().max(1);
    for (j, pair) in terms.pairs.iter().enumerate() {
        if pair.proj != proj {
            continue;
        }
        let f = &terms.factors[j * rows..(j + 1) * rows];
        if group.iter().all(|&(r, _)| f[r] == 0.0) {
            continue;
        }
        let (a, a_type, ak, rank) = expert_bytes((terms.tensor)(pair.a), e)?;
        let (b, b_type, br, bm) = expert_bytes((terms.tensor)(pair.b), e)?;
        if ak != kin || br != rank || bm != m || rank == 0 {
            return Err(GraphError::Internal(format!(
                "expert LoRA term: A {ak}×{rank} and B {br}×{bm} for a projection {kin}×{m}"
            )));
        }
        let low = grow(&mut s.low, n * rank);
        cpu::matmul_segmented(input, n, kin, a, a_type, rank, low, segs, mm)?;
        let up = grow(&mut s.up, n * m);
        cpu::matmul_segmented(low, n, rank, b, b_type, m, up, segs, mm)?;
        for (i, &(r, _)) in group.iter().enumerate() {
            let fr = f[r];
            if fr == 0.0 {
                continue;
            }
            let o = &mut out[i * m..(i + 1) * m];
            for (o, &u) in o.iter_mut().zip(&up[i * m..(i + 1) * m]) {
                // ggml_scale, then ggml_add: two roundings, no fused multiply-add.
                *o += u * fr;
            }
        }
    }
    Ok(())
}
