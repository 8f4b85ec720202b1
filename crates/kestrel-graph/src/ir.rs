//! The graph IR: nodes are ops over named weights and earlier nodes' activations.
//!
//! Every activation is a row-major f32 matrix of `rows × width`, where `rows` is symbolic: the
//! tokens of the current step ([`Rows::Tokens`]), or the rows the step wants outputs for
//! ([`Rows::Outputs`]: the last position of each sequence, before the output projection).
//! Widths are fixed when the graph is built. Symbolic rows are bound per step when a compiled
//! plan runs, so one graph gives the prefill plan (many tokens), the decode plan (one token) and
//! the batched plan (tokens of several sequences).

use kestrel_tensor::DType;

/// Index of a node in its graph.
pub type NodeId = usize;

/// Index of a weight in its graph's weight table.
pub type WeightId = usize;

/// How many rows an activation has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rows {
    /// One row per token of the step.
    Tokens,
    /// One row per output the step asks for (one for a single sequence; one per sequence, or
    /// per drafted token, in a batch).
    Outputs,
}

/// RoPE parameters of one rope node (ggml's `ggml_rope_ext` arguments).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeParams {
    /// Heads in the input row.
    pub n_head: usize,
    /// Head size.
    pub head_dim: usize,
    /// Dimensions rotated per head.
    pub n_rot: usize,
    /// NeoX (halves) rather than adjacent pairs.
    pub neox: bool,
    /// Base frequency.
    pub freq_base: f32,
    /// 1 / linear scaling factor.
    pub freq_scale: f32,
    /// YaRN extrapolation mix (0 = off).
    pub ext_factor: f32,
    /// YaRN magnitude scale.
    pub attn_factor: f32,
    /// YaRN low boundary.
    pub beta_fast: f32,
    /// YaRN high boundary.
    pub beta_slow: f32,
    /// Original training context (YaRN).
    pub n_ctx_orig: usize,
    /// Per-dimension frequency divisors (`rope_freqs.weight`).
    pub freq_factors: Option<WeightId>,
    /// M-RoPE sections whose fourth axis leaves some pairs of a text token unrotated.
    pub mrope: Option<kestrel_tensor::cpu::MropeSections>,
}

/// Attention parameters of one attention node.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionParams {
    /// The layer whose KV cache it reads and writes.
    pub layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// KV heads (GQA when fewer than query heads).
    pub n_kv_head: usize,
    /// Key head size.
    pub head_dim_k: usize,
    /// Value head size.
    pub head_dim_v: usize,
    /// Score scale.
    pub scale: f32,
    /// Sliding window in tokens, if this layer uses one.
    pub window: Option<usize>,
    /// Soft-cap of attention logits.
    pub softcap: Option<f32>,
    /// Each query sees only earlier positions (decoders); false: every query of a sequence sees
    /// every key of it (encoders, whose whole input must then run in one step).
    pub causal: bool,
    /// A learned logit per head in every softmax's denominator (gpt-oss's attention sinks).
    pub sinks: Option<WeightId>,
    /// A latent cache (DeepSeek's absorbed multi-head latent attention): the cache holds the
    /// keys only, and each head's values are the first `head_dim_v` values of its key row; the
    /// node's `v` input is its `k` input.
    pub latent: bool,
}

impl RopeParams {
    /// The CPU and CUDA engines' rope settings (the frequency factors are bound separately).
    pub fn engine_params(&self) -> kestrel_tensor::cpu::RopeParams {
        kestrel_tensor::cpu::RopeParams {
            mode: if self.neox {
                kestrel_tensor::cpu::RopeMode::Neox
            } else {
                kestrel_tensor::cpu::RopeMode::Normal
            },
            n_rot: self.n_rot,
            freq_base: self.freq_base,
            freq_scale: self.freq_scale,
            ext_factor: self.ext_factor,
            attn_factor: self.attn_factor,
            beta_fast: self.beta_fast,
            beta_slow: self.beta_slow,
            n_ctx_orig: self.n_ctx_orig,
            mrope: self.mrope,
        }
    }
}

