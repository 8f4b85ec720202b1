//! Mamba (`MambaForCausalLM`, GGUF `mamba`) and Mamba 2 (`Mamba2ForCausalLM`, GGUF `mamba2`):
//! stacks of selective state-space layers and no attention, converted as llama.cpp's
//! `MambaModel` and `Mamba2Model` do: their own hyperparameters (read from `config.json` as
//! written, not through `transformers`' config class), `backbone.*` tensor names,
//! `A = -exp(A_log)`, the depthwise convolution's middle axis dropped; Mamba 1 leaves out an
//! output matrix equal to the embedding, Mamba 2 stores `A` and `D` as `[n_head, 1]` and its
//! gated norm as `[n_group, d_inner / n_group]`.

use std::path::Path;

use serde_json::Value;

use kestrel_gguf::{GgmlType, TensorSpec};

use super::params::hparams::Hparams;
use super::read::{self, ValueMap};
use super::write::{Planned, Source};
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
    let (layer, tail) = layer_of(name, "backbone.layers.")?;
    let short = match tail {
        "norm.weight" => "attn_norm.weight",
        _ => ssm_short(tail.strip_prefix("mixer.")?)?,
    };
    Some(format!("blk.{layer}.{short}"))
}

/// `(layer, the rest)` of a layer tensor's name under `prefix` (`model.layers.`).
pub(super) fn layer_of<'a>(name: &'a str, prefix: &str) -> Option<(usize, &'a str)> {
    let (layer, tail) = name.strip_prefix(prefix)?.split_once('.')?;
    Some((layer.parse().ok()?, tail))
}

/// The GGUF name (after `blk.{L}.`) of a selective state-space mixer's tensor, by its name
/// under the mixer (`in_proj.weight`, `A_log`, ...): Mamba's, Mamba 2's and the hybrids'.
pub(super) fn ssm_short(tail: &str) -> Option<&'static str> {
    Some(match tail {
        "in_proj.weight" => "ssm_in.weight",
        "conv1d.weight" => "ssm_conv1d.weight",
        "conv1d.bias" => "ssm_conv1d.bias",
        "x_proj.weight" => "ssm_x.weight",
        "dt_proj.weight" => "ssm_dt.weight",
        "dt_proj.bias" => "ssm_dt.bias",
        "A_log" => "ssm_a",
        "D" => "ssm_d",
        "out_proj.weight" => "ssm_out.weight",
        "norm.weight" => "ssm_norm.weight",
        _ => return None,
    })
}

/// A Mamba 2 checkpoint name as llama.cpp reads it: Mamba-Codestral's `model.` prefix dropped,
/// `dt_bias` as the `dt_proj` bias.
pub(super) fn mamba2_name(name: String) -> String {
    let name = match name.strip_prefix("model.") {
        Some(rest) if rest.starts_with("backbone") || rest.starts_with("lm_head") => {
            rest.to_string()
        }
        _ => name,
    };
    match name.strip_suffix(".dt_bias") {
        Some(stem) => format!("{stem}.dt_proj.bias"),
        None => name,
    }
}

/// `vocab_size` rounded up to `pad_vocab_size_multiple` (`multiple` unless given: 8 for Mamba,
/// 16 for Mamba 2), as llama.cpp pads their vocabularies.
pub(super) fn padded_vocab(
    h: &Value,
    cfg: &Path,
    multiple: u64,
) -> Result<Option<u64>, ConvertError> {
    let Some(v) = uint(h, &["vocab_size"], cfg)? else {
        return Ok(None);
    };
    let m = uint(h, &["pad_vocab_size_multiple"], cfg)?.unwrap_or(multiple);
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
    ssm_keys(meta, hp, [d_model, d_conv, d_inner, d_state, dt_rank])?;
    meta.f32(k("attention.layer_norm_rms_epsilon"), eps as f32);
    meta.bool(k("ssm.dt_b_c_rms"), false);
    meta.u32("general.file_type", hp.file_type);
    Ok(())
}

