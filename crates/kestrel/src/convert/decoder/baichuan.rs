//! Baichuan (`BaichuanForCausalLM`, GGUF `baichuan`), converted as llama.cpp's `BaichuanModel`
//! means to: the common keys, Meta's `tensor_data_layout` tag and the rotary dimension
//! (hidden / heads); Llama's tensor names, except the fused `self_attn.W_pack`
//! (`[3 · hidden, hidden]`: Q, K, V thirds) split into Q and K in Llama's row order and V as
//! is; a SentencePiece vocabulary. (llama.cpp b11434's own converter recurses without end on
//! every other tensor of a Baichuan checkpoint, so there is no file of its to compare with:
//! the conversion is checked by its logits against the Llama it is.)

use std::path::Path;

use kestrel_gguf::GgmlType;
use serde_json::Value;

use super::internlm2::{permuted, positive, split_rows};
use super::write::Planned;
use super::{bad, uint};
use crate::convert::ConvertError;

/// `self_attn.W_pack` as `attn_q`, `attn_k` and `attn_v`, or `None` for other tensors.
pub(super) fn plan_w_pack(
    hf: &str,
    name: &str,
    shape: &[usize],
    h: &Value,
    cfg: &Path,
    out_type: &impl Fn(&str, usize, usize) -> GgmlType,
) -> Result<Option<Vec<Planned>>, ConvertError> {
    let Some((layer, "self_attn.W_pack.weight")) = super::mamba::layer_of(name, "model.layers.")
    else {
        return Ok(None);
    };
    let need = |k: &str| positive(h, k, cfg, "Baichuan");
    let (heads, hidden) = (need("num_attention_heads")?, need("hidden_size")?);
    let kv = uint(h, &["num_key_value_heads"], cfg)?.map_or(heads, |v| v as usize);
    if kv != heads {
        // W_pack holds three equal thirds: grouped queries do not fit it.
        return Err(bad(
            cfg,
            format!("Baichuan with {kv} KV heads of {heads}: W_pack is Q, K, V of one size"),
        ));
    }
    let hd = hidden / heads;
    if hidden % heads != 0 || hd % 2 != 0 || shape != [3 * hidden, hidden] {
        return Err(bad(
            cfg,
            format!("{hf:?} has dims {shape:?}, not 3 × {hidden} rows of {heads} heads"),
        ));
    }
    let part = |n: usize, permute: bool| -> Vec<usize> {
        (0..hidden)
            .map(|r| {
                let t = if permute {
                    permuted(hd, r % hd)
                } else {
                    r % hd
                };
                n * hidden + (r / hd) * hd + t
            })
            .collect()
    };
    Ok(Some(split_rows(
        hf,
        layer,
        hidden,
        [part(0, true), part(1, true), part(2, false)],
        out_type,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::decoder::write::Source;

    #[test]
    fn w_pack_splits_into_llamas_row_order() {
        let h = serde_json::json!({ "num_attention_heads": 2, "hidden_size": 8 });
        let cfg = Path::new("config.json");
        let f32s = |_: &str, _: usize, _: usize| GgmlType::F32;
        let name = "model.layers.3.self_attn.W_pack.weight";
        let plan = plan_w_pack(name, name, &[24, 8], &h, cfg, &f32s)
            .unwrap()
            .unwrap();
        let rows: Vec<(String, Vec<usize>)> = plan
            .into_iter()
            .map(|p| match p.source {
                Source::Rows { rows, .. } => (p.spec.name, rows),
                _ => panic!("not rows"),
            })
            .collect();
        // Heads of 4 rows: Hugging Face's halves (0 1 | 2 3) interleaved as 0 2 1 3.
        assert_eq!(rows[0].0, "blk.3.attn_q.weight");
        assert_eq!(rows[0].1, [0, 2, 1, 3, 4, 6, 5, 7]);
        assert_eq!(rows[1].1, [8, 10, 9, 11, 12, 14, 13, 15]);
        assert_eq!(rows[2].0, "blk.3.attn_v.weight");
        assert_eq!(rows[2].1, (16..24).collect::<Vec<_>>());
        // Not a W_pack: left to the plain path; grouped queries: refused.
        assert!(plan_w_pack(
            "x",
            "model.layers.0.mlp.up_proj.weight",
            &[8, 8],
            &h,
            cfg,
            &f32s
        )
        .unwrap()
        .is_none());
        let gqa = serde_json::json!({ "num_attention_heads": 2, "num_key_value_heads": 1,
            "hidden_size": 8 });
        assert!(plan_w_pack(name, name, &[24, 8], &gqa, cfg, &f32s).is_err());
    }
}
