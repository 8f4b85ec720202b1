//! Reading a [`DecoderConfig`] from a model's metadata: the keys every family shares, then
//! what the family's module in `archs` fills in or checks. The top of `config`: it imports
//! `archs`, which imports the types and key readers below it.

use kestrel_gguf::GgufModel;

use super::keys::{per_layer, rope_scaling};
use super::*;
use crate::archs;
use crate::{ArchError, ArchKind};

impl DecoderConfig {
    /// Read the configuration of a model.
    pub fn from_model(model: &GgufModel) -> Result<DecoderConfig, ArchError> {
        let kind = ArchKind::detect(model)?;
        let md = model.metadata();
        let arch = md.architecture()?.to_string();
        if kind.is_encoder() {
            return Err(ArchError::Encoder { arch });
        }
        let key = |f: &str| format!("{arch}.{f}");
        let invalid = |reason: String| ArchError::Invalid {
            arch: arch.clone(),
            reason,
        };

        let n_layer = md.get_usize(&key("block_count"))?;
        let n_embd = md.get_usize(&key("embedding_length"))?;
        if n_layer == 0 || n_embd == 0 || n_layer > 4096 {
            return Err(invalid(format!(
                "block_count {n_layer}, embedding_length {n_embd}"
            )));
        }
        // Families of state-space layers alone have no attention heads (llama.cpp's converter
        // writes 0 heads and FFN size 0 for them).
        let recurrent_only = kind.is_recurrent_only();
        let n_head = match md.contains(&key("attention.head_count")) || !recurrent_only {
            true => per_layer(&md, &key("attention.head_count"), n_layer)?,
            false => vec![0; n_layer],
        };
        let n_head_kv = match md.contains(&key("attention.head_count_kv")) {
            true => per_layer(&md, &key("attention.head_count_kv"), n_layer)?,
            false => n_head.clone(),
        };
        let n_ff = match md.contains(&key("feed_forward_length")) || !recurrent_only {
            true => per_layer(&md, &key("feed_forward_length"), n_layer)?,
            false => vec![0; n_layer],
        };
        let head_dim_k = md
            .opt(&key("attention.key_length"), |m, k| m.get_usize(k))?
            .unwrap_or_else(|| {
                // The first layer with heads (a deci layer may have none).
                let h = n_head.iter().copied().find(|&h| h > 0).unwrap_or(0);
                n_embd.checked_div(h).unwrap_or(0)
            });
        let head_dim_v = md
            .opt(&key("attention.value_length"), |m, k| m.get_usize(k))?
            .unwrap_or(head_dim_k);
        if !recurrent_only && (head_dim_k == 0 || head_dim_v == 0) {
            return Err(invalid("head size 0".into()));
        }
        let n_vocab = match md.opt(&key("vocab_size"), |m, k| m.get_usize(k))? {
            Some(n) => n,
            None => md.get_array("tokenizer.ggml.tokens")?.len(),
        };
        let n_ctx_train = md.get_usize(&key("context_length"))?;
        let norm_eps = md
            .opt(&key("attention.layer_norm_rms_epsilon"), |m, k| {
                m.get_f32(k)
            })?
            .unwrap_or(1e-5);

        let n_rot = md
            .opt(&key("rope.dimension_count"), |m, k| m.get_usize(k))?
            .unwrap_or(head_dim_k);
        if !recurrent_only && (n_rot > head_dim_k || n_rot % 2 != 0) {
            return Err(invalid(format!(
                "rope.dimension_count {n_rot} with head size {head_dim_k}"
            )));
        }
        let longrope = ["rope_factors_short.weight", "rope_factors_long.weight"]
            .into_iter()
            .find(|n| model.tensor_info(n).is_some())
            .map(str::to_string);
        let is_longrope =
            md.opt(&key("rope.scaling.type"), |m, k| m.get_str(k))? == Some("longrope");
        let rope = RopeConfig {
            n_rot,
            freq_base: md
                .opt(&key("rope.freq_base"), |m, k| m.get_f32(k))?
                .unwrap_or(10_000.0),
            freq_base_swa: None,
            swa_unscaled: false,
            neox: false,
            scaling: rope_scaling(&md, &arch, n_ctx_train, longrope.is_some())?,
            // LongRoPE (a "longrope" scaling type with per-pair factor tensors, MiniCPM 4):
            // llama.cpp takes the short factors up to the original context and the long ones
            // past it; kestrel takes the short ones, as for Phi-3.
            freq_factors: model
                .tensor_info("rope_freqs.weight")
                .map(|_| "rope_freqs.weight".to_string())
                .or(longrope.filter(|_| is_longrope)),
            attn_factor: md
                .opt(&key("rope.scaling.attn_factor"), |m, k| m.get_f32(k))?
                .unwrap_or(1.0),
            mrope: None,
        };
        if !(rope.attn_factor.is_finite() && rope.attn_factor > 0.0) {
            return Err(ArchError::Invalid {
                arch: arch.clone(),
                reason: format!("rope.scaling.attn_factor {}", rope.attn_factor),
            });
        }
        let mut cfg = DecoderConfig {
            arch: arch.clone(),
            kind,
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_ff,
            n_head,
            n_head_kv,
            head_dim_k,
            head_dim_v,
            norm_eps,
            norm: NormKind::Rms,
            layout: BlockLayout::Sequential,
            pre_norms: true,
            ffn_norm_optional: false,
            clamp_kqv: None,
            rope,
            // Sliding windows, soft-caps and scales are each read by the families that use them,
            // as llama.cpp reads them (files may carry keys their family ignores).
            sliding_window: None,
            swa_layers: vec![false; n_layer],
            rope_layers: vec![true; n_layer],
            attn_scale: 1.0 / (head_dim_k as f32).sqrt(),
            q_prescale: false,
            attn_temperature: None,
            attn_softcap: None,
            final_softcap: None,
            embd_scale: None,
            learned_positions: false,
            logit_scale: None,
            residual_scale: None,
            activation: Activation::Silu,
            ffn: FfnKind::Gated,
            moe: None,
            ffn_scales: false,
            qkv_scale: true,
            qk_norm: QkNorm::None,
            qk_norm_after_rope: false,
            ffn_norm_name: "ffn_norm",
            post_norms: false,
            tied_output: model.tensor_info("output.weight").is_none(),
            output_bias: true,
            attn_sinks: false,
            mla: None,
            ssm: None,
            attention_layers: vec![true; n_layer],
            recurrent_layers: vec![false; n_layer],
            linear_attn_layers: vec![false; n_layer],
            skip_layers: vec![false; n_layer],
            block_ffn: true,
            attn_out_bias: true,
            output_norm_name: "output_norm",
        };
        archs::adjust(&mut cfg, model)?;
        // A hybrid's recurrent layers have 0 KV heads (llama.cpp reads them so): only the
        // attention layers are checked, once the family has said which they are.
        for il in (0..cfg.n_layer).filter(|&il| !recurrent_only && cfg.attention_layers[il]) {
            let (h, kv) = (cfg.n_head[il], cfg.n_head_kv[il]);
            if h == 0 || kv == 0 || h % kv != 0 {
                return Err(invalid(format!("layer {il}: {h} heads and {kv} KV heads (heads must be a non-zero multiple of KV heads)")));
            }
        }
        if cfg.moe.is_none() && model.tensor_info("blk.0.ffn_gate_inp.weight").is_some() {
            return Err(archs::unsupported_feature(
                &cfg,
                "mixture-of-experts layers",
            ));
        }
        Ok(cfg)
    }
}
