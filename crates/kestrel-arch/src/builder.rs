//! The decoder graph builder: one step of a decoder-only transformer as a `kestrel-graph`
//! [`Graph`], driven by a [`DecoderConfig`] (the per-family differences are flags there, set in
//! `archs/<name>.rs`). Weight shapes come from the file and are checked as the graph is built.

use kestrel_gguf::GgufModel;
use kestrel_graph::{AttentionParams, Graph, NodeId, RopeParams};

use crate::{Activation, ArchError, DecoderConfig, RopeScaling};

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

struct Builder<'a> {
    g: Graph,
    model: &'a GgufModel,
    arch: &'a str,
}

impl Builder<'_> {
    fn weight(&mut self, name: &str) -> Result<usize, ArchError> {
        let info = self
            .model
            .tensor_info(name)
            .ok_or_else(|| ArchError::Invalid {
                arch: self.arch.to_string(),
                reason: format!("tensor {name:?} is missing"),
            })?;
        Ok(self.g.weight(name, info.dims()))
    }

    fn opt_weight(&mut self, name: &str) -> Option<usize> {
        let info = self.model.tensor_info(name)?;
        Some(self.g.weight(name, info.dims()))
    }
}

fn graph_err(arch: &str) -> impl Fn(kestrel_graph::GraphError) -> ArchError + '_ {
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
    // Sliding-window layers with their own base (gemma3) are not scaled.
    let scaled = !(swa && cfg.rope.freq_base_swa.is_some());
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
    p
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
    let eps = cfg.norm_eps;
    let n_embd = cfg.n_embd;
    let tok = b.weight("token_embd.weight")?;
    let mut x = b.g.embed("inp_embd", tok).map_err(&ge)?;
    if let Some(s) = cfg.embd_scale {
        x = b.g.scale("inp_scaled", x, s).map_err(&ge)?;
    }
    let freq_factors = if cfg.rope.has_freq_factors {
        b.opt_weight("rope_freqs.weight")
    } else {
        None
    };
    for il in 0..cfg.n_layer {
        let p = |s: &str| format!("blk.{il}.{s}");
        let (n_head, n_kv) = (cfg.n_head[il], cfg.n_head_kv[il]);

        // Attention.
        let w = b.weight(&p("attn_norm.weight"))?;
        let h =
            b.g.rms_norm(&p("attn_norm"), x, n_embd, eps, Some(w))
                .map_err(&ge)?;
        let mut qkv: [NodeId; 3] = [0; 3];
        for (slot, name) in qkv.iter_mut().zip(["attn_q", "attn_k", "attn_v"]) {
            let w = b.weight(&p(&format!("{name}.weight")))?;
            let mut t = b.g.matmul(&p(name), h, w).map_err(&ge)?;
            if cfg.qkv_bias {
                if let Some(bias) = b.opt_weight(&p(&format!("{name}.bias"))) {
                    t =
                        b.g.add_bias(&p(&format!("{name}_b")), t, bias)
                            .map_err(&ge)?;
                }
            }
            *slot = t;
        }
        let [mut q, mut k, v] = qkv;
        if cfg.qk_norm {
            let wq = b.weight(&p("attn_q_norm.weight"))?;
            let wk = b.weight(&p("attn_k_norm.weight"))?;
            q =
                b.g.rms_norm(&p("attn_q_norm"), q, cfg.head_dim_k, eps, Some(wq))
                    .map_err(&ge)?;
            k =
                b.g.rms_norm(&p("attn_k_norm"), k, cfg.head_dim_k, eps, Some(wk))
                    .map_err(&ge)?;
        }
        q =
            b.g.rope(&p("rope_q"), q, rope_params(cfg, il, n_head, freq_factors))
                .map_err(&ge)?;
        k =
            b.g.rope(&p("rope_k"), k, rope_params(cfg, il, n_kv, freq_factors))
                .map_err(&ge)?;
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
            layer: il,
            n_head,
            n_kv_head: n_kv,
            head_dim_k: cfg.head_dim_k,
            head_dim_v: cfg.head_dim_v,
            scale,
            window,
            softcap: cfg.attn_softcap,
            causal: true,
        };
        let a = b.g.attention(&p("attn"), q, k, v, params).map_err(&ge)?;
        let wo = b.weight(&p("attn_output.weight"))?;
        let mut o = b.g.matmul(&p("attn_output"), a, wo).map_err(&ge)?;
        if cfg.post_norms {
            let w = b.weight(&p("post_attention_norm.weight"))?;
            o =
                b.g.rms_norm(&p("post_attention_norm"), o, n_embd, eps, Some(w))
                    .map_err(&ge)?;
        }
        x = b.g.add(&p("attn_residual"), x, o).map_err(&ge)?;

        // Feed-forward.
        let w = b.weight(&p("ffn_norm.weight"))?;
        let h =
            b.g.rms_norm(&p("ffn_norm"), x, n_embd, eps, Some(w))
                .map_err(&ge)?;
        let wg = b.weight(&p("ffn_gate.weight"))?;
        let wu = b.weight(&p("ffn_up.weight"))?;
        let gate = b.g.matmul(&p("ffn_gate"), h, wg).map_err(&ge)?;
        let up = b.g.matmul(&p("ffn_up"), h, wu).map_err(&ge)?;
        let act = match cfg.activation {
            Activation::Silu => b.g.swiglu(&p("ffn_swiglu"), gate, up),
            Activation::GeluTanh => b.g.geglu(&p("ffn_geglu"), gate, up),
        }
        .map_err(&ge)?;
        let wd = b.weight(&p("ffn_down.weight"))?;
        let mut d = b.g.matmul(&p("ffn_down"), act, wd).map_err(&ge)?;
        if cfg.post_norms {
            let w = b.weight(&p("post_ffw_norm.weight"))?;
            d =
                b.g.rms_norm(&p("post_ffw_norm"), d, n_embd, eps, Some(w))
                    .map_err(&ge)?;
        }
        x = b.g.add(&p("ffn_residual"), x, d).map_err(&ge)?;
    }
    if logits == Logits::Last {
        x = b.g.last_row("last_token", x).map_err(&ge)?;
    }
    let w = b.weight("output_norm.weight")?;
    x =
        b.g.rms_norm("output_norm", x, n_embd, eps, Some(w))
            .map_err(&ge)?;
    if logits == Logits::Hidden {
        b.g.set_output(x).map_err(&ge)?;
        return Ok(b.g);
    }
    let out_w = if cfg.tied_output {
        tok
    } else {
        b.weight("output.weight")?
    };
    let mut out = b.g.matmul("output", x, out_w).map_err(&ge)?;
    if let Some(cap) = cfg.final_softcap {
        out = b.g.softcap("final_softcap", out, cap).map_err(&ge)?;
    }
    b.g.set_output(out).map_err(&ge)?;
    Ok(b.g)
}
