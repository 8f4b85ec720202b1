//! Granite MoE's fused feed-forward tensors, split as llama.cpp's `GraniteMoeModel` splits
//! them: each layer's experts are two 3-D tensors (`block_sparse_moe.input_linear`,
//! `[experts, 2 · ff, hidden]`, gate rows then up rows; `output_linear`, `[experts, hidden,
//! ff]`), and GraniteMoeShared's shared expert one fused `[2 · ff, hidden]` matrix
//! (`shared_mlp.input_linear`) beside its down matrix.

use kestrel_gguf::{GgmlType, TensorSpec};
use serde_json::Value;

use super::read::ValueMap;
use super::write::{Planned, Source};
use super::{bad, uint};
use crate::convert::checkpoint::Checkpoint;
use crate::convert::ConvertError;

/// A tensor read with strides: `planes` × `rows` rows of `cols` values, row `(p, r)` from
/// `off + p * s_plane + r * cols` (row-major within each plane).
fn part(
    hf: &str,
    name: String,
    ty: GgmlType,
    [planes, rows, cols]: [usize; 3],
    s_plane: usize,
    off: usize,
) -> Planned {
    let mut dims = vec![cols as u64, rows as u64];
    if planes > 1 {
        dims.push(planes as u64);
    }
    Planned {
        spec: TensorSpec {
            name,
            ggml_type: ty,
            dims,
        },
        cols,
        source: Source::Strided {
            hf: hf.to_string(),
            planes,
            rows,
            s_plane,
            s_row: cols,
            s_col: 1,
            off,
            map: ValueMap::Keep,
        },
    }
}

/// The GGUF tensors of `hf` (filtered name `name`) when it is one of the fused tensors,
/// `None` otherwise. `h` is the config (`intermediate_size`, `shared_intermediate_size`,
/// `num_local_experts`).
pub(super) fn plan(
    ck: &Checkpoint,
    hf: &str,
    name: &str,
    h: &Value,
    cfg: &std::path::Path,
    out_type: &impl Fn(&str, usize, usize) -> GgmlType,
) -> Result<Option<Vec<Planned>>, ConvertError> {
    let Some(rest) = name.strip_prefix("model.layers.") else {
        return Ok(None);
    };
    let Some((layer, tail)) = rest.split_once('.') else {
        return Ok(None);
    };
    let Ok(layer) = layer.parse::<usize>() else {
        return Ok(None);
    };
    let kind = match tail {
        "block_sparse_moe.input_linear.weight" => 0,
        "block_sparse_moe.output_linear.weight" => 1,
        "shared_mlp.input_linear.weight" => 2,
        _ => return Ok(None),
    };
    let (dtype, shape) = ck
        .info(hf)
        .ok_or_else(|| bad(cfg, format!("{hf} vanished")))?;
    if !dtype.is_float() {
        return Err(bad(cfg, format!("tensor {hf:?} is not a float tensor")));
    }
    let blk = |s: &str| format!("blk.{layer}.{s}.weight");
    let ff_of = |key: &str| -> Result<usize, ConvertError> {
        uint(h, &[key], cfg)?
            .map(|v| usize::try_from(v).unwrap_or(usize::MAX))
            .ok_or_else(|| bad(cfg, format!("no {key}")))
    };
    let has_experts = uint(h, &["num_local_experts"], cfg)?.is_some_and(|n| n > 0);
    let out = match (kind, shape) {
        (0, &[e, rows, hid]) => {
            let ff = ff_of("intermediate_size")?;
            if rows != 2 * ff {
                return Err(bad(
                    cfg,
                    format!("{hf:?} has {rows} rows, not 2 x intermediate_size {ff}"),
                ));
            }
            ["ffn_gate_exps", "ffn_up_exps"]
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let ty = out_type(&blk(n), 3, hid);
                    part(hf, blk(n), ty, [e, ff, hid], rows * hid, i * ff * hid)
                })
                .collect()
        }
        (1, &[e, hid, ff]) => {
            let n = blk("ffn_down_exps");
            let ty = out_type(&n, 3, ff);
            vec![part(hf, n, ty, [e, hid, ff], hid * ff, 0)]
        }
        (2, &[rows, hid]) => {
            let ff = ff_of("shared_intermediate_size")?;
            if rows != 2 * ff {
                return Err(bad(
                    cfg,
                    format!("{hf:?} has {rows} rows, not 2 x shared_intermediate_size {ff}"),
                ));
            }
            let names = if has_experts {
                ["ffn_gate_shexp", "ffn_up_shexp"]
            } else {
                ["ffn_gate", "ffn_up"]
            };
            names
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let ty = out_type(&blk(n), 2, hid);
                    part(hf, blk(n), ty, [1, ff, hid], 0, i * ff * hid)
                })
                .collect()
        }
        _ => {
            return Err(bad(
                cfg,
                format!("{hf:?} has dims {shape:?}, not those of a Granite MoE tensor"),
            ))
        }
    };
    Ok(Some(out))
}
