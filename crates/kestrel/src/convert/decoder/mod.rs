//! Decoder checkpoints → GGUF, as llama.cpp's `convert_hf_to_gguf.py` writes them: the same
//! tensor names, order, shapes and types, the same metadata keys and values, the same
//! tokenizer data. Tensors stream from the memory-mapped shards to the file a block of rows at
//! a time, so the model is never held in memory.

mod baichuan;
mod deci;
mod defaults;
mod experts;
mod falcon_h1;
mod family;
mod gpt_oss;
mod granite_hybrid;
mod granite_moe;
mod head_norms;
mod hunyuan;
mod internlm2;
mod jamba;
mod lfm2;
mod mamba;
mod mla;
mod nemotron_h;
mod openelm;
mod params;
mod read;
mod write;

use std::path::Path;

use kestrel_gguf::{GgmlType, TensorSpec};
use serde_json::Value;

use experts::Experts;
pub(crate) use family::{Family, SUPPORTED};

use super::checkpoint::Checkpoint;
use super::general::{self, ParamCount};
use super::meta::Meta;
use super::vocab::{bpe, special::SpecialVocab, spm, Vocab};
use super::{ConvertError, ConvertOptions, ConvertReport, OutType};
use write::{Planned, Source};

fn bad(path: &Path, reason: impl Into<String>) -> ConvertError {
    ConvertError::Input {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn uint(h: &Value, keys: &[&str], cfg: &Path) -> Result<Option<u64>, ConvertError> {
    match family::find(h, keys) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            bad(
                cfg,
                format!("{} = {v} is not a non-negative integer", keys[0]),
            )
        }),
    }
}

fn u32_of(v: u64, key: &str, cfg: &Path) -> Result<u32, ConvertError> {
    u32::try_from(v).map_err(|_| bad(cfg, format!("{key} = {v} does not fit 32 bits")))
}

