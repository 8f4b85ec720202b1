//! Building mixture-of-experts FFN nodes: every expert weight's dims, the router's, the shared
//! expert's and each expert adapter term's checked against the row width, `n_ff` and
//! `n_expert`.

use super::{shape_err, Graph};
use crate::ir::{MoeActivation, MoeParams, MoeProj, NodeId, Op};
use crate::GraphError;

impl Graph {
    /// A mixture-of-experts FFN of every row of `x` (see [`MoeParams`]); the weights' dims are
    /// checked against the row width, `n_ff` and `n_expert`.
    pub fn moe(&mut self, name: &str, x: NodeId, p: MoeParams) -> Result<NodeId, GraphError> {
        self.moe_routed(name, x, None, p)
    }

    /// A mixture-of-experts FFN of `x` whose router reads `router_x` instead (Nemotron 3 Super's
    /// experts in a latent space: the router sees the layer's input, the experts its projection
    /// down; `None`: `x` itself).
    pub fn moe_routed(
        &mut self,
        name: &str,
        x: NodeId,
        router_x: Option<NodeId>,
        p: MoeParams,
    ) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        let rw = match router_x {
            Some(r) => {
                let (rrows, rw) = self.shape(r)?;
                if rrows != rows {
                    return Err(shape_err(
                        name,
                        format!("router input rows {rrows:?} for expert rows {rows:?}"),
                    ));
                }
                rw
            }
            None => w,
        };
        let (e, f) = (p.n_expert as u64, p.n_ff as u64);
        if p.n_used == 0 || p.n_used > p.n_expert {
            return Err(shape_err(
                name,
                format!("{} of {} experts used", p.n_used, p.n_expert),
            ));
        }
        if p.fused_gate_up && p.gate.is_some() {
            return Err(shape_err(name, "fused gate/up experts and a gate".into()));
        }
        let up_rows = if p.fused_gate_up { 2 * f } else { f };
        let mut expect = vec![
            (p.router, vec![rw as u64, e]),
            (p.up, vec![w as u64, up_rows, e]),
            (p.down, vec![f, w as u64, e]),
        ];
        if let Some(g) = p.gate {
            expect.push((g, vec![w as u64, f, e]));
        }
        for s in p.scales.iter().flatten() {
            expect.push((*s, vec![e]));
        }
        for (b, m) in p.biases.iter().zip([f, f, w as u64]) {
            if let Some(b) = b {
                expect.push((*b, vec![m, e]));
            }
        }
        let gated = p.gate.is_some() || p.fused_gate_up;
        if p.activation == MoeActivation::SwiGluOai && !gated {
            return Err(shape_err(name, "swiglu_oai experts without a gate".into()));
        }
        if p.activation == MoeActivation::ReluSqr && gated {
            return Err(shape_err(name, "relu² experts with a gate".into()));
        }
        if let Some(b) = p.router_bias {
            expect.push((b, vec![e]));
        }
        if let Some(b) = p.selection_bias {
            expect.push((b, vec![e]));
        }
        if let Some((groups, used)) = p.groups {
            let ok = groups > 1
                && p.n_expert.is_multiple_of(groups)
                && p.n_expert / groups >= 2
                && used > 0
                && used < groups
                && p.n_used <= used * (p.n_expert / groups);
            if !ok {
                return Err(shape_err(
                    name,
                    format!(
                        "{} of {} experts chosen from {used} of {groups} groups",
                        p.n_used, p.n_expert
                    ),
                ));
            }
        }
        for (id, dims) in expect {
            let got = self.weight_dims(id, name)?;
            if got != dims.as_slice() {
                return Err(shape_err(
                    name,
                    format!("weight {id} has dims {got:?}, expected {dims:?}"),
                ));
            }
        }
        self.check_moe_terms(name, &p)?;
        let inputs = match router_x {
            Some(r) => vec![x, r],
            None => vec![x],
        };
        Ok(self.push(name, Op::Moe(p), inputs, rows, w))
    }

    /// Checks the LoRA terms of an MoE node against its projections: `A` `[k, rank, e]`, `B`
    /// `[rank, m, e]` for a projection `[k, m, e]` that the node has.
    pub(crate) fn check_moe_terms(&self, name: &str, p: &MoeParams) -> Result<(), GraphError> {
        for t in &p.low_rank {
            let proj = match t.proj {
                MoeProj::Router => Some(p.router),
                MoeProj::Up => Some(p.up),
                MoeProj::Gate => p.gate,
                MoeProj::Down => Some(p.down),
            }
            .ok_or_else(|| shape_err(name, format!("a LoRA term on a {:?} it lacks", t.proj)))?;
            let w = self.weight_dims(proj, name)?;
            let (a, b) = (self.weight_dims(t.a, name)?, self.weight_dims(t.b, name)?);
            let fits = match (w, a, b) {
                ([k, m, e], [ak, ar, ae], [br, bm, be]) => {
                    ak == k && bm == m && ar == br && *ar > 0 && ae == e && be == e
                }
                ([k, m], [ak, ar], [br, bm]) => {
                    t.proj == MoeProj::Router && ak == k && bm == m && ar == br && *ar > 0
                }
                _ => false,
            };
            if !fits || t.term.rank as u64 != a[1] {
                return Err(shape_err(
                    name,
                    format!(
                        "expert LoRA term on {:?} {w:?}: A {a:?} and B {b:?} do not fit",
                        t.proj
                    ),
                ));
            }
        }
        Ok(())
    }
}
