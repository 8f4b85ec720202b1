//! `DecoderConfig`: the hyperparameters of a decoder-only transformer, read from GGUF metadata
//! (`{arch}.*` keys), with what each architecture family does differently filled in.

mod keys;
mod load;

pub(crate) use keys::{layer_flags, moe_counts, swa_pattern};

use crate::ArchKind;

/// The FFN activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Activation {
    /// SiLU (gated: SwiGLU): llama, qwen.
    Silu,
    /// tanh-approximated GELU (gated: GeGLU): gemma, starcoder2.
    GeluTanh,
    /// `relu(x)²`, ungated only (arcee).
    ReluSqr,
}

/// The shape of the feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FfnKind {
    /// `down(act(gate(x)) * up(x))` (llama.cpp `LLM_FFN_PAR`).
    Gated,
    /// `down(act(up(x)))` (llama.cpp `LLM_FFN_SEQ` without a gate).
    Plain,
    /// `down(act(g) * u)` where `ffn_up` holds `[g | u]` side by side (phi3's fused gate/up).
    FusedGateUp,
}

/// The normalization of the residual stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NormKind {
    /// RMS norm times a weight.
    Rms,
    /// Layer norm times a weight, plus a bias when the file has one.
    Layer,
    /// Layer norm without weight or bias (olmo).
    LayerPlain,
}

/// Where Q and K are normalized after their projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QkNorm {
    /// Not at all.
    None,
    /// RMS norm of each head (qwen3, gemma3).
    PerHead,
    /// RMS norm of the whole projection, before it is split into heads (olmo2).
    Full,
    /// Layer norm of each head, with a weight per head (stablelm, command-r+).
    LayerPerHead,
}

/// A mixture-of-experts FFN, as the family's llama.cpp graph calls `build_moe_ffn`.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    /// Experts per layer (`expert_count`).
    pub n_expert: usize,
    /// Experts chosen per token (`expert_used_count`).
    pub n_used: usize,
    /// Router probabilities.
    pub gating: kestrel_graph::MoeGating,
    /// The chosen weights divided by their sum.
    pub norm_weights: bool,
    /// The chosen weights multiplied by this (1: none).
    pub weights_scale: f32,
    /// Per-expert `*_exps.scale` weights are applied.
    pub expert_scales: bool,
    /// Activation of the experts.
    pub activation: kestrel_graph::MoeActivation,
    /// A shared expert (`ffn_*_shexp`) is added where the file has one; its per-tensor scales
    /// are applied when true.
    pub shared_scales: bool,
    /// The router's and the experts' biases (`ffn_gate_inp.bias`, `ffn_*_exps.bias`) are added
    /// (gpt-oss).
    pub biases: bool,
    /// `blk.{L}.exp_probs_b.bias`, where the file has it, is added to the probabilities for the
    /// choice only (DeepSeek V3).
    pub selection_bias: bool,
    /// Expert groups `(groups, used)` (`expert_group_count`, `expert_group_used_count`).
    pub groups: Option<(usize, usize)>,
}

/// Multi-head latent attention (DeepSeek V2/V3) in the absorbed form llama.cpp runs: queries
/// through an optional low-rank pair (`attn_q_a`, its norm, `attn_q_b`; else `attn_q`), one
/// compressed KV row per token (`attn_kv_a_mqa`: the latent, normed by `attn_kv_a_norm`, then a
/// shared rotated key part), each head's non-rotated query part taken into the latent space by
/// `attn_k_b`, attention over a cache of the latent rows (values: the latent), and each head's
/// output taken back by `attn_v_b` before `attn_output`.
#[derive(Clone, Debug, PartialEq)]
pub struct MlaConfig {
    /// Rank of the query compression (0: a plain `attn_q`).
    pub q_lora_rank: usize,
    /// Rank of the KV compression: the latent's size.
    pub kv_lora_rank: usize,
    /// Query and key values per head without rotation.
    pub qk_nope: usize,
    /// Rotated query and key values per head.
    pub qk_rope: usize,
    /// Value size per head after `attn_v_b`.
    pub v_head: usize,
    /// The absorbed form (`attn_k_b`, `attn_v_b`, a latent cache); false: the decompressed form
    /// of older files (`attn_kv_b` expands the latent into plain heads of keys and values,
    /// cached as such).
    pub absorbed: bool,
}