/// Convert the decoder checkpoint in `dir` (already identified as `family`).
pub(crate) fn convert(
    dir: &Path,
    out: &Path,
    family: Family,
    hf_arch: &str,
    config: &Value,
    opts: &ConvertOptions,
) -> Result<ConvertReport, ConvertError> {
    let cfg_path = dir.join("config.json");
    // `text_config` folded onto the top level, as llama.cpp does.
    let full = defaults::with_defaults(config);
    let config = &full;
    let mut h = config.clone();
    if let (Some(top), Some(text)) = (
        h.as_object().cloned(),
        config.get("text_config").and_then(|t| t.as_object()),
    ) {
        let mut merged = top;
        for (k, v) in text {
            merged.insert(k.clone(), v.clone());
        }
        h = Value::Object(merged);
    }
    // Nemotron-H with experts is llama.cpp's `nemotron_h_moe`.
    let arch = if family == Family::NemotronH && nemotron_h::is_moe(&h) {
        "nemotron_h_moe"
    } else {
        family.arch()
    };
    let ck = Checkpoint::open(dir)?;

    // OpenELMModel reads its layer count from `num_transformer_layers` only.
    let layer_keys: &[&str] = match family {
        Family::OpenElm => &["num_transformer_layers"],
        _ => &["n_layers", "num_hidden_layers", "n_layer", "num_layers"],
    };
    let n_layer =
        uint(&h, layer_keys, &cfg_path)?.ok_or_else(|| bad(&cfg_path, "no num_hidden_layers"))?;
    let n_embd = uint(&h, &["hidden_size", "n_embd", "dim"], &cfg_path)?;
    let n_head = uint(&h, &["n_heads", "num_attention_heads"], &cfg_path)?;
    let n_head_kv = uint(&h, &["n_kv_heads", "num_key_value_heads"], &cfg_path)?;
    let vocab_size = if family == Family::Mamba {
        mamba::padded_vocab(&h, &cfg_path, 8)?
    } else if family == Family::Mamba2 {
        mamba::padded_vocab(&h, &cfg_path, 16)?
    } else if matches!(family, Family::GraniteHybrid | Family::NemotronH) {
        // Their `set_vocab`s pad to 8 whatever the config says (a Granite hybrid without
        // Mamba layers, padded to 1, is refused); the parameters keep the config's size.
        if family == Family::NemotronH {
            nemotron_h::check(&h, n_layer, &cfg_path)?;
        } else if granite_hybrid::attn_layers(&h, n_layer, &cfg_path)?.len() as u64 == n_layer {
            return Err(bad(
                &cfg_path,
                "a Granite hybrid without Mamba layers (llama.cpp writes it as granite or \
                 granitemoe) is not supported yet",
            ));
        }
        let mut padded = h.clone();
        padded["pad_vocab_size_multiple"] = Value::from(8);
        mamba::padded_vocab(&padded, &cfg_path, 8)?
    } else {
        uint(&h, &["vocab_size"], &cfg_path)?
    };
    let rp = family::rope_parameters(&h);

    // The tokenizer first: Gemma 3 trims the embedding to its length.
    let has_spm = dir.join("tokenizer.model").is_file();
    let n_vocab = vocab_size.map(|v| v as usize);
    let vocab: Vocab =
        match family {
            Family::Llama
            | Family::SmolLm3
            | Family::Mistral3
            | Family::Arcee
            | Family::Nanbeige
            | Family::Qwen2
            | Family::Qwen2Vl
            | Family::Qwen3
            | Family::Qwen3Vl
            | Family::Gemma3
            | Family::Mamba
            | Family::Mamba2
            | Family::Jamba
            | Family::GraniteHybrid
                if has_spm =>
            {
                spm::load(dir, n_vocab, spm::Style::Default)?
            }
            Family::InternLm2 => spm::load(dir, n_vocab, spm::Style::InternLm2)?,
            Family::OpenElm if has_spm => spm::load(dir, n_vocab, spm::Style::Default)?,
            Family::OpenElm => return Err(bad(
                dir,
                "no tokenizer.model: OpenELM uses Llama 2's SentencePiece vocabulary (llama.cpp \
                 falls back to a copy of its own); put Llama 2's tokenizer.model beside it",
            )),
            // Jamba without `tokenizer.model`: llama.cpp's `LlamaHfVocab` reading, not written yet.
            Family::Jamba => {
                return Err(bad(
                    dir,
                    "a Jamba checkpoint without tokenizer.model is not supported yet",
                ))
            }
            // MiniCPM: SentencePiece only, as llama.cpp's `_set_vocab_sentencepiece`.
            Family::Gemma
            | Family::Gemma2
            | Family::Nemotron
            | Family::MiniCpm
            | Family::Orion
            | Family::Baichuan
            | Family::PanguEmbedded => spm::load(dir, n_vocab, spm::Style::Default)?,
            Family::Xverse => bpe::load_xverse(dir, n_vocab)?,
            // DeciModel reads Llama 3's BPE vocabulary only at its size (else `LlamaHfVocab`).
            Family::Deci if vocab_size != Some(128256) => {
                return Err(bad(
                    &cfg_path,
                    "a DeciLM vocabulary other than Llama 3's 128256 (llama.cpp's LlamaHfVocab \
                 reading) is not supported yet",
                ))
            }
            Family::Phi3 | Family::PhiMoe if !phi3_gpt2_tokenizer(dir)? => {
                spm::load(dir, n_vocab, spm::Style::Phi3)?
            }
            _ => {
                let tj = dir.join("tokenizer.json");
                if !tj.is_file() {
                    return Err(bad(dir, "no tokenizer.model and no tokenizer.json"));
                }
                if family.is_llama() {
                    refuse_llama_hf(&tj)?;
                }
                bpe::load(dir, n_vocab)?
            }
        };
    // Checkpoints shipped quantized: only gpt-oss's MXFP4 experts are read (as llama.cpp,
    // which marks such files MXFP4_MOE unless asked for Q8_0).
    let quant = h
        .get("quantization_config")
        .and_then(|q| q.get("quant_method"))
        .and_then(|m| m.as_str());
    let mxfp4 = quant == Some("mxfp4");
    let fp8 = quant == Some("fp8");
    let fp8_block = if fp8 {
        fp8_block_size(&h, &cfg_path)?
    } else {
        None
    };
    match quant {
        None | Some("fp8") => {}
        Some("mxfp4") if family == Family::GptOss => {}
        Some(m) => {
            return Err(bad(
                &cfg_path,
                format!(
                    "a {m}-quantized checkpoint: not supported yet (convert the unquantized one)"
                ),
            ))
        }
    }
    let file_type = match opts.outtype {
        OutType::F32 | OutType::F16 | OutType::BF16 if mxfp4 => 38,
        _ => opts.outtype.file_type(),
    };
    let hp = params::Hparams {
        h: &h,
        rp: &rp,
        cfg: &cfg_path,
        arch,
        n_layer,
        n_embd,
        n_head,
        // The Granite hybrid's parameters are written before its vocabulary is padded.
        vocab_size: if matches!(family, Family::GraniteHybrid | Family::NemotronH) {
            uint(&h, &["vocab_size"], &cfg_path)?
        } else {
            vocab_size
        },
        file_type,
    };

    // Plan every tensor: name, type, dims, where its values come from.
    let mut plan: Vec<Planned> = Vec::new();
    let out_type = |name: &str, n_dims: usize, cols: usize| -> GgmlType {
        // 1-D tensors, norms, biases, the expert routers, state-space convolutions and learned
        // positions stay F32, as llama.cpp's converter keeps them.
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
        match opts.outtype {
            OutType::F32 => GgmlType::F32,
            OutType::F16 => GgmlType::F16,
            OutType::BF16 => GgmlType::BF16,
            // gguf-py falls back to F16 for rows that are not whole Q8_0 blocks.
            OutType::Q8_0 if cols.is_multiple_of(32) => GgmlType::Q8_0,
            // Resolved by `convert_hf` before this runs; F16 is its all-F32 answer.
            OutType::Q8_0 | OutType::Auto => GgmlType::F16,
        }
    };
    let openelm_layers = if family == Family::OpenElm {
        Some(openelm::layers(&h, n_layer, &cfg_path)?)
    } else {
        None
    };
    let deci_layers = if family == Family::Deci {
        Some(deci::layers(&h, n_layer, &cfg_path)?)
    } else {
        None
    };
    if family.is_llama() || matches!(family, Family::Exaone4 | Family::Exaone | Family::Deci) {
        let rope_params = rp
            .get("full_attention")
            .and_then(|v| v.as_object())
            .unwrap_or(&rp);
        let ty = rope_params
            .get("rope_type")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        if ty.eq_ignore_ascii_case("llama3") {
            let dim = match uint(&h, &["head_dim"], &cfg_path)? {
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
        }) = params::phi3_rope_factors(&hp)?
        {
            phi3_attn_factor = Some(attn_factor);
            push_rope_factors(&mut plan, long, short);
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
                    .ok_or_else(|| {
                        bad(&cfg_path, format!("rope_scaling.{key} holds a non-number"))
                    }),
                Some(_) => Err(bad(&cfg_path, format!("rope_scaling.{key} is not a list"))),
            }
        };
        match (factors("long_factor")?, factors("short_factor")?) {
            (None, None) => {}
            (Some(long), Some(short))
                if long.len() == short.len() && long.len() as u64 * 2 == dims =>
            {
                push_rope_factors(&mut plan, long, short)
            }
            _ => {
                return Err(bad(
                    &cfg_path,
                    format!(
                        "rope_scaling needs long_factor and short_factor of {} values each",
                        dims / 2
                    ),
                ))
            }
        }
    }
    if family == Family::GptOss {
        plan.extend(gpt_oss::plan_mxfp4(&ck, dir)?);
    }
    // The Mamba 2 mixers' inner size and groups (their norm and A/D reshapes), and whether
    // a Granite hybrid has experts (else its shared MLP is the feed-forward).
    let ssm_sizes = match family {
        Family::Mamba2 => Some(mamba::mamba2_sizes(&h, &cfg_path).map(|(_, i, g)| (i, g))?),
        Family::GraniteHybrid => Some(granite_hybrid::sizes(&h, &cfg_path)?),
        Family::FalconH1 => Some(falcon_h1::sizes(&h, &cfg_path)?),
        Family::NemotronH => Some(nemotron_h::sizes(&h, &cfg_path)?),
        _ => None,
    };
    let hybrid_dense = family == Family::GraniteHybrid
        && uint(&h, &["num_local_experts"], &cfg_path)?.is_none_or(|n| n == 0);
    let mut experts = Experts::new(family, &h, &cfg_path)?;
    let mut head_norms = head_norms::HeadNorms::new(n_head, n_head_kv, &cfg_path);
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
        let Some(mut name) = family::filter_name(hf) else {
            continue;
        };
        if ssm_sizes.is_some() {
            name = mamba::mamba2_name(name);
        }
        if family == Family::Jamba {
            name = jamba::name(name, &h);
        }
        if family == Family::GptOss {
            if let Some(p) = gpt_oss::plan_expert(&ck, dir, hf, &out_type)? {
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
            && mamba::output_is_embedding(&ck, dir, hf)?
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
        if family.is_gemma() && family != Family::Gemma3 && name == "lm_head.weight" {
            // Gemma 2 ties its output to the embedding; llama.cpp skips a stray lm_head.
            continue;
        }
        if family == Family::Cohere2 && name.ends_with(".bias") {
            // llama.cpp runs Command R7B without biases; its checkpoints carry zero ones.
            if !all_zero(&ck, dir, hf)? {
                return Err(bad(dir, format!("bias {hf:?} is not zero")));
            }
            continue;
        }
        if family == Family::DeepSeek2 {
            let tied = h.get("tie_word_embeddings") == Some(&Value::Bool(true));
            if mla::is_mtp(&name, n_layer) || (tied && name == "lm_head.weight") {
                continue;
            }
            if let Some(split) = mla::split_kv_b(&ck, hf, &name, &h, &cfg_path, &out_type)? {
                plan.extend(split);
                continue;
            }
        }
        if matches!(family, Family::GraniteMoe | Family::GraniteHybrid) {
            if let Some(parts) = granite_moe::plan(&ck, hf, &name, &h, &cfg_path, &out_type)? {
                plan.extend(parts);
                continue;
            }
        }
        if let Some(stacked) = experts.take(&ck, hf, &name, &out_type)? {
            plan.extend(stacked);
            continue;
        }
        if family == Family::StableLm {
            if let Some(stacked) = head_norms.take(&ck, hf, &name)? {
                plan.extend(stacked);
                continue;
            }
        }
        let (dtype, shape) = ck
            .info(hf)
            .ok_or_else(|| bad(dir, format!("{hf} vanished")))?;
        if family == Family::InternLm2 {
            if let Some(p) = internlm2::plan_wqkv(hf, &name, shape, &h, &cfg_path, &out_type)? {
                plan.extend(p);
                continue;
            }
        }
        if let Some(layers) = &openelm_layers {
            if let Some(p) = openelm::plan_proj_1(hf, shape, layers, &cfg_path, &out_type)? {
                plan.extend(p);
                continue;
            }
        }
        if family == Family::Baichuan {
            if let Some(p) = baichuan::plan_w_pack(hf, &name, shape, &h, &cfg_path, &out_type)? {
                plan.extend(p);
                continue;
            }
        }
        if !(dtype.is_float() || (fp8 && dtype.is_fp8())) {
            return Err(bad(dir, format!("tensor {hf:?} is not a float tensor")));
        }
        let mut gguf = family::gguf_name(family, &name)
            .ok_or_else(|| bad(dir, format!("cannot map tensor {hf:?} for {arch}")))?;
        if hybrid_dense {
            // Without experts the shared MLP is the layer's feed-forward (GraniteMoeModel).
            if let Some(stem) = gguf.strip_suffix(".ffn_down_shexp.weight") {
                gguf = format!("{stem}.ffn_down.weight");
            }
        }
        if let Some(sizes) = ssm_sizes {
            if let Some(p) = mamba::ssm_plan(&ck, dir, hf, &gguf, sizes, &cfg_path)? {
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
        if family::is_conv1d(family, &name) && shape.len() == 2 {
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
                    Some(&(nh, kv, _)) => (Some(nh), Some(kv)),
                    None => (n_head, n_head_kv),
                },
                _ => (n_head, n_head_kv),
            };
            let heads = if name.ends_with("q_proj.weight") || name.ends_with("q_proj.bias") {
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
            };
            if let Some(hd) = heads {
                let hd = hd as usize;
                let len = shape[0];
                if hd == 0 || len % (2 * hd) != 0 {
                    return Err(bad(
                        dir,
                        format!("tensor {hf:?}: {len} rows do not split into {hd} heads of rotary pairs"),
                    ));
                }
                permute_heads = Some(hd);
            }
        }
        if family == Family::Gemma3 && name.ends_with("embed_tokens.weight") {
            rows = rows.min(vocab.tokens.len());
        }
        let dims: Vec<u64> = if shape.len() == 2 {
            vec![cols as u64, rows as u64]
        } else {
            vec![cols as u64]
        };
        let ty = out_type(&gguf, shape.len(), cols);
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
                    falcon_h1::value_map(&name, &h, &cfg_path)?
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
    let params = ParamCount::of(
        plan.iter()
            .map(|p| (p.spec.name.as_str(), p.spec.dims.as_slice())),
    );

    // Metadata, in llama.cpp's order (keys set while preparing tensors come first).
    let mut meta = Meta::default();
    meta.str("general.architecture", arch);
    if let Some(a) = phi3_attn_factor {
        meta.f32(format!("{arch}.rope.scaling.attn_factor"), a);
    }
    general::write(&mut meta, dir, &h, params);
    params::write(&mut meta, family, &hp)?;
    meta.u32("general.quantization_version", 2);

    // Tokenizer.
    if family.is_llama() {
        if let Some(b) = read_opt_json(&dir.join("tokenizer_config.json"))?
            .and_then(|c| c.get("add_prefix_space").and_then(|v| v.as_bool()))
        {
            meta.bool("tokenizer.ggml.add_space_prefix", b);
        }
    }
    vocab.write(&mut meta);
    if family == Family::InternLm2 {
        meta.bool(
            "tokenizer.ggml.add_space_prefix",
            spm::add_dummy_prefix(dir)?,
        );
    }
    let is_bpe = vocab.model == "gpt2";
    let mut sv = SpecialVocab::load(dir, is_bpe, (!is_bpe).then_some(vocab.tokens.len()))?;
    if family == Family::InternLm2 {
        // The chat models end a turn with `<|im_end|>`: InternLM2Model makes it the EOS.
        if let Some(id) = internlm2::chat_eos(dir)? {
            match sv.ids.iter_mut().find(|(t, _)| t == "eos") {
                Some(e) => e.1 = id,
                None => sv.ids.push(("eos".into(), id)),
            }
        }
    }
    if family == Family::Glm4 {
        glm4_specials(dir, &mut sv)?;
    }
    if family == Family::Nemotron {
        // NemotronModel.set_vocab adds padding 0 and unknown 1 after the tokenizer's own
        // (a tokenizer that names either makes llama.cpp stop on the repeated key; kestrel
        // keeps the tokenizer's).
        sv.set_if_absent("pad", 0)?;
        sv.set_if_absent("unk", 1)?;
    }
    sv.write(&mut meta);
    if family == Family::PanguEmbedded {
        // PanguEmbeddedModel.set_vocab: tokenizer_config.json's add_prefix_space, where set.
        if let Some(b) = read_opt_json(&dir.join("tokenizer_config.json"))?
            .and_then(|c| c.get("add_prefix_space").and_then(|v| v.as_bool()))
        {
            meta.bool("tokenizer.ggml.add_space_prefix", b);
        }
    }
    if family == Family::HunyuanDense {
        hunyuan::specials(&mut meta, &h, dir, &cfg_path)?;
    }
    if family == Family::Gemma {
        // GemmaModel.set_vocab's second SpecialVocab: of its CodeGemma FIM ids (67-70) the
        // writer has a key for none but the end of turn, 107. (It would take an `eot_token`
        // named in tokenizer_config.json first; no Gemma 1 release names one.)
        meta.u32("tokenizer.ggml.eot_token_id", 107);
    }
    if (family == Family::Gemma3 && has_spm) || matches!(family, Family::Gemma | Family::Gemma2) {
        meta.bool("tokenizer.ggml.add_space_prefix", false);
    }
    if family.is_llama() && vocab_size == Some(49152) {
        // llama.cpp's rule for Granite-sized (and SmolLM) vocabularies.
        meta.bool("tokenizer.ggml.add_bos_token", false);
    }
    if hf_arch == "Qwen3ForSequenceClassification" {
        return Err(bad(&cfg_path, "Qwen3 rerankers are not converted yet"));
    }
    if family == Family::NemotronH {
        nemotron_h::check_latent(&h, &plan, &cfg_path)?;
    }

    let mut report = write::write_file(out, &ck, fp8_block, meta, &plan, opts)?;
    report.arch = arch.to_string();
    Ok(report)
}

/// An unsigned hyperparameter as llama.cpp's hybrid converters' `find_hparam` reads it: the
/// first of `keys` present, else the first of them with `prefix` (`mamba_`).
pub(super) fn find_prefixed(
    h: &Value,
    keys: &[&str],
    prefix: &str,
    cfg: &Path,
) -> Result<Option<u64>, ConvertError> {
    if let Some(v) = uint(h, keys, cfg)? {
        return Ok(Some(v));
    }
    let prefixed: Vec<String> = keys.iter().map(|k| format!("{prefix}{k}")).collect();
    let refs: Vec<&str> = prefixed.iter().map(String::as_str).collect();
    uint(h, &refs, cfg)
}

/// GLM-4's special tokens, as its converter sets them after loading (each only if not set
/// yet): end of text as EOS, unknown and BOS, `<|user|>` as end of turn. Both must be added
/// tokens of `tokenizer.json` (llama.cpp stops with a `KeyError` otherwise).
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

fn glm4_specials(dir: &Path, sv: &mut SpecialVocab) -> Result<(), ConvertError> {
    let tj = dir.join("tokenizer.json");
    let v = crate::convert::read_json(&tj)?;
    let added = |content: &str| -> Result<u32, ConvertError> {
        v.get("added_tokens")
            .and_then(|a| a.as_array())
            .and_then(|a| {
                a.iter()
                    .rev()
                    .filter(|t| t.get("content").and_then(|c| c.as_str()) == Some(content))
                    .find_map(|t| t.get("id").and_then(|i| i.as_u64()))
            })
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| bad(&tj, format!("GLM-4 needs {content} among the added tokens")))
    };
    let (end, user) = (added("<|endoftext|>")?, added("<|user|>")?);
    for (typ, id) in [("eos", end), ("eot", user), ("unk", end), ("bos", end)] {
        sv.set_if_absent(typ, id)?;
    }
    Ok(())
}

