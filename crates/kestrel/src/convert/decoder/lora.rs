//! PEFT LoRA adapters → GGUF, as llama.cpp's `convert_lora_to_gguf.py` writes them: for each
//! adapted matrix of the base model, `<gguf name>.lora_a` (PEFT's `lora_A`, `[rank, in]`) and
//! `.lora_b` (`lora_B`, `[out, rank]`, its rows reordered as the base's Q/K rows are), in the
//! adapter's name order; `general.type = adapter`, `adapter.type = lora`,
//! `adapter.lora.alpha`, the name from the adapter's folder. The base model's `config.json`
//! gives the architecture and head counts; its weights are not read.
//!
//! Families whose matrices map one to one onto the base (Llama and its kin, Qwen 1-3 and
//! Qwen's MoE forms, Gemma 1-3, Phi-2/3 with Phi-3's fused QKV and gate-up, OLMo 1-3, OLMoE,
//! Phi-3.5-MoE, ChatGLM, ...) are converted, and InternLM2 and OpenELM, whose fused `wqkv` and
//! `proj_1` are split as their bases are (`lora_B`'s rows by part, `lora_A` repeated). An adapter on the token embedding
//! (`lora_embedding_A`/`_B`) is written as llama.cpp's embedding lookup reads it (`A`
//! transposed); norm vectors that mergekit-extract-lora adds are kept as they are. Adapters on
//! experts are stacked per layer and projection as the base's experts are
//! (`blk.{L}.ffn_{gate,up,down}_exps.weight.lora_{a,b}`, 3-d), which needs every expert
//! projection of a layer adapted, as llama.cpp's script does. An activated LoRA (aLoRA) gets
//! its invocation sequence as `adapter.alora.invocation_tokens`. The other families, whole
//! embedding weights and DoRA are refused, as is the PyTorch `.bin` form.

use std::collections::BTreeMap;
use std::path::Path;

use kestrel_gguf::TensorSpec;
use serde_json::Value;

use super::experts::Experts;
use super::write::{Planned, Source};
use super::{bad, internlm2, names, openelm, read, tensors, uint, Family};
use crate::convert::checkpoint::Checkpoint;
use crate::convert::general;
use crate::convert::meta::Meta;
use crate::convert::{read_json, ConvertError, ConvertOptions, ConvertReport, OutType};

/// Whether the family's matrices map one to one (only renamed, Q/K rows reordered).
fn plain(family: Family) -> bool {
    family.is_llama()
        || matches!(
            family,
            Family::Qwen2
                | Family::Qwen3
                | Family::Gemma
                | Family::Gemma2
                | Family::Gemma3
                | Family::Phi3
                | Family::Qwen2Moe
                | Family::Qwen3Moe
                | Family::Olmoe
                | Family::PhiMoe
                | Family::Olmo2
                | Family::Olmo
                | Family::CommandR
                | Family::Cohere2
                | Family::Phi2
                | Family::StableLm
                | Family::StarCoder2
                | Family::Exaone4
                | Family::Glm4
                | Family::Qwen
                | Family::ChatGlm
                | Family::InternLm2
        )
}

/// One adapted matrix: the base's GGUF name and its two PEFT tensors.
struct Pair {
    a: Option<String>,
    b: Option<String>,
}

