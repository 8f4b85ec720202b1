//! DeepSeek V2/V3 checkpoints (multi-head latent attention) as llama.cpp's `DeepseekV2Model`
//! converts them: `kv_b_proj` `[heads * (nope + v), kv_lora]` is split per head into
//! `attn_k_b` (each head's key part transposed, `[heads, kv_lora, nope]`) and `attn_v_b`
//! (`[heads, v, kv_lora]`), the layout llama.cpp's absorbed attention multiplies with; the
//! multi-token-prediction layers past `num_hidden_layers` are left out.

use std::path::Path;

use kestrel_gguf::{GgmlType, TensorSpec};
use serde_json::Value;

use super::read::ValueMap;
use super::write::{Planned, Source};
use super::{bad, uint};
use crate::convert::checkpoint::Checkpoint;
use crate::convert::ConvertError;

/// Whether `name` (filtered) belongs to a layer at or past `n_layer` (DeepSeek V3's
/// multi-token-prediction block, which llama.cpp does not convert).
pub(super) fn is_mtp(name: &str, n_layer: u64) -> bool {
    name.strip_prefix("model.layers.")
        .and_then(|r| r.split_once('.'))
        .and_then(|(l, _)| l.parse::<u64>().ok())
        .is_some_and(|l| l >= n_layer)
}

/// `attn_k_b` and `attn_v_b` for `hf` (a `self_attn.kv_b_proj.weight`), or `None` for any other
/// tensor.
pub(super) fn split_kv_b(
    ck: &Checkpoint,
    hf: &str,
    name: &str,
    h: &Value,
    cfg: &Path,
    out_type: &impl Fn(&str, usize, usize) -> GgmlType,
) -> Result<Option<Vec<Planned>>, ConvertError> {
    let Some(prefix) = name.strip_suffix(".self_attn.kv_b_proj.weight") else {
        return Ok(None);
    };
    let layer = prefix
        .strip_prefix("model.layers.")
        .and_then(|l| l.parse::<usize>().ok())
        .ok_or_else(|| bad(cfg, format!("{hf:?} has no layer")))?;
    let need = |key: &str| -> Result<usize, ConvertError> {
        let v = uint(h, &[key], cfg)?.ok_or_else(|| bad(cfg, format!("no {key}")))?;
        usize::try_from(v).map_err(|_| bad(cfg, format!("{key} = {v} is too large")))
    };
    let heads = need("num_key_value_heads")?;
    let v = need("v_head_dim")?;
    let nope = need("qk_nope_head_dim")?;
    let (dtype, shape) = ck
        .info(hf)
        .ok_or_else(|| bad(cfg, format!("{hf} vanished")))?;
    if !dtype.is_float() && !dtype.is_fp8() {
        return Err(bad(cfg, format!("tensor {hf:?} is not a float tensor")));
    }
    let &[rows, rank] = shape else {
        return Err(bad(cfg, format!("{hf:?} has {} dims, not 2", shape.len())));
    };
    let per_head = nope
        .checked_add(v)
        .filter(|p| heads.checked_mul(*p) == Some(rows))
        .ok_or_else(|| {
            bad(
                cfg,
                format!(
                    "{hf:?} has {rows} rows, not num_key_value_heads {heads} x \
                     (qk_nope_head_dim {nope} + v_head_dim {v})"
                ),
            )
        })?;
    let plane = per_head * rank;
    let k_name = format!("blk.{layer}.attn_k_b.weight");
    let v_name = format!("blk.{layer}.attn_v_b.weight");
    let k_type = out_type(&k_name, 3, nope);
    let v_type = out_type(&v_name, 3, rank);
    let spec = |name: String, ggml_type, dims: [usize; 3]| TensorSpec {
        name,
        ggml_type,
        dims: dims.iter().map(|&d| d as u64).collect(),
    };
    Ok(Some(vec![
        // Row (head, c) of k_b holds the head's key rows 0..nope at latent column c.
        Planned {
            spec: spec(k_name, k_type, [nope, rank, heads]),
            cols: nope,
            source: Source::Strided {
                hf: hf.to_string(),
                planes: heads,
                rows: rank,
                s_plane: plane,
                s_row: 1,
                s_col: rank,
                off: 0,
                map: ValueMap::Keep,
            },
        },
        // Row (head, r) of v_b is the head's value row r, as stored after its key rows.
        Planned {
            spec: spec(v_name, v_type, [rank, v, heads]),
            cols: rank,
            source: Source::Strided {
                hf: hf.to_string(),
                planes: heads,
                rows: v,
                s_plane: plane,
                s_row: rank,
                s_col: 1,
                off: nope * rank,
                map: ValueMap::Keep,
            },
        },
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_past_the_model_are_prediction_heads() {
        assert!(is_mtp("model.layers.61.eh_proj.weight", 61));
        assert!(!is_mtp("model.layers.60.mlp.gate.weight", 61));
        assert!(!is_mtp("model.embed_tokens.weight", 61));
    }
}