/// Whether every value of `hf` is zero.
fn all_zero(ck: &Checkpoint, dir: &Path, hf: &str) -> Result<bool, ConvertError> {
    let v = read::Values::open(ck, hf, None).map_err(|e| bad(dir, format!("{hf}: {e}")))?;
    let n = ck.info(hf).map_or(0, |(_, s)| s.iter().product::<usize>());
    Ok((0..n).all(|i| v.get(i) == 0.0))
}

/// An FP8 checkpoint's `weight_block_size` (`[rows, columns]` per scale), if it has one.
fn fp8_block_size(h: &Value, cfg: &Path) -> Result<Option<(usize, usize)>, ConvertError> {
    let v = h
        .get("quantization_config")
        .and_then(|q| q.get("weight_block_size"));
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => match a.as_slice() {
            [r, c] => {
                let dim = |x: &Value| x.as_u64().filter(|&d| d > 0 && d <= 1 << 20);
                match (dim(r), dim(c)) {
                    (Some(r), Some(c)) => Ok(Some((r as usize, c as usize))),
                    _ => Err(bad(
                        cfg,
                        format!("weight_block_size {v:?} is not two sizes"),
                    )),
                }
            }
            _ => Err(bad(cfg, "weight_block_size is not [rows, columns]")),
        },
        Some(other) => Err(bad(
            cfg,
            format!("weight_block_size = {other} is not a list"),
        )),
    }
}