impl AttentionParams {
    /// The CPU and CUDA engines' attention settings (K and V head sizes must match there).
    pub fn engine_params(&self) -> kestrel_tensor::cpu::AttentionParams {
        kestrel_tensor::cpu::AttentionParams {
            n_head: self.n_head,
            n_kv_head: self.n_kv_head,
            head_dim: self.head_dim_k,
            scale: self.scale,
            softcap: self.softcap.unwrap_or(0.0),
            window: self.window.unwrap_or(0),
        }
    }
}

/// How router logits become expert probabilities (llama.cpp's `llama_expert_gating_func_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MoeGating {
    /// Softmax over all experts.
    Softmax,
    /// Sigmoid of each logit.
    Sigmoid,
    /// The raw logits select; a softmax over the selected ones weighs.
    SoftmaxWeight,
}

/// The expert FFN's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MoeActivation {
    /// SiLU (gated: SwiGLU).
    Silu,
    /// tanh GELU (gated: GeGLU).
    Gelu,
    /// gpt-oss's clamped SwiGLU (llama.cpp `ggml_swiglu_oai`, alpha 1.702, limit 7):
    /// `min(g, 7) · sigmoid(1.702 · min(g, 7)) · (clamp(u, ±7) + 1)`; gated only.
    SwiGluOai,
    /// `relu(u)²` (nemotron_h's experts); ungated only.
    ReluSqr,
}

/// A mixture-of-experts FFN (llama.cpp's `build_moe_ffn`): router logits `x · routerᵀ`
/// (`+ router_bias`), probabilities by `gating`, the `n_used` experts of the highest probability
/// (`+ selection_bias`, which changes the choice only), their probabilities as weights
/// (`norm_weights`: divided by their sum; times `weights_scale`), and the sum over the chosen
/// experts, in the order chosen, of `weight · down(act(gate(x)) · up(x))`. Expert weights are
/// 3-d (`[k, m, n_expert]`); per-expert scales (`[n_expert]`) multiply each projection.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeParams {
    /// Experts.
    pub n_expert: usize,
    /// Experts chosen per token.
    pub n_used: usize,
    /// Hidden size of one expert.
    pub n_ff: usize,
    /// Router logits to probabilities.
    pub gating: MoeGating,
    /// Divide the chosen weights by their sum.
    pub norm_weights: bool,
    /// Multiply the chosen weights by this (1: no change).
    pub weights_scale: f32,
    /// Activation.
    pub activation: MoeActivation,
    /// Router (`[n_embd, n_expert]`).
    pub router: WeightId,
    /// Added to the router logits.
    pub router_bias: Option<WeightId>,
    /// Added to the probabilities for the choice only (DeepSeek V3).
    pub selection_bias: Option<WeightId>,
    /// Expert groups `(groups, used)` (DeepSeek V3): the experts split into `groups` equal
    /// groups, each scored by the sum of its two best selection scores, and only the experts of
    /// the `used` best groups can be chosen.
    pub groups: Option<(usize, usize)>,
    /// Up projections.
    pub up: WeightId,
    /// Gate projections (none: an ungated activation of `up`, unless `fused_gate_up`).
    pub gate: Option<WeightId>,
    /// `up` holds each expert's gate and up projections stacked (`[k, 2·n_ff, n_expert]`, the
    /// gate's `n_ff` outputs first: llama.cpp's `ffn_gate_up_exps`); `gate` is none.
    pub fused_gate_up: bool,
    /// Down projections.
    pub down: WeightId,
    /// Per-expert scales of up, gate and down.
    pub scales: [Option<WeightId>; 3],
    /// Per-expert biases of up, gate and down (`[m, n_expert]`), added after the scales.
    pub biases: [Option<WeightId>; 3],
    /// LoRA terms of the expert projections (llama.cpp's `build_lora_mm_id`): each chosen
    /// expert's projection gets `+ factor · B_e·(A_e·x)` after its scale, before its bias; and
    /// of the router (`+ factor · B·(A·x)` before its bias).
    pub low_rank: Vec<MoeLowRank>,
}

