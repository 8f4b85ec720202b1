//! `Graph`: building the IR with shape checks at every step, so a builder bug is caught when
//! the graph is made, not when it runs. The mixture-of-experts builders (their weights and
//! adapter terms checked against the expert count) are in `moe.rs`.

use std::collections::HashMap;

use crate::ir::{
    AdapterTerm, AttentionParams, EmbedIndex, Node, NodeId, Op, RopeParams, Rows, SsmConvParams,
    SsmScanParams, WeightId, WeightRef,
};
use crate::GraphError;
use kestrel_tensor::DType;

mod moe;

/// A computation graph over one step's tokens.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    nodes: Vec<Node>,
    weights: Vec<WeightRef>,
    weight_index: HashMap<String, WeightId>,
    outputs: Vec<NodeId>,
}

fn shape_err(name: &str, reason: String) -> GraphError {
    GraphError::Shape {
        node: name.to_string(),
        reason,
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// The nodes, in a topological order (every input precedes its consumer).
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The weights, by id.
    pub fn weights(&self) -> &[WeightRef] {
        &self.weights
    }

    /// The output nodes.
    pub fn outputs(&self) -> &[NodeId] {
        &self.outputs
    }

    /// Mark `node` as an output (its buffer is kept until the end of the step).
    pub fn set_output(&mut self, node: NodeId) -> Result<(), GraphError> {
        self.node(node)?;
        self.outputs.push(node);
        Ok(())
    }

    /// A node by id.
    pub fn node(&self, id: NodeId) -> Result<&Node, GraphError> {
        self.nodes.get(id).ok_or(GraphError::NoSuchNode(id))
    }

    /// Register (or find) a weight by GGUF name and expected ggml dims.
    pub fn weight(&mut self, name: &str, dims: &[u64]) -> WeightId {
        if let Some(&id) = self.weight_index.get(name) {
            return id;
        }
        let id = self.weights.len();
        self.weights.push(WeightRef {
            name: name.to_string(),
            dims: dims.to_vec(),
        });
        self.weight_index.insert(name.to_string(), id);
        id
    }

    /// Appends a node as it is (its inputs must be earlier nodes of this graph).
    pub(crate) fn push_node(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn push(
        &mut self,
        name: &str,
        op: Op,
        inputs: Vec<NodeId>,
        rows: Rows,
        width: usize,
    ) -> NodeId {
        self.nodes.push(Node {
            op,
            inputs,
            rows,
            width,
            name: name.to_string(),
        });
        self.nodes.len() - 1
    }

    fn weight_dims(&self, w: WeightId, name: &str) -> Result<&[u64], GraphError> {
        self.weights
            .get(w)
            .map(|w| &w.dims[..])
            .ok_or_else(|| shape_err(name, format!("weight {w} does not exist")))
    }

    /// Embedding rows for the step's tokens; the table's ggml dims are `[width, n_vocab]`.
    pub fn embed(&mut self, name: &str, table: WeightId) -> Result<NodeId, GraphError> {
        self.embed_by(name, table, EmbedIndex::Tokens)
    }

    /// Embedding rows picked by `index` (token ids, positions, or one fixed row), one per token.
    pub fn embed_by(
        &mut self,
        name: &str,
        table: WeightId,
        index: EmbedIndex,
    ) -> Result<NodeId, GraphError> {
        let dims = self.weight_dims(table, name)?;
        let width = *dims
            .first()
            .ok_or_else(|| shape_err(name, "embedding table has no dims".into()))?
            as usize;
        if let EmbedIndex::Row(r) = index {
            let n_rows = dims.iter().skip(1).product::<u64>();
            if u64::from(r) >= n_rows {
                return Err(shape_err(
                    name,
                    format!("row {r} of a table with {n_rows} rows"),
                ));
            }
        }
        Ok(self.push(
            name,
            Op::Embed { table, index },
            vec![],
            Rows::Tokens,
            width,
        ))
    }

    /// `x · Wᵀ` with W's ggml dims `[k, m]`.
    pub fn matmul(
        &mut self,
        name: &str,
        x: NodeId,
        weight: WeightId,
    ) -> Result<NodeId, GraphError> {
        let (rows, k) = self.shape(x)?;
        let dims = self.weight_dims(weight, name)?;
        // A vector weight `[k]` is one output column (a shared expert's gate).
        let m = match dims {
            [kk, m] if *kk as usize == k => *m as usize,
            [kk] if *kk as usize == k => 1,
            _ => {
                return Err(shape_err(
                    name,
                    format!("input width {k} does not match weight dims {dims:?}"),
                ))
            }
        };
        Ok(self.push(name, Op::MatMul { weight }, vec![x], rows, m))
    }

    /// Add a bias vector to every row.
    pub fn add_bias(
        &mut self,
        name: &str,
        x: NodeId,
        bias: WeightId,
    ) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        let dims = self.weight_dims(bias, name)?;
        if dims.iter().product::<u64>() as usize != w {
            return Err(shape_err(name, format!("bias dims {dims:?} for width {w}")));
        }
        Ok(self.push(name, Op::AddBias { bias }, vec![x], rows, w))
    }

    /// RMS norm over groups of `group` values, scaled by `weight` (length `group`) if given.
    pub fn rms_norm(
        &mut self,
        name: &str,
        x: NodeId,
        group: usize,
        eps: f32,
        weight: Option<WeightId>,
    ) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        if group == 0 || w % group != 0 {
            return Err(shape_err(
                name,
                format!("group {group} does not divide width {w}"),
            ));
        }
        if let Some(wt) = weight {
            let dims = self.weight_dims(wt, name)?;
            if dims.iter().product::<u64>() as usize != group {
                return Err(shape_err(
                    name,
                    format!("norm weight dims {dims:?} for group {group}"),
                ));
            }
        }
        Ok(self.push(name, Op::RmsNorm { group, eps, weight }, vec![x], rows, w))
    }

    /// Layer norm over each whole row, with optional scale and shift vectors.
    pub fn layer_norm(
        &mut self,
        name: &str,
        x: NodeId,
        eps: f32,
        weight: Option<WeightId>,
        bias: Option<WeightId>,
    ) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        for v in [weight, bias].into_iter().flatten() {
            let dims = self.weight_dims(v, name)?;
            if dims.iter().product::<u64>() as usize != w {
                return Err(shape_err(
                    name,
                    format!("norm vector dims {dims:?} for width {w}"),
                ));
            }
        }
        Ok(self.push(
            name,
            Op::LayerNorm {
                group: w,
                eps,
                weight,
                bias,
            },
            vec![x],
            rows,
            w,
        ))
    }

    /// Layer norm over groups of `group` values (per head), without scale or shift.
    pub fn layer_norm_groups(
        &mut self,
        name: &str,
        x: NodeId,
        group: usize,
        eps: f32,
    ) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        if group == 0 || w % group != 0 {
            return Err(shape_err(
                name,
                format!("group {group} does not divide width {w}"),
            ));
        }
        let op = Op::LayerNorm {
            group,
            eps,
            weight: None,
            bias: None,
        };
        Ok(self.push(name, op, vec![x], rows, w))
    }

    /// `min(max(x, -limit), limit)`.
    pub fn clamp(&mut self, name: &str, x: NodeId, limit: f32) -> Result<NodeId, GraphError> {
        self.elementwise(name, Op::Clamp(limit), x)
    }

    /// Exact (erf) GELU.
    pub fn gelu_erf(&mut self, name: &str, x: NodeId) -> Result<NodeId, GraphError> {
        self.elementwise(name, Op::GeluErf, x)
    }

    /// GELU (tanh form, ggml's rounding).
    pub fn gelu(&mut self, name: &str, x: NodeId) -> Result<NodeId, GraphError> {
        self.elementwise(name, Op::Gelu, x)
    }

    /// SiLU.
    pub fn silu(&mut self, name: &str, x: NodeId) -> Result<NodeId, GraphError> {
        self.elementwise(name, Op::Silu, x)
    }

    /// `1 / (1 + exp(-x))`.
    pub fn sigmoid(&mut self, name: &str, x: NodeId) -> Result<NodeId, GraphError> {
        self.elementwise(name, Op::Sigmoid, x)
    }

    /// Every row of `x` (one per token) times its position's attention temperature.
    pub fn attn_temperature(
        &mut self,
        name: &str,
        x: NodeId,
        t: crate::AttnTemperature,
    ) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        if rows != Rows::Tokens || t.floor_scale == 0 || !t.scale.is_finite() {
            return Err(shape_err(
                name,
                format!("a temperature of {t:?} over rows {rows:?} (one per token needed)"),
            ));
        }
        Ok(self.push(name, Op::AttnTemperature(t), vec![x], rows, w))
    }

    /// Every row of `a` times the single value of the same row of `s` (width 1).
    pub fn mul_row_scalar(
        &mut self,
        name: &str,
        a: NodeId,
        s: NodeId,
    ) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(a)?;
        let (srows, sw) = self.shape(s)?;
        if srows != rows || sw != 1 {
            return Err(shape_err(
                name,
                format!("a factor of {sw} values per row ({srows:?}) for rows {rows:?}"),
            ));
        }
        Ok(self.push(name, Op::MulRowScalar, vec![a, s], rows, w))
    }

    /// `relu(x)²`.
    pub fn relu_sqr(&mut self, name: &str, x: NodeId) -> Result<NodeId, GraphError> {
        self.elementwise(name, Op::ReluSqr, x)
    }

    /// Every row times a weight of the row's width, or of one value (broadcast).
    pub fn mul_weight(
        &mut self,
        name: &str,
        x: NodeId,
        weight: WeightId,
    ) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        let dims = self.weight_dims(weight, name)?;
        let n = dims.iter().product::<u64>() as usize;
        if n != w && n != 1 {
            return Err(shape_err(
                name,
                format!("factor dims {dims:?} for width {w} (need {w} values or one)"),
            ));
        }
        Ok(self.push(name, Op::MulWeight { weight }, vec![x], rows, w))
    }

    /// Columns `offset .. offset + width` of every row of `x`.
    pub fn slice(
        &mut self,
        name: &str,
        x: NodeId,
        offset: usize,
        width: usize,
    ) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        if width == 0 || offset.checked_add(width).is_none_or(|end| end > w) {
            return Err(shape_err(
                name,
                format!(
                    "columns {offset}..{} of a row of {w}",
                    offset.saturating_add(width)
                ),
            ));
        }
        Ok(self.push(name, Op::Slice { offset }, vec![x], rows, width))
    }

    /// Head `h`'s `k` values times matrix `h` of a 3-d weight of ggml dims `[k, m, n_head]`.
    pub fn head_matmul(
        &mut self,
        name: &str,
        x: NodeId,
        weight: WeightId,
        n_head: usize,
    ) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        let dims = self.weight_dims(weight, name)?;
        // GGUF drops trailing dims of 1: one head's weight is `[k, m]`.
        let full = match dims {
            [k, m] => [*k, *m, 1],
            [k, m, h] => [*k, *m, *h],
            _ => [0, 0, 0],
        };
        match full {
            [k, m, h] if h as usize == n_head && n_head > 0 && k as usize * n_head == w => {
                let m = m as usize;
                Ok(self.push(
                    name,
                    Op::HeadMatMul { weight, n_head },
                    vec![x],
                    rows,
                    m * n_head,
                ))
            }
            _ => Err(shape_err(
                name,
                format!("input width {w} in {n_head} heads does not match weight dims {dims:?}"),
            )),
        }
    }

    /// Values `offset .. offset + width` of each of the `n_head` heads of every row of `x`.
    pub fn head_slice(
        &mut self,
        name: &str,
        x: NodeId,
        n_head: usize,
        offset: usize,
        width: usize,
    ) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        let head_in = if n_head > 0 && w.is_multiple_of(n_head) {
            w / n_head
        } else {
            0
        };
        if width == 0 || offset.checked_add(width).is_none_or(|end| end > head_in) {
            return Err(shape_err(
                name,
                format!("values {offset}..+{width} of {n_head} heads in a row of {w}"),
            ));
        }
        let op = Op::HeadSlice {
            n_head,
            head_in,
            offset,
        };
        Ok(self.push(name, op, vec![x], rows, width * n_head))
    }

    /// Per head, `a`'s values then `b`'s; an input of one head is repeated for every head.
    pub fn head_concat(
        &mut self,
        name: &str,
        a: NodeId,
        b: NodeId,
        n_head: usize,
        heads: [usize; 2],
    ) -> Result<NodeId, GraphError> {
        let (ra, wa) = self.shape(a)?;
        let (rb, wb) = self.shape(b)?;
        let fits = |w: usize, h: usize| (h == 1 || h == n_head) && w > 0 && w.is_multiple_of(h);
        if n_head == 0 || ra != rb || !fits(wa, heads[0]) || !fits(wb, heads[1]) {
            return Err(shape_err(
                name,
                format!("{ra:?}×{wa} and {rb:?}×{wb} as {heads:?} heads of {n_head}"),
            ));
        }
        let width = (wa / heads[0] + wb / heads[1]) * n_head;
        Ok(self.push(
            name,
            Op::HeadConcat { n_head, heads },
            vec![a, b],
            ra,
            width,
        ))
    }

    /// RoPE at the step's positions.
    pub fn rope(&mut self, name: &str, x: NodeId, p: RopeParams) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        if p.n_head * p.head_dim != w || p.n_rot > p.head_dim || !p.n_rot.is_multiple_of(2) {
            return Err(shape_err(
                name,
                format!(
                    "{} heads of {} (rotating {}) for width {w}",
                    p.n_head, p.head_dim, p.n_rot
                ),
            ));
        }
        Ok(self.push(name, Op::Rope(p), vec![x], rows, w))
    }

    /// A state-space layer's causal convolution of `x` (one channel per value) with taps of
    /// ggml dims `[d_conv, width]`.
    pub fn ssm_conv(
        &mut self,
        name: &str,
        x: NodeId,
        p: SsmConvParams,
    ) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        let dims = self.weight_dims(p.weight, name)?;
        let taps_ok = dims.len() >= 2
            && dims[0] as usize == p.d_conv
            && dims[1] as usize == w
            && dims.iter().skip(2).all(|&d| d == 1);
        if rows != Rows::Tokens || p.d_conv == 0 || !taps_ok {
            return Err(shape_err(
                name,
                format!(
                    "taps of dims {dims:?} over {w} channels, kernel {}",
                    p.d_conv
                ),
            ));
        }
        if let Some(b) = p.bias {
            let n = self.weight_dims(b, name)?.iter().product::<u64>() as usize;
            if n != w {
                return Err(shape_err(name, format!("a bias of {n} for {w} channels")));
            }
        }
        Ok(self.push(name, Op::SsmConv(p), vec![x], Rows::Tokens, w))
    }

    /// A state-space layer's selective scan over `x` (`n_head · head_dim` channels), `dt`
    /// (`n_head` per token) and `bc` (`2 · n_group · d_state` per token).
    pub fn ssm_scan(
        &mut self,
        name: &str,
        x: NodeId,
        dt: NodeId,
        bc: NodeId,
        p: SsmScanParams,
    ) -> Result<NodeId, GraphError> {
        let (rx, wx) = self.shape(x)?;
        let (rd, wd) = self.shape(dt)?;
        let (rb, wb) = self.shape(bc)?;
        let a = self.weight_dims(p.a, name)?.iter().product::<u64>() as usize;
        let d = self.weight_dims(p.d, name)?.iter().product::<u64>() as usize;
        let ok = [rx, rd, rb].iter().all(|&r| r == Rows::Tokens)
            && p.n_head > 0
            && p.n_group > 0
            && p.d_state > 0
            && p.n_head.is_multiple_of(p.n_group)
            && wx == p.n_head * p.head_dim
            && wd == p.n_head
            && wb == 2 * p.n_group * p.d_state
            && (a == p.n_head * p.d_state || a == p.n_head)
            && d == p.n_head;
        if !ok {
            return Err(shape_err(
                name,
                format!("x {wx}, dt {wd}, bc {wb}, A {a}, D {d} do not fit {p:?}"),
            ));
        }
        Ok(self.push(name, Op::SsmScan(p), vec![x, dt, bc], Rows::Tokens, wx))
    }

    /// Attention of `q` over the cache after writing `k` and `v` into it.
    pub fn attention(
        &mut self,
        name: &str,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        p: AttentionParams,
    ) -> Result<NodeId, GraphError> {
        let (rq, wq) = self.shape(q)?;
        let (rk, wk) = self.shape(k)?;
        let (rv, wv) = self.shape(v)?;
        let ok = rq == Rows::Tokens
            && rk == Rows::Tokens
            && rv == Rows::Tokens
            && p.n_kv_head > 0
            && p.n_head.is_multiple_of(p.n_kv_head)
            && wq == p.n_head * p.head_dim_k
            && wk == p.n_kv_head * p.head_dim_k
            && if p.latent {
                // The values are the front of each key head: `v` is `k` itself.
                v == k && p.head_dim_v <= p.head_dim_k
            } else {
                wv == p.n_kv_head * p.head_dim_v
            };
        if !ok {
            return Err(shape_err(
                name,
                format!("q {wq}, k {wk}, v {wv} do not fit {p:?}"),
            ));
        }
        if let Some(s) = p.sinks {
            let dims = self.weight_dims(s, name)?;
            if dims.iter().product::<u64>() as usize != p.n_head {
                return Err(shape_err(
                    name,
                    format!("sinks of dims {dims:?} for {} heads", p.n_head),
                ));
            }
        }
        let w = p.n_head * p.head_dim_v;
        Ok(self.push(name, Op::Attention(p), vec![q, k, v], Rows::Tokens, w))
    }

    fn binary(&mut self, name: &str, op: Op, a: NodeId, b: NodeId) -> Result<NodeId, GraphError> {
        let sa = self.shape(a)?;
        let sb = self.shape(b)?;
        if sa != sb {
            return Err(shape_err(name, format!("{sa:?} and {sb:?} differ")));
        }
        Ok(self.push(name, op, vec![a, b], sa.0, sa.1))
    }

    /// `a + b`.
    pub fn add(&mut self, name: &str, a: NodeId, b: NodeId) -> Result<NodeId, GraphError> {
        self.binary(name, Op::Add, a, b)
    }

    /// `a * b`.
    pub fn mul(&mut self, name: &str, a: NodeId, b: NodeId) -> Result<NodeId, GraphError> {
        self.binary(name, Op::Mul, a, b)
    }

    /// `silu(gate) * up`.
    pub fn swiglu(&mut self, name: &str, gate: NodeId, up: NodeId) -> Result<NodeId, GraphError> {
        self.binary(name, Op::SwiGlu, gate, up)
    }

    /// `gelu_tanh(gate) * up`.
    pub fn geglu(&mut self, name: &str, gate: NodeId, up: NodeId) -> Result<NodeId, GraphError> {
        self.binary(name, Op::GeGlu, gate, up)
    }

    /// `acc + scale · (x · Aᵀ) · Bᵀ` ([`Op::LowRank`]): `x` is `k` wide, `A`'s ggml dims
    /// `[k, rank]`, `Bᵀ`'s `[m, rank]` (`B` transposed), `acc` `m` wide with `x`'s rows; `term`
    /// says which adapter it is, for steps that scale adapters per sequence; `inputs` the
    /// halves' types in the file (an F16 or BF16 half reads its input rounded to that type).
    #[allow(clippy::too_many_arguments)]
    pub fn low_rank(
        &mut self,
        name: &str,
        acc: NodeId,
        x: NodeId,
        a: WeightId,
        bt: WeightId,
        scale: f32,
        term: AdapterTerm,
        inputs: (DType, DType),
    ) -> Result<NodeId, GraphError> {
        let (rows, k) = self.shape(x)?;
        let (acc_rows, m) = self.shape(acc)?;
        let (ad, bd) = (self.weight_dims(a, name)?, self.weight_dims(bt, name)?);
        let fits = matches!((ad, bd), ([ak, ar], [bm, br])
            if *ak as usize == k && ar == br && *bm as usize == m && *ar > 0);
        if !fits || acc_rows != rows {
            return Err(shape_err(
                name,
                format!(
                    "input {rows:?} x {k}, output {acc_rows:?} x {m}: A {ad:?} and B transposed {bd:?} do not fit"
                ),
            ));
        }
        let op = Op::LowRank {
            a,
            bt,
            scale,
            term,
            inputs,
        };
        Ok(self.push(name, op, vec![acc, x], rows, m))
    }

    /// `x * scale`, or each row times its sequence's factor of adapter `term`
    /// ([`Op::AdapterScale`]).
    pub fn adapter_scale(
        &mut self,
        name: &str,
        x: NodeId,
        scale: f32,
        term: AdapterTerm,
    ) -> Result<NodeId, GraphError> {
        self.elementwise(name, Op::AdapterScale { scale, term }, x)
    }

    /// `x * s`.
    pub fn scale(&mut self, name: &str, x: NodeId, s: f32) -> Result<NodeId, GraphError> {
        self.elementwise(name, Op::Scale(s), x)
    }

    /// `cap * tanh(x / cap)`.
    pub fn softcap(&mut self, name: &str, x: NodeId, cap: f32) -> Result<NodeId, GraphError> {
        self.elementwise(name, Op::SoftCap(cap), x)
    }

    /// The rows of `x` the step asks outputs for: the last token of each sequence by default.
    pub fn last_row(&mut self, name: &str, x: NodeId) -> Result<NodeId, GraphError> {
        let (_, w) = self.shape(x)?;
        Ok(self.push(name, Op::OutputRows, vec![x], Rows::Outputs, w))
    }

    /// An op of one input whose output has the input's shape.
    fn elementwise(&mut self, name: &str, op: Op, x: NodeId) -> Result<NodeId, GraphError> {
        let (rows, w) = self.shape(x)?;
        Ok(self.push(name, op, vec![x], rows, w))
    }

    /// Rows and width of a node's output.
    pub fn shape(&self, id: NodeId) -> Result<(Rows, usize), GraphError> {
        let n = self.node(id)?;
        Ok((n.rows, n.width))
    }
}