/// Which recurrent layer a family has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SsmKind {
    /// llama.cpp's `build_mamba_layer`: `ssm_in` projects to `x` and the gate `z`; a causal
    /// convolution (`ssm_conv1d`, its bias, SiLU) over `x`; `ssm_x` gives the rank-`dt_rank`
    /// `dt` input, B and C (RMS-normed where `dt_b_c_rms` says, with `ssm_{dt,b,c}_norm`
    /// weights where the file has them: jamba); `ssm_dt` expands `dt`; the selective scan with
    /// `ssm_a` and `ssm_d`; `y · silu(z)`; `ssm_out`.
    Mamba,
    /// llama.cpp's `build_mamba2_layer`: `ssm_in` projects to `z`, then `x`, B and C, then one
    /// `dt` per head; the convolution runs over `x`, B and C together; the scan has one decay
    /// per head; `y · silu(z)`, then an RMS norm per group (`ssm_norm`) where the file has it.
    Mamba2,
    /// LFM2's short convolution: `shortconv.in_proj` gives B, C and `x`; `C · conv(B · x)`
    /// (kernel `shortconv.l_cache`, no bias, no scan); `shortconv.out_proj`.
    ShortConv,
}

/// A family's recurrent (state-space) layers.
#[derive(Clone, Debug, PartialEq)]
pub struct SsmConfig {
    /// Which layer.
    pub kind: SsmKind,
    /// Convolution kernel width.
    pub d_conv: usize,
    /// Inner channels (the embedding width for the short convolution).
    pub d_inner: usize,
    /// State values per channel (0: no scan).
    pub d_state: usize,
    /// Mamba: the rank of `dt`; Mamba-2: the heads.
    pub dt_rank: usize,
    /// Mamba-2: groups of B and C (Mamba: 1).
    pub n_group: usize,
    /// Mamba: RMS norms on `dt`, B and C (FalconMamba, jamba).
    pub dt_b_c_rms: bool,
}

impl SsmConfig {
    /// Channels the convolution runs over: `x` (Mamba, the short convolution), `x`, B and C
    /// (Mamba-2).
    pub fn conv_channels(&self) -> usize {
        match self.kind {
            SsmKind::Mamba2 => self.d_inner + 2 * self.n_group * self.d_state,
            _ => self.d_inner,
        }
    }

    /// The recurrent state of one layer and sequence (llama.cpp's `n_embd_r`, `n_embd_s`):
    /// the convolution's last `d_conv - 1` inputs per channel, and the scan's state.
    pub fn state_sizes(&self) -> (usize, usize) {
        (
            self.d_conv.saturating_sub(1) * self.conv_channels(),
            self.d_state * self.d_inner,
        )
    }
}

/// Where the block's norms sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockLayout {
    /// `x + attn(norm(x))`, then `x + ffn(norm(x))` (llama).
    Sequential,
    /// `x + attn(norm(x)) + ffn(norm(x))` with one norm (command-r, phi2).
    Parallel,
}

/// How positions stretch beyond the training context.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Positions divided by `factor`.
    Linear {
        /// Scale factor.
        factor: f32,
    },
    /// YaRN.
    Yarn {
        /// Scale factor.
        factor: f32,
        /// Context the model was trained with.
        original_context: usize,
        /// Extrapolation mix (-1 = derive from factor, as llama.cpp).
        ext_factor: f32,
        /// Magnitude scale.
        attn_factor: f32,
        /// Low correction dim boundary.
        beta_fast: f32,
        /// High correction dim boundary.
        beta_slow: f32,
    },
}

/// Rotary position embedding settings.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    /// Dimensions rotated per head (`rope.dimension_count`, default the head size).
    pub n_rot: usize,
    /// Base frequency of global layers.
    pub freq_base: f32,
    /// Base frequency of sliding-window layers, where it differs (gemma3: 10 000).
    pub freq_base_swa: Option<f32>,
    /// Sliding-window layers rotate without the global scaling (gemma3, olmo2: llama.cpp's
    /// `rope_freq_scale_train_swa` of 1); otherwise they are scaled as the others.
    pub swa_unscaled: bool,
    /// NeoX style (rotate halves) rather than adjacent pairs.
    pub neox: bool,
    /// Scaling of global layers.
    pub scaling: RopeScaling,
    /// The tensor of per-dimension frequency divisors, when the family uses one and the file has
    /// it (`rope_freqs.weight` of llama 3.1+; phi3's `rope_factors_short.weight`).
    pub freq_factors: Option<String>,
    /// Multiplier of the rotated values' cos/sin outside YaRN (`rope.scaling.attn_factor`:
    /// LongRoPE's `sqrt(1 + ln(s) / ln(n_ctx_orig))` for Phi-3 128k; llama.cpp's
    /// `rope_attn_factor`). YaRN reads the same key as its own attention factor.
    pub attn_factor: f32,
    /// Multi-axis RoPE sections (qwen2vl, qwen3vl, glm4 with sections) when some pairs fall in
    /// the fourth axis, which a text token leaves unrotated (llama.cpp's `[p, p, p, 0]`).
    pub mrope: Option<kestrel_tensor::cpu::MropeSections>,
}