/// Which projection of an [`Op::Moe`] a term adapts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MoeProj {
    /// The router (`[k, n_expert]`, one 2-D pair, as llama.cpp's `build_lora_mm` adapts it).
    Router,
    /// `up` (with `fused_gate_up`: the stacked gate and up projections).
    Up,
    /// `gate`.
    Gate,
    /// `down`.
    Down,
}

impl MoeProj {
    /// The index of an expert projection in [`MoeParams::scales`] and [`MoeParams::biases`]
    /// (`None` for the router).
    pub fn index(self) -> Option<usize> {
        match self {
            MoeProj::Router => None,
            MoeProj::Up => Some(0),
            MoeProj::Gate => Some(1),
            MoeProj::Down => Some(2),
        }
    }
}

/// One adapter's pair on a projection of an MoE FFN: for an expert projection `A` of ggml
/// dims `[k, rank, n_expert]` and `B` `[rank, m, n_expert]` (the weight being `[k, m,
/// n_expert]`), for the router `[k, rank]` and `[rank, n_expert]`; read in their stored types
/// as matmul weights (an F16 half reads its input rounded to f16, as ggml's `mul_mat_id`
/// does).
#[derive(Clone, Debug, PartialEq)]
pub struct MoeLowRank {
    /// The projection it adapts.
    pub proj: MoeProj,
    /// `A`.
    pub a: WeightId,
    /// `B`.
    pub b: WeightId,
    /// The factor when a step binds no per-sequence scales.
    pub scale: f32,
    /// The adapter it belongs to.
    pub term: AdapterTerm,
}

/// Which rows of a table an [`Op::Embed`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbedIndex {
    /// The step's token ids (token embeddings).
    Tokens,
    /// The step's positions (learned absolute position embeddings).
    Positions,
    /// One fixed row for every token (a BERT token-type embedding, type 0).
    Row(u32),
}

/// Which adapter a low-rank term belongs to and how a user scale becomes its factor, so one
/// plan can run each sequence of a batch with its own adapters and scales.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdapterTerm {
    /// The adapter's index among the graph's adapters.
    pub adapter: usize,
    /// The adapter's `adapter.lora.alpha` (0: none).
    pub alpha: f32,
    /// The term's rank (`B`'s first ggml dim).
    pub rank: usize,
}

impl AdapterTerm {
    /// The factor at user scale `scale`: `scale · alpha / rank`, or `scale` without an alpha
    /// (llama.cpp's `get_scale`, in its order of operations).
    pub fn factor(&self, scale: f32) -> f32 {
        if self.alpha != 0.0 {
            scale * self.alpha / self.rank as f32
        } else {
            scale
        }
    }
}

