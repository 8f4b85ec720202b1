//! `--fuse-qkv`: each layer's separate Q, K and V projections written as one `attn_qkv`
//! (rows of Q, then K, then V; their biases likewise), as `convert_hf_to_gguf.py --fuse-qkv`
//! does (gguf-py's `prepare_qkv_fusion` and `modify_tensors`): a layer fuses when its three
//! weights come from separate checkpoint tensors and its biases are all three or none; the
//! fused tensor takes the place of the last of the three in the file.

use std::collections::BTreeMap;
use std::path::Path;

use super::bad;
use super::family::Family;
use super::write::{Planned, Source};
use crate::convert::ConvertError;

/// Families whose fused files are checked against llama.cpp's (their converters reach
/// gguf-py's fusing `modify_tensors`).
fn checked(family: Family) -> bool {
    family.is_llama()
        || family.is_gemma()
        || matches!(
            family,
            Family::Qwen2
                | Family::Qwen3
                | Family::Qwen2Moe
                | Family::Qwen3Moe
                | Family::Olmo
                | Family::Olmo2
                | Family::Olmoe
                | Family::StarCoder2
                | Family::CommandR
                | Family::Cohere2
                | Family::StableLm
                | Family::Exaone4
                | Family::Glm4
                | Family::Phi2
        )
}

/// `blk.{layer}.attn_{q,k,v}.{weight,bias}`: (layer, 0/1/2 for Q/K/V, bias?).
fn qkv_part(name: &str) -> Option<(usize, usize, bool)> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, tail) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (which, kind) = tail.strip_prefix("attn_")?.split_once('.')?;
    let i = ["q", "k", "v"].iter().position(|w| *w == which)?;
    match kind {
        "weight" => Some((layer, i, false)),
        "bias" => Some((layer, i, true)),
        _ => None,
    }
}

/// Rewrites `plan` with fused Q/K/V where llama.cpp fuses them.
///
/// # Errors
/// A family whose fused output is not checked against llama.cpp's.
pub(super) fn qkv(family: Family, plan: &mut Vec<Planned>, at: &Path) -> Result<(), ConvertError> {
    if !checked(family) {
        return Err(bad(
            at,
            format!(
                "--fuse-qkv is not checked for {} yet (it is for the Llama family, Qwen 2/3 and \
                 their MoE forms, Gemma 1-3, OLMo 1-3, OLMoE, StarCoder 2, Command R/R7B, \
                 StableLM, EXAONE 4, GLM-4 and Phi-2)",
                family.arch()
            ),
        ));
    }
    // Which layers fuse: three separate weights, and biases all three or none.
    let mut seen: BTreeMap<(usize, bool), [bool; 3]> = BTreeMap::new();
    for p in plan.iter() {
        if let Some((l, i, bias)) = qkv_part(&p.spec.name) {
            if matches!(p.source, Source::Tensor { .. }) {
                seen.entry((l, bias)).or_default()[i] = true;
            }
        }
    }
    let full = |l: usize, bias: bool| seen.get(&(l, bias)).is_some_and(|s| s.iter().all(|&x| x));
    let any_bias = |l: usize| seen.get(&(l, true)).is_some_and(|s| s.iter().any(|&x| x));
    let fuses = |l: usize, bias: bool| {
        full(l, false) && (full(l, true) || !any_bias(l)) && (!bias || full(l, true))
    };
    let mut pending: BTreeMap<(usize, bool), [Option<Planned>; 3]> = BTreeMap::new();
    let mut out = Vec::with_capacity(plan.len());
    for p in plan.drain(..) {
        let Some((l, i, bias)) = qkv_part(&p.spec.name).filter(|&(l, _, b)| fuses(l, b)) else {
            out.push(p);
            continue;
        };
        let slot = pending.entry((l, bias)).or_default();
        slot[i] = Some(p);
        if slot.iter().all(Option::is_some) {
            let parts: Vec<Planned> = slot.iter_mut().filter_map(Option::take).collect();
            // Weights: rows stacked (ggml dims [cols, rows]); biases: values appended.
            let n: u64 = parts
                .iter()
                .map(|q| q.spec.dims.last().copied().unwrap_or(1))
                .sum();
            let mut spec = parts[0].spec.clone();
            spec.name = format!("blk.{l}.attn_qkv.{}", if bias { "bias" } else { "weight" });
            let cols = if bias { n as usize } else { parts[0].cols };
            spec.dims = if bias { vec![n] } else { vec![cols as u64, n] };
            out.push(Planned {
                spec,
                cols,
                source: Source::Concat(parts),
            });
        }
    }
    *plan = out;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qkv_names_parse() {
        assert_eq!(qkv_part("blk.3.attn_k.weight"), Some((3, 1, false)));
        assert_eq!(qkv_part("blk.0.attn_v.bias"), Some((0, 2, true)));
        assert_eq!(qkv_part("blk.0.attn_output.weight"), None);
        assert_eq!(qkv_part("blk.0.attn_q_norm.weight"), None);
        assert_eq!(qkv_part("output.weight"), None);
    }
}
