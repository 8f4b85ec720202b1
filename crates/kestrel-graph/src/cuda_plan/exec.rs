//! Running one node of a [`CudaPlan`] step: its rows, a fused launch where one applies, else
//! the op's own launch (`exec_into`), and which ops the CUDA plan cannot run yet.

use std::sync::Arc;

use kestrel_tensor::cuda::{DeviceTensor, Unary, MLA_MAX_HEAD_DIM};
use kestrel_tensor::{Shape, TensorError};

use super::{internal, CudaPlan, StepKv};
use crate::ir::{EmbedIndex, Node, Op, Rows};
use crate::GraphError;

impl CudaPlan {
    /// Rows of `node` in a step of `t` tokens: one output row a sequence.
    pub(super) fn rows(node: &Node, t: usize, kv: &StepKv<'_>) -> usize {
        match (node.rows, kv) {
            (Rows::Tokens, _) | (Rows::Outputs, StepKv::Table) => t,
            (Rows::Outputs, StepKv::One(_) | StepKv::Paged) => 1,
        }
    }

    pub(super) fn exec(
        &mut self,
        i: usize,
        node: &Node,
        tokens: &[u32],
        pos0: usize,
        kv: &mut StepKv<'_>,
    ) -> Result<(), GraphError> {
        if self.done[i] {
            return Ok(()); // written by an earlier node's fused launch
        }
        let rows = Self::rows(node, tokens.len(), kv);
        let mut out = self.acts[i]
            .take()
            .ok_or_else(|| internal("node buffer in use"))?;
        out.set_shape(Shape::matrix(rows, node.width)?)?;
        let result = match &node.op {
            Op::Moe(p) => self.exec_moe(i, node, p, &mut out, rows).map(|()| true),
            _ => self.exec_fused(i, node, &mut out, rows, kv),
        };
        let result = match result {
            Ok(true) => Ok(()),
            Ok(false) => self.exec_into(i, node, &mut out, tokens, pos0, kv),
            Err(e) => Err(e),
        };
        self.acts[i] = Some(out);
        result
    }

    /// Runs `f` on node's first input and `out`, both viewed as rows of `group` values (a
    /// per-head norm), then gives both their shapes back.
    fn grouped(
        &mut self,
        node: &Node,
        group: usize,
        out: &mut DeviceTensor,
        f: impl FnOnce(&DeviceTensor, &mut DeviceTensor) -> Result<(), TensorError>,
    ) -> Result<(), GraphError> {
        let in_id = node.inputs[0];
        let a_shape = self.input(node, 0)?.shape();
        let grouped = Shape::matrix(a_shape.elem_count() / group.max(1), group)?;
        let out_shape = out.shape();
        if let Some(a) = self.acts[in_id].as_mut() {
            a.set_shape(grouped)?;
        }
        out.set_shape(grouped)?;
        let r = f(self.input(node, 0)?, out);
        if let Some(a) = self.acts[in_id].as_mut() {
            a.set_shape(a_shape)?;
        }
        out.set_shape(out_shape)?;
        Ok(r?)
    }

    pub(super) fn input(&self, node: &Node, slot: usize) -> Result<&DeviceTensor, GraphError> {
        let id = *node
            .inputs
            .get(slot)
            .ok_or_else(|| internal("node input missing"))?;
        self.acts[id]
            .as_ref()
            .ok_or_else(|| internal("input buffer missing"))
    }

