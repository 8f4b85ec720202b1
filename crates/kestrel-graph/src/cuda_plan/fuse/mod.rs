//! Which launches a [`CudaPlan`] step may fuse (issue 24: decode is bound by launches on
//! small models), found once when the plan is compiled; the plan applies them per step where
//! the quantized matvec runs (`CudaDevice::matvec_quantized`), since only its Q8_1 input and
//! its epilogue take part:
//! - a matmul whose product only feeds a residual add writes the sum itself (the add's launch
//!   is saved: llama's `attn_output` and `ffn_down`);
//! - a residual add followed by an RMS norm of its sum runs as one launch (Gemma's post-norms,
//!   and every layer's first norm where the add was not fused into a matmul);
//! - an RMS norm or a gated activation whose every reader is a quantized matmul also leaves its
//!   output as Q8_1 for them (their quantize launch is saved);
//! - two or three consecutive matmuls of one input with weights of one quantized type (q/k/v,
//!   gate/up) run as one matvec launch in a one-token step, and so do q/k/v whose v has the
//!   type that pairs with q's and k's in `MIXED_MULTI_TYPES` (llama.cpp's `_M` mixes);
//! - a one-row matmul and the RMS norm after it run as one launch, the matvec's last CTA
//!   running the norm: llama's norm of the sum its epilogue add wrote, Gemma's sandwich (the
//!   post-norm of the product, the residual add and the next norm); so do a one-row gate/up
//!   launch and the gated activation after it (`KESTREL_CUDA_TAILS=0` leaves both two
//!   launches, to measure; `=norm` or `=glu` keeps only that tail);
//! - the RoPE of an attention's queries and keys and the append of its keys and values to the
//!   cache run as one launch at the attention (the keys rotated straight into the f16 cache),
//!   at any step size, with a scale of the queries between RoPE and attention (Gemma's) in it.
//!
//! Each fused launch gives the bits of the launches it replaces, so fusing changes no output.
//! Here what may fuse is found; `exec.rs` runs a fused launch in a step.

use kestrel_tensor::cuda::MIXED_MULTI_TYPES;
use kestrel_tensor::DType;

use crate::ir::{Node, Op, RopeParams};

mod exec;

/// A residual add taken into a matmul's epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MatMulAdd {
    /// The add node (its output buffer receives the sum).
    pub add: usize,
    /// The add's other input.
    pub residual: usize,
}

/// An RMS norm run in its residual add's launch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AddNorm {
    /// The norm node, right after the add.
    pub norm: usize,
    pub eps: f32,
    pub weight: Option<usize>,
}

/// An RMS norm of one of a fused add's inputs (Gemma's sandwich norms: the post-attention and
/// post-FFN norms), run in the add's launch before it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PreNorm {
    /// The norm node (its buffer receives the normed values) and its input.
    pub norm: usize,
    pub input: usize,
    /// The add's other input.
    pub residual: usize,
    pub eps: f32,
    pub weight: Option<usize>,
}

/// The RMS norm after a matmul, run in its launch (`CudaDevice::matmul_norm_reusing`) in
/// one-row steps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum MatMulNorm {
    /// The norm (right after the add) of the sum the matmul's epilogue add writes
    /// ([`Fusions::matmul_add`]): llama's norms.
    AfterAdd(AddNorm),
    /// The matmul's product is the input of add `add`'s [`PreNorm`] (Gemma's sandwich), whose
    /// [`AddNorm`] is the norm.
    Sandwich { add: usize },
}

/// The RoPE nodes of an attention's queries and keys, run with its KV append in one launch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RopeAttention {
    /// The query and key RoPE nodes, and their inputs.
    pub q: usize,
    pub k: usize,
    pub q_src: usize,
    pub k_src: usize,
    /// The attention's value input.
    pub v: usize,
    /// Their shared parameters (the key node's head count is the KV heads').
    pub rope: RopeParams,
    pub n_kv_head: usize,
    /// A scale node between the query RoPE and the attention (Gemma's query pre-scale) and its
    /// factor, applied in the same launch: the rotated queries land in its buffer.
    pub q_scale: Option<(usize, f32)>,
    /// Per-head RMS norms feeding the query and key RoPE (Gemma 3's and Qwen 3's Q/K norms),
    /// run in the same launch (`q_src` / `k_src` are then the norms' inputs).
    pub head_norms: [Option<HeadNormNode>; 2],
}

