//! The decoder graph builder: one step of a decoder-only transformer as a `kestrel-graph`
//! [`Graph`], driven by a [`DecoderConfig`] (the per-family differences are flags there, set in
//! `archs/<name>.rs`). Weight shapes come from the file and are checked as the graph is built.

use kestrel_gguf::GgufModel;
use kestrel_graph::{AttentionParams, EmbedIndex, Graph, MoeParams, NodeId, RopeParams};

use crate::{
    Activation, ArchError, BlockLayout, DecoderConfig, FfnKind, MlaConfig, NormKind, QkNorm,
    RopeScaling,
};

mod recurrent;
use recurrent::recurrent_mixer;

/// Which positions get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (generation).
    Last,
    /// Every token's (perplexity, speculative verification).
    All,
    /// No logits: every token's hidden state after the final norm (embeddings).
    Hidden,
}

pub(crate) struct Builder<'a> {
    pub(crate) g: Graph,
    model: &'a GgufModel,
    arch: &'a str,
}

impl Builder<'_> {
    pub(crate) fn weight(&mut self, name: &str) -> Result<usize, ArchError> {
        let info = self
            .model
            .tensor_info(name)
            .ok_or_else(|| ArchError::Invalid {
                arch: self.arch.to_string(),
                reason: format!("tensor {name:?} is missing"),
            })?;
        Ok(self.g.weight(name, info.dims()))
    }

    pub(crate) fn opt_weight(&mut self, name: &str) -> Option<usize> {
        let info = self.model.tensor_info(name)?;
        Some(self.g.weight(name, info.dims()))
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.model.tensor_info(name).is_some()
    }

    /// A projection as llama.cpp's `build_lora_mm` and its callers make it: `x · Wᵀ`, times the
    /// per-tensor `{name}.scale` when the file has one, plus `{name}.bias` when it has one.
    pub(crate) fn linear(&mut self, name: &str, x: NodeId) -> Result<NodeId, ArchError> {
        self.projection(name, x, true, false, true)
    }

    /// An FFN projection as llama.cpp's `build_ffn` makes it: the bias is added before the
    /// per-tensor scale, and the scale only where the family's graph passes it on (`scaled`).
    fn ffn_linear(&mut self, name: &str, x: NodeId, scaled: bool) -> Result<NodeId, ArchError> {
        self.projection(name, x, scaled, true, true)
    }

    pub(crate) fn projection(
        &mut self,
        name: &str,
        x: NodeId,
        scaled: bool,
        bias_first: bool,
        biased: bool,
    ) -> Result<NodeId, ArchError> {
        let ge = graph_err(self.arch);
        let w = self.weight(&format!("{name}.weight"))?;
        let mut t = self.g.matmul(name, x, w).map_err(&ge)?;
        let scale = scaled
            .then(|| self.opt_weight(&format!("{name}.scale")))
            .flatten();
        let bias = biased
            .then(|| self.opt_weight(&format!("{name}.bias")))
            .flatten();
        let scale_it = |b: &mut Self, t: NodeId| match scale {
            Some(s) => b.g.mul_weight(&format!("{name}_s"), t, s),
            None => Ok(t),
        };
        if !bias_first {
            t = scale_it(self, t).map_err(&ge)?;
        }
        if let Some(b) = bias {
            t = self.g.add_bias(&format!("{name}_b"), t, b).map_err(&ge)?;
        }
        if bias_first {
            t = scale_it(self, t).map_err(&ge)?;
        }
        Ok(t)
    }

    /// The residual stream's norm `{name}.weight` (and `{name}.bias` for a layer norm).
    pub(crate) fn norm(
        &mut self,
        cfg: &DecoderConfig,
        name: &str,
        x: NodeId,
    ) -> Result<NodeId, ArchError> {
        let ge = graph_err(self.arch);
        if cfg.norm == NormKind::LayerPlain {
            return self
                .g
                .layer_norm(name, x, cfg.norm_eps, None, None)
                .map_err(&ge);
        }
        // falcon-h1 names its FFN norm `blk.N.ffn_norm`, without `.weight`.
        let w = match self.has(&format!("{name}.weight")) || !self.has(name) {
            true => self.weight(&format!("{name}.weight"))?,
            false => self.weight(name)?,
        };
        match cfg.norm {
            NormKind::Layer => {
                let b = self.opt_weight(&format!("{name}.bias"));
                self.g.layer_norm(name, x, cfg.norm_eps, Some(w), b)
            }
            _ => {
                // llama.cpp's `build_norm` adds a bias after the scale where the family passes
                // one (phimoe); the other families' files have none.
                let n = self.g.rms_norm(name, x, cfg.n_embd, cfg.norm_eps, Some(w));
                match (n, self.opt_weight(&format!("{name}.bias"))) {
                    (Ok(n), Some(b)) => self.g.add_bias(&format!("{name}_b"), n, b),
                    (n, _) => n,
                }
            }
        }
        .map_err(&ge)
    }

    /// The feed-forward block of layer `il`: dense, or mixture of experts (plus a shared expert)
    /// in a layer with a router.
    fn ffn(&mut self, cfg: &DecoderConfig, il: usize, h: NodeId) -> Result<NodeId, ArchError> {
        let p = |s: &str| format!("blk.{il}.{s}");
        let Some(moe) = cfg
            .moe
            .as_ref()
            .filter(|_| self.has(&p("ffn_gate_inp.weight")))
        else {
            return self.dense_ffn(cfg, il, h, "");
        };
        let ge = graph_err(self.arch);
        // llama.cpp's files may hold each expert's gate and up projections stacked.
        let fused_gate_up = self.has(&p("ffn_gate_up_exps.weight"));
        let up_name = p(if fused_gate_up {
            "ffn_gate_up_exps.weight"
        } else {
            "ffn_up_exps.weight"
        });
        let up = self.weight(&up_name)?;
        let up_rows = self
            .model
            .tensor_info(&up_name)
            .and_then(|t| t.dims().get(1).copied())
            .unwrap_or(0) as usize;
        let n_ff = if fused_gate_up { up_rows / 2 } else { up_rows };
        let scale = |b: &mut Self, s: &str| {
            if moe.expert_scales {
                b.opt_weight(&p(&format!("{s}.scale")))
            } else {
                None
            }
        };
        let params = MoeParams {
            n_expert: moe.n_expert,
            n_used: moe.n_used,
            n_ff,
            gating: moe.gating,
            norm_weights: moe.norm_weights,
            weights_scale: moe.weights_scale,
            activation: moe.activation,
            router: self.weight(&p("ffn_gate_inp.weight"))?,
            router_bias: if moe.biases {
                Some(self.weight(&p("ffn_gate_inp.bias"))?)
            } else {
                None
            },
            selection_bias: if moe.selection_bias {
                self.opt_weight(&p("exp_probs_b.bias"))
            } else {
                None
            },
            groups: moe.groups,
            up,
            gate: if fused_gate_up {
                None
            } else {
                self.opt_weight(&p("ffn_gate_exps.weight"))
            },
            fused_gate_up,
            down: self.weight(&p("ffn_down_exps.weight"))?,
            scales: [
                scale(self, "ffn_up_exps"),
                scale(self, "ffn_gate_exps"),
                scale(self, "ffn_down_exps"),
            ],
            biases: if moe.biases {
                [
                    self.opt_weight(&p("ffn_up_exps.bias")),
                    self.opt_weight(&p("ffn_gate_exps.bias")),
                    self.opt_weight(&p("ffn_down_exps.bias")),
                ]
            } else {
                [None; 3]
            },
            low_rank: Vec::new(),
        };
        // Experts in a latent space (Nemotron 3 Super): they read the input projected down
        // (a plain product: no scale, no bias), the router the input itself, and their sum is
        // projected back up.
        let mut out = match self.opt_weight(&p("ffn_latent_down.weight")) {
            Some(down) => {
                let x = self.g.matmul(&p("ffn_latent_in"), h, down).map_err(&ge)?;
                self.g.moe_routed(&p("ffn_moe"), x, Some(h), params)
            }
            None => self.g.moe(&p("ffn_moe"), h, params),
        }
        .map_err(&ge)?;
        if let Some(up) = self.opt_weight(&p("ffn_latent_up.weight")) {
            out = self.g.matmul(&p("ffn_latent_out"), out, up).map_err(&ge)?;
        }
        if self.has(&p("ffn_up_shexp.weight")) {
            let mut shared = self.dense_ffn(cfg, il, h, "_shexp")?;
            if let Some(g) = self.opt_weight(&p("ffn_gate_inp_shexp.weight")) {
                let logit = self.g.matmul(&p("ffn_shexp_gate"), h, g).map_err(&ge)?;
                let gate = self
                    .g
                    .sigmoid(&p("ffn_shexp_sigmoid"), logit)
                    .map_err(&ge)?;
                shared = self
                    .g
                    .mul_row_scalar(&p("ffn_shexp_gated"), shared, gate)
                    .map_err(&ge)?;
            }
            out = self.g.add(&p("ffn_moe_shexp"), out, shared).map_err(&ge)?;
        }
        Ok(out)
    }

    /// A dense FFN of layer `il` over the tensors `ffn_{gate,up,down}{suffix}` (suffix `""`, or
    /// `"_shexp"` for a shared expert, whose scales follow `moe.shared_scales`).
    fn dense_ffn(
        &mut self,
        cfg: &DecoderConfig,
        il: usize,
        h: NodeId,
        suffix: &str,
    ) -> Result<NodeId, ArchError> {
        let ge = graph_err(self.arch);
        let p = |s: &str| format!("blk.{il}.{s}");
        let t = |s: &str| format!("blk.{il}.{s}{suffix}");
        let sc = if suffix.is_empty() {
            cfg.ffn_scales
        } else {
            cfg.moe.as_ref().is_some_and(|m| m.shared_scales)
        };
        let gated = |b: &mut Self, gate: NodeId, up: NodeId| match cfg.activation {
            Activation::Silu => b.g.swiglu(&p("ffn_swiglu"), gate, up).map_err(&ge),
            Activation::GeluTanh => b.g.geglu(&p("ffn_geglu"), gate, up).map_err(&ge),
            Activation::ReluSqr => Err(ArchError::Invalid {
                arch: cfg.arch.clone(),
                reason: "a gated relu² FFN".into(),
            }),
        };
        let act = match cfg.ffn {
            FfnKind::Gated => {
                let gate = self.ffn_linear(&t("ffn_gate"), h, sc)?;
                let up = self.ffn_linear(&t("ffn_up"), h, sc)?;
                gated(self, gate, up)?
            }
            FfnKind::Plain => {
                let up = self.ffn_linear(&t("ffn_up"), h, sc)?;
                match cfg.activation {
                    Activation::Silu => self.g.silu(&p("ffn_silu"), up),
                    Activation::GeluTanh => self.g.gelu(&p("ffn_gelu"), up),
                    Activation::ReluSqr => self.g.relu_sqr(&p("ffn_relu_sqr"), up),
                }
                .map_err(&ge)?
            }
            FfnKind::FusedGateUp => {
                let n_ff = cfg.n_ff[il];
                let gu = self.ffn_linear(&t("ffn_up"), h, sc)?;
                let gate = self
                    .g
                    .slice(&p("ffn_gate_part"), gu, 0, n_ff)
                    .map_err(&ge)?;
                let up = self
                    .g
                    .slice(&p("ffn_up_part"), gu, n_ff, n_ff)
                    .map_err(&ge)?;
                gated(self, gate, up)?
            }
        };
        self.ffn_linear(&t("ffn_down"), act, sc)
    }
}

