//! Metadata readers the config and the families share: per-layer values, expert counts, layer
//! flags, sliding-window patterns, RoPE scaling.

use kestrel_gguf::{Metadata, Value};

use super::RopeScaling;
use crate::ArchError;

/// A per-layer field: a scalar for all layers or an array with one value per layer.
pub(crate) fn per_layer(
    md: &Metadata<'_>,
    key: &str,
    n_layer: usize,
) -> Result<Vec<usize>, ArchError> {
    match md.get(key) {
        Some(Value::Array(a)) => {
            let v = a.to_i64_vec().unwrap_or_default();
            if v.len() != n_layer || v.iter().any(|&x| x < 0) {
                return Err(ArchError::Invalid {
                    arch: md.architecture().unwrap_or("?").into(),
                    reason: format!(
                        "{key} has {} entries, expected {n_layer} non-negative",
                        v.len()
                    ),
                });
            }
            Ok(v.into_iter().map(|x| x as usize).collect())
        }
        _ => Ok(vec![md.get_usize(key)?; n_layer]),
    }
}

/// The MoE settings every family shares: `expert_count` and `expert_used_count` (llama.cpp's
/// generic loader), softmax routing, SiLU experts; the family then adjusts the rest.
pub(crate) fn moe_counts(
    md: &Metadata<'_>,
    arch: &str,
) -> Result<Option<(usize, usize)>, ArchError> {
    let n_expert = md
        .opt(&format!("{arch}.expert_count"), |m, k| m.get_usize(k))?
        .unwrap_or(0);
    if n_expert == 0 {
        return Ok(None);
    }
    let key = format!("{arch}.expert_used_count");
    let n_used = match md.get(&key) {
        Some(Value::Array(a)) => {
            let v = a.to_i64_vec().unwrap_or_default();
            let first = v.first().copied().unwrap_or(0);
            if v.iter().any(|&x| x != first) {
                return Err(ArchError::UnsupportedFeature {
                    arch: arch.into(),
                    feature: "a different number of experts per layer".into(),
                });
            }
            usize::try_from(first).unwrap_or(0)
        }
        _ => md.opt(&key, |m, k| m.get_usize(k))?.unwrap_or(0),
    };
    if n_used == 0 || n_used > n_expert || n_expert > 4096 {
        return Err(ArchError::Invalid {
            arch: arch.into(),
            reason: format!("{n_used} of {n_expert} experts used"),
        });
    }
    Ok(Some((n_expert, n_used)))
}

/// A per-layer flag array: llama.cpp's converter writes booleans, older files and
/// test-llama-archs integers (non-zero: set). `None` for any other element type.
pub(crate) fn layer_flags(a: &kestrel_gguf::ArrayView<'_>) -> Option<Vec<bool>> {
    a.iter()
        .map(|x| match x {
            Value::Bool(b) => Some(b),
            x => x.as_integer().map(|i| i != 0),
        })
        .collect()
}

/// Which layers use the sliding window, as llama.cpp's `load_swa_pattern`: the per-layer array
/// `attention.sliding_window_pattern` when the file has one (non-zero: sliding), else every
/// `n_pattern`-th layer is global (`dense_first`: the first of each group, else the last;
/// the scalar key overrides `n_pattern`; 0 means every layer slides).
pub(crate) fn swa_pattern(
    md: &Metadata<'_>,
    arch: &str,
    n_layer: usize,
    n_pattern: usize,
    dense_first: bool,
) -> Result<Vec<bool>, ArchError> {
    let key = format!("{arch}.attention.sliding_window_pattern");
    let n_pattern = match md.get(&key) {
        Some(Value::Array(a)) => {
            let Some(v) = layer_flags(&a) else {
                return Err(ArchError::Invalid {
                    arch: arch.into(),
                    reason: format!("{key} holds neither booleans nor integers"),
                });
            };
            if v.len() < n_layer {
                return Err(ArchError::Invalid {
                    arch: arch.into(),
                    reason: format!("{key} has {} entries for {n_layer} layers", v.len()),
                });
            }
            return Ok(v[..n_layer].to_vec());
        }
        Some(_) => md.get_usize(&key)?,
        None => n_pattern,
    };
    Ok((0..n_layer)
        .map(|il| {
            n_pattern == 0
                || if dense_first {
                    il % n_pattern != 0
                } else {
                    il % n_pattern < n_pattern - 1
                }
        })
        .collect())
}

/// The file's RoPE scaling. `longrope_factors`: the file has LongRoPE's per-pair factor
/// tensors, without which a "longrope" type is refused.
pub(crate) fn rope_scaling(
    md: &Metadata<'_>,
    arch: &str,
    n_ctx_train: usize,
    longrope_factors: bool,
) -> Result<RopeScaling, ArchError> {
    let key = |f: &str| format!("{arch}.rope.scaling.{f}");
    let ty = md.opt(&key("type"), |m, k| m.get_str(k))?.unwrap_or("none");
    let factor = match md.opt(&key("factor"), |m, k| m.get_f32(k))? {
        Some(f) => f,
        // The old key: rope.scale_linear.
        None => md
            .opt(&format!("{arch}.rope.scale_linear"), |m, k| m.get_f32(k))?
            .unwrap_or(1.0),
    };
    // llama.cpp reads a factor of 0 as "no scaling" (`rope_freq_scale_train = ropescale == 0 ?
    // 1 : 1/ropescale`), and its converter writes 0 for it.
    let factor = if factor == 0.0 { 1.0 } else { factor };
    let bad = |reason: String| ArchError::Invalid {
        arch: arch.into(),
        reason,
    };
    if !(factor.is_finite() && factor > 0.0) {
        return Err(bad(format!("rope scaling factor {factor}")));
    }
    let linear = |factor: f32| {
        if factor == 1.0 {
            RopeScaling::None
        } else {
            RopeScaling::Linear { factor }
        }
    };
    Ok(match ty {
        // llama.cpp applies the factor whatever the type says, so "none" with a factor is linear;
        // LongRoPE's per-pair factors are frequency factors (`RopeConfig::freq_factors`).
        "none" | "linear" => linear(factor),
        "longrope" if longrope_factors => linear(factor),
        "longrope" => {
            return Err(bad(
                "rope scaling type \"longrope\" without rope_factors_short/long tensors".into(),
            ))
        }
        "yarn" => RopeScaling::Yarn {
            factor,
            original_context: md
                .opt(&key("original_context_length"), |m, k| m.get_usize(k))?
                .unwrap_or(n_ctx_train),
            ext_factor: md
                .opt(&key("yarn_ext_factor"), |m, k| m.get_f32(k))?
                .unwrap_or(-1.0),
            attn_factor: md
                .opt(&key("attn_factor"), |m, k| m.get_f32(k))?
                .unwrap_or(1.0),
            beta_fast: md
                .opt(&key("yarn_beta_fast"), |m, k| m.get_f32(k))?
                .unwrap_or(32.0),
            beta_slow: md
                .opt(&key("yarn_beta_slow"), |m, k| m.get_f32(k))?
                .unwrap_or(1.0),
        },
        other => {
            return Err(bad(format!(
                "rope scaling type {other:?} is not supported (none, linear, yarn, longrope)"
            )))
        }
    })
}
