//! Running a fused launch in a [`CudaPlan`] step (what `Fusions` found at compile time).

use std::sync::Arc;

use kestrel_tensor::cuda::{DeviceTensor, Glu, NormAfter, Sandwich};
use kestrel_tensor::{Shape, TensorError};

use super::super::{internal, CudaPlan, StepKv};
use super::*;
use crate::ir::{Node, Op};
use crate::GraphError;

impl CudaPlan {
    /// Whether node `i`'s output of `rows` rows may also be left as Q8_1 for its readers (never
    /// with fusion off).
    pub(in crate::cuda_plan) fn q8_wanted(&self, i: usize, rows: usize) -> bool {
        let types = &self.fusions.q8_readers[i];
        self.fuse && !types.is_empty() && types.iter().all(|&t| self.dev.matvec_quantized(t, rows))
    }

    /// Takes node `j`'s buffer out, shaped `rows` × `width`, for a fused launch to write.
    fn take_act(
        &mut self,
        j: usize,
        rows: usize,
        width: usize,
    ) -> Result<DeviceTensor, GraphError> {
        let mut t = self.acts[j]
            .take()
            .ok_or_else(|| internal("fused node buffer in use"))?;
        t.set_shape(Shape::matrix(rows, width)?)?;
        Ok(t)
    }

