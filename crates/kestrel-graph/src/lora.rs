//! Low-rank adapters (LoRA) applied to a graph without merging them into its weights: every
//! matmul `y = x · Wᵀ` whose weight has adapters becomes `y + Σ scale · (x · Aᵀ) · Bᵀ`, and an
//! adapted token embedding `e = W[id]` becomes `e + Σ scale · A[id] · Bᵀ`, as llama.cpp's
//! `build_lora_mm` and `build_inp_embd` compute them. The base weights stay as they are
//! (quantized, packed); the adapter's `A` and `B` are small extra weights of the graph.
//!
//! A fused term ([`Op::LowRank`]) reads its halves as F32 or F16, `B` transposed, under derived
//! names ([`low_rank_names`]); [`derived_weight`] makes those tensors from the plain ones, for
//! weight lookups to call (once per adapter, so every plan shares them).

use std::collections::HashSet;

use kestrel_tensor::cpu::low_rank;
use kestrel_tensor::{DType, Shape, Tensor};

use crate::ir::{
    AdapterTerm, EmbedIndex, MoeLowRank, MoeParams, MoeProj, Node, NodeId, Op, WeightId,
};
use crate::{Graph, GraphError};

/// Marks a half as the low-rank kernels read it (`{name}#lr`).
const AS_READ: &str = "#lr";
/// Marks a half transposed (`{name}#T`).
const TRANSPOSED: &str = "#T";

/// The names a fused term reads its halves under: `A` as the kernels read it (`{a}#lr`) and
/// `B` transposed (`{b}#T`).
pub fn low_rank_names(a: &str, b: &str) -> (String, String) {
    (format!("{a}{AS_READ}"), format!("{b}{TRANSPOSED}"))
}

/// The tensor a derived name of [`low_rank_names`] stands for, made from `plain` (the lookup of
/// undecorated names): `{x}#lr` is `x` as F32 or F16 (`x` itself when it is one of them,
/// F32 values otherwise), `{x}#T` is `x` transposed (ggml dims swapped) in the column blocks
/// the low-rank kernels read ([`low_rank::pack_bt`]), F16 when `x` is, F32 otherwise. `None` for any other name or a missing tensor. Made tensors share their bytes
/// between clones.
///
/// # Errors
/// A tensor that is not 2-D or cannot be read as f32 values.
pub fn derived_weight(
    name: &str,
    plain: &dyn Fn(&str) -> Option<Tensor>,
) -> Option<Result<Tensor, GraphError>> {
    let bad = |e: String| GraphError::Shape {
        node: name.to_string(),
        reason: e,
    };
    if let Some(base) = name.strip_suffix(AS_READ) {
        let t = plain(base)?;
        let readable = match t.dtype() {
            DType::F32 => t.as_f32().is_ok(),
            DType::F16 => t.as_f16().is_ok(),
            _ => false,
        };
        if readable {
            return Some(Ok(t));
        }
        let keep = if t.dtype() == DType::F16 {
            DType::F16
        } else {
            DType::F32
        };
        return Some(
            t.to_f32_vec()
                .and_then(|v| make(keep, t.shape(), &v))
                .map_err(|e| bad(e.to_string())),
        );
    }
    let base = name.strip_suffix(TRANSPOSED)?;
    let t = plain(base)?;
    let made = (|| {
        let dims = t.shape().dims().to_vec();
        let &[cols, rows] = dims.as_slice() else {
            return Err(format!("a transposed half must be 2-D, {base} is {dims:?}"));
        };
        let v = t.to_f32_vec().map_err(|e| e.to_string())?;
        if v.len() != rows * cols {
            return Err(format!("{base} holds {} values for {dims:?}", v.len()));
        }
        let out = low_rank::pack_bt(&v, cols, rows);
        let shape = Shape::new(&[rows, cols]).map_err(|e| e.to_string())?;
        let keep = if t.dtype() == DType::F16 {
            DType::F16
        } else {
            DType::F32
        };
        make(keep, shape, &out).map_err(|e| e.to_string())
    })();
    Some(made.map_err(bad))
}