pub(crate) fn graph_err(arch: &str) -> impl Fn(kestrel_graph::GraphError) -> ArchError + '_ {
    move |e| ArchError::Invalid {
        arch: arch.to_string(),
        reason: e.to_string(),
    }
}

/// RoPE parameters of layer `il`.
pub fn rope_params(
    cfg: &DecoderConfig,
    il: usize,
    n_head: usize,
    freq_factors: Option<usize>,
) -> RopeParams {
    let swa = cfg.swa_layers.get(il).copied().unwrap_or(false);
    let base = match (swa, cfg.rope.freq_base_swa) {
        (true, Some(b)) => b,
        _ => cfg.rope.freq_base,
    };
    // Sliding-window layers of some families rotate unscaled (gemma3, olmo2).
    let scaled = !(swa && cfg.rope.swa_unscaled);
    let mut p = RopeParams {
        n_head,
        head_dim: cfg.head_dim_k,
        n_rot: cfg.rope.n_rot,
        neox: cfg.rope.neox,
        freq_base: base,
        freq_scale: 1.0,
        ext_factor: 0.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
        n_ctx_orig: cfg.n_ctx_train,
        freq_factors,
        mrope: cfg.rope.mrope,
    };
    if scaled {
        match cfg.rope.scaling {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } => p.freq_scale = 1.0 / factor,
            RopeScaling::Yarn {
                factor,
                original_context,
                ext_factor,
                attn_factor,
                beta_fast,
                beta_slow,
            } => {
                p.freq_scale = 1.0 / factor;
                // llama.cpp: a negative ext_factor means 1 for YaRN.
                p.ext_factor = if ext_factor < 0.0 { 1.0 } else { ext_factor };
                p.attn_factor = attn_factor;
                p.beta_fast = beta_fast;
                p.beta_slow = beta_slow;
                p.n_ctx_orig = original_context;
            }
        }
    }
    if !matches!(cfg.rope.scaling, RopeScaling::Yarn { .. }) {
        p.attn_factor *= cfg.rope.attn_factor;
    }
    p
}