/// Phi-4 ships a GPT-2 tokenizer under the Phi-3 architecture (`tokenizer_class`).
fn phi3_gpt2_tokenizer(dir: &Path) -> Result<bool, ConvertError> {
    Ok(read_opt_json(&dir.join("tokenizer_config.json"))?
        .and_then(|c| {
            c.get("tokenizer_class")
                .and_then(|v| v.as_str())
                .map(String::from)
        })
        .is_some_and(|c| c == "GPT2Tokenizer"))
}

fn read_opt_json(p: &Path) -> Result<Option<Value>, ConvertError> {
    if p.is_file() {
        super::read_json(p).map(Some)
    } else {
        Ok(None)
    }
}

/// A `tokenizer.json` llama.cpp reads as a Llama SentencePiece-BPE (`LlamaHfVocab`).
fn refuse_llama_hf(tj: &Path) -> Result<(), ConvertError> {
    let v = super::read_json(tj)?;
    let model = v.get("model");
    let ty = model.and_then(|m| m.get("type")).and_then(|t| t.as_str());
    let byte_fallback = model
        .and_then(|m| m.get("byte_fallback"))
        .and_then(|b| b.as_bool());
    let decoder_seq = v
        .get("decoder")
        .and_then(|d| d.get("type"))
        .and_then(|t| t.as_str())
        == Some("Sequence");
    if ty == Some("BPE") && byte_fallback == Some(true) && decoder_seq {
        return Err(bad(
            tj,
            "a SentencePiece-style BPE tokenizer.json without tokenizer.model: not supported yet \
             (add the checkpoint's tokenizer.model)",
        ));
    }
    Ok(())
}
