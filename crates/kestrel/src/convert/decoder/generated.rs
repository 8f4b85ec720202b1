//! Tensors a decoder conversion computes rather than reads: Llama 3's RoPE frequency factors and
//! the LongRoPE long/short factors of Phi-3 and MiniCPM 4, planned ahead of the checkpoint's
//! tensors as llama.cpp's converters yield them.

use kestrel_gguf::{GgmlType, TensorSpec};
use serde_json::Value;

use super::params::{self, hparams::Hparams};
use super::write::{Planned, Source};
use super::{bad, family, uint, Family};
use crate::convert::ConvertError;

/// Plan `family`'s generated tensors; returns Phi-3's LongRoPE attention factor where it has one.
pub(super) fn plan(
    family: Family,
    hp: &Hparams,
    plan: &mut Vec<Planned>,
) -> Result<Option<f32>, ConvertError> {
    let (h, rp, cfg_path) = (hp.h, hp.rp, hp.cfg);
    let (n_embd, n_head) = (hp.n_embd, hp.n_head);
    if family.is_llama() || matches!(family, Family::Exaone4 | Family::Exaone | Family::Deci) {
        let rope_params = rp
            .get("full_attention")
            .and_then(|v| v.as_object())
            .unwrap_or(rp);
        let ty = rope_params
            .get("rope_type")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        if ty.eq_ignore_ascii_case("llama3") {
            let dim = match uint(h, &["head_dim"], cfg_path)? {
                Some(d) => d,
                None => n_embd.unwrap_or(0) / n_head.filter(|&n| n > 0).unwrap_or(1),
            } as usize;
            let v = family::llama3_rope_factors(rope_params, dim);
            plan.push(Planned {
                spec: TensorSpec {
                    name: "rope_freqs.weight".into(),
                    ggml_type: GgmlType::F32,
                    dims: vec![v.len() as u64],
                },
                cols: v.len(),
                source: Source::Generated(v),
            });
        }
    }
    let mut phi3_attn_factor = None;
    if matches!(family, Family::Phi3 | Family::PhiMoe) {
        if let Some(params::LongRope {
            attn_factor,
            long,
            short,
        }) = params::phi3_rope_factors(hp)?
        {
            phi3_attn_factor = Some(attn_factor);
            push_rope_factors(plan, long, short);
        }
    }
    if family == Family::MiniCpm {
        // MiniCPM 4's LongRoPE factors, as the config lists them (one per rotated pair).
        let dims = n_embd.unwrap_or(0) / n_head.filter(|&n| n > 0).unwrap_or(1);
        let factors = |key: &str| -> Result<Option<Vec<f32>>, ConvertError> {
            match rp.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| v.as_f64().map(|f| f as f32))
                    .collect::<Option<Vec<f32>>>()
                    .map(Some)
                    .ok_or_else(|| bad(cfg_path, format!("rope_scaling.{key} holds a non-number"))),
                Some(_) => Err(bad(cfg_path, format!("rope_scaling.{key} is not a list"))),
            }
        };
        match (factors("long_factor")?, factors("short_factor")?) {
            (None, None) => {}
            (Some(long), Some(short))
                if long.len() == short.len() && long.len() as u64 * 2 == dims =>
            {
                push_rope_factors(plan, long, short)
            }
            _ => {
                return Err(bad(
                    cfg_path,
                    format!(
                        "rope_scaling needs long_factor and short_factor of {} values each",
                        dims / 2
                    ),
                ))
            }
        }
    }
    Ok(phi3_attn_factor)
}

/// LongRoPE's per-pair factors as F32 tensors (`rope_factors_long`, then `_short`), generated
/// ahead of the checkpoint's tensors as llama.cpp's converters yield them.
fn push_rope_factors(plan: &mut Vec<Planned>, long: Vec<f32>, short: Vec<f32>) {
    for (name, v) in [
        ("rope_factors_long.weight", long),
        ("rope_factors_short.weight", short),
    ] {
        plan.push(Planned {
            spec: TensorSpec {
                name: name.into(),
                ggml_type: GgmlType::F32,
                dims: vec![v.len() as u64],
            },
            cols: v.len(),
            source: Source::Generated(v),
        });
    }
}
