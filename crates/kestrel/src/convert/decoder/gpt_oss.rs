//! gpt-oss checkpoints keep each layer's experts as 3-D tensors: `mlp.experts.gate_up_proj`
//! `[E, hidden, 2 * ff]` (gate and up interleaved column by column) and `down_proj`
//! `[E, ff, hidden]`, both transposed against GGUF, with their biases; OpenAI's release stores
//! them already quantized as MXFP4 (`*_blocks`, `*_scales`). As llama.cpp's `GptOssModel`:
//! MXFP4 experts are repacked byte for byte into GGUF MXFP4 and written first, float experts are
//! transposed and split into `ffn_{gate,up,down}_exps`.

use std::path::Path;

use kestrel_gguf::{GgmlType, TensorSpec};

use super::bad;
use super::read::ValueMap;
use super::write::{Planned, Source};
use crate::convert::checkpoint::Checkpoint;
use crate::convert::safetensors::StDType;
use crate::convert::ConvertError;

/// The layer of `model.layers.{L}.…`.
fn layer(name: &str) -> Option<usize> {
    name.strip_prefix("model.layers.")?
        .split_once('.')?
        .0
        .parse()
        .ok()
}

fn spec(name: String, ggml_type: GgmlType, dims: Vec<usize>) -> TensorSpec {
    TensorSpec {
        name,
        ggml_type,
        dims: dims.into_iter().map(|d| d as u64).collect(),
    }
}

/// The MXFP4 expert tensors, in checkpoint order (llama.cpp writes them before every other
/// tensor, from `generate_extra_tensors`).
pub(super) fn plan_mxfp4(ck: &Checkpoint, dir: &Path) -> Result<Vec<Planned>, ConvertError> {
    let mut plan = Vec::new();
    for scales in ck.names() {
        let (proj, parts): (&str, &[(&str, usize)]) =
            if scales.ends_with("mlp.experts.down_proj_scales") {
                ("down_proj", &[("ffn_down_exps", 0)])
            } else if scales.ends_with("mlp.experts.gate_up_proj_scales") {
                ("gate_up_proj", &[("ffn_gate_exps", 0), ("ffn_up_exps", 1)])
            } else {
                continue;
            };
        let blocks = scales.replace("_scales", "_blocks");
        let l = layer(scales).ok_or_else(|| bad(dir, format!("{scales:?} has no layer")))?;
        let (bt, bshape) = ck
            .info(&blocks)
            .ok_or_else(|| bad(dir, format!("{scales:?} without {blocks:?}")))?;
        let (st, sshape) = ck
            .info(scales)
            .ok_or_else(|| bad(dir, format!("{scales} vanished")))?;
        let &[e, r, nb, 16] = bshape else {
            return Err(bad(
                dir,
                format!("{blocks:?} is {bshape:?}, not [experts, rows, blocks, 16]"),
            ));
        };
        if bt != StDType::U8 || st != StDType::U8 || sshape != [e, r, nb] {
            return Err(bad(
                dir,
                format!("{proj}: MXFP4 blocks {bshape:?} and scales {sshape:?} must be U8 [E, R, B(, 16)]"),
            ));
        }
        let step = parts.len();
        if !r.is_multiple_of(step) {
            return Err(bad(
                dir,
                format!("{blocks:?}: {r} rows do not split in {step}"),
            ));
        }
        for &(gguf, off) in parts {
            plan.push(Planned {
                spec: spec(
                    format!("blk.{l}.{gguf}.weight"),
                    GgmlType::MXFP4,
                    vec![nb * 32, r / step, e],
                ),
                cols: nb * 32,
                source: Source::Mxfp4 {
                    blocks: blocks.clone(),
                    scales: scales.to_string(),
                    planes: e,
                    rows: r / step,
                    in_rows: r,
                    row_step: step,
                    row_off: off,
                },
            });
        }
    }
    Ok(plan)
}

/// gpt-oss's expert tensors other than MXFP4 ones: `Ok(None)` for any other tensor,
/// `Ok(Some(tensors))` (none for the MXFP4 parts already planned) for these.
pub(super) fn plan_expert(
    ck: &Checkpoint,
    dir: &Path,
    hf: &str,
    out_type: &impl Fn(&str, usize, usize) -> GgmlType,
) -> Result<Option<Vec<Planned>>, ConvertError> {
    let Some(rest) = hf.split_once(".mlp.experts.").map(|p| p.1) else {
        return Ok(None);
    };
    if rest.ends_with("_blocks") || rest.ends_with("_scales") {
        return Ok(Some(Vec::new()));
    }
    let l = layer(hf).ok_or_else(|| bad(dir, format!("{hf:?} has no layer")))?;
    let (dt, shape) = ck
        .info(hf)
        .ok_or_else(|| bad(dir, format!("{hf} vanished")))?;
    if !dt.is_float() {
        return Err(bad(dir, format!("tensor {hf:?} is not a float tensor")));
    }
    let name = |g: &str, kind: &str| format!("blk.{l}.{g}.{kind}");
    let strided =
        |name: String, ty, dims: Vec<usize>, [rows, s_plane, s_row, s_col, off]: [usize; 5]| {
            let planes = dims.get(2).copied().unwrap_or(1);
            Planned {
                spec: spec(name, ty, dims.clone()),
                cols: dims[0],
                source: Source::Strided {
                    hf: hf.to_string(),
                    planes,
                    rows,
                    s_plane,
                    s_row,
                    s_col,
                    off,
                    map: ValueMap::Keep,
                },
            }
        };
    let out = match (rest, shape) {
        ("down_proj_bias", &[e, h]) => vec![strided(
            name("ffn_down_exps", "bias"),
            GgmlType::F32,
            vec![h, e],
            [e, 0, h, 1, 0],
        )],
        ("gate_up_proj_bias", &[e, f2]) if f2 % 2 == 0 => {
            [("ffn_gate_exps", 0), ("ffn_up_exps", 1)]
                .iter()
                .map(|&(g, off)| {
                    strided(
                        name(g, "bias"),
                        GgmlType::F32,
                        vec![f2 / 2, e],
                        [e, 0, f2, 2, off],
                    )
                })
                .collect()
        }
        // [E, ff, hidden] -> E matrices of hidden rows x ff columns.
        ("down_proj", &[e, f, h]) => {
            let n = name("ffn_down_exps", "weight");
            let ty = out_type(&n, 3, f);
            vec![strided(n, ty, vec![f, h, e], [h, f * h, 1, h, 0])]
        }
        // [E, hidden, 2 ff] -> gate (even columns) and up (odd), ff rows x hidden columns each.
        ("gate_up_proj", &[e, h, f2]) if f2 % 2 == 0 => [("ffn_gate_exps", 0), ("ffn_up_exps", 1)]
            .iter()
            .map(|&(g, off)| {
                let n = name(g, "weight");
                let ty = out_type(&n, 3, h);
                strided(n, ty, vec![h, f2 / 2, e], [f2 / 2, h * f2, 2, f2, off])
            })
            .collect(),
        _ => {
            return Err(bad(
                dir,
                format!("cannot map gpt-oss expert tensor {hf:?} of shape {shape:?}"),
            ))
        }
    };
    Ok(Some(out))
}