/// A per-head RMS norm run in the RoPE + append launch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct HeadNormNode {
    pub node: usize,
    pub weight: Option<usize>,
    pub eps: f32,
}

impl RopeAttention {
    /// The node whose buffer receives the rotated (and scaled) queries.
    pub fn q_out(&self) -> usize {
        self.q_scale.map_or(self.q, |(node, _)| node)
    }
}

/// What may fuse around each node, by node index.
#[derive(Clone, Debug, Default)]
pub(crate) struct Fusions {
    pub matmul_add: Vec<Option<MatMulAdd>>,
    pub add_norm: Vec<Option<AddNorm>>,
    /// For an add with a norm after it ([`Self::add_norm`]): a norm before it, on one input.
    pub pre_norm: Vec<Option<PreNorm>>,
    /// The weight types of a node's readers when all of them are matmuls (empty otherwise, or
    /// for a node whose output is a graph output): its output may also be left as Q8_1.
    pub q8_readers: Vec<Vec<DType>>,
    /// For an attention node: its RoPE nodes, run in its launch; `deferred` marks those RoPE
    /// nodes (they do nothing at their own turn when the plan fuses).
    pub rope_attention: Vec<Option<RopeAttention>>,
    pub deferred: Vec<bool>,
    /// For the first of 2-3 consecutive matmuls of one input and weight type: the others
    /// (run in its launch when the step's rows allow).
    pub multi: Vec<Option<[Option<MultiMember>; 2]>>,
    /// For a matmul: the RMS norm after it, run in its launch in a one-row step.
    pub norm_after: Vec<Option<MatMulNorm>>,
    /// For the first of a gate/up pair ([`Self::multi`], two matmuls): the gated activation
    /// that alone reads both, run in their launch in a one-row step.
    pub multi_glu: Vec<Option<MultiGlu>>,
}

/// A gated activation run in its gate/up launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MultiGlu {
    /// The activation node.
    pub node: usize,
    /// GeGLU (else SwiGLU).
    pub gelu: bool,
    /// Whether the pair's first matmul is the gate (else the up projection).
    pub gate_first: bool,
}

/// A matmul run in another's launch: its node, weight and output width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MultiMember {
    pub node: usize,
    pub weight: usize,
    pub width: usize,
}

impl Fusions {
    /// Drops the matvec tails `setting` (`KESTREL_CUDA_TAILS`) turns off: `"0"` both, `"norm"`
    /// the gated activation's (only the norm tail stays), `"glu"` the norm's; anything else,
    /// or none, keeps both.
    pub fn keep_tails(&mut self, setting: Option<&str>) {
        let (norm, glu) = match setting {
            Some("0") => (false, false),
            Some("norm") => (true, false),
            Some("glu") => (false, true),
            _ => (true, true),
        };
        if !norm {
            self.norm_after.fill(None);
        }
        if !glu {
            self.multi_glu.fill(None);
        }
    }

