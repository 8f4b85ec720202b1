//! Apple OpenELM (`OpenELMForCausalLM`, GGUF `openelm`), converted as llama.cpp's
//! `OpenELMModel` does: its own keys (`model_dim`, per-layer `num_query_heads` and
//! `num_kv_heads`, feed-forward sizes from `ffn_multipliers` made divisible by
//! `ffn_dim_divisor`, `rope_freq_constant`, an RMS epsilon of 1e-6); its own tensor names under
//! `transformer.`, the fused `ffn.proj_1` split into gate (the first rows) and up; a
//! SentencePiece vocabulary. OpenELM's repositories ship no tokenizer: llama.cpp then takes its
//! own copy of Llama 2's, which kestrel does not carry, so a checkpoint without
//! `tokenizer.model` is refused.

use std::path::Path;

use kestrel_gguf::{GgmlType, TensorSpec};
use serde_json::Value;

use super::params::hparams::Hparams;
use super::read::ValueMap;
use super::write::{Planned, Source};
use super::{bad, u32_of, uint};
use crate::convert::meta::Meta;
use crate::convert::ConvertError;

/// OpenELM's `make_divisible`: `v` to the nearest multiple of `divisor` (at least `divisor`),
/// one more step when rounding lost over 10%.
fn make_divisible(v: f64, divisor: u64) -> u64 {
    let d = divisor as f64;
    let mut n = ((v + d / 2.0).trunc() as u64 / divisor * divisor).max(divisor);
    if (n as f64) < 0.9 * v {
        n += divisor;
    }
    n
}

/// A per-layer list of `key` (numbers), one per layer.
fn list(h: &Value, key: &str, n_layer: u64, cfg: &Path) -> Result<Vec<f64>, ConvertError> {
    let a = h
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| bad(cfg, format!("OpenELM needs the list {key}")))?;
    if a.len() as u64 != n_layer {
        return Err(bad(
            cfg,
            format!("{key} has {} entries for {n_layer} layers", a.len()),
        ));
    }
    a.iter()
        .map(|v| v.as_f64().filter(|x| x.is_finite() && *x >= 0.0))
        .collect::<Option<Vec<f64>>>()
        .ok_or_else(|| bad(cfg, format!("{key} holds a value that is not a size")))
}

/// (heads, KV heads, feed-forward size) of each layer.
pub(super) fn layers(
    h: &Value,
    n_layer: u64,
    cfg: &Path,
) -> Result<Vec<(u64, u64, u64)>, ConvertError> {
    let need = |k: &str| {
        uint(h, &[k], cfg)?
            .filter(|&v| v > 0)
            .ok_or_else(|| bad(cfg, format!("OpenELM needs {k}")))
    };
    let (n_embd, divisor) = (need("model_dim")?, need("ffn_dim_divisor")?);
    let heads = list(h, "num_query_heads", n_layer, cfg)?;
    let kv = list(h, "num_kv_heads", n_layer, cfg)?;
    let mult = list(h, "ffn_multipliers", n_layer, cfg)?;
    let mut out = Vec::with_capacity(heads.len());
    for il in 0..heads.len() {
        let ff = mult[il] * n_embd as f64;
        if ff > 1e12 {
            return Err(bad(
                cfg,
                format!("layer {il}: ffn_multipliers {}", mult[il]),
            ));
        }
        out.push((heads[il] as u64, kv[il] as u64, make_divisible(ff, divisor)));
    }
    Ok(out)
}