/// Convert the PEFT adapter in `adapter` for the base model whose `config.json` is in `base`.
pub(crate) fn convert(
    adapter: &Path,
    base: &Path,
    out: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertReport, ConvertError> {
    let cfg_path = adapter.join("adapter_config.json");
    let lcfg = read_json(&cfg_path)?;
    let alpha = lcfg
        .get("lora_alpha")
        .and_then(Value::as_f64)
        .ok_or_else(|| bad(&cfg_path, "no lora_alpha"))?;
    if let Some(t) = lcfg.get("peft_type").and_then(Value::as_str) {
        if t != "LORA" {
            return Err(bad(
                &cfg_path,
                format!("peft_type {t:?}: only LoRA adapters convert"),
            ));
        }
    }
    if lcfg.get("use_dora") == Some(&Value::Bool(true)) {
        return Err(bad(
            &cfg_path,
            "DoRA adapters (use_dora) are not supported yet",
        ));
    }
    let invoked = invocation(&lcfg, &cfg_path, base)?;
    let model = adapter.join("adapter_model.safetensors");
    if !model.is_file() {
        return Err(bad(
            adapter,
            if adapter.join("adapter_model.bin").is_file() {
                "has only a PyTorch adapter_model.bin; save the adapter as safetensors"
            } else {
                "no adapter_model.safetensors"
            },
        ));
    }
    let base_cfg = base.join("config.json");
    let h = read_json(&base_cfg)?;
    let hf_arch = h
        .get("architectures")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .unwrap_or("");
    let family = Family::of(hf_arch).ok_or_else(|| {
        bad(
            &base_cfg,
            format!("base architecture {hf_arch:?} is not one kestrel converts"),
        )
    })?;
    if !plain(family) && family != Family::OpenElm {
        return Err(bad(
            &base_cfg,
            format!(
                "LoRA adapters for {} are not converted yet (Llama, Mistral, Mixtral, \
                 Qwen 1-3 and their MoE forms, Gemma, Phi-2/3/3.5-MoE, OLMo, OLMoE, Command \
                 R, StableLM, StarCoder 2, EXAONE 4, ChatGLM, GLM-4, InternLM2 and OpenELM bases \
                 are)",
                family.arch()
            ),
        ));
    }
    let n_head = uint(&h, &["n_heads", "num_attention_heads"], &base_cfg)?;
    let n_head_kv = uint(&h, &["n_kv_heads", "num_key_value_heads"], &base_cfg)?;

    let ck = Checkpoint::open_file(&model)?;
    // convert_lora_to_gguf.py b11434 stops on `--outtype auto` (its guess asks the adapter
    // pair for a tensor method it lacks): nothing to match, so no guess here either.
    if opts.outtype == OutType::Auto {
        return Err(bad(
            adapter,
            "--outtype auto is not defined for adapters: give f32, f16, bf16 or q8_0",
        ));
    }
    let outtype = opts.outtype;
    // PEFT names → the base's names, each A and B paired, in the adapter's name order.
    let mut pairs: BTreeMap<String, Pair> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut norms: Vec<(String, String)> = Vec::new();
    for name in ck.names() {
        let base_name = name
            .replace("base_model.model.", "")
            .replace(".lora_A.weight", ".weight")
            .replace(".lora_B.weight", ".weight")
            .replace(".lora_embedding_A", ".weight")
            .replace(".lora_embedding_B", ".weight");
        let Some(base_name) = names::filter_name(&base_name) else {
            continue;
        };
        if family.drops_lm_head() && base_name == "lm_head.weight" {
            // Filtered by name first, as llama.cpp's script does: left out, not refused.
            continue;
        }
        let is_a = name.contains(".lora_A.weight") || name.contains(".lora_embedding_A");
        let is_b = name.contains(".lora_B.weight") || name.contains(".lora_embedding_B");
        if !is_a && !is_b {
            if name.contains(".base_layer.weight") {
                continue;
            }
            if name.contains("_layernorm") || name.contains(".norm") {
                // mergekit-extract-lora's norm vectors: kept as they are, before the pairs, as
                // llama.cpp's script keeps them (llama.cpp and kestrel load but do not apply
                // them).
                norms.push((name.to_string(), base_name));
                continue;
            }
            let what = if name.contains(".embed_tokens.weight") || name.contains(".lm_head.weight")
            {
                "whole embedding weights in the adapter (tokens added in fine-tuning; llama.cpp \
                 refuses them too) are not supported"
            } else if name.contains("lora_magnitude_vector") {
                "DoRA adapters are not supported yet"
            } else {
                "not a lora_A or lora_B tensor"
            };
            return Err(bad(&model, format!("{name:?}: {what}")));
        }
        let e = pairs.entry(base_name.clone()).or_insert_with(|| {
            order.push(base_name.clone());
            Pair { a: None, b: None }
        });
        let slot = if is_a { &mut e.a } else { &mut e.b };
        if slot.replace(name.to_string()).is_some() {
            return Err(bad(&model, format!("{name:?} appears twice")));
        }
    }
    if order.is_empty() {
        return Err(bad(&model, "no lora_A/lora_B tensors"));
    }

    let mut plan = Vec::with_capacity(norms.len() + 2 * order.len());
    for (hf, base_name) in &norms {
        let gguf = names::gguf_name(family, base_name)
            .filter(|g| g.contains("_norm"))
            .ok_or_else(|| bad(&model, format!("{hf:?}: not a norm of {}", family.arch())))?;
        let n = match ck.info(hf) {
            Some((dt, &[n])) if dt.is_float() => n,
            Some((dt, s)) => {
                return Err(bad(
                    &model,
                    format!("{hf}: {dt:?} of shape {s:?}, not a norm vector"),
                ))
            }
            None => return Err(bad(&model, format!("{hf} vanished"))),
        };
        plan.push(Planned {
            spec: TensorSpec {
                name: gguf,
                ggml_type: kestrel_gguf::GgmlType::F32,
                dims: vec![n as u64],
            },
            cols: n,
            source: Source::Tensor {
                hf: hf.clone(),
                rows: 1,
                permute_heads: None,
                // Through the base's own rewrite, as llama.cpp's script passes them
                // (Gemma's and Nemotron's `1 + w`).
                map: if family.norm_shift(base_name) {
                    read::ValueMap::PlusOne
                } else {
                    read::ValueMap::Keep
                },
            },
        });
    }
    let mut total_params: i64 = 0;
    // Expert pairs, collected per layer as the base's experts are (one collector per half).
    let mut expert_a = Experts::new(family, &h, &base_cfg)?;
    let mut expert_b = Experts::new(family, &h, &base_cfg)?;
    for base_name in &order {
        let p = &pairs[base_name];
        let (Some(a), Some(b)) = (&p.a, &p.b) else {
            return Err(bad(
                &model,
                format!("{base_name}: lora_A or lora_B is missing"),
            ));
        };
        if family
            .experts()
            .is_some_and(|l| names::expert_of(&l, base_name).is_some())
        {
            // Stacked as the base's experts are, once the layer's last expert pair is in:
            // each projection's `lora_a` `[n_expert, rank, in]` and `lora_b` `[n_expert, out,
            // rank]`, in the base's projection order.
            let (rank, _) = matrix(&ck, a, &model)?;
            let (_, rank_b) = matrix(&ck, b, &model)?;
            check_rank(base_name, rank, rank_b, &model)?;
            let ty = |_: &str, _: usize, cols: usize| tensors::quantized_type(outtype, cols);
            let (sa, sb) = (
                expert_a.take(&ck, a, base_name, &ty)?,
                expert_b.take(&ck, b, base_name, &ty)?,
            );
            for (mut la, mut lb) in sa.into_iter().flatten().zip(sb.into_iter().flatten()) {
                let n: u64 = la.spec.dims.get(2).copied().unwrap_or(1);
                let (k, m) = (la.spec.dims[0], lb.spec.dims[1]);
                total_params += (n * k * m) as i64;
                la.spec.name.push_str(".lora_a");
                lb.spec.name.push_str(".lora_b");
                plan.push(la);
                plan.push(lb);
            }
            continue;
        }
        if let Some((layer, "ffn.proj_1.weight")) = (family == Family::OpenElm)
            .then(|| super::mamba::layer_of(base_name, "transformer.layers."))
            .flatten()
        {
            // Split as the base's `proj_1` is (llama.cpp's script slices the pair's `lora_B`
            // rows): gate its first `ff` rows, up the rest; `lora_A` whole for each.
            let (rank, n_in) = matrix(&ck, a, &model)?;
            let (n_out, rank_b) = matrix(&ck, b, &model)?;
            check_rank(base_name, rank, rank_b, &model)?;
            let n_layer = uint(&h, &["num_transformer_layers"], &base_cfg)?.unwrap_or(0);
            let ff = openelm::layers(&h, n_layer, &base_cfg)?
                .get(layer)
                .map_or(0, |l| l.2 as usize);
            if n_out != 2 * ff {
                return Err(bad(
                    &model,
                    format!("{b}: {n_out} rows, not 2 × layer {layer}'s feed-forward size {ff}"),
                ));
            }
            total_params += (n_out * n_in) as i64;
            for (part, first) in [("ffn_gate", 0), ("ffn_up", ff)] {
                let gguf = format!("blk.{layer}.{part}.weight");
                plan.push(half(&gguf, "lora_a", a, rank, n_in, outtype, None));
                let mut lb = half(&gguf, "lora_b", b, ff, rank, outtype, None);
                lb.source = Source::Rows {
                    hf: b.clone(),
                    rows: (first..first + ff).collect(),
                    map: read::ValueMap::Keep,
                };
                plan.push(lb);
            }
            continue;
        }
        if family == Family::InternLm2 {
            if let Some((layer, "attention.wqkv.weight")) =
                super::mamba::layer_of(base_name, "model.layers.")
            {
                // Split as the base's `wqkv` is: each part's `lora_B` rows, `lora_A` whole.
                let (rank, n_in) = matrix(&ck, a, &model)?;
                let (n_out, rank_b) = matrix(&ck, b, &model)?;
                check_rank(base_name, rank, rank_b, &model)?;
                let parts = internlm2::wqkv_rows(b, n_out, &h, &base_cfg)?;
                total_params += (n_out * n_in) as i64;
                for (part, rows) in ["attn_q", "attn_k", "attn_v"].into_iter().zip(parts) {
                    let gguf = format!("blk.{layer}.{part}.weight");
                    plan.push(half(&gguf, "lora_a", a, rank, n_in, outtype, None));
                    let mut lb = half(&gguf, "lora_b", b, rows.len(), rank, outtype, None);
                    lb.source = Source::Rows {
                        hf: b.clone(),
                        rows,
                        map: read::ValueMap::Keep,
                    };
                    plan.push(lb);
                }
                continue;
            }
        }
        let gguf = names::gguf_name(family, base_name).ok_or_else(|| {
            bad(
                &model,
                format!("cannot map {base_name:?} for {}", family.arch()),
            )
        })?;
        if gguf == "token_embd.weight" {
            // PEFT's embedding adapter: `lora_embedding_A` `[rank, vocab]` written transposed
            // (a row per token, as the embedding lookup reads it), `lora_embedding_B`
            // `[hidden, rank]` as it is.
            let (rank, n_vocab) = matrix(&ck, a, &model)?;
            let (n_embd, rank_b) = matrix(&ck, b, &model)?;
            check_rank(base_name, rank, rank_b, &model)?;
            total_params += (n_vocab * n_embd) as i64;
            let mut la = half(&gguf, "lora_a", a, n_vocab, rank, outtype, None);
            la.source = Source::Strided {
                hf: a.clone(),
                planes: 1,
                rows: n_vocab,
                s_plane: 0,
                s_row: 1,
                s_col: n_vocab,
                off: 0,
                map: read::ValueMap::Keep,
            };
            plan.push(la);
            plan.push(half(&gguf, "lora_b", b, n_embd, rank, outtype, None));
            continue;
        }
        let (rank, n_in) = matrix(&ck, a, &model)?;
        let (n_out, rank_b) = matrix(&ck, b, &model)?;
        check_rank(base_name, rank, rank_b, &model)?;
        // Q and K: B's rows (the base matrix's output rows) reordered as the base's are.
        let permute_heads = tensors::rotary_heads(family, base_name, n_head, n_head_kv)
            .map(|hd| tensors::rotary_rows(hd, n_out, b, &model))
            .transpose()?;
        total_params += (n_out * n_in) as i64;
        plan.push(half(&gguf, "lora_a", a, rank, n_in, outtype, None));
        plan.push(half(
            &gguf,
            "lora_b",
            b,
            n_out,
            rank,
            outtype,
            permute_heads,
        ));
    }

    // llama.cpp's script stacks a layer's experts only once all of them are in.
    expert_a.finish().map_err(|e| {
        bad(
            &model,
            format!(
                "an adapter on experts must adapt every expert projection of a layer, as                  llama.cpp's converter stacks them ({e})"
            ),
        )
    })?;
    let arch = family.arch();
    let mut meta = Meta::default();
    meta.str("general.architecture", arch);
    meta.str("general.type", "adapter");
    meta.str("adapter.type", "lora");
    // Named from the adapter's folder (gguf-py reads no config there); the parameter count is
    // negative for an adapter, so no size label is made up.
    let none = crate::convert::overrides::Overrides::default();
    general::write_names(&mut meta, adapter, &Value::Null, -total_params, None, &none)?;
    meta.f32("adapter.lora.alpha", alpha as f32);
    if let Some(tokens) = invoked {
        meta.set(
            "adapter.alora.invocation_tokens",
            kestrel_gguf::MetadataValue::u32_array(tokens),
        );
    }
    meta.u32("general.quantization_version", 2);
    let opts = ConvertOptions {
        outtype,
        ..opts.clone()
    };
    let mut report = super::write::write_file(out, &ck, None, meta, &plan, &opts)?;
    report.arch = arch.to_string();
    Ok(report)
}

/// The `(rows, columns)` of the adapter's float matrix `n`.
/// Most tokens in an activated LoRA's invocation sequence.
const MAX_INVOCATION: usize = 4096;

/// An activated LoRA's invocation sequence, as llama.cpp's script finds it: PEFT's
/// `alora_invocation_tokens`, else the older `invocation_string` tokenized by the base's
/// tokenizer (`tokenizer.json`, special tokens added) less its first token (llama.cpp: those
/// adapters were trained to act after it). `None` for an ordinary adapter.
fn invocation(
    lcfg: &Value,
    cfg_path: &Path,
    base: &Path,
) -> Result<Option<Vec<u32>>, ConvertError> {
    let tokens = match lcfg.get("alora_invocation_tokens") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_u64()
                    .and_then(|t| u32::try_from(t).ok())
                    .ok_or_else(|| {
                        bad(
                            cfg_path,
                            format!("alora_invocation_tokens holds {v}, not a token id"),
                        )
                    })
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(bad(
                cfg_path,
                format!("alora_invocation_tokens is {v}, not a list of token ids"),
            ))
        }
    };
    let text = lcfg
        .get("invocation_string")
        .and_then(Value::as_str)
        .unwrap_or("");
    let tokens = if tokens.is_empty() && !text.is_empty() {
        let path = base.join("tokenizer.json");
        let tok = tokenizers::Tokenizer::from_file(&path).map_err(|e| {
            bad(
                &path,
                format!("invocation_string needs the base's tokenizer to become tokens: {e}"),
            )
        })?;
        let enc = tok.encode(text, true).map_err(|e| {
            bad(
                &path,
                format!("cannot tokenize invocation_string {text:?}: {e}"),
            )
        })?;
        enc.get_ids().iter().skip(1).copied().collect()
    } else {
        tokens
    };
    if tokens.len() > MAX_INVOCATION {
        return Err(bad(
            cfg_path,
            format!(
                "an invocation sequence of {} tokens (at most {MAX_INVOCATION})",
                tokens.len()
            ),
        ));
    }
    Ok((!tokens.is_empty()).then_some(tokens))
}