/// A shared tensor of `dtype` (F32 or F16, exact for values read from an F16 tensor).
fn make(dtype: DType, shape: Shape, v: &[f32]) -> kestrel_tensor::Result<Tensor> {
    let t = match dtype {
        DType::F16 => {
            let bytes: Vec<u8> = v
                .iter()
                .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                .collect();
            Tensor::from_bytes(DType::F16, shape, &bytes)?
        }
        _ => Tensor::from_f32(shape, v)?,
    };
    Ok(t.into_shared())
}

/// One adapter's pair for one base weight: the names its lookup resolves, ggml dims, and the
/// scale its product is added with.
#[derive(Clone, Debug, PartialEq)]
pub struct LowRank {
    /// `A`: ggml dims `[k, rank]` for a matmul weight `[k, m]`; `[rank, n_vocab]` for an
    /// embedding table (its rows are picked by token, as the table's).
    pub a: (String, Vec<u64>),
    /// `B`: ggml dims `[rank, m]` (an embedding table's `[rank, width]`).
    pub b: (String, Vec<u64>),
    /// The product's factor (llama.cpp: `scale · alpha / rank`, or `scale` without an alpha).
    pub scale: f32,
    /// Which adapter the pair is of (its index among the graph's adapters): a step may scale
    /// each sequence's adapters differently.
    pub adapter: usize,
    /// The adapter's alpha (0: none), from which a per-sequence scale becomes a factor.
    pub alpha: f32,
    /// `A`'s and `B`'s types in the file (a fused term rounds an F16 or BF16 half's input to
    /// that type, as ggml's matmul reads it).
    pub types: (DType, DType),
}

impl Graph {
    /// This graph with the low-rank terms `pairs` gives for each weight name added wherever the
    /// weight is a matmul's, an expert projection's of an [`Op::Moe`] (llama.cpp's
    /// `build_lora_mm_id`: the halves are 3-d, one pair per expert) or a token embedding's.
    /// Returns the graph and the names of the base weights that got a term; a weight with
    /// pairs that only other ops use (per-head matmuls, a norm) is not among them, so the
    /// caller can refuse what it cannot apply.
    ///
    /// # Errors
    /// A pair whose dims do not fit its weight.
    ///
    /// With `fused`, a matmul's term is one [`Op::LowRank`] node (the CPU engine runs it as one
    /// step); without, four plain nodes (matmul by `A`, matmul by `B`, scale, add), which every
    /// engine runs.
    pub fn with_low_rank(
        &self,
        pairs: &dyn Fn(&str) -> Vec<LowRank>,
        fused: bool,
    ) -> Result<(Graph, HashSet<String>), GraphError> {
        let mut g = Graph::new();
        for w in self.weights() {
            g.weight(&w.name, &w.dims);
        }
        let mut applied = HashSet::new();
        // Old node id → the new node holding its value.
        let mut map: Vec<usize> = Vec::with_capacity(self.nodes().len());
        // Terms to add after node `.0` (a matmul's scale): weight name, input, matmul's name.
        let mut deferred: Option<(usize, String, NodeId, String)> = None;
        for (i, node) in self.nodes().iter().enumerate() {
            let inputs: Vec<usize> = node.inputs.iter().map(|&i| map[i]).collect();
            if let Op::Moe(p) = &node.op {
                let p = self.moe_terms(&mut g, &node.name, p, pairs, &mut applied)?;
                map.push(g.push_node(Node {
                    inputs,
                    op: Op::Moe(p),
                    ..node.clone()
                }));
                continue;
            }
            let id = g.push_node(Node {
                inputs: inputs.clone(),
                ..node.clone()
            });
            // Terms deferred from the matmul this node scales.
            if let Some((at, wname, x, tag)) = deferred.take() {
                if at == i {
                    let acc = add_terms(&mut g, &tag, id, x, &pairs(&wname), fused, false)?;
                    applied.insert(wname);
                    map.push(acc);
                    continue;
                }
            }
            let (weight, embed) = match &node.op {
                Op::MatMul { weight } => (Some(*weight), false),
                Op::Embed {
                    table,
                    index: EmbedIndex::Tokens,
                } => (Some(*table), true),
                _ => (None, false),
            };
            let Some(w) = weight else {
                map.push(id);
                continue;
            };
            let wname = self.weights()[w].name.clone();
            let ps = pairs(&wname);
            if ps.is_empty() {
                map.push(id);
                continue;
            }
            // A per-tensor scale right after the matmul (`{name}_s`, as the builders name it)
            // comes first: llama.cpp's `build_lora_mm(w, cur, w_s)` adds the terms after it.
            let scaled_next = !embed
                && self.nodes().get(i + 1).is_some_and(|n| {
                    matches!(n.op, Op::MulWeight { .. })
                        && n.inputs.first() == Some(&i)
                        && n.name == format!("{}_s", node.name)
                });
            if scaled_next {
                deferred = Some((i + 1, wname, inputs[0], node.name.clone()));
                map.push(id);
                continue;
            }
            let x = inputs.first().copied().unwrap_or(id);
            let acc = add_terms(&mut g, &node.name, id, x, &ps, fused, embed)?;
            applied.insert(wname);
            map.push(acc);
        }
        for &o in self.outputs() {
            g.set_output(map[o])?;
        }
        Ok((g, applied))
    }

