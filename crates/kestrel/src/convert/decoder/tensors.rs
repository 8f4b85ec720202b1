//! The tensor plan of a decoder conversion: each checkpoint tensor's GGUF name, type and dims,
//! and where its values come from (renamed, split, stacked, permuted or mapped as llama.cpp's
//! converter does for the family).

use std::path::Path;

use kestrel_gguf::{GgmlType, TensorSpec};
use serde_json::Value;

use super::experts::Experts;
use super::write::{Planned, Source};
use super::{
    bad, baichuan, deci, falcon_h1, gpt_oss, granite_hybrid, granite_moe, head_norms, internlm2,
    jamba, mamba, mla, names, nemotron_h, openelm, read, uint, Family,
};
use crate::convert::checkpoint::Checkpoint;
use crate::convert::{ConvertError, OutType};

/// What planning reads of the checkpoint and its configuration.
#[derive(Clone, Copy)]
pub(super) struct Inputs<'a> {
    pub family: Family,
    pub arch: &'a str,
    /// The checkpoint's folder and its `config.json`, for errors.
    pub dir: &'a Path,
    pub cfg: &'a Path,
    /// `config.json` with `text_config` folded on top and the defaults applied.
    pub h: &'a Value,
    pub ck: &'a Checkpoint,
    pub outtype: OutType,
    /// FP8 weights with their scales (`*_scale_inv`).
    pub fp8: bool,
    pub n_layer: u64,
    pub n_head: Option<u64>,
    pub n_head_kv: Option<u64>,
    /// The vocabulary's length: Gemma 3 trims its embedding to it.
    pub n_tokens: usize,
}

/// The type a tensor is written as: 1-D tensors, norms, biases, the expert routers, state-space
/// convolutions and learned positions stay F32, as llama.cpp's converter keeps them.
pub(super) fn out_type(outtype: OutType, name: &str, n_dims: usize, cols: usize) -> GgmlType {
    if n_dims <= 1
        || name.ends_with("_norm.weight")
        || !name.ends_with(".weight")
        || name.ends_with(".ffn_gate_inp.weight")
        || name.ends_with(".ffn_gate_inp_shexp.weight")
        || name.ends_with(".ssm_conv1d.weight")
        || name.ends_with(".shortconv.conv.weight")
        || name == "position_embd.weight"
    {
        return GgmlType::F32;
    }
    quantized_type(outtype, cols)
}

/// The type `--outtype` gives a matrix llama.cpp does not keep in F32.
pub(super) fn quantized_type(outtype: OutType, cols: usize) -> GgmlType {
    match outtype {
        OutType::F32 => GgmlType::F32,
        OutType::F16 => GgmlType::F16,
        OutType::BF16 => GgmlType::BF16,
        // gguf-py falls back to F16 for rows that are not whole Q8_0 blocks.
        OutType::Q8_0 if cols.is_multiple_of(32) => GgmlType::Q8_0,
        // Resolved by `convert_hf` before this runs; F16 is its all-F32 answer.
        OutType::Q8_0 | OutType::Auto => GgmlType::F16,
    }
}