/// A decoder-only transformer's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    /// `general.architecture`.
    pub arch: String,
    /// The family it runs as.
    pub kind: ArchKind,
    /// Vocabulary size.
    pub n_vocab: usize,
    /// Training context length.
    pub n_ctx_train: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Layers.
    pub n_layer: usize,
    /// FFN hidden size per layer.
    pub n_ff: Vec<usize>,
    /// Attention heads per layer.
    pub n_head: Vec<usize>,
    /// KV heads per layer.
    pub n_head_kv: Vec<usize>,
    /// Key head size.
    pub head_dim_k: usize,
    /// Value head size.
    pub head_dim_v: usize,
    /// Norm epsilon (RMS or layer norm, as `norm` says).
    pub norm_eps: f32,
    /// The residual stream's norm.
    pub norm: NormKind,
    /// Sequential or parallel attention and FFN.
    pub layout: BlockLayout,
    /// Norms before attention and FFN (false: olmo2, which norms only their outputs).
    pub pre_norms: bool,
    /// A layer without `ffn_norm` feeds its FFN the attention's normed input (stablelm's
    /// parallel layers) instead of being an error.
    pub ffn_norm_optional: bool,
    /// Q, K and V clamped to `±limit` after their projections (olmo's `clamp_kqv`).
    pub clamp_kqv: Option<f32>,
    /// RoPE.
    pub rope: RopeConfig,
    /// Sliding-window size, for the layers that use one.
    pub sliding_window: Option<usize>,
    /// Which layers attend within the sliding window.
    pub swa_layers: Vec<bool>,
    /// Which layers rotate Q and K (false: a NoPE layer, as smollm3's every fourth).
    pub rope_layers: Vec<bool>,
    /// Attention score scale (default `1/sqrt(head_dim_k)`).
    pub attn_scale: f32,
    /// Multiply the (RoPE'd) queries by `attn_scale` as an op of its own and attend with scale 1,
    /// as llama.cpp builds Gemma: the f32 product is rounded before the query goes to f16 in the
    /// attention kernel, so the two forms differ where a scaled query is f16-subnormal.
    pub q_prescale: bool,
    /// `cap * tanh(x / cap)` on attention logits.
    pub attn_softcap: Option<f32>,
    /// Queries multiplied by their position's attention temperature after RoPE (Llama 4's
    /// tuning, as Ministral 3 uses it).
    pub attn_temperature: Option<kestrel_graph::AttnTemperature>,
    /// `cap * tanh(x / cap)` on output logits.
    pub final_softcap: Option<f32>,
    /// Input embeddings multiplied by this (gemma: `sqrt(n_embd)`).
    pub embd_scale: Option<f32>,
    /// Learned absolute positions: `position_embd.weight`'s row of each position is added to the
    /// token embedding (gpt2, starcoder).
    pub learned_positions: bool,
    /// Logits multiplied by this (command-r's `logit_scale`; granite's `1 / logit_scale`).
    pub logit_scale: Option<f32>,
    /// Attention and FFN outputs multiplied by this before the residual add (granite).
    pub residual_scale: Option<f32>,
    /// FFN activation.
    pub activation: Activation,
    /// FFN shape.
    pub ffn: FfnKind,
    /// Mixture of experts in the layers that have a router (`ffn_gate_inp`).
    pub moe: Option<MoeConfig>,
    /// The FFN projections honour per-tensor `*.scale` weights (true only where llama.cpp's graph
    /// of the family passes them to its FFN, as llama's does; most pass none).
    pub ffn_scales: bool,
    /// A fused `attn_qkv` projection honours its per-tensor `*.scale` weight (false: openelm,
    /// whose llama.cpp graph passes none).
    pub qkv_scale: bool,
    /// Norm of Q and K.
    pub qk_norm: QkNorm,
    /// Q and K are normed after RoPE rather than before (hunyuan-dense, maincoder).
    pub qk_norm_after_rope: bool,
    /// The name of the norm before the FFN (`ffn_norm`; seed_oss: `post_attention_norm`).
    pub ffn_norm_name: &'static str,
    /// Norms after attention and FFN (gemma's sandwich norms, olmo2's post-norms).
    pub post_norms: bool,
    /// No `output.weight`: the output projection is the token embedding.
    pub tied_output: bool,
    /// Add `output.bias` when the file has one (false: qwen2vl, whose graph ignores it).
    pub output_bias: bool,
    /// Attention sinks (`blk.N.attn_sinks.weight`, one logit per head; gpt-oss).
    pub attn_sinks: bool,
    /// Multi-head latent attention (deepseek2): the attention block is built from it, and the
    /// KV cache holds `head_dim_k` latent values per token and no values.
    pub mla: Option<MlaConfig>,
    /// State-space layers (Mamba, Mamba-2), for the families that have them.
    pub ssm: Option<SsmConfig>,
    /// Which layers have attention (all but a hybrid's recurrent and FFN-only layers).
    pub attention_layers: Vec<bool>,
    /// Which layers have a recurrent (state-space) mixer: instead of attention, or beside it
    /// (falcon-h1 adds the two); all false for a transformer. A layer with neither runs its FFN
    /// as its mixer (nemotron_h).
    pub recurrent_layers: Vec<bool>,
    /// deci's "linear attention" layers: the normed input through `attn_output` alone, in place
    /// of attention (no heads, no cache).
    pub linear_attn_layers: Vec<bool>,
    /// Layers left out of the forward pass (deci's FFN-free layers: llama.cpp builds no FFN for
    /// them and drops their attention output with it, so they pass the residual on unchanged).
    pub skip_layers: Vec<bool>,
    /// Whether each layer has an FFN after its mixer (false: Mamba, nemotron_h). With one, a
    /// layer without a mixer (deci's attention-free layers) feeds its input to the FFN directly.
    pub block_ffn: bool,
    /// Whether `attn_output.bias` is added where the file has one (falcon-h1's graph leaves it
    /// out).
    pub attn_out_bias: bool,
    /// The final norm's tensor (LFM2: `token_embd_norm`).
    pub output_norm_name: &'static str,
}