    /// `p` with the terms `pairs` gives for its expert projections (their halves added to
    /// `g`'s weights under their own names, read as stored).
    fn moe_terms(
        &self,
        g: &mut Graph,
        node: &str,
        p: &MoeParams,
        pairs: &dyn Fn(&str) -> Vec<LowRank>,
        applied: &mut HashSet<String>,
    ) -> Result<MoeParams, GraphError> {
        let mut p = p.clone();
        let projs = [
            (MoeProj::Router, Some(p.router)),
            (MoeProj::Up, Some(p.up)),
            (MoeProj::Gate, p.gate),
            (MoeProj::Down, Some(p.down)),
        ];
        for (proj, w) in projs {
            let Some(w) = w else { continue };
            let wname = &self.weights()[w].name;
            for lr in pairs(wname) {
                let rank = lr.b.1.first().copied().unwrap_or(0) as usize;
                p.low_rank.push(MoeLowRank {
                    proj,
                    a: g.weight(&lr.a.0, &lr.a.1),
                    b: g.weight(&lr.b.0, &lr.b.1),
                    scale: lr.scale,
                    term: AdapterTerm {
                        adapter: lr.adapter,
                        alpha: lr.alpha,
                        rank,
                    },
                });
                applied.insert(wname.clone());
            }
        }
        g.check_moe_terms(node, &p)?;
        Ok(p)
    }
}

/// `acc` plus the terms of `pairs` over the input `x` (token ids for an `embed` table), one
/// fused node each or four plain ones; the nodes are named after `tag` (the matmul's name).
fn add_terms(
    g: &mut Graph,
    tag: &str,
    mut acc: NodeId,
    x: NodeId,
    pairs: &[LowRank],
    fused: bool,
    embed: bool,
) -> Result<NodeId, GraphError> {
    for (k, p) in pairs.iter().enumerate() {
        let tag = format!("{tag}.lora{k}");
        let term = AdapterTerm {
            adapter: p.adapter,
            alpha: p.alpha,
            rank: p.b.1.first().copied().unwrap_or(0) as usize,
        };
        if fused && !embed {
            let (an, btn) = low_rank_names(&p.a.0, &p.b.0);
            let a = g.weight(&an, &p.a.1);
            let bt: Vec<u64> = p.b.1.iter().rev().copied().collect();
            let bt = g.weight(&btn, &bt);
            acc = g.low_rank(&tag, acc, x, a, bt, p.scale, term, p.types)?;
            continue;
        }
        let a: WeightId = g.weight(&p.a.0, &p.a.1);
        let b: WeightId = g.weight(&p.b.0, &p.b.1);
        let low = if embed {
            g.embed_by(&format!("{tag}.a"), a, EmbedIndex::Tokens)?
        } else {
            g.matmul(&format!("{tag}.a"), x, a)?
        };
        let up = g.matmul(&format!("{tag}.b"), low, b)?;
        if g.shape(up)? != g.shape(acc)? {
            return Err(GraphError::Shape {
                node: tag,
                reason: format!(
                    "the adapter's product is {:?}, the weight's output {:?}",
                    g.shape(up)?,
                    g.shape(acc)?
                ),
            });
        }
        let scaled = g.adapter_scale(&format!("{tag}.scale"), up, p.scale, term)?;
        acc = g.add(&format!("{tag}.add"), acc, scaled)?;
    }
    Ok(acc)
}

