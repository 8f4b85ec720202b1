//! InternLM2 (`InternLM2ForCausalLM`, GGUF `internlm2`), converted as llama.cpp's
//! `InternLM2Model` does: the common keys; its own names (`tok_embeddings`, `attention.wo`,
//! `feed_forward.w1/w3/w2`, `attention_norm`, `ffn_norm`, `output`); the fused `wqkv`, stored
//! as groups of `q_per_kv` query heads then one key and one value head, split into Q, K and V
//! with Llama's Q/K row order; a SentencePiece vocabulary (`spm::Style::InternLm2`) with
//! `add_space_prefix` from the model, and `<|im_end|>` as EOS where it is an added token.

use std::path::Path;

use kestrel_gguf::{GgmlType, TensorSpec};
use serde_json::Value;

use super::read::ValueMap;
use super::write::{Planned, Source};
use super::{bad, uint};
use crate::convert::ConvertError;

/// The GGUF name of an InternLM2 tensor (`wqkv` is split by [`plan_wqkv`]).
pub(super) fn gguf_name(name: &str) -> Option<String> {
    match name {
        "model.tok_embeddings.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "output.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let (layer, tail) = super::mamba::layer_of(name, "model.layers.")?;
    let short = match tail {
        "attention_norm.weight" => "attn_norm.weight",
        "attention.wo.weight" => "attn_output.weight",
        "ffn_norm.weight" => "ffn_norm.weight",
        "feed_forward.w1.weight" => "ffn_gate.weight",
        "feed_forward.w3.weight" => "ffn_up.weight",
        "feed_forward.w2.weight" => "ffn_down.weight",
        _ => return None,
    };
    Some(format!("blk.{layer}.{short}"))
}

/// A positive config value `k` that `who`'s fused-QKV split needs.
pub(super) fn positive(h: &Value, k: &str, cfg: &Path, who: &str) -> Result<usize, ConvertError> {
    uint(h, &[k], cfg)?
        .and_then(|v| usize::try_from(v).ok())
        .filter(|&v| v > 0)
        .ok_or_else(|| bad(cfg, format!("{who} needs {k}")))
}

/// Llama's Q/K row order within `heads` heads of `hd` rows: output row `2i + j` of a head is
/// its input row `j · hd/2 + i`.
pub(super) fn permuted(hd: usize, r: usize) -> usize {
    let (i, j) = (r / 2, r % 2);
    j * (hd / 2) + i
}

/// `attention.wqkv` (`[groups · (q_per_kv + 2) · head_dim, hidden]`) as `attn_q`, `attn_k` and
/// `attn_v`, or `None` for other tensors.
pub(super) fn plan_wqkv(
    hf: &str,
    name: &str,
    shape: &[usize],
    h: &Value,
    cfg: &Path,
    out_type: &impl Fn(&str, usize, usize) -> GgmlType,
) -> Result<Option<Vec<Planned>>, ConvertError> {
    let Some((layer, "attention.wqkv.weight")) = super::mamba::layer_of(name, "model.layers.")
    else {
        return Ok(None);
    };
    let hidden = positive(h, "hidden_size", cfg, "InternLM2")?;
    let parts = match shape {
        &[rows, cols] if cols == hidden => wqkv_rows(hf, rows, h, cfg)?,
        _ => {
            return Err(bad(
                cfg,
                format!("{hf:?} has dims {shape:?}, not [_, {hidden}]"),
            ))
        }
    };
    Ok(Some(split_rows(hf, layer, hidden, parts, out_type)))
}

/// Which of `attention.wqkv`'s `rows` rows make `attn_q`, `attn_k` and `attn_v` (groups of
/// `q_per_kv` query heads, a key and a value head; Q and K in Llama's row order). A LoRA
/// adapter's `lora_B` is split by the same rows.
pub(super) fn wqkv_rows(
    hf: &str,
    rows: usize,
    h: &Value,
    cfg: &Path,
) -> Result<[Vec<usize>; 3], ConvertError> {
    let need = |k: &str| positive(h, k, cfg, "InternLM2");
    let (heads, kv, hidden) = (
        need("num_attention_heads")?,
        need("num_key_value_heads")?,
        need("hidden_size")?,
    );
    if heads % kv != 0 || hidden % heads != 0 {
        return Err(bad(
            cfg,
            format!("{heads} heads in {kv} KV groups of a {hidden}-wide model"),
        ));
    }
    let (q_per_kv, hd) = (heads / kv, hidden / heads);
    if hd % 2 != 0 || rows != kv * (q_per_kv + 2) * hd {
        return Err(bad(
            cfg,
            format!("{hf:?} has {rows} rows, not {kv} groups of {q_per_kv} + 2 heads of {hd}"),
        ));
    }
    let group = (q_per_kv + 2) * hd;
    let q: Vec<usize> = (0..heads * hd)
        .map(|r| {
            let (head, t) = (r / hd, permuted(hd, r % hd));
            (head / q_per_kv) * group + (head % q_per_kv) * hd + t
        })
        .collect();
    let k: Vec<usize> = (0..kv * hd)
        .map(|r| (r / hd) * group + q_per_kv * hd + permuted(hd, r % hd))
        .collect();
    let v: Vec<usize> = (0..kv * hd)
        .map(|r| (r / hd) * group + (q_per_kv + 1) * hd + r % hd)
        .collect();
    Ok([q, k, v])
}

/// `attn_q`, `attn_k` and `attn_v` of layer `layer`, each the given rows of `hf` (of `cols`
/// columns).
pub(super) fn split_rows(
    hf: &str,
    layer: usize,
    cols: usize,
    [q, k, v]: [Vec<usize>; 3],
    out_type: &impl Fn(&str, usize, usize) -> GgmlType,
) -> Vec<Planned> {
    [("attn_q", q), ("attn_k", k), ("attn_v", v)]
        .into_iter()
        .map(|(n, rows)| {
            let name = format!("blk.{layer}.{n}.weight");
            Planned {
                spec: TensorSpec {
                    ggml_type: out_type(&name, 2, cols),
                    dims: vec![cols as u64, rows.len() as u64],
                    name,
                },
                cols,
                source: Source::Rows {
                    hf: hf.to_string(),
                    rows,
                    map: ValueMap::Keep,
                },
            }
        })
        .collect()
}

/// The id of `<|im_end|>` where `tokenizer_config.json`'s `added_tokens_decoder` or
/// `tokenizer.json`'s `added_tokens` name it (the latter last, as the converter reads them).
pub(super) fn chat_eos(dir: &Path) -> Result<Option<u32>, ConvertError> {
    let mut id = None;
    let tc = dir.join("tokenizer_config.json");
    if tc.is_file() {
        let c = crate::convert::read_json(&tc)?;
        for (k, data) in c
            .get("added_tokens_decoder")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if data.get("content").and_then(Value::as_str) == Some("<|im_end|>") {
                id = k.parse::<u32>().ok();
            }
        }
    }
    let tj = dir.join("tokenizer.json");
    if tj.is_file() {
        let t = crate::convert::read_json(&tj)?;
        for data in t
            .get("added_tokens")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if data.get("content").and_then(Value::as_str) == Some("<|im_end|>") {
                id = data
                    .get("id")
                    .and_then(Value::as_u64)
                    .and_then(|i| u32::try_from(i).ok());
            }
        }
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::permuted;

    /// Llama's permutation: `reshape(heads, 2, hd/2).swapaxes(1, 2)` of a head's rows.
    #[test]
    fn rows_follow_llamas_permute() {
        let hd = 8;
        let got: Vec<usize> = (0..hd).map(|r| permuted(hd, r)).collect();
        assert_eq!(got, [0, 4, 1, 5, 2, 6, 3, 7]);
    }
}
