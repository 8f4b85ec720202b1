//! State-space layers on the GPU (Mamba, Mamba-2 and the hybrids): each recurrent layer's
//! state lives in the sequence's [`CudaKvCache`] ([`LayerState`](super::cache::LayerState)), the convolution and the scan
//! read and update it (`kestrel_tensor::cuda` `ssm_conv`, `ssm_scan`), and a sequence that starts
//! over (its first position) has it zeroed before the step. A batched step runs each of its
//! sequences alone (the kernels take one sequence's state).

use kestrel_tensor::cpu::SsmScanParams as EngineScan;
use kestrel_tensor::cuda::{DeviceTensor, MAX_SSM_STATE};

use super::cache::StepKv;
use super::{internal, CudaKvCache, CudaPlan};
use crate::ir::{Node, Op, SsmScanParams};
use crate::GraphError;

/// Each recurrent layer's state sizes, by recurrent layer index: (convolution values, scan
/// values); `None` for an index no node names.
pub(super) fn state_sizes(nodes: &[Node]) -> Vec<Option<(usize, usize)>> {
    fn at(sizes: &mut Vec<Option<(usize, usize)>>, layer: usize) -> &mut (usize, usize) {
        if sizes.len() <= layer {
            sizes.resize(layer + 1, None);
        }
        sizes[layer].get_or_insert((0, 0))
    }
    let mut sizes = Vec::new();
    for n in nodes {
        match &n.op {
            Op::SsmConv(p) => at(&mut sizes, p.layer).0 = n.width * p.d_conv.saturating_sub(1),
            Op::SsmScan(p) => at(&mut sizes, p.layer).1 = p.n_head * p.head_dim * p.d_state,
            _ => {}
        }
    }
    sizes
}

/// Why the GPU cannot run a state-space node (`None`: it can).
pub(super) fn refused(op: &Op) -> Option<&'static str> {
    match op {
        Op::SsmScan(p) if p.d_state > MAX_SSM_STATE => {
            Some("selective scan with more than 256 state values a channel")
        }
        _ => None,
    }
}

/// The weights a state-space node reads as plain f32 values (the convolution's taps, the
/// scan's A and D), whatever their dims.
pub(super) fn f32_weights(nodes: &[Node]) -> Vec<usize> {
    let mut ids = Vec::new();
    for n in nodes {
        match &n.op {
            Op::SsmConv(p) => ids.extend(std::iter::once(p.weight).chain(p.bias)),
            Op::SsmScan(p) => ids.extend([p.a, p.d]),
            _ => {}
        }
    }
    ids
}

impl CudaPlan {
    /// Whether the graph has state-space layers.
    pub(super) fn recurrent(&self) -> bool {
        self.ssm_sizes.iter().any(Option::is_some)
    }

    /// Zeroes `cache`'s states when its step starts the sequence (position 0); refuses a step
    /// over states a failed step left ahead of the cache (truncate or reset it first). The
    /// states count as changing from here until the step succeeds.
    pub(super) fn start_states(
        &self,
        cache: &mut CudaKvCache,
        pos0: usize,
    ) -> Result<(), GraphError> {
        if cache.states.iter().all(Option::is_none) {
            return Ok(());
        }
        if cache.dirty && pos0 > 0 {
            return Err(GraphError::Internal(
                "a failed step left the recurrent state ahead of the cache: truncate or reset it"
                    .into(),
            ));
        }
        cache.dirty = true;
        if pos0 == 0 {
            for s in cache.states.iter_mut().flatten() {
                self.dev.zero(&mut s.conv)?;
                self.dev.zero(&mut s.ssm)?;
            }
            cache.checkpoint = None;
        }
        Ok(())
    }

    /// A batched step of a recurrent graph: each sequence alone, the rows gathered in order.
    pub(super) fn run_each(
        &mut self,
        caches: &mut [&mut CudaKvCache],
        tokens: &[u32],
    ) -> Result<&[f32], GraphError> {
        let mut rows = std::mem::take(&mut self.each_out);
        rows.clear();
        let mut result = Ok(());
        for (c, &t) in caches.iter_mut().zip(tokens) {
            match self.run(c, &[t]) {
                Ok(r) => rows.extend_from_slice(r),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.each_out = rows;
        result.map(|()| &self.each_out[..])
    }

    /// Runs a state-space node of one sequence's step.
    pub(super) fn exec_ssm(
        &mut self,
        node: &Node,
        out: &mut DeviceTensor,
        t: usize,
        kv: &mut StepKv<'_>,
    ) -> Result<(), GraphError> {
        let StepKv::One(cache) = kv else {
            return Err(internal("a state-space layer in a batched step"));
        };
        let layer = match &node.op {
            Op::SsmConv(p) => p.layer,
            Op::SsmScan(p) => p.layer,
            _ => return Err(internal("not a state-space node")),
        };
        let st = cache
            .states
            .get_mut(layer)
            .and_then(Option::as_mut)
            .ok_or_else(|| internal("recurrent state missing"))?;
        match &node.op {
            Op::SsmConv(p) => {
                let bias = p.bias.map(|b| &*self.weights[b]);
                self.dev.ssm_conv(
                    self.input(node, 0)?,
                    t,
                    p.d_conv,
                    (&self.weights[p.weight], bias),
                    &mut st.conv,
                    out,
                )?;
            }
            Op::SsmScan(p) => {
                let sp = engine_scan(p, self.weights[p.a].shape().elem_count());
                self.dev.ssm_scan(
                    &sp,
                    &mut st.ssm,
                    (
                        self.input(node, 0)?,
                        self.input(node, 1)?,
                        self.input(node, 2)?,
                    ),
                    (&self.weights[p.a], &self.weights[p.d]),
                    t,
                    out,
                )?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// The engine's scan parameters (A per state index when it holds `n_head · d_state` values, as
/// the CPU plan decides).
fn engine_scan(p: &SsmScanParams, a_len: usize) -> EngineScan {
    EngineScan {
        d_state: p.d_state,
        n_head: p.n_head,
        head_dim: p.head_dim,
        n_group: p.n_group,
        a_per_state: a_len == p.n_head * p.d_state && p.d_state > 1,
    }
}