#[cfg(test)]
mod tests {
    use super::LowRank;
    use crate::Graph;
    use kestrel_tensor::DType;

    #[test]
    fn adapted_matmuls_and_embeddings_get_their_terms() {
        let mut g = Graph::new();
        let emb = g.weight("token_embd.weight", &[8, 32]);
        let wq = g.weight("blk.0.attn_q.weight", &[8, 8]);
        let wo = g.weight("output.weight", &[8, 32]);
        let x = g.embed("embd", emb).unwrap();
        let q = g.matmul("q", x, wq).unwrap();
        let r = g.add("res", x, q).unwrap();
        let out = g.matmul("out", r, wo).unwrap();
        g.set_output(out).unwrap();
        let pairs = |name: &str| match name {
            "blk.0.attn_q.weight" => vec![
                LowRank {
                    a: ("q.a0".into(), vec![8, 2]),
                    b: ("q.b0".into(), vec![2, 8]),
                    scale: 0.5,
                    adapter: 0,
                    alpha: 0.0,
                    types: (DType::F32, DType::F32),
                },
                LowRank {
                    a: ("q.a1".into(), vec![8, 4]),
                    b: ("q.b1".into(), vec![4, 8]),
                    scale: 2.0,
                    adapter: 1,
                    alpha: 0.0,
                    types: (DType::F32, DType::F32),
                },
            ],
            "token_embd.weight" => vec![LowRank {
                a: ("e.a".into(), vec![3, 32]),
                b: ("e.b".into(), vec![3, 8]),
                scale: 1.0,
                adapter: 0,
                alpha: 0.0,
                types: (DType::F32, DType::F32),
            }],
            _ => vec![],
        };
        let (h, applied) = g.with_low_rank(&pairs, false).unwrap();
        // Fused: one node per matmul term, the embedding's stays four.
        let (f, _) = g.with_low_rank(&pairs, true).unwrap();
        assert_eq!(f.nodes().len(), 4 + 2 + 4);
        assert_eq!(applied.len(), 2);
        assert!(applied.contains("blk.0.attn_q.weight"));
        // 4 nodes + 4 per adapter term (3 terms).
        assert_eq!(h.nodes().len(), 4 + 12);
        assert_eq!(h.weights().len(), 3 + 6);
        let out = h.node(h.outputs()[0]).unwrap();
        assert_eq!(out.name, "out");
        // The residual adds the adapted embedding and the adapted q.
        let res = h.nodes().iter().find(|n| n.name == "res").unwrap();
        let names: Vec<&str> = res
            .inputs
            .iter()
            .map(|&i| h.nodes()[i].name.as_str())
            .collect();
        assert_eq!(names, ["embd.lora0.add", "q.lora1.add"]);
        // A pair that does not fit is refused.
        let bad = |name: &str| match name {
            "blk.0.attn_q.weight" => vec![LowRank {
                a: ("a".into(), vec![8, 2]),
                b: ("b".into(), vec![2, 7]),
                scale: 1.0,
                adapter: 0,
                alpha: 0.0,
                types: (DType::F32, DType::F32),
            }],
            _ => vec![],
        };
        assert!(g.with_low_rank(&bad, false).is_err());
        assert!(g.with_low_rank(&bad, true).is_err());
    }
}
