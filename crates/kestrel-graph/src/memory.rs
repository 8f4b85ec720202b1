//! Liveness-based buffer assignment: every node's output gets an offset in one arena, and
//! buffers whose values are dead are reused by later nodes. Computed once per plan; running the
//! plan then allocates nothing.

use std::ops::Range;

use crate::ir::Rows;
use crate::{Graph, GraphError};

/// Offsets are multiples of this many f32s (64 bytes), so rows start cache-line aligned.
pub const ALIGN_F32: usize = 16;

/// Where each node's output lives in the plan's arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Offset (in f32s) of each node's output.
    pub offsets: Vec<usize>,
    /// Capacity (in f32s) of each node's output.
    pub sizes: Vec<usize>,
    /// Arena length in f32s.
    pub arena_len: usize,
    /// Index of the last node that reads each node (its own index if none does).
    pub last_use: Vec<usize>,
}

/// Free regions of the arena, kept sorted and merged.
struct FreeList {
    free: Vec<(usize, usize)>, // (offset, len)
    end: usize,
}

impl FreeList {
    fn alloc(&mut self, len: usize) -> usize {
        // Best fit: the smallest free region that holds `len`.
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, &(_, l))| l >= len)
            .min_by_key(|(_, &(_, l))| l)
            .map(|(i, _)| i);
        if let Some(i) = best {
            let (off, l) = self.free[i];
            if l == len {
                self.free.remove(i);
            } else {
                self.free[i] = (off + len, l - len);
            }
            return off;
        }
        // Grow the arena, reusing a free region that ends at the end.
        if let Some(&(off, l)) = self.free.last() {
            if off + l == self.end {
                self.free.pop();
                self.end = off + len;
                return off;
            }
        }
        let off = self.end;
        self.end += len;
        off
    }

    fn release(&mut self, off: usize, len: usize) {
        let i = self.free.partition_point(|&(o, _)| o < off);
        self.free.insert(i, (off, len));
        // Merge with the next and the previous region.
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }
}

/// Assign arena offsets for a step of at most `max_tokens` tokens and `max_outputs` output rows.
pub fn plan_memory(
    graph: &Graph,
    max_tokens: usize,
    max_outputs: usize,
) -> Result<MemoryPlan, GraphError> {
    let nodes = graph.nodes();
    if graph.outputs().is_empty() {
        return Err(GraphError::NoOutput);
    }
    let n = nodes.len();
    let mut last_use: Vec<usize> = (0..n).collect();
    for (i, node) in nodes.iter().enumerate() {
        for &inp in &node.inputs {
            if inp >= i {
                return Err(GraphError::NoSuchNode(inp));
            }
            last_use[inp] = last_use[inp].max(i);
        }
    }
    for &o in graph.outputs() {
        last_use[o] = n; // outputs live past the last node
    }
    let sizes: Vec<usize> = nodes
        .iter()
        .map(|node| {
            let rows = match node.rows {
                Rows::Tokens => max_tokens.max(1),
                Rows::Outputs => max_outputs.clamp(1, max_tokens.max(1)),
            };
            (rows * node.width).div_ceil(ALIGN_F32) * ALIGN_F32
        })
        .collect();
    let mut fl = FreeList {
        free: Vec::new(),
        end: 0,
    };
    let mut offsets = vec![0; n];
    for (i, node) in nodes.iter().enumerate() {
        // The output is allocated while the inputs are still held, so it never aliases them.
        offsets[i] = fl.alloc(sizes[i]);
        let mut inputs = node.inputs.clone();
        inputs.sort_unstable();
        inputs.dedup();
        for inp in inputs {
            if last_use[inp] == i {
                fl.release(offsets[inp], sizes[inp]);
            }
        }
        if last_use[i] == i {
            // Nobody reads it: free at once.
            fl.release(offsets[i], sizes[i]);
        }
    }
    Ok(MemoryPlan {
        offsets,
        sizes,
        arena_len: fl.end,
        last_use,
    })
}