/// An operation.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Op {
    /// Rows of an embedding table: for the step's token ids, its positions, or one fixed row.
    Embed {
        /// The table (`[n_vocab, width]`).
        table: WeightId,
        /// Which rows.
        index: EmbedIndex,
    },
    /// `x · Wᵀ`: input `[rows, k]`, weight `[m, k]` (ggml dims `[k, m]`), output `[rows, m]`.
    MatMul {
        /// The weight.
        weight: WeightId,
    },
    /// Add a bias row to every row.
    AddBias {
        /// The bias (`width` values).
        bias: WeightId,
    },
    /// RMS norm over groups of `group` values (the whole row when `group` = width; per head for
    /// QK-norm), then multiply by `weight` (length `group`) if given.
    RmsNorm {
        /// Values normalized together.
        group: usize,
        /// Epsilon.
        eps: f32,
        /// Scale.
        weight: Option<WeightId>,
    },
    /// Layer norm over groups of `group` values (the whole row when `group` = width; per head
    /// for a QK-norm): `(x - mean) / sqrt(var + eps) * weight + bias` (weight and bias only for
    /// whole rows).
    LayerNorm {
        /// Values normalized together.
        group: usize,
        /// Epsilon.
        eps: f32,
        /// Scale.
        weight: Option<WeightId>,
        /// Shift.
        bias: Option<WeightId>,
    },
    /// Rotary position embedding at the step's positions.
    Rope(RopeParams),
    /// Attention of queries over the KV cache; inputs `q, k, v`, writes `k, v` to the cache.
    Attention(AttentionParams),
    /// Elementwise sum of two nodes.
    Add,
    /// Elementwise product of two nodes.
    Mul,
    /// Multiply by a constant.
    Scale(f32),
    /// A LoRA adapter's term added to a matmul's output: `acc + scale · (x · Aᵀ) · Bᵀ`, inputs
    /// `[acc, x]`, halves F32 or F16: `A` of ggml dims `[k, rank]` and `B` given transposed,
    /// `Bᵀ` of ggml dims `[m, rank]`, in the low-rank kernels' column blocks (see
    /// [`low_rank_names`](crate::low_rank_names)).
    LowRank {
        /// `A` (F32 or F16).
        a: WeightId,
        /// `Bᵀ` (F32 or F16).
        bt: WeightId,
        /// The product's factor when a step binds no per-sequence adapter scales.
        scale: f32,
        /// The adapter it belongs to, for per-sequence scales.
        term: AdapterTerm,
        /// The halves' types in the adapter file: an F16 or BF16 half reads its input rounded
        /// to that type, as ggml's matmul does (the sums stay f32).
        inputs: (DType, DType),
    },
    /// An adapter's product scaled as [`Op::LowRank`]'s is (its unfused form): by `scale`, or
    /// by the factor of each row's sequence's scale for `term` when the step binds them.
    AdapterScale {
        /// The factor when a step binds no per-sequence adapter scales.
        scale: f32,
        /// The adapter it belongs to.
        term: AdapterTerm,
    },
    /// `cap * tanh(x / cap)`.
    SoftCap(f32),
    /// `silu(a) * b` (SwiGLU).
    SwiGlu,
    /// `gelu_tanh(a) * b` (GeGLU).
    GeGlu,
    /// Exact (erf) GELU of one node (BERT's FFN).
    GeluErf,
    /// GELU (tanh form, as ggml's `ggml_gelu`) of one node: an ungated FFN's activation.
    Gelu,
    /// SiLU of one node: an ungated FFN's activation.
    Silu,
    /// `relu(x)²` of one node (arcee's FFN).
    ReluSqr,
    /// `1 / (1 + exp(-x))` of one node (a shared expert's gate).
    Sigmoid,
    /// Every row of the first input times the one value of the same row of the second.
    MulRowScalar,
    /// Every row times its position's attention temperature (Llama 4's and Ministral 3's query
    /// scaling, [`AttnTemperature`]).
    AttnTemperature(AttnTemperature),
    /// Multiply every row by a weight: a vector of the row's width, or one value for all
    /// (llama.cpp's per-tensor `*.scale` after a projection).
    MulWeight {
        /// The factors (`width` values or one).
        weight: WeightId,
    },
    /// `min(max(x, -limit), limit)` (llama.cpp's `clamp_kqv`).
    Clamp(f32),
    /// A mixture-of-experts FFN of each row.
    Moe(MoeParams),
    /// Columns `offset .. offset + width` of every input row (one part of a fused projection,
    /// such as Q, K or V of `attn_qkv`).
    Slice {
        /// First column taken.
        offset: usize,
    },
    /// One matrix per head (a 3-d weight of ggml dims `[k, m, n_head]`): head `h`'s `k` input
    /// values times matrix `h` give its `m` output values (DeepSeek's `attn_k_b`, `attn_v_b`).
    HeadMatMul {
        /// The weight.
        weight: WeightId,
        /// Heads.
        n_head: usize,
    },
    /// Values `offset .. offset + w` of each of the `n_head` heads of `head_in` values in a row
    /// (`w` = output width / `n_head`): one part of every head.
    HeadSlice {
        /// Heads.
        n_head: usize,
        /// Values per head in the input.
        head_in: usize,
        /// First value taken of each head.
        offset: usize,
    },
    /// Each head's values of the first input followed by its values of the second; an input of
    /// one head (`heads[i]` = 1) gives every head the same values (`ggml_repeat` then
    /// `ggml_concat`).
    HeadConcat {
        /// Heads of the output.
        n_head: usize,
        /// Heads of each input: `n_head` or 1.
        heads: [usize; 2],
    },
    /// The rows of a `Tokens` node that the step asks outputs for (by default the last token of
    /// each sequence).
    OutputRows,
    /// A state-space layer's causal depthwise convolution over each sequence's tokens, carrying
    /// the sequence's convolution state (llama.cpp's `ggml_ssm_conv` plus the bias).
    SsmConv(SsmConvParams),
    /// A state-space layer's selective scan plus its skip term; inputs `x`, `dt` (biased, before
    /// the softplus) and `bc` (B's groups then C's per token), carrying the sequence's scan
    /// state (llama.cpp's `ggml_ssm_scan`, then `y + x · D`).
    SsmScan(SsmScanParams),
}