impl DecoderConfig {
    /// Leaves the top `n` blocks out (NextN draft blocks, counted in `block_count` but not
    /// part of the model's forward pass): every per-layer list shortened with `n_layer`.
    pub(crate) fn drop_top_layers(&mut self, n: usize) {
        self.n_layer = self.n_layer.saturating_sub(n);
        let n_layer = self.n_layer;
        self.n_ff.truncate(n_layer);
        self.n_head.truncate(n_layer);
        self.n_head_kv.truncate(n_layer);
        self.swa_layers.truncate(n_layer);
        self.rope_layers.truncate(n_layer);
        self.attention_layers.truncate(n_layer);
        self.recurrent_layers.truncate(n_layer);
        self.linear_attn_layers.truncate(n_layer);
        self.skip_layers.truncate(n_layer);
    }

    /// Attention layers before layer `il`: the KV cache's index of attention layer `il`.
    pub fn attention_index(&self, il: usize) -> usize {
        self.attention_layers[..il.min(self.n_layer)]
            .iter()
            .filter(|&&a| a)
            .count()
    }

    /// Recurrent layers before layer `il`: the state's index of recurrent layer `il`.
    pub fn recurrent_index(&self, il: usize) -> usize {
        self.recurrent_layers[..il.min(self.n_layer)]
            .iter()
            .filter(|&&r| r)
            .count()
    }

    /// Layers with attention (and so a KV cache).
    pub fn n_attention_layers(&self) -> usize {
        self.attention_index(self.n_layer)
    }

    /// Values per KV head and token the cache holds for values: `head_dim_v`, or 0 for a latent
    /// cache (multi-head latent attention), whose values are the front of its key rows.
    pub fn kv_value_dim(&self) -> usize {
        if self.mla.as_ref().is_some_and(|m| m.absorbed) {
            0
        } else {
            self.head_dim_v
        }
    }
}