/// Split the arena into the output slice and up to three input slices. The memory plan
/// guarantees they do not overlap; this checks it anyway, so a planner bug is an error, not UB.
pub(crate) type Io<'a> = (&'a mut [f32], [&'a [f32]; 3]);

pub(crate) fn split_arena(
    arena: &mut [f32],
    out: Range<usize>,
    ins: [Range<usize>; 3],
) -> Result<Io<'_>, GraphError> {
    let len = arena.len();
    let bad = || GraphError::Internal("arena ranges overlap or exceed the arena".into());
    if out.end > len || out.start > out.end {
        return Err(bad());
    }
    for r in &ins {
        let overlaps = r.start < out.end && out.start < r.end;
        if r.end > len || r.start > r.end || (overlaps && !r.is_empty() && !out.is_empty()) {
            return Err(bad());
        }
    }
    let base = arena.as_mut_ptr();
    // SAFETY: every range lies inside `arena` (checked above) and no input range overlaps the
    // output range, so the one mutable slice aliases none of the shared ones; inputs may overlap
    // each other since they are only read. The lifetimes are tied to the `arena` borrow.
    unsafe {
        let o = std::slice::from_raw_parts_mut(base.add(out.start), out.len());
        let i =
            ins.map(|r| &*std::ptr::slice_from_raw_parts(base.add(r.start) as *const f32, r.len()));
        Ok((o, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttentionParams, NodeId};
    use proptest::prelude::*;

    /// Two nodes whose lifetimes overlap must not share arena bytes.
    fn assert_no_live_overlap(g: &Graph, m: &MemoryPlan) {
        let n = g.nodes().len();
        for a in 0..n {
            for b in a + 1..n {
                // a is live over [a, last_use[a]], b over [b, last_use[b]]; b starts after a.
                if b <= m.last_use[a] {
                    let (oa, sa) = (m.offsets[a], m.sizes[a]);
                    let (ob, sb) = (m.offsets[b], m.sizes[b]);
                    assert!(
                        oa + sa <= ob || ob + sb <= oa,
                        "nodes {a} and {b} overlap: {m:?}"
                    );
                }
            }
        }
        for i in 0..n {
            assert!(m.offsets[i] + m.sizes[i] <= m.arena_len);
            assert_eq!(m.offsets[i] % ALIGN_F32, 0);
        }
    }

    fn layer_like() -> Graph {
        let mut g = Graph::new();
        let emb = g.weight("token_embd.weight", &[8, 100]);
        let wq = g.weight("q", &[8, 8]);
        let wk = g.weight("k", &[8, 4]);
        let wo = g.weight("o", &[8, 8]);
        let x = g.embed("embd", emb).unwrap();
        let mut cur = x;
        for layer in 0..3 {
            let n = g.rms_norm("norm", cur, 8, 1e-5, None).unwrap();
            let q = g.matmul("q", n, wq).unwrap();
            let k = g.matmul("k", n, wk).unwrap();
            let v = g.matmul("v", n, wk).unwrap();
            let p = AttentionParams {
                layer,
                n_head: 2,
                n_kv_head: 1,
                head_dim_k: 4,
                head_dim_v: 4,
                scale: 0.5,
                window: None,
                softcap: None,
                causal: true,
                sinks: None,
                latent: false,
            };
            let a = g.attention("attn", q, k, v, p).unwrap();
            let o = g.matmul("o", a, wo).unwrap();
            cur = g.add("res", cur, o).unwrap();
        }
        let last = g.last_row("last", cur).unwrap();
        g.set_output(last).unwrap();
        g
    }

    #[test]
    fn buffers_are_reused_across_layers() {
        let g = layer_like();
        let m = plan_memory(&g, 4, 1).unwrap();
        assert_no_live_overlap(&g, &m);
        let total: usize = m.sizes.iter().sum();
        assert!(
            m.arena_len * 2 < total,
            "arena {} of {} total",
            m.arena_len,
            total
        );
        // A decode plan (1 token) needs a smaller arena than a prefill plan.
        assert!(plan_memory(&g, 1, 1).unwrap().arena_len < m.arena_len);
    }

    #[test]
    fn no_output_is_an_error() {
        let mut g = Graph::new();
        let w = g.weight("e", &[4, 10]);
        g.embed("e", w).unwrap();
        assert!(matches!(plan_memory(&g, 1, 1), Err(GraphError::NoOutput)));
    }

    proptest! {
        #[test]
        fn random_dags_never_alias_live_buffers(
            edges in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), 0u8..3), 1..40),
            max_tokens in 1usize..8,
        ) {
            let mut g = Graph::new();
            let e = g.weight("e", &[16, 10]);
            let mut ids: Vec<NodeId> = vec![g.embed("e", e).unwrap()];
            for (a, b, kind) in edges {
                let a = ids[a.index(ids.len())];
                let b = ids[b.index(ids.len())];
                let id = match kind {
                    0 => g.add("add", a, b).unwrap(),
                    1 => g.mul("mul", a, a).unwrap(),
                    _ => g.scale("scale", b, 2.0).unwrap(),
                };
                ids.push(id);
            }
            let out = *ids.last().unwrap();
            g.set_output(out).unwrap();
            let m = plan_memory(&g, max_tokens, 1).unwrap();
            assert_no_live_overlap(&g, &m);
        }
    }
}