/// Llama 4's attention temperature tuning, as llama.cpp's `llm_graph_input_attn_temp` computes
/// it for a token at position `pos`: `ln(floor((pos + offset) / floor_scale) + 1) · scale + 1`
/// (the division in f32, the rest in f64, rounded to f32). Positions before `floor_scale` get
/// exactly 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnTemperature {
    /// Positions per step of the logarithm (Ministral 3: the YaRN original context).
    pub floor_scale: u32,
    /// The logarithm's factor (`attention.temperature_scale`).
    pub scale: f32,
    /// Added to each position first (0 for Ministral 3).
    pub offset: f32,
}

impl AttnTemperature {
    /// The factor of a token at `pos`.
    pub fn factor(&self, pos: i32) -> f32 {
        let steps = ((pos as f32 + self.offset) / self.floor_scale as f32).floor();
        ((f64::from(steps) + 1.0).ln() * f64::from(self.scale) + 1.0) as f32
    }
}

/// Parameters of an [`Op::SsmConv`] node.
#[derive(Clone, Debug, PartialEq)]
pub struct SsmConvParams {
    /// The recurrent layer whose state it reads and writes (recurrent layers numbered from 0).
    pub layer: usize,
    /// Kernel width (`ssm.conv_kernel`).
    pub d_conv: usize,
    /// Taps (ggml dims `[d_conv, channels]`).
    pub weight: WeightId,
    /// Added per channel.
    pub bias: Option<WeightId>,
}

/// Parameters of an [`Op::SsmScan`] node.
#[derive(Clone, Debug, PartialEq)]
pub struct SsmScanParams {
    /// The recurrent layer whose state it reads and writes.
    pub layer: usize,
    /// State values per channel.
    pub d_state: usize,
    /// Heads (Mamba: one per channel).
    pub n_head: usize,
    /// Channels per head (Mamba: 1).
    pub head_dim: usize,
    /// Groups of B and C.
    pub n_group: usize,
    /// The decay `A`: `n_head × d_state` values (Mamba) or one per head (Mamba-2).
    pub a: WeightId,
    /// The skip factor `D`, one per head.
    pub d: WeightId,
}

/// A node: an op, its inputs, and the shape of its output.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// What it computes.
    pub op: Op,
    /// Nodes it reads, in op order.
    pub inputs: Vec<NodeId>,
    /// Rows of the output.
    pub rows: Rows,
    /// Values per output row.
    pub width: usize,
    /// A name for debugging (`blk.3.attn_q`).
    pub name: String,
}

/// A weight the graph reads, by GGUF tensor name, with the shape the builder expects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightRef {
    /// GGUF tensor name.
    pub name: String,
    /// Expected ggml dims (`[k, m]` for a matrix).
    pub dims: Vec<u64>,
}