    /// The fused RoPE of `ra`'s queries (into `q_out`) and keys with the KV append of `layer`.
    fn rope_append(
        &self,
        ra: &RopeAttention,
        layer: usize,
        q_out: &mut DeviceTensor,
        kv: &mut StepKv<'_>,
    ) -> Result<(), GraphError> {
        let get = |id: usize| {
            self.acts[id]
                .as_ref()
                .ok_or_else(|| internal("fused RoPE input buffer missing"))
        };
        let (q_src, k_src, v_src) = (get(ra.q_src)?, get(ra.k_src)?, get(ra.v)?);
        let params = ra.rope.engine_params();
        let ff = ra.rope.freq_factors.map(|w| &*self.weights[w]);
        let heads = (ra.rope.n_head, ra.n_kv_head, ra.rope.head_dim);
        let q_scale = ra.q_scale.map_or(1.0, |(_, s)| s);
        let norms = ra
            .head_norms
            .map(|n| n.map(|n| (n.weight.map(|w| &*self.weights[w]), n.eps)));
        match kv {
            StepKv::One(cache) => {
                let lc = cache
                    .layers
                    .get_mut(layer)
                    .and_then(Option::as_mut)
                    .ok_or_else(|| internal("layer cache missing"))?;
                self.dev.rope_qk_append_ids(
                    (q_src, q_out),
                    (k_src, v_src),
                    &self.d_positions,
                    (&mut lc.k, &mut lc.v),
                    heads,
                    &params,
                    ff,
                    q_scale,
                    norms,
                )?;
            }
            StepKv::Table | StepKv::Paged => {
                let table = self
                    .kv_table
                    .as_ref()
                    .ok_or_else(|| internal("step without its table"))?;
                // SAFETY: `run_batch` (or `run`, for a paged cache) wrote the table for this
                // step from caches (and the pool) it holds borrowed until the step's launches
                // are enqueued; their memory is freed in stream order, after these launches.
                unsafe {
                    self.dev.rope_qk_append_table(
                        (q_src, q_out),
                        (k_src, v_src),
                        &self.d_positions,
                        (table, layer),
                        heads,
                        &params,
                        ff,
                        q_scale,
                        norms,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// The add whose buffer is `sum` with the norm before it on one input (`pn`) and the norm
    /// `after` it, in one launch; leaves Q8_1 of the last norm when `quantize`.
    fn pre_norm_add_norm(
        &mut self,
        pn: PreNorm,
        (norm, eps, weight): (usize, f32, Option<usize>),
        sum: &mut DeviceTensor,
        rows: usize,
        quantize: bool,
    ) -> Result<bool, GraphError> {
        let width = sum.shape().row_len();
        let mut normed = self.take_act(norm, rows, width)?;
        let mut pre = match self.take_act(pn.norm, rows, width) {
            Ok(t) => t,
            Err(e) => {
                self.acts[norm] = Some(normed);
                return Err(e);
            }
        };
        let w1 = pn.weight.map(|w| Arc::clone(&self.weights[w]));
        let w2 = weight.map(|w| Arc::clone(&self.weights[w]));
        let r = match (
            self.acts[pn.input].as_ref(),
            self.acts[pn.residual].as_ref(),
        ) {
            (Some(o), Some(res)) => self.dev.norm_add_rms_norm(
                (o, w1.as_deref(), pn.eps),
                &mut pre,
                (res, sum),
                (w2.as_deref(), eps),
                &mut normed,
                quantize,
            ),
            _ => Err(TensorError::InvalidParam {
                op: "cuda plan",
                why: "a fused sandwich norm's input buffer is missing",
            }),
        };
        self.acts[pn.norm] = Some(pre);
        self.acts[norm] = Some(normed);
        if let Some(t) = r? {
            self.q8 = Some((norm, t));
        }
        self.done[norm] = true;
        Ok(true)
    }

    /// Takes the buffers of `ids` out, shaped `rows` × `width`: every one of them (`Some`
    /// each), or on an error none (those taken are put back). Allocates nothing.
    fn take_acts<const N: usize>(
        &mut self,
        ids: [usize; N],
        rows: usize,
        width: usize,
    ) -> Result<[Option<DeviceTensor>; N], GraphError> {
        let mut taken: [Option<DeviceTensor>; N] = std::array::from_fn(|_| None);
        for k in 0..N {
            match self.take_act(ids[k], rows, width) {
                Ok(t) => taken[k] = Some(t),
                Err(e) => {
                    for (id, t) in ids.into_iter().zip(&mut taken) {
                        if let Some(t) = t.take() {
                            self.acts[id] = Some(t);
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(taken)
    }

    /// Matmul node `i` (weight `weight`, its buffer `out`) with the RMS norm after it in its
    /// launch ([`Fusions::norm_after`]), where the step (one row) and the device take it;
    /// false: run it otherwise.
    fn matmul_norm(
        &mut self,
        i: usize,
        node: &Node,
        weight: usize,
        out: &mut DeviceTensor,
        rows: usize,
    ) -> Result<bool, GraphError> {
        let Some(mn) = self.fusions.norm_after[i] else {
            return Ok(false);
        };
        let w = Arc::clone(&self.weights[weight]);
        if !self.dev.matvec_norm_applies(w.dtype(), rows, node.width) {
            return Ok(false);
        }
        let from = node.inputs[0];
        let ticket = self.q8.and_then(|(id, t)| (id == from).then_some(t));
        let missing = || TensorError::InvalidParam {
            op: "cuda plan",
            why: "a fused matmul + norm's input buffer is missing",
        };
        let (norm, q8) = match mn {
            MatMulNorm::AfterAdd(AddNorm { norm, eps, weight }) => {
                let Some(MatMulAdd { add, residual }) = self.fusions.matmul_add[i] else {
                    return Ok(false);
                };
                let quantize = self.q8_wanted(norm, rows);
                let [Some(mut sum), Some(mut normed)] =
                    self.take_acts([add, norm], rows, node.width)?
                else {
                    return Err(internal("fused node buffers missing"));
                };
                let nw = weight.map(|w| Arc::clone(&self.weights[w]));
                let r = match (self.acts[from].as_ref(), self.acts[residual].as_ref()) {
                    (Some(x), Some(res)) => {
                        let after = NormAfter {
                            weight: nw.as_deref(),
                            eps,
                            out: &mut normed,
                            quantize,
                            sandwich: None,
                        };
                        self.dev
                            .matmul_norm_reusing(x, &w, &mut sum, Some(res), after, ticket)
                    }
                    _ => Err(missing()),
                };
                self.acts[add] = Some(sum);
                self.acts[norm] = Some(normed);
                self.done[add] = true;
                (norm, r)
            }
            MatMulNorm::Sandwich { add } => {
                let (Some(AddNorm { norm, eps, weight }), Some(pn)) =
                    (self.fusions.add_norm[add], self.fusions.pre_norm[add])
                else {
                    return Ok(false);
                };
                let quantize = self.q8_wanted(norm, rows);
                let [Some(mut pre), Some(mut sum), Some(mut normed)] =
                    self.take_acts([pn.norm, add, norm], rows, node.width)?
                else {
                    return Err(internal("fused node buffers missing"));
                };
                let (w1, w2) = (
                    pn.weight.map(|w| Arc::clone(&self.weights[w])),
                    weight.map(|w| Arc::clone(&self.weights[w])),
                );
                let r = match (self.acts[from].as_ref(), self.acts[pn.residual].as_ref()) {
                    (Some(x), Some(res)) => {
                        let after = NormAfter {
                            weight: w2.as_deref(),
                            eps,
                            out: &mut normed,
                            quantize,
                            sandwich: Some(Sandwich {
                                weight: w1.as_deref(),
                                eps: pn.eps,
                                normed: &mut pre,
                                residual: res,
                                sum: &mut sum,
                            }),
                        };
                        self.dev
                            .matmul_norm_reusing(x, &w, out, None, after, ticket)
                    }
                    _ => Err(missing()),
                };
                self.acts[pn.norm] = Some(pre);
                self.acts[add] = Some(sum);
                self.acts[norm] = Some(normed);
                self.done[add] = true;
                (norm, r)
            }
        };
        self.done[norm] = true;
        self.q8 = q8?.map(|t| (norm, t));
        Ok(true)
    }

    /// The gate/up pair starting at node `i` (`w0`, its buffer `out`; `w1` and `m1` the other)
    /// with the gated activation after it in its launch ([`Fusions::multi_glu`]), where the
    /// step (one row) and the device take it; false: run it otherwise.
    fn gate_up_glu(
        &mut self,
        i: usize,
        node: &Node,
        (w0, w1, m1): (&DeviceTensor, &DeviceTensor, MultiMember),
        out: &mut DeviceTensor,
        rows: usize,
    ) -> Result<bool, GraphError> {
        let Some(MultiGlu {
            node: g,
            gelu,
            gate_first,
        }) = self.fusions.multi_glu[i]
        else {
            return Ok(false);
        };
        let glu = if gelu { Glu::GeGlu } else { Glu::SwiGlu };
        if w0.dtype() != w1.dtype()
            || !self
                .dev
                .matvec_gate_up_glu_applies(w0.dtype(), rows, node.width)
        {
            return Ok(false);
        }
        let from = node.inputs[0];
        let ticket = self.q8.and_then(|(id, t)| (id == from).then_some(t));
        let quantize = self.q8_wanted(g, rows);
        let [Some(mut other), Some(mut act)] = self.take_acts([m1.node, g], rows, node.width)?
        else {
            return Err(internal("fused node buffers missing"));
        };
        let r = match self.acts[from].as_ref() {
            Some(x) => {
                let (first, second) = ((w0, &mut *out), (w1, &mut other));
                let (gate, up) = if gate_first {
                    (first, second)
                } else {
                    (second, first)
                };
                self.dev
                    .matmul_gate_up_glu_reusing(x, gate, up, glu, &mut act, quantize, ticket)
            }
            None => Err(TensorError::InvalidParam {
                op: "cuda plan",
                why: "a fused gate/up matmul's input buffer is missing",
            }),
        };
        self.acts[m1.node] = Some(other);
        self.acts[g] = Some(act);
        self.done[m1.node] = true;
        self.done[g] = true;
        self.q8 = r?.map(|t| (g, t));
        Ok(true)
    }

    /// Runs node `i` (its buffer `out`) as a fused launch where [`Fusions::find`] found one that
    /// applies to this step; false: run it plainly.
    pub(in crate::cuda_plan) fn exec_fused(
        &mut self,
        i: usize,
        node: &Node,
        out: &mut DeviceTensor,
        rows: usize,
        kv: &mut StepKv<'_>,
    ) -> Result<bool, GraphError> {
        if !self.fuse {
            return Ok(false);
        }
        let dev = Arc::clone(&self.dev);
        match &node.op {
            Op::MatMul { weight } if self.fusions.multi[i].is_some() => {
                let Some([Some(m1), m2]) = self.fusions.multi[i] else {
                    return Ok(false);
                };
                let w0 = Arc::clone(&self.weights[*weight]);
                let w1 = Arc::clone(&self.weights[m1.weight]);
                let w2 = m2.map(|m| Arc::clone(&self.weights[m.weight]));
                let types = [
                    w0.dtype(),
                    w1.dtype(),
                    w2.as_ref().map_or(w0.dtype(), |w| w.dtype()),
                ];
                if !dev.matvec_multi_applies(&types[..2 + usize::from(m2.is_some())], rows) {
                    return Ok(false);
                }
                if m2.is_none() && self.gate_up_glu(i, node, (&*w0, &*w1, m1), out, rows)? {
                    return Ok(true);
                }
                let from = node.inputs[0];
                let ticket = self.q8.and_then(|(id, t)| (id == from).then_some(t));
                let mut o1 = self.take_act(m1.node, rows, m1.width)?;
                let mut o2 = match m2 {
                    Some(m) => match self.take_act(m.node, rows, m.width) {
                        Ok(t) => Some(t),
                        Err(e) => {
                            self.acts[m1.node] = Some(o1);
                            return Err(e);
                        }
                    },
                    None => None,
                };
                let r = match (self.acts[from].as_ref(), w2.as_deref(), o2.as_mut()) {
                    (Some(x), w2, o2) => {
                        dev.matmul_multi_reusing(x, (&w0, out), (&w1, &mut o1), w2.zip(o2), ticket)
                    }
                    (None, ..) => Err(TensorError::InvalidParam {
                        op: "cuda plan",
                        why: "a fused matmul's input buffer is missing",
                    }),
                };
                self.acts[m1.node] = Some(o1);
                self.done[m1.node] = true;
                if let (Some(m), Some(t)) = (m2, o2) {
                    self.acts[m.node] = Some(t);
                    self.done[m.node] = true;
                }
                self.q8 = r?.map(|t| (from, t));
                Ok(true)
            }
            Op::MatMul { weight } => {
                if self.matmul_norm(i, node, *weight, out, rows)? {
                    return Ok(true);
                }
                let Some(MatMulAdd { add, residual }) = self.fusions.matmul_add[i] else {
                    return Ok(false);
                };
                let w = Arc::clone(&self.weights[*weight]);
                if !dev.matvec_quantized(w.dtype(), rows) {
                    return Ok(false);
                }
                let from = node.inputs[0];
                let ticket = self.q8.and_then(|(id, t)| (id == from).then_some(t));
                let mut sum = self.take_act(add, rows, node.width)?;
                let r = match (self.acts[from].as_ref(), self.acts[residual].as_ref()) {
                    (Some(x), Some(res)) => dev.matmul_add_reusing(x, &w, res, &mut sum, ticket),
                    _ => Err(TensorError::InvalidParam {
                        op: "cuda plan",
                        why: "a fused matmul's input buffer is missing",
                    }),
                };
                self.acts[add] = Some(sum);
                self.q8 = r?.map(|t| (from, t));
                self.done[add] = true;
                Ok(true)
            }
            Op::Add => {
                let Some(AddNorm { norm, eps, weight }) = self.fusions.add_norm[i] else {
                    return Ok(false);
                };
                let quantize = self.q8_wanted(norm, rows);
                if let Some(pn) = self.fusions.pre_norm[i] {
                    return self.pre_norm_add_norm(pn, (norm, eps, weight), out, rows, quantize);
                }
                let mut normed = self.take_act(norm, rows, node.width)?;
                let (a, b) = (node.inputs[0], node.inputs[1]);
                let w = weight.map(|w| Arc::clone(&self.weights[w]));
                let r = match (self.acts[a].as_ref(), self.acts[b].as_ref()) {
                    (Some(x), Some(res)) => dev.rms_norm_fused(
                        x,
                        Some((res, out)),
                        w.as_deref(),
                        eps,
                        &mut normed,
                        quantize,
                    ),
                    _ => Err(TensorError::InvalidParam {
                        op: "cuda plan",
                        why: "a fused add's input buffer is missing",
                    }),
                };
                self.acts[norm] = Some(normed);
                if let Some(t) = r? {
                    self.q8 = Some((norm, t));
                }
                self.done[norm] = true;
                Ok(true)
            }
            // A sandwich norm its add runs ([`Fusions::pre_norm`]).
            Op::RmsNorm { .. } if self.fusions.deferred[i] => Ok(true),
            Op::RmsNorm { group, eps, weight } if *group == node.width => {
                if !self.q8_wanted(i, rows) {
                    return Ok(false);
                }
                let w = weight.map(|w| &*self.weights[w]);
                let x = self.input(node, 0)?;
                if let Some(t) = dev.rms_norm_fused(x, None, w, *eps, out, true)? {
                    self.q8 = Some((i, t));
                }
                Ok(true)
            }
            Op::Rope(_) | Op::Scale(_) => Ok(self.fusions.deferred[i]),
            Op::Attention(p) => {
                let Some(ra) = self.fusions.rope_attention[i].clone() else {
                    return Ok(false);
                };
                let q_node = ra.q_out();
                let mut q_out = self.take_act(q_node, rows, ra.rope.n_head * ra.rope.head_dim)?;
                let r = self.rope_append(&ra, p.layer, &mut q_out, kv);
                self.acts[q_node] = Some(q_out);
                r?;
                // The attention itself runs as usual, told the append is done.
                self.appended = true;
                Ok(false)
            }
            Op::SwiGlu | Op::GeGlu => {
                if !self.q8_wanted(i, rows) {
                    return Ok(false);
                }
                let glu = match node.op {
                    Op::SwiGlu => Glu::SwiGlu,
                    _ => Glu::GeGlu,
                };
                let (g, u) = (self.input(node, 0)?, self.input(node, 1)?);
                if let Some(t) = dev.glu_fused(glu, g, u, out, true)? {
                    self.q8 = Some((i, t));
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