    /// Finds the fusions of `nodes` (weights' types by weight index; `outputs` are never
    /// fused away).
    pub fn find(nodes: &[Node], weight_types: &[DType], outputs: &[usize]) -> Fusions {
        let n = nodes.len();
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, node) in nodes.iter().enumerate() {
            for &inp in &node.inputs {
                if inp < n && !readers[inp].contains(&i) {
                    readers[inp].push(i);
                }
            }
        }
        let whole_rows =
            |a: usize, b: usize| nodes[a].width == nodes[b].width && nodes[a].rows == nodes[b].rows;
        let mut f = Fusions {
            matmul_add: vec![None; n],
            add_norm: vec![None; n],
            pre_norm: vec![None; n],
            q8_readers: vec![Vec::new(); n],
            rope_attention: vec![None; n],
            deferred: vec![false; n],
            multi: vec![None; n],
            norm_after: vec![None; n],
            multi_glu: vec![None; n],
        };
        for (i, node) in nodes.iter().enumerate() {
            let Op::Attention(att) = &node.op else {
                continue;
            };
            let (Some(&q_in), Some(&k), Some(&v)) =
                (node.inputs.first(), node.inputs.get(1), node.inputs.get(2))
            else {
                continue;
            };
            let only_read_by = |r: usize, by: usize| readers[r] == [by] && !outputs.contains(&r);
            let only_here = |r: usize| only_read_by(r, i);
            // The queries straight from their RoPE, or through a scale read only here.
            let (q, q_scale) = match nodes[q_in].op {
                Op::Scale(s) => match nodes[q_in].inputs.first() {
                    Some(&r)
                        if only_here(q_in)
                            && readers[r] == [q_in]
                            && !outputs.contains(&r)
                            && whole_rows(r, q_in) =>
                    {
                        (r, Some((q_in, s)))
                    }
                    _ => continue,
                },
                _ => (q_in, None),
            };
            let (Op::Rope(pq), Op::Rope(pk)) = (&nodes[q].op, &nodes[k].op) else {
                continue;
            };
            let q_ok = if q_scale.is_some() {
                true
            } else {
                only_here(q)
            };
            let (Some(&q_src), Some(&k_src)) = (nodes[q].inputs.first(), nodes[k].inputs.first())
            else {
                continue;
            };
            // A per-head RMS norm read only by its RoPE runs in the launch too (heads up to
            // the kernel's 256).
            let head_norm = |rope: usize, src: usize, head_dim: usize| match &nodes[src].op {
                Op::RmsNorm { group, eps, weight }
                    if *group == head_dim
                        && head_dim <= kestrel_tensor::cuda::MAX_HEAD_DIM
                        && readers[src] == [rope]
                        && !outputs.contains(&src) =>
                {
                    let input = *nodes[src].inputs.first()?;
                    whole_rows(input, src).then_some((
                        HeadNormNode {
                            node: src,
                            weight: *weight,
                            eps: *eps,
                        },
                        input,
                    ))
                }
                _ => None,
            };
            let (q_norm, q_src) = match head_norm(q, q_src, pq.head_dim) {
                Some((n, input)) => (Some(n), input),
                None => (None, q_src),
            };
            let (k_norm, k_src) = match head_norm(k, k_src, pk.head_dim) {
                Some((n, input)) => (Some(n), input),
                None => (None, k_src),
            };
            let same_rope = RopeParams {
                n_head: pq.n_head,
                ..pk.clone()
            } == *pq;
            if q != k
                && q_ok
                && only_here(k)
                && same_rope
                && pq.head_dim == att.head_dim_k
                && pq.n_head == att.n_head
                && pk.n_head == att.n_kv_head
                && whole_rows(q, q_src)
                && whole_rows(k, k_src)
            {
                f.rope_attention[i] = Some(RopeAttention {
                    q,
                    k,
                    q_src,
                    k_src,
                    v,
                    rope: pq.clone(),
                    n_kv_head: pk.n_head,
                    q_scale,
                    head_norms: [q_norm, k_norm],
                });
                f.deferred[q] = true;
                f.deferred[k] = true;
                for n in [q_norm, k_norm].into_iter().flatten() {
                    f.deferred[n.node] = true;
                }
                if let Some((node, _)) = q_scale {
                    f.deferred[node] = true;
                }
            }
        }
        for (j, node) in nodes.iter().enumerate() {
            if !matches!(node.op, Op::Add) || node.inputs.len() != 2 {
                continue;
            }
            let (a, b) = (node.inputs[0], node.inputs[1]);
            if a == b || !whole_rows(a, j) || !whole_rows(b, j) {
                continue;
            }
            // The matmul: the later of the two inputs (the residual must exist when it runs),
            // read by this add alone, not an output.
            let (mm, residual) = if a > b { (a, b) } else { (b, a) };
            let sole = readers[mm].len() == 1 && !outputs.contains(&mm);
            if sole && matches!(nodes[mm].op, Op::MatMul { .. }) {
                f.matmul_add[mm] = Some(MatMulAdd { add: j, residual });
            }
            if let Some(Node {
                op: Op::RmsNorm { group, eps, weight },
                inputs,
                width,
                ..
            }) = nodes.get(j + 1)
            {
                if inputs.first() == Some(&j) && group == width && whole_rows(j, j + 1) {
                    f.add_norm[j] = Some(AddNorm {
                        norm: j + 1,
                        eps: *eps,
                        weight: *weight,
                    });
                }
            }
            // A whole-row norm read by this add alone, on either input, with no matmul
            // epilogue taking the add.
            if f.add_norm[j].is_some() && f.matmul_add[a].is_none() && f.matmul_add[b].is_none() {
                for (p, residual) in [(b, a), (a, b)] {
                    let Node {
                        op: Op::RmsNorm { group, eps, weight },
                        inputs,
                        width,
                        ..
                    } = &nodes[p]
                    else {
                        continue;
                    };
                    let Some(&input) = inputs.first() else {
                        continue;
                    };
                    if group == width
                        && readers[p] == [j]
                        && !outputs.contains(&p)
                        && whole_rows(input, p)
                    {
                        f.pre_norm[j] = Some(PreNorm {
                            norm: p,
                            input,
                            residual,
                            eps: *eps,
                            weight: *weight,
                        });
                        f.deferred[p] = true;
                        break;
                    }
                }
            }
        }
        // Runs of matmuls of one input and one weight type, none of them an epilogue's.
        let mut i = 0;
        while i < n {
            let key = |j: usize| match nodes.get(j).map(|nd| &nd.op) {
                Some(Op::MatMul { weight })
                    if f.matmul_add[j].is_none() && !outputs.contains(&j) =>
                {
                    Some((
                        nodes[j].inputs.first().copied(),
                        weight_types.get(*weight).copied(),
                    ))
                }
                _ => None,
            };
            let Some(first) = key(i) else {
                i += 1;
                continue;
            };
            let mut end = i + 1;
            while end < n
                && end - i < 3
                && key(end) == Some(first)
                && nodes[end].rows == nodes[i].rows
            {
                end += 1;
            }
            // A third matmul of the same input whose weight type pairs with the first two's.
            if end - i == 2 && end < n && nodes[end].rows == nodes[i].rows {
                if let ((input, Some(a)), Some((input3, Some(c)))) = (first, key(end)) {
                    if input3 == input && MIXED_MULTI_TYPES.contains(&(a, c)) {
                        end += 1;
                    }
                }
            }
            if end - i >= 2 {
                let member = |j: usize| match nodes.get(j).map(|nd| &nd.op) {
                    Some(Op::MatMul { weight }) if j < end => Some(MultiMember {
                        node: j,
                        weight: *weight,
                        width: nodes[j].width,
                    }),
                    _ => None,
                };
                f.multi[i] = Some([member(i + 1), member(i + 2)]);
            }
            i = end;
        }
        // A matmul (alone in its launch) and the norm after it.
        let mut in_multi = vec![false; n];
        let mut by_add = vec![None; n];
        for i in 0..n {
            if let Some(m) = f.multi[i] {
                in_multi[i] = true;
                for mm in m.iter().flatten() {
                    in_multi[mm.node] = true;
                }
            }
            if let Some(ma) = f.matmul_add[i] {
                by_add[ma.add] = Some(i);
            }
        }
        for (j, mm_of_add) in by_add.into_iter().enumerate() {
            let Some(an) = f.add_norm[j] else { continue };
            let mm = match f.pre_norm[j] {
                Some(pn) if readers[pn.input] == [pn.norm] && !outputs.contains(&pn.input) => {
                    (pn.input, MatMulNorm::Sandwich { add: j })
                }
                Some(_) => continue,
                None => match mm_of_add {
                    Some(mm) => (mm, MatMulNorm::AfterAdd(an)),
                    None => continue,
                },
            };
            if matches!(nodes[mm.0].op, Op::MatMul { .. }) && !in_multi[mm.0] {
                f.norm_after[mm.0] = Some(mm.1);
            }
        }
        // A gate/up pair read only by one gated activation of their width.
        for i in 0..n {
            let Some([Some(up), None]) = f.multi[i] else {
                continue;
            };
            let [g] = readers[i][..] else { continue };
            let glu = &nodes[g];
            let pair = glu.inputs[..] == [i, up.node] || glu.inputs[..] == [up.node, i];
            if matches!(glu.op, Op::SwiGlu | Op::GeGlu)
                && pair
                && readers[up.node] == [g]
                && !outputs.contains(&i)
                && !outputs.contains(&up.node)
                && whole_rows(i, g)
                && whole_rows(up.node, g)
            {
                f.multi_glu[i] = Some(MultiGlu {
                    node: g,
                    gelu: matches!(glu.op, Op::GeGlu),
                    gate_first: glu.inputs[0] == i,
                });
            }
        }
        for (i, node) in nodes.iter().enumerate() {
            let produces = match &node.op {
                Op::RmsNorm { group, .. } => *group == node.width,
                Op::SwiGlu | Op::GeGlu => true,
                // The per-token and split attention kernels write Q8_1 blocks of 32 values of
                // one head (`attention_ids_q8`).
                Op::Attention(p) => {
                    !p.latent && p.head_dim_k == p.head_dim_v && p.head_dim_v.is_multiple_of(32)
                }
                _ => false,
            };
            if !produces || readers[i].is_empty() || outputs.contains(&i) {
                continue;
            }
            let types: Option<Vec<DType>> = readers[i]
                .iter()
                .map(|&r| match nodes[r].op {
                    Op::MatMul { weight } if nodes[r].inputs.first() == Some(&i) => {
                        weight_types.get(weight).copied()
                    }
                    _ => None,
                })
                .collect();
            f.q8_readers[i] = types.unwrap_or_default();
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttentionParams, RopeParams};
    use crate::Graph;

