//! A MoE layer routed on the device (steps of up to 64 rows): the router's logits stay on the
//! GPU, `moe_route` picks each token's experts and weights there (the CPU's rule), each
//! (token, slot) pair's projections read its expert through the indirect matvec (from 8 tokens
//! the pairs grouped by expert into tiles for the tensor-core matvec, each expert read once a
//! tile), and the pairs' outputs are summed by their weights into the token's row. No copy
//! back, no host ids: the step can be captured in a CUDA graph.
//!
//! Each pair's projections have the bits of the host path's (its expert's one-row matvec, the
//! same scale, bias, activation and slot-ordered sum); the routing weights may differ from the
//! host's routing in the last bits (the device sums in warp trees), and near-ties between
//! experts may then fall the other way.

use kestrel_tensor::cuda::RouteSpec;
use kestrel_tensor::Shape;

use super::super::{internal, CudaPlan};
use super::{activate, ExpertWeights, MoeBuffers};
use crate::ir::{MoeParams, Node};
use crate::GraphError;

impl CudaPlan {
    /// Whether MoE layers the device can route route there (on unless
    /// `KESTREL_CUDA_MOE_ROUTE=host`): off, every MoE step copies its router's logits back and
    /// routes on the host, as before, and such plans capture no CUDA graphs.
    pub fn set_moe_on_device(&mut self, on: bool) {
        self.moe_device = on;
    }

    /// Whether this plan's decode steps need no host routing: it has no MoE layer, or routes
    /// every one on the device.
    pub(in crate::cuda_plan) fn moe_graphable(&self) -> bool {
        self.moe_buf.is_none()
            || (self.moe_device && self.moe.iter().flatten().all(|(_, e)| e.route.is_some()))
    }

    pub(super) fn moe_step_routed(
        &self,
        node: &Node,
        p: &MoeParams,
        ew: &ExpertWeights,
        b: &mut MoeBuffers,
        out: &mut kestrel_tensor::cuda::DeviceTensor,
        rows: usize,
    ) -> Result<(), GraphError> {
        let dev = &*self.dev;
        let spec: &RouteSpec = ew
            .route
            .as_ref()
            .ok_or_else(|| internal("MoE node not routable on the device"))?;
        let routes = b
            .routes
            .as_mut()
            .ok_or_else(|| internal("MoE routes missing"))?;
        let (ne, k, nf, width) = (p.n_expert, p.n_used, p.n_ff, node.width);
        let pairs = rows * k;
        let x = self.input(node, 0)?;
        let rx = match node.inputs.get(1) {
            Some(_) => self.input(node, 1)?,
            None => x,
        };
        b.logits.set_shape(Shape::matrix(rows, ne)?)?;
        dev.matmul_reusing(rx, &self.weights[p.router], &mut b.logits, None)?;
        let biases = (ew.d_router_bias.as_ref(), ew.d_selection_bias.as_ref());
        dev.moe_route(&b.logits, spec, biases, routes)?;
        let routes = &*routes;
        let factors = |slot: usize| (ew.d_scales[slot].as_ref(), ew.d_biases[slot].as_ref());
        if p.fused_gate_up {
            b.both.set_shape(Shape::matrix(pairs, 2 * nf)?)?;
            dev.matmul_experts(x, (&ew.up, routes), true, &mut b.both, None)?;
            dev.moe_scale_bias(&mut b.both, routes, ne, factors(0))?;
            for (t, off) in [(&mut b.gate, 0), (&mut b.up, nf)] {
                t.set_shape(Shape::matrix(pairs, nf)?)?;
                dev.slice_cols(&b.both, off, t)?;
            }
        } else {
            b.up.set_shape(Shape::matrix(pairs, nf)?)?;
            let ticket = dev.matmul_experts(x, (&ew.up, routes), true, &mut b.up, None)?;
            dev.moe_scale_bias(&mut b.up, routes, ne, factors(0))?;
            if let Some(g) = &ew.gate {
                b.gate.set_shape(Shape::matrix(pairs, nf)?)?;
                dev.matmul_experts(x, (g, routes), true, &mut b.gate, ticket)?;
                dev.moe_scale_bias(&mut b.gate, routes, ne, factors(1))?;
            }
        }
        activate(dev, p, pairs, (&b.gate, &b.up, &mut b.act))?;
        b.outs.set_shape(Shape::matrix(pairs, width)?)?;
        dev.matmul_experts(&b.act, (&ew.down, routes), false, &mut b.outs, None)?;
        dev.moe_scale_bias(&mut b.outs, routes, ne, factors(2))?;
        dev.moe_combine(&b.outs, routes, out)?;
        Ok(())
    }
}