/// The norms of Q and K that `cfg.qk_norm` asks for (none: unchanged).
fn qk_norm(
    b: &mut Builder<'_>,
    cfg: &DecoderConfig,
    il: usize,
    mut q: NodeId,
    mut k: NodeId,
) -> Result<(NodeId, NodeId), ArchError> {
    let ge = graph_err(&cfg.arch);
    let p = |s: &str| format!("blk.{il}.{s}");
    let eps = cfg.norm_eps;
    let (q_width, k_width) = (
        cfg.n_head[il] * cfg.head_dim_k,
        cfg.n_head_kv[il] * cfg.head_dim_k,
    );
    let group = match cfg.qk_norm {
        QkNorm::None => None,
        QkNorm::PerHead | QkNorm::LayerPerHead => Some((cfg.head_dim_k, cfg.head_dim_k)),
        QkNorm::Full => Some((q_width, k_width)),
    };
    if let Some((gq, gk)) = group {
        let wq = b.weight(&p("attn_q_norm.weight"))?;
        let wk = b.weight(&p("attn_k_norm.weight"))?;
        if cfg.qk_norm == QkNorm::LayerPerHead {
            // A weight per head (`[head_dim, n_head]`): normalize, then scale every value.
            q =
                b.g.layer_norm_groups(&p("attn_q_ln"), q, gq, eps)
                    .map_err(&ge)?;
            k =
                b.g.layer_norm_groups(&p("attn_k_ln"), k, gk, eps)
                    .map_err(&ge)?;
            q = b.g.mul_weight(&p("attn_q_norm"), q, wq).map_err(&ge)?;
            k = b.g.mul_weight(&p("attn_k_norm"), k, wk).map_err(&ge)?;
        } else {
            q =
                b.g.rms_norm(&p("attn_q_norm"), q, gq, eps, Some(wq))
                    .map_err(&ge)?;
            k =
                b.g.rms_norm(&p("attn_k_norm"), k, gk, eps, Some(wk))
                    .map_err(&ge)?;
        }
    }
    Ok((q, k))
}