    fn rope(n_head: usize) -> RopeParams {
        RopeParams {
            n_head,
            head_dim: 16,
            n_rot: 16,
            neox: false,
            freq_base: 10_000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: 4096,
            freq_factors: None,
            mrope: None,
        }
    }

    /// One decoder layer as the builders lay it out (llama: pre-norms, residual adds after the
    /// output and down projections; `post_norms`: Gemma's norms after attention and FFN, so the
    /// residual add is followed by the next norm), then a final norm and the output matmul.
    fn layer_graph(post_norms: bool) -> (Graph, Vec<DType>) {
        let mut g = Graph::new();
        let (h, ff) = (64u64, 128u64);
        let emb = g.weight("token_embd.weight", &[h, 256]);
        let mut x = g.embed("emb", emb).unwrap();
        let w = |g: &mut Graph, n: &str, k: u64, m: u64| g.weight(n, &[k, m]);
        let v = |g: &mut Graph, n: &str| g.weight(n, &[h]);
        let an = v(&mut g, "attn_norm");
        let n1 = g
            .rms_norm("attn_norm", x, h as usize, 1e-6, Some(an))
            .unwrap();
        let (wq, wk, wv) = (
            w(&mut g, "q", h, 64),
            w(&mut g, "k", h, 32),
            w(&mut g, "v", h, 32),
        );
        let q = g.matmul("q", n1, wq).unwrap();
        let k = g.matmul("k", n1, wk).unwrap();
        let vv = g.matmul("v", n1, wv).unwrap();
        let (mut q, mut k) = (q, k);
        if post_norms {
            // Gemma 3's per-head Q/K norms.
            let (qn, kn) = (g.weight("q_norm", &[16]), g.weight("k_norm", &[16]));
            q = g.rms_norm("q_norm", q, 16, 1e-6, Some(qn)).unwrap();
            k = g.rms_norm("k_norm", k, 16, 1e-5, Some(kn)).unwrap();
        }
        let mut qr = g.rope("q_rope", q, rope(4)).unwrap();
        let kr = g.rope("k_rope", k, rope(2)).unwrap();
        if post_norms {
            // Gemma scales its queries between RoPE and attention.
            qr = g.scale("q_scaled", qr, 0.0625).unwrap();
        }
        let att = AttentionParams {
            layer: 0,
            n_head: 4,
            n_kv_head: 2,
            head_dim_k: 16,
            head_dim_v: 16,
            scale: 0.25,
            window: None,
            softcap: None,
            causal: true,
            sinks: None,
            latent: false,
        };
        let a = g.attention("attn", qr, kr, vv, att).unwrap();
        let wo = w(&mut g, "o", 64, h);
        let mut o = g.matmul("o", a, wo).unwrap();
        if post_norms {
            let pn = v(&mut g, "post_attention_norm");
            o = g
                .rms_norm("post_attention_norm", o, h as usize, 1e-6, Some(pn))
                .unwrap();
        }
        x = g.add("attn_residual", x, o).unwrap();
        let fnw = v(&mut g, "ffn_norm");
        let n2 = g
            .rms_norm("ffn_norm", x, h as usize, 1e-6, Some(fnw))
            .unwrap();
        let (wg, wu) = (w(&mut g, "gate", h, ff), w(&mut g, "up", h, ff));
        let gate = g.matmul("gate", n2, wg).unwrap();
        let up = g.matmul("up", n2, wu).unwrap();
        let act = g.swiglu("swiglu", gate, up).unwrap();
        let wd = w(&mut g, "down", ff, h);
        let mut d = g.matmul("down", act, wd).unwrap();
        if post_norms {
            let pf = v(&mut g, "post_ffw_norm");
            d = g
                .rms_norm("post_ffw_norm", d, h as usize, 1e-6, Some(pf))
                .unwrap();
        }
        x = g.add("ffn_residual", x, d).unwrap();
        let onw = v(&mut g, "output_norm");
        let on = g
            .rms_norm("output_norm", x, h as usize, 1e-6, Some(onw))
            .unwrap();
        let wout = w(&mut g, "output", h, 256);
        let logits = g.matmul("output", on, wout).unwrap();
        g.set_output(logits).unwrap();
        // q/k/v and gate/up share a type; v may not (here a type no multi kernel pairs with
        // Q4_K; `q_k_and_a_v_of_a_paired_type_share_a_launch` sets a pairing one).
        let types = g
            .weights()
            .iter()
            .map(|w| match w.name.as_str() {
                "v" if post_norms => DType::Q8_0,
                n if n.ends_with("norm") => DType::F32,
                _ => DType::Q4K,
            })
            .collect();
        (g, types)
    }

