//! Mamba (`MambaForCausalLM`, GGUF `mamba`): a stack of selective state-space layers and no
//! attention, converted as llama.cpp's `MambaModel` does: its own hyperparameters (read from
//! `config.json` as written, not through `transformers`' config class), `backbone.*` tensor
//! names, `A = -exp(A_log)`, the depthwise convolution's middle axis dropped, and an output
//! matrix equal to the embedding left out.

use std::path::Path;

use serde_json::Value;

use super::params::Hparams;
use super::read;
use super::{bad, u32_of, uint};
use crate::convert::checkpoint::Checkpoint;
use crate::convert::meta::Meta;
use crate::convert::ConvertError;

/// The GGUF name of a Mamba checkpoint tensor, or `None` when it has no place in the file.
pub(super) fn gguf_name(name: &str) -> Option<String> {
    match name {
        "backbone.embeddings.weight" | "backbone.embedding.weight" => {
            return Some("token_embd.weight".into())
        }
        "backbone.norm_f.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let rest = name.strip_prefix("backbone.layers.")?;
    let (layer, tail) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let short = match tail {
        "norm.weight" => "attn_norm.weight",
        "mixer.in_proj.weight" => "ssm_in.weight",
        "mixer.conv1d.weight" => "ssm_conv1d.weight",
        "mixer.conv1d.bias" => "ssm_conv1d.bias",
        "mixer.x_proj.weight" => "ssm_x.weight",
        "mixer.dt_proj.weight" => "ssm_dt.weight",
        "mixer.dt_proj.bias" => "ssm_dt.bias",
        "mixer.A_log" => "ssm_a",
        "mixer.D" => "ssm_d",
        "mixer.out_proj.weight" => "ssm_out.weight",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}"))
}

/// `vocab_size` rounded up to `pad_vocab_size_multiple` (8 unless given), as `MambaModel`'s
/// vocabulary is padded.
pub(super) fn padded_vocab(h: &Value, cfg: &Path) -> Result<Option<u64>, ConvertError> {
    let Some(v) = uint(h, &["vocab_size"], cfg)? else {
        return Ok(None);
    };
    let m = uint(h, &["pad_vocab_size_multiple"], cfg)?.unwrap_or(8);
    if m == 0 {
        return Err(bad(cfg, "pad_vocab_size_multiple is 0"));
    }
    v.checked_next_multiple_of(m)
        .map(Some)
        .ok_or_else(|| bad(cfg, format!("vocab_size {v}")))
}

/// `MambaModel.set_gguf_parameters` (it does not call the base).
pub(super) fn params(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let d_model =
        uint(h, &["hidden_size", "d_model"], cfg)?.ok_or_else(|| bad(cfg, "no hidden_size"))?;
    let d_conv = uint(h, &["conv_kernel", "d_conv"], cfg)?
        .filter(|&v| v != 0)
        .unwrap_or(4);
    let d_inner = uint(h, &["intermediate_size", "d_inner"], cfg)?
        .filter(|&v| v != 0)
        .unwrap_or(2 * d_model);
    let d_state = uint(h, &["state_size", "d_state"], cfg)?
        .filter(|&v| v != 0)
        .unwrap_or(16);
    // "auto" (as `transformers` may write it) and 0 mean the default, ceil(d_model / 16).
    let dt_rank = match super::family::find(h, &["time_step_rank", "dt_rank"]) {
        Some(Value::Number(n)) => n
            .as_u64()
            .filter(|&v| v != 0)
            .ok_or_else(|| bad(cfg, format!("time_step_rank {n}")))?,
        Some(Value::String(s)) if s == "auto" => d_model.div_ceil(16),
        None | Some(Value::Null) => d_model.div_ceil(16),
        Some(v) => return Err(bad(cfg, format!("time_step_rank {v}"))),
    };
    let eps = super::family::find(h, &["layer_norm_epsilon", "rms_norm_eps"])
        .and_then(|v| v.as_f64())
        .filter(|&v| v != 0.0)
        .unwrap_or(1e-5);
    if d_inner != 2 * d_model {
        // llama.cpp's converter asserts the block expansion factor of 2.
        return Err(bad(
            cfg,
            format!("intermediate_size {d_inner} is not 2 x hidden_size {d_model}"),
        ));
    }
    if h.get("model_type").and_then(|v| v.as_str()) == Some("falcon_mamba") {
        return Err(bad(
            cfg,
            "Falcon Mamba (RMS norms on B, C and dt) is not supported yet",
        ));
    }
    meta.u32(k("context_length"), 1 << 20);
    meta.u32(k("embedding_length"), u32_of(d_model, "hidden_size", cfg)?);
    meta.u32(k("feed_forward_length"), 0);
    meta.u32(k("attention.head_count"), 0);
    meta.u32(
        k("block_count"),
        u32_of(hp.n_layer, "num_hidden_layers", cfg)?,
    );
    meta.u32(k("ssm.conv_kernel"), u32_of(d_conv, "conv_kernel", cfg)?);
    meta.u32(
        k("ssm.inner_size"),
        u32_of(d_inner, "intermediate_size", cfg)?,
    );
    meta.u32(k("ssm.state_size"), u32_of(d_state, "state_size", cfg)?);
    meta.u32(
        k("ssm.time_step_rank"),
        u32_of(dt_rank, "time_step_rank", cfg)?,
    );
    meta.f32(k("attention.layer_norm_rms_epsilon"), eps as f32);
    meta.bool(k("ssm.dt_b_c_rms"), false);
    meta.u32("general.file_type", hp.file_type);
    Ok(())
}

/// Whether `lm_head` holds exactly the embedding's values (llama.cpp then leaves the output
/// out: the model ties them).
pub(super) fn output_is_embedding(
    ck: &Checkpoint,
    dir: &Path,
    lm_head: &str,
) -> Result<bool, ConvertError> {
    let Some(embd) = ["backbone.embeddings.weight", "backbone.embedding.weight"]
        .into_iter()
        .find(|n| ck.info(n).is_some())
    else {
        return Ok(false);
    };
    let (Some((_, se)), Some((_, so))) = (ck.info(embd), ck.info(lm_head)) else {
        return Ok(false);
    };
    if se != so {
        return Ok(false);
    }
    let open = |n: &str| read::Values::open(ck, n, None).map_err(|e| bad(dir, format!("{n}: {e}")));
    let (e, o) = (open(embd)?, open(lm_head)?);
    let n: usize = se.iter().product();
    // `torch.equal` on the values as converted to f32.
    Ok((0..n).all(|i| e.get(i) == o.get(i)))
}