/// Multi-head latent attention of layer `il` as llama.cpp's deepseek2 graph builds it, absorbed
/// (`is_mla()`) or decompressed (`attn_kv_b`): the heads' output before `attn_output`.
fn mla_attention(
    b: &mut Builder<'_>,
    cfg: &DecoderConfig,
    mla: &MlaConfig,
    il: usize,
    h: NodeId,
) -> Result<NodeId, ArchError> {
    let ge = graph_err(&cfg.arch);
    let p = |s: &str| format!("blk.{il}.{s}");
    let n_head = cfg.n_head[il];
    let (nope, rope, rank) = (mla.qk_nope, mla.qk_rope, mla.kv_lora_rank);
    // Queries: [n_head × (nope + rope)].
    let q = if mla.q_lora_rank > 0 {
        let qa = b.linear(&p("attn_q_a"), h)?;
        let w = b.weight(&p("attn_q_a_norm.weight"))?;
        let qa =
            b.g.rms_norm(
                &p("attn_q_a_norm"),
                qa,
                mla.q_lora_rank,
                cfg.norm_eps,
                Some(w),
            )
            .map_err(&ge)?;
        b.linear(&p("attn_q_b"), qa)?
    } else {
        b.linear(&p("attn_q"), h)?
    };
    // One compressed row per token: the latent, then the shared key part to rotate.
    let kv = b.linear(&p("attn_kv_a_mqa"), h)?;
    let latent = b.g.slice(&p("kv_cmpr"), kv, 0, rank).map_err(&ge)?;
    let k_pe = b.g.slice(&p("k_pe"), kv, rank, rope).map_err(&ge)?;
    let rope_of = |n: usize| RopeParams {
        head_dim: rope,
        ..rope_params(cfg, il, n, None)
    };
    let k_pe = b.g.rope(&p("rope_k"), k_pe, rope_of(1)).map_err(&ge)?;
    let w = b.weight(&p("attn_kv_a_norm.weight"))?;
    let latent =
        b.g.rms_norm(&p("attn_kv_a_norm"), latent, rank, cfg.norm_eps, Some(w))
            .map_err(&ge)?;
    let q_nope =
        b.g.head_slice(&p("q_nope"), q, n_head, 0, nope)
            .map_err(&ge)?;
    let q_pe =
        b.g.head_slice(&p("q_pe"), q, n_head, nope, rope)
            .map_err(&ge)?;
    let q_pe = b.g.rope(&p("rope_q"), q_pe, rope_of(n_head)).map_err(&ge)?;
    if !mla.absorbed {
        // The decompressed form: `attn_kv_b` expands the latent into each head's non-rotated
        // key part and its values; every head's key ends with the shared rotated part.
        let kv = b.linear(&p("attn_kv_b"), latent)?;
        let k_nope =
            b.g.head_slice(&p("k_nope"), kv, n_head, 0, nope)
                .map_err(&ge)?;
        let v =
            b.g.head_slice(&p("v_heads"), kv, n_head, nope, mla.v_head)
                .map_err(&ge)?;
        let q_full =
            b.g.head_concat(&p("q_heads"), q_nope, q_pe, n_head, [n_head, n_head])
                .map_err(&ge)?;
        let k_full =
            b.g.head_concat(&p("k_heads"), k_nope, k_pe, n_head, [n_head, 1])
                .map_err(&ge)?;
        let params = AttentionParams {
            layer: cfg.attention_index(il),
            n_head,
            n_kv_head: n_head,
            head_dim_k: nope + rope,
            head_dim_v: mla.v_head,
            scale: cfg.attn_scale,
            window: None,
            softcap: None,
            causal: true,
            sinks: None,
            latent: false,
        };
        return b
            .g
            .attention(&p("attn"), q_full, k_full, v, params)
            .map_err(&ge);
    }
    // Each head's non-rotated part taken into the latent space.
    let wk_b = b.weight(&p("attn_k_b.weight"))?;
    let q_abs =
        b.g.head_matmul(&p("q_nope_absorbed"), q_nope, wk_b, n_head)
            .map_err(&ge)?;
    let q_full =
        b.g.head_concat(&p("q_mla"), q_abs, q_pe, n_head, [n_head, n_head])
            .map_err(&ge)?;
    let k_full =
        b.g.head_concat(&p("k_mla"), latent, k_pe, 1, [1, 1])
            .map_err(&ge)?;
    let params = AttentionParams {
        layer: cfg.attention_index(il),
        n_head,
        n_kv_head: 1,
        head_dim_k: rank + rope,
        head_dim_v: rank,
        scale: cfg.attn_scale,
        window: None,
        softcap: None,
        causal: true,
        sinks: None,
        latent: true,
    };
    let a =
        b.g.attention(&p("attn"), q_full, k_full, k_full, params)
            .map_err(&ge)?;
    // Each head's latent output taken back to its values.
    let wv_b = b.weight(&p("attn_v_b.weight"))?;
    b.g.head_matmul(&p("attn_v_b"), a, wv_b, n_head)
        .map_err(&ge)
}