    fn id(g: &Graph, name: &str) -> usize {
        g.nodes().iter().position(|n| n.name == name).unwrap()
    }

    #[test]
    fn a_llama_layer_fuses_what_the_plan_expects() {
        let (g, types) = layer_graph(false);
        let f = Fusions::find(g.nodes(), &types, g.outputs());
        let n = |s| id(&g, s);
        // q/k/v in one launch, gate/up in another.
        let qkv = f.multi[n("q")].expect("q/k/v grouped");
        assert_eq!(qkv.map(|m| m.map(|m| m.node)), [Some(n("k")), Some(n("v"))]);
        let gu = f.multi[n("gate")].expect("gate/up grouped");
        assert_eq!(gu.map(|m| m.map(|m| m.node)), [Some(n("up")), None]);
        assert!(f.multi[n("k")].is_none() && f.multi[n("o")].is_none());
        // The residual adds in the output and down projections' epilogues.
        let add = |s| f.matmul_add[n(s)].map(|m| m.add);
        assert_eq!(add("o"), Some(n("attn_residual")));
        assert_eq!(add("down"), Some(n("ffn_residual")));
        assert_eq!(
            add("output"),
            None,
            "the graph's output is never fused away"
        );
        // Norms and the activation leave Q8_1 for their matmuls; RoPE waits for the attention.
        for s in ["attn_norm", "ffn_norm", "swiglu", "output_norm"] {
            assert!(!f.q8_readers[n(s)].is_empty(), "{s}");
        }
        assert!(f.deferred[n("q_rope")] && f.deferred[n("k_rope")]);
        let ra = f.rope_attention[n("attn")].clone().expect("RoPE + append");
        assert_eq!(
            (ra.q_src, ra.k_src, ra.v, ra.n_kv_head),
            (n("q"), n("k"), n("v"), 2)
        );
        // Each add is followed by its norm: fused when the add was not taken by a matmul.
        assert_eq!(
            f.add_norm[n("attn_residual")].map(|a| a.norm),
            Some(n("ffn_norm"))
        );
        // The output and down projections run the norm after their epilogue's add; no other
        // matmul takes a norm.
        let norm_of = |s| match f.norm_after[n(s)] {
            Some(MatMulNorm::AfterAdd(a)) => Some(a.norm),
            _ => None,
        };
        assert_eq!(norm_of("o"), Some(n("ffn_norm")));
        assert_eq!(norm_of("down"), Some(n("output_norm")));
        let takers = f.norm_after.iter().filter(|m| m.is_some()).count();
        assert_eq!(takers, 2);
        // The SwiGLU runs in the gate/up launch.
        let glu = f.multi_glu[n("gate")].expect("SwiGLU in the gate/up launch");
        assert_eq!(
            (glu.node, glu.gelu, glu.gate_first),
            (n("swiglu"), false, true)
        );
        assert_eq!(f.multi_glu.iter().flatten().count(), 1);
        // KESTREL_CUDA_TAILS: each tail can be left out alone.
        let count = |f: &Fusions| {
            (
                f.norm_after.iter().flatten().count(),
                f.multi_glu.iter().flatten().count(),
            )
        };
        for (setting, want) in [
            (None, (2, 1)),
            (Some("1"), (2, 1)),
            (Some("norm"), (2, 0)),
            (Some("glu"), (0, 1)),
            (Some("0"), (0, 0)),
        ] {
            let mut g = f.clone();
            g.keep_tails(setting);
            assert_eq!(count(&g), want, "{setting:?}");
        }
    }