    fn exec_into(
        &mut self,
        i: usize,
        node: &Node,
        out: &mut DeviceTensor,
        tokens: &[u32],
        pos0: usize,
        kv: &mut StepKv<'_>,
    ) -> Result<(), GraphError> {
        let t = tokens.len();
        let dev = Arc::clone(&self.dev);
        match &node.op {
            Op::Embed { table, index } => match index {
                EmbedIndex::Tokens => {
                    dev.get_rows_ids(&self.weights[*table], &self.d_tokens, out)?
                }
                EmbedIndex::Positions => {
                    dev.get_rows_ids(&self.weights[*table], &self.d_positions, out)?
                }
                EmbedIndex::Row(r) => {
                    self.ids.clear();
                    self.ids.extend(std::iter::repeat_n(*r, t));
                    dev.get_rows(&self.weights[*table], &self.ids, out)?;
                }
            },
            Op::MatMul { weight } => {
                let a = self.input(node, 0)?;
                let from = node.inputs[0];
                let ticket = self.q8.and_then(|(id, t)| (id == from).then_some(t));
                let issued = dev.matmul_reusing(a, &self.weights[*weight], out, ticket)?;
                self.q8 = issued.map(|t| (from, t));
            }
            Op::AddBias { bias } => dev.add(self.input(node, 0)?, &self.weights[*bias], out)?,
            // Per-head norms see the row as `width / group` rows of `group`.
            Op::RmsNorm { group, eps, weight } => {
                let w = weight.map(|w| Arc::clone(&self.weights[w]));
                self.grouped(node, *group, out, |x, out| {
                    dev.rms_norm(x, w.as_deref(), *eps, out)
                })?;
            }
            Op::LayerNorm {
                eps,
                weight,
                bias,
                group,
            } => {
                let w = weight.map(|w| Arc::clone(&self.weights[w]));
                let b = bias.map(|b| Arc::clone(&self.weights[b]));
                self.grouped(node, *group, out, |x, out| {
                    dev.layer_norm(x, w.as_deref(), b.as_deref(), *eps, out)
                })?;
            }
            Op::Rope(p) => {
                let a = self.input(node, 0)?;
                let params = p.engine_params();
                let ff = p.freq_factors.map(|w| &*self.weights[w]);
                dev.rope_ids_from(a, out, &self.d_positions, p.n_head, p.head_dim, &params, ff)?;
            }
            Op::Attention(p) => {
                let params = p.engine_params();
                let sinks = p.sinks.map(|w| &*self.weights[w]);
                let cache = match kv {
                    StepKv::One(cache) => cache,
                    StepKv::Table | StepKv::Paged => {
                        let appended = std::mem::take(&mut self.appended);
                        let table = self
                            .kv_table
                            .as_ref()
                            .ok_or_else(|| internal("step without its table"))?;
                        let (q, k, v) = (
                            self.input(node, 0)?,
                            self.input(node, 1)?,
                            self.input(node, 2)?,
                        );
                        // SAFETY: `run_batch` (or `run`, for a paged cache) wrote the table for
                        // this step from caches (and the pool) it holds borrowed until the
                        // step's launches are enqueued; their memory is freed in stream order,
                        // after these launches.
                        let quantize = self.q8_wanted(i, out.shape().n_rows());
                        let ticket = unsafe {
                            if !appended {
                                dev.kv_append2_table((k, v), &self.d_positions, table, p.layer)?;
                            }
                            dev.attention_table_q8(
                                q,
                                &self.d_positions,
                                (table, p.layer),
                                &params,
                                sinks,
                                out,
                                quantize,
                            )?
                        };
                        if let Some(t) = ticket {
                            self.q8 = Some((i, t));
                        }
                        return Ok(());
                    }
                };
                // Causal queries bound their keys by their own position, so the kernel is given
                // the capacity (the same for every step: a graph replays it); a non-causal one
                // sees every key written so far.
                let (mask, kv_len) = if p.causal {
                    (&self.d_positions, cache.capacity)
                } else {
                    (&self.d_mask, pos0 + t)
                };
                let layer = cache
                    .layers
                    .get_mut(p.layer)
                    .and_then(Option::as_mut)
                    .ok_or_else(|| internal("layer cache missing"))?;
                if p.latent {
                    // DeepSeek's latent cache: keys only, each one's front its value.
                    self.appended = false;
                    dev.kv_append_ids(self.input(node, 1)?, &self.d_positions, &mut layer.k)?;
                    let q = self.input(node, 0)?;
                    dev.attention_latent_ids(
                        q,
                        mask,
                        &layer.k,
                        kv_len,
                        &params,
                        p.head_dim_v,
                        out,
                    )?;
                    return Ok(());
                }
                if !std::mem::take(&mut self.appended) {
                    dev.kv_append2_ids(
                        (self.input(node, 1)?, self.input(node, 2)?),
                        &self.d_positions,
                        (&mut layer.k, &mut layer.v),
                    )?;
                }
                let q = self.input(node, 0)?;
                // The output also as Q8_1 when the matvecs reading it want it.
                let quantize = self.q8_wanted(i, out.shape().n_rows());
                if let Some(t) = dev.attention_ids_q8(
                    q,
                    mask,
                    (&layer.k, &layer.v),
                    kv_len,
                    &params,
                    sinks,
                    out,
                    quantize,
                )? {
                    self.q8 = Some((i, t));
                }
            }
            Op::Add => dev.add(self.input(node, 0)?, self.input(node, 1)?, out)?,
            Op::Mul => dev.mul(self.input(node, 0)?, self.input(node, 1)?, out)?,
            Op::Scale(s) => dev.scale_from(self.input(node, 0)?, out, *s)?,
            // The bound scales' factor, else the one the graph was built with.
            Op::AdapterScale { scale, term } => {
                let f = match &self.adapter_scales {
                    Some(s) => term.factor(s.get(term.adapter).copied().unwrap_or(0.0)),
                    None => *scale,
                };
                dev.scale_from(self.input(node, 0)?, out, f)?
            }
            Op::SoftCap(cap) => dev.softcap_from(self.input(node, 0)?, out, *cap)?,
            Op::SwiGlu => dev.swiglu(self.input(node, 0)?, self.input(node, 1)?, out)?,
            Op::GeGlu => dev.geglu(self.input(node, 0)?, self.input(node, 1)?, out)?,
            Op::GeluErf => dev.gelu_erf_from(self.input(node, 0)?, out)?,
            Op::AttnTemperature(p) => dev.attn_temperature_ids_from(
                self.input(node, 0)?,
                out,
                &self.d_positions,
                node.width,
                p.floor_scale,
                p.scale,
                p.offset,
            )?,
            Op::Gelu => dev.unary_op(Unary::Gelu, self.input(node, 0)?, out)?,
            Op::Silu => dev.unary_op(Unary::Silu, self.input(node, 0)?, out)?,
            Op::ReluSqr => dev.unary_op(Unary::ReluSqr, self.input(node, 0)?, out)?,
            Op::Sigmoid => dev.unary_op(Unary::Sigmoid, self.input(node, 0)?, out)?,
            Op::Clamp(limit) => dev.unary_op(Unary::Clamp(*limit), self.input(node, 0)?, out)?,
            // A weight vector per row, or one value for the whole tensor.
            Op::MulWeight { weight } => {
                dev.mul(self.input(node, 0)?, &self.weights[*weight], out)?
            }
            Op::MulRowScalar => {
                dev.mul_row_scalar(self.input(node, 0)?, self.input(node, 1)?, out)?
            }
            Op::Slice { offset } => dev.slice_cols(self.input(node, 0)?, *offset, out)?,
            Op::SsmConv(_) | Op::SsmScan(_) => self.exec_ssm(node, out, t, kv)?,
            Op::HeadSlice {
                n_head,
                head_in,
                offset,
            } => dev.head_slice(self.input(node, 0)?, (*n_head, *head_in, *offset), out)?,
            Op::HeadConcat { n_head, heads } => dev.head_concat(
                (self.input(node, 0)?, self.input(node, 1)?),
                *n_head,
                *heads,
                out,
            )?,
            Op::HeadMatMul { weight, n_head } => {
                dev.head_matmul(self.input(node, 0)?, &self.weights[*weight], *n_head, out)?
            }
            Op::Moe(_) | Op::LowRank { .. } => {
                return Err(GraphError::Unsupported {
                    op: unsupported(&node.op).unwrap_or("?"),
                    node: node.name.clone(),
                    backend: "CUDA",
                })
            }
            Op::OutputRows => {
                // One sequence: its last token; a batched step: each sequence's one token.
                let a = self.input(node, 0)?;
                match kv {
                    StepKv::One(_) | StepKv::Paged => dev.copy_rows(a, t - 1, 1, out, 0)?,
                    StepKv::Table => dev.copy_rows(a, 0, t, out, 0)?,
                }
            }
        }
        Ok(())
    }
}

/// The name of an op the CUDA plan cannot run yet (refused when the plan is made).
pub(super) fn unsupported(op: &Op) -> Option<&'static str> {
    match op {
        Op::Rope(p) if p.mrope.is_some() => Some("M-RoPE with unrotated fourth-axis pairs"),
        Op::Attention(p)
            if p.latent && (p.head_dim_k > MLA_MAX_HEAD_DIM || p.head_dim_v > p.head_dim_k) =>
        {
            Some("latent attention with key heads over 576 values")
        }
        Op::Attention(p) if !p.latent && p.head_dim_k.max(p.head_dim_v) > 256 => {
            Some("attention with heads over 256 values")
        }
        Op::SsmScan(_) => super::ssm::refused(op),
        Op::LowRank { .. } => {
            Some("fused low-rank adapter term (the CUDA plan takes the unfused form)")
        }
        _ => None,
    }
}