/// The keys both Mamba converters write first: the arbitrary context of 2^20, the width,
/// zero feed-forward and head counts, the layers, then the convolution kernel, inner size,
/// state size and time-step rank (`sizes`, in that order after the width).
fn ssm_keys(meta: &mut Meta, hp: &Hparams, sizes: [u64; 5]) -> Result<(), ConvertError> {
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let [d_model, d_conv, d_inner, d_state, dt_rank] = sizes;
    let v = |x: u64, key: &str| u32_of(x, key, hp.cfg);
    meta.u32(k("context_length"), 1 << 20);
    meta.u32(k("embedding_length"), v(d_model, "hidden_size")?);
    meta.u32(k("feed_forward_length"), 0);
    meta.u32(k("attention.head_count"), 0);
    meta.u32(k("block_count"), v(hp.n_layer, "num_hidden_layers")?);
    meta.u32(k("ssm.conv_kernel"), v(d_conv, "conv_kernel")?);
    meta.u32(k("ssm.inner_size"), v(d_inner, "d_inner")?);
    meta.u32(k("ssm.state_size"), v(d_state, "state_size")?);
    meta.u32(k("ssm.time_step_rank"), v(dt_rank, "time_step_rank")?);
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

/// Mamba 2's sizes: `(d_model, d_inner, n_group)` as `Mamba2Model.__init__` finds them.
pub(super) fn mamba2_sizes(h: &Value, cfg: &Path) -> Result<(u64, u64, u64), ConvertError> {
    let d_model = uint(h, &["hidden_size", "d_model", "dim"], cfg)?
        .ok_or_else(|| bad(cfg, "no hidden_size"))?;
    let expand = uint(h, &["mamba_expand", "expand"], cfg)?
        .filter(|&v| v != 0)
        .unwrap_or(2);
    let d_inner = uint(h, &["mamba_d_ssm", "intermediate_size", "d_inner"], cfg)?
        .filter(|&v| v != 0)
        .unwrap_or(expand * d_model);
    let n_group = uint(h, &["n_groups"], cfg)?
        .filter(|&v| v != 0)
        .unwrap_or(1);
    if d_inner != expand * d_model {
        return Err(bad(
            cfg,
            format!("d_inner {d_inner} is not expand {expand} x hidden_size {d_model}"),
        ));
    }
    if d_inner % n_group != 0 {
        return Err(bad(cfg, format!("d_inner {d_inner} in {n_group} groups")));
    }
    Ok((d_model, d_inner, n_group))
}

/// `Mamba2Model.set_gguf_parameters`.
pub(super) fn mamba2_params(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let (d_model, d_inner, n_group) = mamba2_sizes(h, cfg)?;
    let d_conv = uint(h, &["conv_kernel", "d_conv"], cfg)?
        .filter(|&v| v != 0)
        .unwrap_or(4);
    let d_state = uint(h, &["state_size", "d_state"], cfg)?
        .filter(|&v| v != 0)
        .unwrap_or(128);
    let head_dim = uint(h, &["mamba_d_head", "head_dim"], cfg)?
        .filter(|&v| v != 0)
        .unwrap_or(64);
    if d_inner % head_dim != 0 {
        return Err(bad(
            cfg,
            format!("d_inner {d_inner} in heads of {head_dim}"),
        ));
    }
    let eps = super::family::find(h, &["layer_norm_epsilon", "rms_norm_eps"])
        .and_then(|v| v.as_f64())
        .filter(|&v| v != 0.0)
        .unwrap_or(1e-5);
    ssm_keys(
        meta,
        hp,
        [d_model, d_conv, d_inner, d_state, d_inner / head_dim],
    )?;
    meta.u32(k("ssm.group_count"), u32_of(n_group, "n_groups", cfg)?);
    meta.f32(k("attention.layer_norm_rms_epsilon"), eps as f32);
    meta.u32("general.file_type", hp.file_type);
    Ok(())
}

/// A Mamba 2 mixer's reshaped tensors (Mamba 2's and the hybrids'), or `None` for the others:
/// `A` (from `A_log`) and `D` as `[n_head, 1]` (ggml dims `[1, n_head]`), the gated norm as
/// `[n_group, d_inner / n_group]`, for the model's `(d_inner, n_group)`.
pub(super) fn ssm_plan(
    ck: &Checkpoint,
    dir: &Path,
    hf: &str,
    gguf: &str,
    (d_inner, n_group): (u64, u64),
    cfg: &Path,
) -> Result<Option<Planned>, ConvertError> {
    let (a, d) = (gguf.ends_with(".ssm_a"), gguf.ends_with(".ssm_d"));
    let norm = gguf.ends_with(".ssm_norm.weight");
    if !(a || d || norm) {
        return Ok(None);
    }
    let (_, shape) = ck
        .info(hf)
        .ok_or_else(|| bad(dir, format!("{hf} vanished")))?;
    let n: usize = shape.iter().product();
    let (rows, cols, map) = if norm {
        let g = usize::try_from(n_group).map_err(|_| bad(cfg, "n_groups"))?;
        if u64::try_from(n).ok() != Some(d_inner) {
            return Err(bad(dir, format!("{hf}: {n} values, d_inner {d_inner}")));
        }
        (g, n / g, ValueMap::Keep)
    } else {
        (n, 1, if a { ValueMap::NegExp } else { ValueMap::Keep })
    };
    Ok(Some(Planned {
        spec: TensorSpec {
            name: gguf.to_string(),
            ggml_type: GgmlType::F32,
            dims: vec![cols as u64, rows as u64],
        },
        cols,
        source: Source::Strided {
            hf: hf.to_string(),
            planes: 1,
            rows,
            s_plane: 0,
            s_row: cols,
            s_col: 1,
            off: 0,
            map,
        },
    }))
}