    #[test]
    fn q_k_and_a_v_of_a_paired_type_share_a_launch() {
        let (g, mut types) = layer_graph(true);
        let v_weight = g.weights().iter().position(|w| w.name == "v").unwrap();
        let n = |s| id(&g, s);
        for (qk, v, grouped) in [
            (DType::Q4K, DType::Q6K, true),
            (DType::Q5K, DType::Q6K, true),
            (DType::Q5_0, DType::Q8_0, true),
            (DType::Q4K, DType::Q8_0, false),
            (DType::Q6K, DType::Q4K, false),
        ] {
            for (t, w) in types.iter_mut().zip(g.weights()) {
                if w.name == "q" || w.name == "k" {
                    *t = qk;
                }
            }
            types[v_weight] = v;
            let f = Fusions::find(g.nodes(), &types, g.outputs());
            let third = f.multi[n("q")].expect("q/k grouped")[1].map(|m| m.node);
            assert_eq!(third, grouped.then(|| n("v")), "{qk:?} q/k with a {v:?} v");
            assert!(f.multi[n("v")].is_none());
        }
    }

    #[test]
    fn a_gemma_layer_fuses_its_post_norm_adds_and_groups_only_matching_types() {
        let (g, types) = layer_graph(true);
        let f = Fusions::find(g.nodes(), &types, g.outputs());
        let n = |s| id(&g, s);
        // v is Q8_0, which no kernel pairs with Q4_K: q and k alone share a launch.
        let qk = f.multi[n("q")].expect("q/k grouped");
        assert_eq!(qk.map(|m| m.map(|m| m.node)), [Some(n("k")), None]);
        // The projections feed norms, not adds: no epilogue; the adds fuse with the next norm.
        assert!(f.matmul_add[n("o")].is_none() && f.matmul_add[n("down")].is_none());
        assert_eq!(
            f.add_norm[n("attn_residual")].map(|a| a.norm),
            Some(n("ffn_norm"))
        );
        assert_eq!(
            f.add_norm[n("ffn_residual")].map(|a| a.norm),
            Some(n("output_norm"))
        );
        // A norm whose reader is an add (not a matmul) leaves no Q8_1, and runs in the add's
        // launch with the norm after it.
        assert!(f.q8_readers[n("post_attention_norm")].is_empty());
        for (add, pre, input, residual) in [
            ("attn_residual", "post_attention_norm", "o", "emb"),
            ("ffn_residual", "post_ffw_norm", "down", "attn_residual"),
        ] {
            let pn = f.pre_norm[n(add)].expect("sandwich norm fused");
            assert_eq!(
                (pn.norm, pn.input, pn.residual),
                (n(pre), n(input), n(residual))
            );
            assert!(f.deferred[n(pre)]);
            // The projection's launch runs the sandwich, the add and the norm after it.
            assert_eq!(
                f.norm_after[n(input)],
                Some(MatMulNorm::Sandwich { add: n(add) })
            );
        }
        // The query scale runs in the RoPE + append launch, into the scale node's buffer.
        let ra = f.rope_attention[n("attn")].clone().expect("RoPE + append");
        assert_eq!(ra.q_scale, Some((n("q_scaled"), 0.0625)));
        assert_eq!((ra.q, ra.q_out()), (n("q_rope"), n("q_scaled")));
        // The per-head Q/K norms run in it too: the RoPE reads the matmuls.
        let [qn, kn] = ra.head_norms.map(|h| h.expect("head norm fused"));
        assert_eq!(
            (qn.node, qn.eps, kn.node, kn.eps),
            (n("q_norm"), 1e-6, n("k_norm"), 1e-5)
        );
        assert_eq!((ra.q_src, ra.k_src), (n("q"), n("k")));
        assert!(f.deferred[n("q_norm")] && f.deferred[n("k_norm")]);
        assert!(f.deferred[n("q_rope")] && f.deferred[n("k_rope")] && f.deferred[n("q_scaled")]);
    }
}