/// `OpenELMModel.set_gguf_parameters`.
pub(super) fn params(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let (h, cfg) = (hp.h, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let layers = layers(h, hp.n_layer, cfg)?;
    let need = |key: &str| uint(h, &[key], cfg)?.ok_or_else(|| bad(cfg, format!("no {key}")));
    let i32s = |f: fn(&(u64, u64, u64)) -> u64| -> Result<Vec<i32>, ConvertError> {
        layers
            .iter()
            .map(|l| i32::try_from(f(l)).map_err(|_| bad(cfg, "a per-layer size over 2^31")))
            .collect()
    };
    meta.u32(
        k("block_count"),
        u32_of(hp.n_layer, "num_transformer_layers", cfg)?,
    );
    meta.u32(
        k("context_length"),
        u32_of(need("max_context_length")?, "max_context_length", cfg)?,
    );
    meta.u32(
        k("embedding_length"),
        u32_of(need("model_dim")?, "model_dim", cfg)?,
    );
    meta.i32s(k("feed_forward_length"), &i32s(|l| l.2)?);
    meta.i32s(k("attention.head_count"), &i32s(|l| l.0)?);
    meta.i32s(k("attention.head_count_kv"), &i32s(|l| l.1)?);
    let theta = h
        .get("rope_freq_constant")
        .and_then(Value::as_f64)
        .ok_or_else(|| bad(cfg, "no rope_freq_constant"))?;
    meta.f32(k("rope.freq_base"), theta as f32);
    meta.f32(k("attention.layer_norm_rms_epsilon"), 1e-6);
    let head_dim = u32_of(need("head_dim")?, "head_dim", cfg)?;
    meta.u32(k("rope.dimension_count"), head_dim);
    meta.u32(k("attention.key_length"), head_dim);
    meta.u32(k("attention.value_length"), head_dim);
    meta.u32("general.file_type", hp.file_type);
    Ok(())
}

/// The GGUF name of an OpenELM tensor (`ffn.proj_1` is split by [`plan_proj_1`]).
pub(super) fn gguf_name(name: &str) -> Option<String> {
    match name {
        "transformer.token_embeddings.weight" => return Some("token_embd.weight".into()),
        "transformer.norm.weight" => return Some("output_norm.weight".into()),
        _ => {}
    }
    let (layer, tail) = super::mamba::layer_of(name, "transformer.layers.")?;
    let short = match tail {
        "attn_norm.weight" => "attn_norm.weight",
        "attn.qkv_proj.weight" => "attn_qkv.weight",
        "attn.q_norm.weight" => "attn_q_norm.weight",
        "attn.k_norm.weight" => "attn_k_norm.weight",
        "attn.out_proj.weight" => "attn_output.weight",
        "ffn_norm.weight" => "ffn_norm.weight",
        "ffn.proj_2.weight" => "ffn_down.weight",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}"))
}

/// `ffn.proj_1` (`[2 · ff, hidden]`) as `ffn_gate` (its first `ff` rows) and `ffn_up`, or
/// `None` for other tensors.
pub(super) fn plan_proj_1(
    hf: &str,
    shape: &[usize],
    layers: &[(u64, u64, u64)],
    cfg: &Path,
    out_type: &impl Fn(&str, usize, usize) -> GgmlType,
) -> Result<Option<Vec<Planned>>, ConvertError> {
    let Some((layer, "ffn.proj_1.weight")) = super::mamba::layer_of(hf, "transformer.layers.")
    else {
        return Ok(None);
    };
    let ff = layers.get(layer).map_or(0, |l| l.2 as usize);
    let [rows, cols] = shape else {
        return Err(bad(cfg, format!("{hf:?} has dims {shape:?}")));
    };
    // llama.cpp slices `[:ff]` and `[ff:]` whatever the rows: the two halves must be `ff` each.
    if *rows != 2 * ff {
        return Err(bad(
            cfg,
            format!("{hf:?} has {rows} rows, not 2 × the feed-forward size {ff}"),
        ));
    }
    let cols = *cols;
    Ok(Some(
        [("ffn_gate", 0), ("ffn_up", ff)]
            .into_iter()
            .map(|(n, first)| {
                let name = format!("blk.{layer}.{n}.weight");
                Planned {
                    spec: TensorSpec {
                        ggml_type: out_type(&name, 2, cols),
                        dims: vec![cols as u64, ff as u64],
                        name,
                    },
                    cols,
                    source: Source::Rows {
                        hf: hf.to_string(),
                        rows: (first..first + ff).collect(),
                        map: ValueMap::Keep,
                    },
                }
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OpenELM-270M's feed-forward sizes (model_dim 1280, divisor 256, multipliers 0.5 to 4).
    #[test]
    fn feed_forward_sizes_are_openelms() {
        assert_eq!(make_divisible(0.5 * 1280.0, 256), 768);
        assert_eq!(make_divisible(4.0 * 1280.0, 256), 5120);
        assert_eq!(make_divisible(1.0 * 1280.0, 256), 1280);
        assert_eq!(make_divisible(10.0, 256), 256);
        // Rounding down by more than 10% adds a step: 300 -> 256 is 85%.
        assert_eq!(make_divisible(300.0, 256), 512);
    }
}