/// The attention of layer `il` over its normed input `h`: the heads' output before
/// `attn_output`.
fn attention_block(
    b: &mut Builder<'_>,
    cfg: &DecoderConfig,
    il: usize,
    h: NodeId,
    freq_factors: Option<usize>,
) -> Result<NodeId, ArchError> {
    let ge = graph_err(&cfg.arch);
    let p = |s: &str| format!("blk.{il}.{s}");
    let (n_head, n_kv) = (cfg.n_head[il], cfg.n_head_kv[il]);
    let (q_width, k_width) = (n_head * cfg.head_dim_k, n_kv * cfg.head_dim_k);
    let a = if let Some(mla) = &cfg.mla {
        mla_attention(b, cfg, mla, il, h)?
    } else {
        let (mut q, mut k, mut v) = if b.has(&p("attn_qkv.weight")) {
            let qkv = b.projection(&p("attn_qkv"), h, cfg.qkv_scale, false, true)?;
            let v_width = n_kv * cfg.head_dim_v;
            (
                b.g.slice(&p("q_part"), qkv, 0, q_width).map_err(&ge)?,
                b.g.slice(&p("k_part"), qkv, q_width, k_width)
                    .map_err(&ge)?,
                b.g.slice(&p("v_part"), qkv, q_width + k_width, v_width)
                    .map_err(&ge)?,
            )
        } else {
            (
                b.linear(&p("attn_q"), h)?,
                b.linear(&p("attn_k"), h)?,
                b.linear(&p("attn_v"), h)?,
            )
        };
        if let Some(limit) = cfg.clamp_kqv {
            q = b.g.clamp(&p("q_clamped"), q, limit).map_err(&ge)?;
            k = b.g.clamp(&p("k_clamped"), k, limit).map_err(&ge)?;
            v = b.g.clamp(&p("v_clamped"), v, limit).map_err(&ge)?;
        }
        if !cfg.qk_norm_after_rope {
            (q, k) = qk_norm(b, cfg, il, q, k)?;
        }
        if cfg.rope_layers[il] {
            q =
                b.g.rope(&p("rope_q"), q, rope_params(cfg, il, n_head, freq_factors))
                    .map_err(&ge)?;
            k =
                b.g.rope(&p("rope_k"), k, rope_params(cfg, il, n_kv, freq_factors))
                    .map_err(&ge)?;
        }
        if cfg.qk_norm_after_rope {
            (q, k) = qk_norm(b, cfg, il, q, k)?;
        }
        if let Some(t) = cfg.attn_temperature {
            q = b.g.attn_temperature(&p("q_temp"), q, t).map_err(&ge)?;
        }
        let mut scale = cfg.attn_scale;
        if cfg.q_prescale {
            q = b.g.scale(&p("q_scaled"), q, scale).map_err(&ge)?;
            scale = 1.0;
        }
        let window = if cfg.swa_layers[il] {
            cfg.sliding_window
        } else {
            None
        };
        let params = AttentionParams {
            layer: cfg.attention_index(il),
            n_head,
            n_kv_head: n_kv,
            head_dim_k: cfg.head_dim_k,
            head_dim_v: cfg.head_dim_v,
            scale,
            window,
            softcap: cfg.attn_softcap,
            causal: true,
            latent: false,
            sinks: if cfg.attn_sinks {
                Some(b.weight(&p("attn_sinks.weight"))?)
            } else {
                None
            },
        };
        b.g.attention(&p("attn"), q, k, v, params).map_err(&ge)?
    };
    Ok(a)
}