/// Plan every tensor the checkpoint holds, after whatever `plan` has already.
pub(super) fn plan(x: &Inputs, plan: &mut Vec<Planned>) -> Result<(), ConvertError> {
    let Inputs {
        family,
        arch,
        dir,
        cfg: cfg_path,
        h,
        ck,
        outtype,
        fp8,
        n_layer,
        n_head,
        n_head_kv,
        n_tokens,
    } = *x;
    let out_type = |name: &str, n_dims: usize, cols: usize| out_type(outtype, name, n_dims, cols);
    let openelm_layers = if family == Family::OpenElm {
        Some(openelm::layers(h, n_layer, cfg_path)?)
    } else {
        None
    };
    let deci_layers = if family == Family::Deci {
        deci::head_layers(h, n_layer, cfg_path)?
    } else {
        None
    };
    if family == Family::GptOss {
        plan.extend(gpt_oss::plan_mxfp4(ck, dir)?);
    }
    // The Mamba 2 mixers' inner size and groups (their norm and A/D reshapes), and whether
    // a Granite hybrid has experts (else its shared MLP is the feed-forward).
    let ssm_sizes = match family {
        Family::Mamba2 => Some(mamba::mamba2_sizes(h, cfg_path).map(|(_, i, g)| (i, g))?),
        Family::GraniteHybrid => Some(granite_hybrid::sizes(h, cfg_path)?),
        Family::FalconH1 => Some(falcon_h1::sizes(h, cfg_path)?),
        Family::NemotronH => Some(nemotron_h::sizes(h, cfg_path)?),
        _ => None,
    };
    let hybrid_dense = family == Family::GraniteHybrid
        && uint(h, &["num_local_experts"], cfg_path)?.is_none_or(|n| n == 0);
    let mut experts = Experts::new(family, h, cfg_path)?;
    let mtp_bid = if family == Family::NemotronH {
        nemotron_h::mtp_block(h, n_layer, cfg_path)?
    } else {
        None
    };
    let mut head_norms = head_norms::HeadNorms::new(n_head, n_head_kv, cfg_path);
    for hf in ck.names() {
        if fp8 {
            // The scales are read with their weights; activation scales are unused.
            if hf.ends_with("_scale_inv") || hf.ends_with("activation_scale") {
                continue;
            }
            if hf.ends_with(".qscale_weight") || hf.ends_with(".qscale_act") {
                return Err(bad(
                    dir,
                    format!("{hf:?}: FP8 in Mistral's own layout is not supported yet"),
                ));
            }
        }
        let Some(mut name) = names::filter_name(hf) else {
            continue;
        };
        if let Some(bid) = mtp_bid {
            name = nemotron_h::mtp_name(name, bid);
        }
        if ssm_sizes.is_some() {
            name = mamba::mamba2_name(name);
        }
        if family == Family::Jamba {
            name = jamba::name(name, h);
        }
        if family == Family::GptOss {
            if let Some(p) = gpt_oss::plan_expert(ck, dir, hf, &out_type)? {
                plan.extend(p);
                continue;
            }
        }
        if matches!(family, Family::GptOss | Family::GraniteSwa)
            && name.ends_with(".self_attn.sinks")
        {
            name.push_str(".weight");
        }
        if family == Family::Mamba
            && name == "lm_head.weight"
            && mamba::output_is_embedding(ck, dir, hf)?
        {
            continue;
        }
        if family == Family::HunyuanDense
            && name == "lm_head.weight"
            && h.get("tie_word_embeddings") == Some(&Value::Bool(true))
        {
            // HunYuanModel skips a tied output.
            continue;
        }
        if family.drops_lm_head() && name == "lm_head.weight" {
            continue;
        }
        if family == Family::Cohere2 && name.ends_with(".bias") {
            // llama.cpp runs Command R7B without biases; its checkpoints carry zero ones.
            if !all_zero(ck, dir, hf)? {
                return Err(bad(dir, format!("bias {hf:?} is not zero")));
            }
            continue;
        }
        if family == Family::DeepSeek2 {
            let tied = h.get("tie_word_embeddings") == Some(&Value::Bool(true));
            if mla::is_mtp(&name, n_layer) || (tied && name == "lm_head.weight") {
                continue;
            }
            if let Some(split) = mla::split_kv_b(ck, hf, &name, h, cfg_path, &out_type)? {
                plan.extend(split);
                continue;
            }
        }
        if matches!(family, Family::GraniteMoe | Family::GraniteHybrid) {
            if let Some(parts) = granite_moe::plan(ck, hf, &name, h, cfg_path, &out_type)? {
                plan.extend(parts);
                continue;
            }
        }
        if let Some(stacked) = experts.take(ck, hf, &name, &out_type)? {
            plan.extend(stacked);
            continue;
        }
        if family == Family::StableLm {
            if let Some(stacked) = head_norms.take(ck, hf, &name)? {
                plan.extend(stacked);
                continue;
            }
        }
        let (dtype, shape) = ck
            .info(hf)
            .ok_or_else(|| bad(dir, format!("{hf} vanished")))?;
        if family == Family::InternLm2 {
            if let Some(p) = internlm2::plan_wqkv(hf, &name, shape, h, cfg_path, &out_type)? {
                plan.extend(p);
                continue;
            }
        }
        if let Some(layers) = &openelm_layers {
            if let Some(p) = openelm::plan_proj_1(hf, shape, layers, cfg_path, &out_type)? {
                plan.extend(p);
                continue;
            }
        }
        if family == Family::Baichuan {
            if let Some(p) = baichuan::plan_w_pack(hf, &name, shape, h, cfg_path, &out_type)? {
                plan.extend(p);
                continue;
            }
        }
        if !(dtype.is_float() || (fp8 && dtype.is_fp8())) {
            return Err(bad(dir, format!("tensor {hf:?} is not a float tensor")));
        }
        let mut gguf = names::gguf_name(family, &name)
            .ok_or_else(|| bad(dir, format!("cannot map tensor {hf:?} for {arch}")))?;
        if hybrid_dense {
            // Without experts the shared MLP is the layer's feed-forward (GraniteMoeModel).
            if let Some(stem) = gguf.strip_suffix(".ffn_down_shexp.weight") {
                gguf = format!("{stem}.ffn_down.weight");
            }
        }
        if let Some(sizes) = ssm_sizes {
            if let Some(p) = mamba::ssm_plan(ck, dir, hf, &gguf, sizes, cfg_path)? {
                plan.push(p);
                continue;
            }
        }
        // The state-space and short-convolution families' depthwise convolutions
        // `[channels, 1, taps]`: the middle axis dropped.
        let squeezed;
        let mamba =
            ssm_sizes.is_some() || matches!(family, Family::Mamba | Family::Lfm2 | Family::Jamba);
        let shape = if mamba && shape.len() == 3 && shape[1] == 1 {
            squeezed = vec![shape[0], shape[2]];
            &squeezed
        } else {
            shape
        };
        if shape.len() > 2 {
            return Err(bad(dir, format!("tensor {hf:?} has {} dims", shape.len())));
        }
        if names::is_conv1d(family, &name) && shape.len() == 2 {
            // `[in, out]` read column by column: rows of `in` values, `out` of them.
            let (cols, rows) = (shape[0], shape[1]);
            let ty = out_type(&gguf, 2, cols);
            plan.push(Planned {
                spec: TensorSpec {
                    name: gguf,
                    ggml_type: ty,
                    dims: vec![cols as u64, rows as u64],
                },
                cols,
                source: Source::Strided {
                    hf: hf.to_string(),
                    planes: 1,
                    rows,
                    s_plane: 0,
                    s_row: 1,
                    s_col: rows,
                    off: 0,
                    map: read::ValueMap::Keep,
                },
            });
            continue;
        }
        let cols = shape.last().copied().unwrap_or(1);
        let mut rows = if shape.len() == 2 { shape[0] } else { 1 };
        let mut permute_heads = None;
        if family.undo_permute() {
            // DeciModel: each layer's own heads and KV heads.
            let (n_head, n_head_kv) = match (
                &deci_layers,
                crate::convert::layer_tensor(&name, "model.layers."),
            ) {
                (Some(l), Some((il, _, _))) => match l.get(il) {
                    Some(&(nh, kv)) => (Some(nh), Some(kv)),
                    None => (n_head, n_head_kv),
                },
                _ => (n_head, n_head_kv),
            };
            if let Some(hd) = rotary_heads(family, &name, n_head, n_head_kv) {
                permute_heads = Some(rotary_rows(hd, shape[0], hf, dir)?);
            }
        }
        if family == Family::Gemma3 && name.ends_with("embed_tokens.weight") {
            rows = rows.min(n_tokens);
        }
        let dims: Vec<u64> = if shape.len() == 2 {
            vec![cols as u64, rows as u64]
        } else {
            vec![cols as u64]
        };
        // llama.cpp keeps routers F32 by matching the name against the block id it read from
        // the checkpoint's name; the multi-token-prediction head's router (`mtp.layers.1`,
        // written as the last block) does not match, so it gets `--outtype`'s type.
        let ty = if mtp_bid.is_some() && hf.starts_with("mtp.") && shape.len() == 2 {
            quantized_type(outtype, cols)
        } else {
            out_type(&gguf, shape.len(), cols)
        };
        plan.push(Planned {
            spec: TensorSpec {
                name: gguf,
                ggml_type: ty,
                dims,
            },
            cols,
            source: Source::Tensor {
                hf: hf.to_string(),
                rows,
                permute_heads,
                map: if family == Family::FalconH1 {
                    falcon_h1::value_map(&name, h, cfg_path)?
                } else if family.norm_shift(&name) {
                    read::ValueMap::PlusOne
                } else if (family == Family::Mamba && name.ends_with(".mixer.A_log"))
                    || (family == Family::Jamba && name.ends_with(".mamba.A_log"))
                {
                    read::ValueMap::NegExp
                } else {
                    read::ValueMap::Keep
                },
            },
        });
    }
    experts.finish()?;
    head_norms.finish()?;
    Ok(())
}