fn matrix(ck: &Checkpoint, n: &str, model: &Path) -> Result<(usize, usize), ConvertError> {
    match ck.info(n) {
        Some((dt, &[rows, cols])) if dt.is_float() => Ok((rows, cols)),
        Some((dt, s)) => Err(bad(
            model,
            format!("{n}: {dt:?} of shape {s:?}, not a float matrix"),
        )),
        None => Err(bad(model, format!("{n} vanished"))),
    }
}

/// `lora_A`'s rank must be `lora_B`'s, and not 0.
fn check_rank(base: &str, a: usize, b: usize, model: &Path) -> Result<(), ConvertError> {
    if a != b || a == 0 {
        return Err(bad(
            model,
            format!("{base}: lora_A has rank {a}, lora_B {b}"),
        ));
    }
    Ok(())
}

/// One half (`suffix` `lora_a` or `lora_b`) of the adapter of GGUF weight `gguf`: `hf`'s `rows`
/// rows of `cols`, Q/K rows reordered (heads of `permute` rows) where given.
fn half(
    gguf: &str,
    suffix: &str,
    hf: &str,
    rows: usize,
    cols: usize,
    outtype: OutType,
    permute: Option<usize>,
) -> Planned {
    Planned {
        spec: TensorSpec {
            name: format!("{gguf}.{suffix}"),
            ggml_type: tensors::quantized_type(outtype, cols),
            dims: vec![cols as u64, rows as u64],
        },
        cols,
        source: Source::Tensor {
            hf: hf.to_string(),
            rows,
            permute_heads: permute,
            map: read::ValueMap::Keep,
        },
    }
}