/// A sequential layer's FFN half: `x + ffn(norm(x))` (with post-norm and residual scale where
/// the family has them); `h` is the mixer's normed input, which stablelm's parallel layers
/// without `ffn_norm` feed their FFN.
fn block_ffn(
    b: &mut Builder<'_>,
    cfg: &DecoderConfig,
    il: usize,
    x: NodeId,
    h: NodeId,
) -> Result<NodeId, ArchError> {
    let ge = graph_err(&cfg.arch);
    let p = |s: &str| format!("blk.{il}.{s}");
    let ffn_norm = p(cfg.ffn_norm_name);
    let ffn_in = if !cfg.pre_norms {
        x
    } else if cfg.ffn_norm_optional && !b.has(&format!("{ffn_norm}.weight")) {
        h
    } else {
        b.norm(cfg, &ffn_norm, x)?
    };
    let mut d = b.ffn(cfg, il, ffn_in)?;
    if cfg.post_norms {
        d = b.norm(cfg, &p("post_ffw_norm"), d)?;
    }
    if let Some(s) = cfg.residual_scale {
        d = b.g.scale(&p("ffn_res_scaled"), d, s).map_err(&ge)?;
    }
    b.g.add(&p("ffn_residual"), x, d).map_err(&ge)
}

/// Build the graph of one step.
pub fn build_decoder(
    cfg: &DecoderConfig,
    model: &GgufModel,
    logits: Logits,
) -> Result<Graph, ArchError> {
    let mut b = Builder {
        g: Graph::new(),
        model,
        arch: &cfg.arch,
    };
    let ge = graph_err(&cfg.arch);
    let tok = b.weight("token_embd.weight")?;
    let mut x = b.g.embed("inp_embd", tok).map_err(&ge)?;
    if let Some(s) = cfg.embd_scale {
        x = b.g.scale("inp_scaled", x, s).map_err(&ge)?;
    }
    if cfg.learned_positions {
        let table = b.weight("position_embd.weight")?;
        let pos =
            b.g.embed_by("inp_pos_embd", table, EmbedIndex::Positions)
                .map_err(&ge)?;
        x = b.g.add("inp_with_pos", x, pos).map_err(&ge)?;
    }
    let freq_factors = match &cfg.rope.freq_factors {
        Some(name) => Some(b.weight(name)?),
        None => None,
    };
    for il in 0..cfg.n_layer {
        if cfg.skip_layers[il] {
            continue;
        }
        let p = |s: &str| format!("blk.{il}.{s}");
        // The mixer: attention, a recurrent layer, both added (falcon-h1), a linear layer
        // (deci), or none: then the layer's FFN mixes (nemotron_h), or with an FFN of its own
        // the layer has no mixer at all (deci's attention-free layers).
        let mixer =
            cfg.attention_layers[il] || cfg.recurrent_layers[il] || cfg.linear_attn_layers[il];
        if !mixer && cfg.block_ffn {
            x = block_ffn(&mut b, cfg, il, x, x)?;
            continue;
        }
        let h = if cfg.pre_norms {
            b.norm(cfg, &p("attn_norm"), x)?
        } else {
            x
        };
        let mut o = None;
        if cfg.linear_attn_layers[il] {
            // llama.cpp's `build_lora_mm(wo, cur)`: no bias, no scale.
            o = Some(b.projection(&p("attn_output"), h, false, false, false)?);
        }
        if cfg.attention_layers[il] {
            let a = attention_block(&mut b, cfg, il, h, freq_factors)?;
            o = Some(if cfg.attn_out_bias {
                b.linear(&p("attn_output"), a)?
            } else {
                b.projection(&p("attn_output"), a, true, false, false)?
            });
        }
        if cfg.recurrent_layers[il] {
            let ssm = cfg.ssm.as_ref().ok_or_else(|| ArchError::Invalid {
                arch: cfg.arch.clone(),
                reason: format!("layer {il} is recurrent without ssm sizes"),
            })?;
            let m = recurrent_mixer(&mut b, cfg, ssm, il, h)?;
            o = Some(match o {
                Some(a) => b.g.add(&p("attn_ssm"), a, m).map_err(&ge)?,
                None => m,
            });
        }
        let mut o = match o {
            Some(o) => o,
            None => b.ffn(cfg, il, h)?,
        };
        if cfg.post_norms {
            o = b.norm(cfg, &p("post_attention_norm"), o)?;
        }
        if let Some(s) = cfg.residual_scale {
            o = b.g.scale(&p("attn_res_scaled"), o, s).map_err(&ge)?;
        }
        if !cfg.block_ffn {
            x = b.g.add(&p("block_residual"), o, x).map_err(&ge)?;
            continue;
        }

        match cfg.layout {
            BlockLayout::Sequential => {
                x = b.g.add(&p("attn_residual"), x, o).map_err(&ge)?;
                x = block_ffn(&mut b, cfg, il, x, h)?;
            }
            BlockLayout::Parallel => {
                // llama.cpp (command-r, cohere2): `(ffn_out + inpL) + attn_out`.
                let d = b.ffn(cfg, il, h)?;
                let ffn_res = b.g.add(&p("ffn_residual"), d, x).map_err(&ge)?;
                x = b.g.add(&p("attn_residual"), ffn_res, o).map_err(&ge)?;
            }
        }
    }
    if logits == Logits::Last {
        x = b.g.last_row("last_token", x).map_err(&ge)?;
    }
    x = b.norm(cfg, cfg.output_norm_name, x)?;
    if logits == Logits::Hidden {
        b.g.set_output(x).map_err(&ge)?;
        return Ok(b.g);
    }
    let mut out = if cfg.tied_output {
        b.g.matmul("output", x, tok).map_err(&ge)?
    } else if cfg.output_bias {
        b.linear("output", x)?
    } else {
        let w = b.weight("output.weight")?;
        b.g.matmul("output", x, w).map_err(&ge)?
    };
    if let Some(s) = cfg.logit_scale {
        out = b.g.scale("logit_scaled", out, s).map_err(&ge)?;
    }
    if let Some(cap) = cfg.final_softcap {
        out = b.g.softcap("final_softcap", out, cap).map_err(&ge)?;
    }
    b.g.set_output(out).map_err(&ge)?;
    Ok(b.g)
}
