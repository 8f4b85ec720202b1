//! Hunyuan dense (`HunYuanDenseV1ForCausalLM`, GGUF `hunyuan-dense`), converted as llama.cpp's
//! `HunYuanModel` does: the common keys (a `num_experts` of 1 left out), then NTK-alpha RoPE
//! folded into the base (`rope_theta · alpha^(d / (d - 2))`, scaling type none, factor 1; the
//! "dynamic" releases' context of 256Ki), per-head Q/K norms under `query_layernorm` /
//! `key_layernorm`, a tied output left out, and the first of `generation_config.json`'s EOS
//! ids as the end of turn (its `eod_token_id` as EOS is lost on the way, see `specials`).

use std::path::Path;

use serde_json::Value;

use super::params::hparams::Hparams;
use super::{bad, u32_of, uint};
use crate::convert::meta::Meta;
use crate::convert::ConvertError;

/// The RoPE keys `HunYuanModel.set_gguf_parameters` adds after the common ones.
pub(super) fn params(meta: &mut Meta, hp: &Hparams) -> Result<(), ConvertError> {
    let (h, rp, cfg) = (hp.h, hp.rp, hp.cfg);
    let k = |s: &str| format!("{}.{s}", hp.arch);
    let rope_type = rp.get("rope_type").and_then(Value::as_str);
    if !matches!(rope_type, Some("dynamic" | "xdrope")) {
        return Ok(());
    }
    let f = |key: &str, default: f64| rp.get(key).and_then(Value::as_f64).unwrap_or(default);
    let (alpha, base) = (f("alpha", 50.0), f("rope_theta", 10000.0));
    let dim = uint(h, &["head_dim"], cfg)?
        .filter(|&d| d > 2)
        .ok_or_else(|| bad(cfg, "Hunyuan's NTK-alpha RoPE needs a head_dim above 2"))?;
    let scaled = base * alpha.powf(dim as f64 / (dim - 2) as f64);
    meta.f32(k("rope.freq_base"), scaled as f32);
    meta.str(k("rope.scaling.type"), "none");
    meta.f32(k("rope.scaling.factor"), 1.0);
    if rope_type == Some("dynamic") {
        // The converter's own assumptions about these releases; it stops otherwise.
        let ctx = uint(h, &["max_position_embeddings"], cfg)?;
        if base != 10000.0 || !matches!(ctx, Some(32768 | 262144)) {
            return Err(bad(
                cfg,
                format!(
                    "Hunyuan dynamic RoPE with rope_theta {base} and max_position_embeddings \
                     {ctx:?}: llama.cpp's converter knows only 10000 with 32Ki or 256Ki"
                ),
            ));
        }
        let full = u32_of(256 * 1024, "context length", cfg)?;
        meta.u32(k("rope.scaling.original_context_length"), full);
        meta.u32(k("context_length"), full);
    }
    Ok(())
}

/// The special-token fixes of `HunYuanModel.set_vocab` (after the tokenizer's own).
pub(super) fn specials(
    meta: &mut Meta,
    h: &Value,
    dir: &Path,
    cfg: &Path,
) -> Result<(), ConvertError> {
    if h.get("pad_token_id")
        .and_then(Value::as_i64)
        .is_some_and(|p| p < 0)
    {
        return Err(bad(
            cfg,
            "a negative pad_token_id (HunyuanVL's OCR configs) is not supported yet",
        ));
    }
    // `eod_token_id` is not applied: the converter reads it from `transformers`' config class,
    // which does not keep it (4.57), so llama.cpp's files keep the tokenizer's EOS.
    let gen = dir.join("generation_config.json");
    if gen.is_file() {
        let g = crate::convert::read_json(&gen)?;
        if let Some(ids) = g.get("eos_token_id").and_then(Value::as_array) {
            if ids.len() >= 2 {
                let first = ids[0]
                    .as_u64()
                    .ok_or_else(|| bad(&gen, "eos_token_id[0] is not a token id"))?;
                meta.u32(
                    "tokenizer.ggml.eot_token_id",
                    u32_of(first, "eos_token_id", &gen)?,
                );
            }
        }
    }
    Ok(())
}