/// Whether every value of `hf` is zero.
fn all_zero(ck: &Checkpoint, dir: &Path, hf: &str) -> Result<bool, ConvertError> {
    let v = read::Values::open(ck, hf, None).map_err(|e| bad(dir, format!("{hf}: {e}")))?;
    let n = ck.info(hf).map_or(0, |(_, s)| s.iter().product::<usize>());
    Ok((0..n).all(|i| v.get(i) == 0.0))
}

/// How many heads a Q or K matrix (or bias) named `name` is reordered over, as llama.cpp's
/// converter undoes Hugging Face's rotary permutation for `family`; None for other tensors.
pub(super) fn rotary_heads(
    family: Family,
    name: &str,
    n_head: Option<u64>,
    n_head_kv: Option<u64>,
) -> Option<u64> {
    if !family.undo_permute() {
        None
    } else if name.ends_with("q_proj.weight") || name.ends_with("q_proj.bias") {
        n_head
    } else if family == Family::Xverse && name.ends_with("k_proj.weight") {
        // XverseModel's own permute: with grouped queries, heads / KV heads "heads".
        match (n_head, n_head_kv) {
            (Some(h), Some(kv)) if kv > 0 && kv != h => Some(h / kv),
            _ => n_head,
        }
    } else if name.ends_with("k_proj.weight") || name.ends_with("k_proj.bias") {
        n_head_kv.or(n_head)
    } else {
        None
    }
}

/// `heads` as a row-reordering count for tensor `what` of `rows` rows: refused unless the rows
/// split into that many heads of rotary pairs.
pub(super) fn rotary_rows(
    heads: u64,
    rows: usize,
    what: &str,
    at: &std::path::Path,
) -> Result<usize, ConvertError> {
    let hd = heads as usize;
    if hd == 0 || !rows.is_multiple_of(2 * hd) {
        return Err(bad(
            at,
            format!("tensor {what:?}: {rows} rows do not split into {hd} heads of rotary pairs"),
        ));
    }
    Ok(hd)
}
