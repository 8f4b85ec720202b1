//! kestrel's variants of llama.cpp's random-weight files (other storage types, other shapes),
//! whose llama.cpp logits are recorded in `golden.json` with a `made_by` field.

use kestrel_gguf::{GgmlType, MetadataValue, ValueType};

use super::{all_f32, build_as, build_bytes_as, GgufModel, Skeleton};

/// A variant's change of a llama.cpp file's shape.
type Reshape = fn(&Skeleton) -> Skeleton;

/// The storage type a variant gives each tensor, by name and ggml dims.
pub type TypeOf = fn(&str, &[u64]) -> GgmlType;

/// A file kestrel derives from one of llama.cpp's (llama.cpp's logits for it are computed on the
/// bytes [`Variant::bytes`] writes): other storage types, and/or another shape of the model.
pub struct Variant {
    types: TypeOf,
    reshape: Option<fn(&Skeleton) -> Skeleton>,
}

/// Every matrix whose rows are whole 256-value super-blocks in `ty`.
fn matrices_as(ty: GgmlType, dims: &[u64]) -> GgmlType {
    if dims.len() >= 2 && dims[0].is_multiple_of(256) {
        ty
    } else {
        GgmlType::F32
    }
}

fn experts_mxfp4(name: &str, _: &[u64]) -> GgmlType {
    if name.contains("_exps.weight") {
        GgmlType::MXFP4
    } else {
        GgmlType::F32
    }
}

/// The variants, by file stem, with the stem of the llama.cpp file each comes from:
/// - `<stem>-mxfp4`: `<stem>` with its expert matrices in MXFP4 (gpt-oss's real files store them
///   so);
/// - `<stem>-tq1_0`, `<stem>-tq2_0`: `<stem>` with every matrix of 256-value rows in the ternary
///   type (quantized by kestrel's reference quantizer, byte for byte ggml's);
/// - `deepseek2-moe-h4`: llama.cpp's deepseek2 file (absorbed multi-head latent attention, one
///   head) with 4 query heads, as real DeepSeek files have many;
/// - `deepseek2-moe-h4-kvb`: the same in the older decompressed form (`attn_kv_b`, 4 KV heads
///   of key length 192 and value length 128, no `*_mla` keys);
/// - `deepseek2-moe-h4-top1`: `deepseek2-moe-h4` choosing one of its two experts per token
///   (so the selection bias `exp_probs_b` decides, as in DeepSeek V3), weights scaled by 2.5.
/// - `nemotron_h_moe-experts`: llama.cpp's nemotron_h_moe file (test-llama-archs writes it
///   without experts) with its FFN layer made a mixture of experts as real Nemotron-H MoE files
///   have it: a router over 4 relu² experts of 96 (2 used, sigmoid routing, the `exp_probs_b`
///   selection bias, weights normalized and scaled by 2.5, per-expert scales) and a relu²
///   shared expert of 128; that layer moved first and the attention layer last, so every
///   token's routing reaches the last position's logits.
/// - `deci-dense-nas`: llama.cpp's deci file grown to 7 layers of the kinds real
///   Llama-3.1-Nemotron NAS files mix: attention with 2 KV heads, a "linear attention" layer (no
///   KV heads), attention with 1 KV head, an attention-free layer, a dummy layer (no heads, no
///   FFN), attention without an FFN (which llama.cpp leaves out whole), attention with 1 KV
///   head; the linear layer carries an `attn_output.bias` llama.cpp loads but does not apply.
/// - `mistral3-dense-temp`: llama.cpp's mistral3 file with Ministral 3's long-context settings
///   at a small scale: YaRN ×4 over an original context of 8 with a log multiplier of 0.7, and
///   Llama 4's attention temperature 0.1 (so the queries of positions 8 and on are scaled).
/// - `openelm-dense-layers`: llama.cpp's openelm file with 3 layers of different head, KV head
///   and FFN sizes, as real OpenELM files have them (2/1/256, 4/2/384, 3/3/512).
/// - `nemotron_h_moe-latent`: `nemotron_h_moe-experts` with its experts in a latent space of 64,
///   as Nemotron 3 Super has them (`moe_latent_size`, `ffn_latent_down`/`_up` around the
///   experts; the router and shared expert on the full width).
/// - `qwen3vl-dense-s242020`: llama.cpp's qwen3vl file with real Qwen3-VL's M-RoPE sections
///   (interleaved 24/20/20 over its 64 pairs), which leave pairs 61 and 62 to the fourth axis
///   (position 0 for text: unrotated; slow pairs, so barely visible in the logits);
/// - `qwen3vl-dense-s444012`: sections 4/4/4/12, whose fourth axis takes pairs 12-23, 36-47
///   and 60-63, fast ones among them (KL divergence 0.1+ from rotating them).
pub fn variant(stem: &str) -> Option<(&str, Variant)> {
    if let Some(base) = stem.strip_suffix("-mxfp4") {
        let v = Variant {
            types: experts_mxfp4,
            reshape: None,
        };
        return Some((base, v));
    }
    let ternary: Option<(&str, TypeOf)> = match stem.rsplit_once('-') {
        Some((base, "tq1_0")) => Some((base, |_, d| matrices_as(GgmlType::TQ1_0, d))),
        Some((base, "tq2_0")) => Some((base, |_, d| matrices_as(GgmlType::TQ2_0, d))),
        _ => None,
    };
    if let Some((base, types)) = ternary {
        let v = Variant {
            types,
            reshape: None,
        };
        return Some((base, v));
    }
    let sections: Option<fn(&Skeleton) -> Skeleton> = match stem {
        "qwen3vl-dense-s242020" => Some(|s| qwen3vl_sections(s, [24, 20, 20, 0])),
        "qwen3vl-dense-s444012" => Some(|s| qwen3vl_sections(s, [4, 4, 4, 12])),
        _ => None,
    };
    if let Some(reshape) = sections {
        let v = Variant {
            types: all_f32,
            reshape: Some(reshape),
        };
        return Some(("qwen3vl-dense", v));
    }
    // Reshaped variants of one llama.cpp file each: (stem, base stem, reshape).
    let reshaped: [(&str, &str, Reshape); 5] = [
        (
            "mistral3-dense-temp",
            "mistral3-dense",
            mistral3_temperature,
        ),
        ("openelm-dense-layers", "openelm-dense", openelm_layers),
        ("deci-dense-nas", "deci-dense", deci_nas),
        (
            "nemotron_h_moe-latent",
            "nemotron_h_moe-dense",
            nemotron_h_latent,
        ),
        (
            "nemotron_h_moe-experts",
            "nemotron_h_moe-dense",
            nemotron_h_experts,
        ),
    ];
    if let Some(&(_, base, reshape)) = reshaped.iter().find(|(s, _, _)| *s == stem) {
        let v = Variant {
            types: all_f32,
            reshape: Some(reshape),
        };
        return Some((base, v));
    }
    let reshape: fn(&Skeleton) -> Skeleton = match stem {
        "deepseek2-moe-h4" => |s| deepseek2_heads(s, 4, false),
        "deepseek2-moe-h4-kvb" => |s| deepseek2_heads(s, 4, true),
        "deepseek2-moe-h4-top1" => |s| deepseek2_top1(&deepseek2_heads(s, 4, false)),
        _ => return None,
    };
    Some((
        "deepseek2-moe",
        Variant {
            types: all_f32,
            reshape: Some(reshape),
        },
    ))
}

impl Variant {
    fn skeleton(&self, base: &Skeleton) -> Skeleton {
        match self.reshape {
            Some(f) => f(base),
            None => Skeleton {
                metadata: base.metadata.clone(),
                tensors: base.tensors.clone(),
            },
        }
    }

    /// The variant's GGUF bytes (for llama.cpp to read).
    pub fn bytes(&self, base: &Skeleton, seed: u64, stdev: f32) -> Vec<u8> {
        build_bytes_as(&self.skeleton(base), seed, stdev, self.types)
    }

    /// The variant's model in memory.
    pub fn model(&self, base: &Skeleton, seed: u64, stdev: f32) -> GgufModel {
        build_as(&self.skeleton(base), seed, stdev, self.types)
    }
}

/// llama.cpp's one-head deepseek2 file with `n_head` heads: the absorbed form (`attn_k_b`,
/// `attn_v_b` per head, one latent KV head), or the decompressed one (`attn_kv_b`, a KV head
/// per head, plain key and value lengths). Weights are drawn by name as llama.cpp draws them.
fn deepseek2_heads(s: &Skeleton, n_head: u64, decompressed: bool) -> Skeleton {
    let u32_of = |key: &str| {
        s.metadata.iter().find_map(|(k, v)| match v {
            MetadataValue::U32(x) if k == key => Some(u64::from(*x)),
            _ => None,
        })
    };
    let k_mla = u32_of("deepseek2.attention.key_length_mla").expect("key_length_mla");
    let v_mla = u32_of("deepseek2.attention.value_length_mla").expect("value_length_mla");
    let rope = u32_of("deepseek2.rope.dimension_count").expect("rope dims");
    let nope = k_mla - rope;
    let set = |k: &str, v: &MetadataValue| -> Option<MetadataValue> {
        let short = k.strip_prefix("deepseek2.attention.")?;
        Some(match short {
            "head_count" => MetadataValue::U32(n_head as u32),
            "head_count_kv" if decompressed => MetadataValue::U32(n_head as u32),
            "key_length" if decompressed => MetadataValue::U32(k_mla as u32),
            "value_length" if decompressed => MetadataValue::U32(v_mla as u32),
            _ => v.clone(),
        })
    };
    let metadata = s
        .metadata
        .iter()
        .filter(|(k, _)| !(decompressed && k.ends_with("_length_mla")))
        .map(|(k, v)| (k.clone(), set(k, v).unwrap_or_else(|| v.clone())))
        .collect();
    let mut tensors = Vec::new();
    for (name, dims) in &s.tensors {
        let (prefix, last) = name.rsplit_once(".attn_").map_or(("", ""), |(a, b)| (a, b));
        let d = match last {
            "q_b.weight" => vec![dims[0], n_head * k_mla],
            "output.weight" => vec![n_head * v_mla, dims[1]],
            "k_b.weight" if decompressed => {
                // One matrix in place of the two: the latent to each head's keys and values.
                let rank = dims[1];
                tensors.push((
                    format!("{prefix}.attn_kv_b.weight"),
                    vec![rank, n_head * (nope + v_mla)],
                ));
                continue;
            }
            "v_b.weight" if decompressed => continue,
            "k_b.weight" => vec![dims[0], dims[1], n_head],
            "v_b.weight" => vec![dims[0], dims[1], n_head],
            _ => dims.clone(),
        };
        tensors.push((name.clone(), d));
    }
    Skeleton { metadata, tensors }
}

/// `s` with one expert used per token and the routing weights scaled by 2.5.
/// `s` with these M-RoPE sections.
fn qwen3vl_sections(s: &Skeleton, sections: [i32; 4]) -> Skeleton {
    with_metadata(s, |k| {
        (k == "qwen3vl.rope.dimension_sections").then(|| MetadataValue::Array {
            element_type: ValueType::I32,
            items: sections.map(MetadataValue::I32).to_vec(),
        })
    })
}

/// `s` with the metadata values `f` gives (`None`: the value kept).
fn with_metadata(s: &Skeleton, f: impl Fn(&str) -> Option<MetadataValue>) -> Skeleton {
    let metadata = s
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), f(k).unwrap_or_else(|| v.clone())))
        .collect();
    Skeleton {
        metadata,
        tensors: s.tensors.clone(),
    }
}

/// This skeleton with each token using one of its experts (every `*.expert_used_count` 1), so
/// its router chooses (llama.cpp's files use all of theirs).
#[allow(dead_code)] // cuda_architectures.rs only
pub fn one_expert_used(s: &Skeleton) -> Skeleton {
    with_metadata(s, |k| {
        k.ends_with(".expert_used_count")
            .then_some(MetadataValue::U32(1))
    })
}

fn deepseek2_top1(s: &Skeleton) -> Skeleton {
    with_metadata(s, |k| match k {
        "deepseek2.expert_used_count" => Some(MetadataValue::U32(1)),
        "deepseek2.expert_weights_scale" => Some(MetadataValue::F32(2.5)),
        _ => None,
    })
}

/// llama.cpp's nemotron_h_moe file (attention, Mamba-2, FFN) with its first and last layers
/// swapped, and the FFN layer's `ffn_up`/`ffn_down` (and their biases and scales) replaced by a
/// router, 4 relu² experts of 96 with per-expert scales, the selection bias and a shared expert
/// of 128 (2 experts used, weights normalized, scaled by 2.5).
fn nemotron_h_experts(s: &Skeleton) -> Skeleton {
    let (n_expert, n_ff_exp, n_ff_shexp) = (4u64, 96u64, 128u64);
    let swapped = |v: &MetadataValue| match v {
        MetadataValue::Array {
            element_type,
            items,
        } if items.len() == 3 => {
            let mut items = items.clone();
            items.swap(0, 2);
            Some(MetadataValue::Array {
                element_type: *element_type,
                items,
            })
        }
        _ => None,
    };
    let s = with_metadata(s, |k| match k.strip_prefix("nemotron_h_moe.")? {
        "feed_forward_length" | "attention.head_count" | "attention.head_count_kv" => s
            .metadata
            .iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| swapped(v)),
        "expert_count" => Some(MetadataValue::U32(n_expert as u32)),
        "expert_used_count" => Some(MetadataValue::U32(2)),
        "expert_feed_forward_length" => Some(MetadataValue::U32(n_ff_exp as u32)),
        "expert_shared_feed_forward_length" => Some(MetadataValue::U32(n_ff_shexp as u32)),
        "expert_weights_norm" => Some(MetadataValue::Bool(true)),
        "expert_weights_scale" => Some(MetadataValue::F32(2.5)),
        _ => None,
    });
    let renamed = s.tensors.iter().map(|(name, dims)| {
        let name = if let Some(r) = name.strip_prefix("blk.0.") {
            format!("blk.2.{r}")
        } else if let Some(r) = name.strip_prefix("blk.2.") {
            format!("blk.0.{r}")
        } else {
            name.clone()
        };
        (name, dims)
    });
    let mut tensors = Vec::new();
    for (name, dims) in renamed {
        let Some(prefix) = name.strip_suffix(".ffn_up.weight") else {
            if !name.contains(".ffn_up.") && !name.contains(".ffn_down.") {
                tensors.push((name.clone(), dims.clone()));
            }
            continue;
        };
        let n_embd = dims[0];
        let t = |n: &str| format!("{prefix}.{n}");
        tensors.extend([
            (t("ffn_gate_inp.weight"), vec![n_embd, n_expert]),
            (t("exp_probs_b.bias"), vec![n_expert]),
            (t("ffn_up_exps.weight"), vec![n_embd, n_ff_exp, n_expert]),
            (t("ffn_down_exps.weight"), vec![n_ff_exp, n_embd, n_expert]),
            (t("ffn_up_exps.scale"), vec![n_expert]),
            (t("ffn_down_exps.scale"), vec![n_expert]),
            (t("ffn_up_shexp.weight"), vec![n_embd, n_ff_shexp]),
            (t("ffn_down_shexp.weight"), vec![n_ff_shexp, n_embd]),
            (t("ffn_up_shexp.scale"), vec![1]),
            (t("ffn_down_shexp.scale"), vec![1]),
        ]);
    }
    Skeleton {
        metadata: s.metadata,
        tensors,
    }
}

/// llama.cpp's mistral3 file with YaRN (×4, original context 8, log multiplier 0.7) and an
/// attention temperature of 0.1.
fn mistral3_temperature(s: &Skeleton) -> Skeleton {
    with_metadata(s, |k| {
        Some(match k.strip_prefix("mistral3.")? {
            "rope.scaling.type" => MetadataValue::String("yarn".into()),
            "rope.scaling.factor" => MetadataValue::F32(4.0),
            "rope.scaling.original_context_length" => MetadataValue::U32(8),
            "rope.scaling.yarn_log_multiplier" => MetadataValue::F32(0.7),
            "attention.temperature_scale" => MetadataValue::F32(0.1),
            _ => return None,
        })
    })
}

/// `s` (of architecture `arch`, llama.cpp's 2 layers) with the metadata of `layers` layers of
/// (heads, KV heads, FFN size) as per-layer arrays, its other per-layer lists grown to match
/// (their first entry repeated).
fn with_layers(s: &Skeleton, arch: &str, layers: &[(u32, u32, u32)]) -> Skeleton {
    let n = layers.len();
    let u32s = |f: fn(&(u32, u32, u32)) -> u32| MetadataValue::Array {
        element_type: ValueType::U32,
        items: layers.iter().map(|l| MetadataValue::U32(f(l))).collect(),
    };
    with_metadata(s, |k| {
        let rest = k.strip_prefix(arch)?.strip_prefix('.')?;
        Some(match rest {
            "block_count" => MetadataValue::U32(n as u32),
            "attention.head_count" => u32s(|l| l.0),
            "attention.head_count_kv" => u32s(|l| l.1),
            "feed_forward_length" => u32s(|l| l.2),
            _ => match s.metadata.iter().find(|(name, _)| name == k)?.1.clone() {
                MetadataValue::Array {
                    element_type,
                    items,
                } if items.len() == 2 => MetadataValue::Array {
                    element_type,
                    items: vec![items[0].clone(); n],
                },
                _ => return None,
            },
        })
    })
}

/// llama.cpp's openelm file with 3 layers of (heads, KV heads, FFN size) 2/1/256, 4/2/384 and
/// 3/3/512 (heads of 128).
fn openelm_layers(s: &Skeleton) -> Skeleton {
    const LAYERS: [(u64, u64, u64); 3] = [(2, 1, 256), (4, 2, 384), (3, 3, 512)];
    let s2 = with_layers(
        s,
        "openelm",
        &LAYERS.map(|(h, kv, ff)| (h as u32, kv as u32, ff as u32)),
    );
    let mut tensors = outside_blocks(s);
    for (il, &(heads, kv, ff)) in LAYERS.iter().enumerate() {
        for (name, dims) in &s.tensors {
            let Some(rest) = name.strip_prefix("blk.0.") else {
                continue;
            };
            let dims = match rest {
                "attn_qkv.weight" => vec![dims[0], (heads + 2 * kv) * 128],
                "attn_output.weight" => vec![heads * 128, dims[1]],
                "ffn_gate.weight" | "ffn_up.weight" => vec![dims[0], ff],
                "ffn_down.weight" => vec![ff, dims[1]],
                _ => dims.clone(),
            };
            tensors.push((format!("blk.{il}.{rest}"), dims));
        }
    }
    Skeleton {
        metadata: s2.metadata,
        tensors,
    }
}

/// The skeleton's tensors outside the blocks (embedding, output, norms).
fn outside_blocks(s: &Skeleton) -> Vec<(String, Vec<u64>)> {
    s.tensors
        .iter()
        .filter(|(name, _)| !name.starts_with("blk."))
        .cloned()
        .collect()
}

/// llama.cpp's deci file with the 7 layers `deci-dense-nas` describes, each layer's tensors
/// those of llama.cpp's layer 0 that the layer's kind loads (K and V at its KV head count).
fn deci_nas(s: &Skeleton) -> Skeleton {
    // (heads, KV heads, FFN size) per layer.
    const LAYERS: [(u32, u32, u32); 7] = [
        (2, 2, 384),
        (2, 0, 384),
        (2, 1, 384),
        (0, 0, 384),
        (0, 0, 0),
        (2, 2, 0),
        (2, 1, 384),
    ];
    let s2 = with_layers(s, "deci", &LAYERS);
    let layer0: Vec<(&str, &Vec<u64>)> = s
        .tensors
        .iter()
        .filter_map(|(name, d)| Some((name.strip_prefix("blk.0.")?, d)))
        .collect();
    let mut tensors = outside_blocks(s);
    for (il, &(heads, kv, ff)) in LAYERS.iter().enumerate() {
        for &(rest, dims) in &layer0 {
            let attn = rest.starts_with("attn_");
            let keep = if rest.starts_with("ffn_") {
                ff > 0
            } else if heads > 0 && kv == 0 {
                ["attn_norm.weight", "attn_output.weight", "attn_output.bias"].contains(&rest)
            } else {
                attn && heads > 0
            };
            if !keep {
                continue;
            }
            let mut dims = dims.clone();
            if rest.starts_with("attn_k.") || rest.starts_with("attn_v.") {
                // The KV projections' output width: KV heads of 128.
                let last = dims.len() - 1;
                if dims[last] > 1 {
                    dims[last] = u64::from(kv) * 128;
                }
            }
            tensors.push((format!("blk.{il}.{rest}"), dims));
        }
    }
    Skeleton {
        metadata: s2.metadata,
        tensors,
    }
}

/// [`nemotron_h_experts`] with the experts in a latent space of 64: `moe_latent_size`, a
/// projection down before them and up after, the experts' matrices 64 wide.
fn nemotron_h_latent(s: &Skeleton) -> Skeleton {
    let latent = 64u64;
    let s = nemotron_h_experts(s);
    let mut metadata = s.metadata;
    metadata.push((
        "nemotron_h_moe.moe_latent_size".into(),
        MetadataValue::U32(latent as u32),
    ));
    let mut tensors = Vec::new();
    for (name, dims) in s.tensors {
        if let Some(prefix) = name.strip_suffix(".ffn_up_exps.weight") {
            let n_embd = dims[0];
            tensors.push((
                format!("{prefix}.ffn_latent_down.weight"),
                vec![n_embd, latent],
            ));
            tensors.push((
                format!("{prefix}.ffn_latent_up.weight"),
                vec![latent, n_embd],
            ));
            tensors.push((name, vec![latent, dims[1], dims[2]]));
        } else if name.ends_with(".ffn_down_exps.weight") {
            tensors.push((name, vec![dims[0], latent, dims[2]]));
        } else {
            tensors.push((name, dims));
        }
    }
    Skeleton { metadata, tensors }
}

/// `s` (of architecture `arch`) with one more block on top, a copy of the last one's shapes,
/// declared a NextN (multi-token prediction) block: `block_count` + 1, `nextn_predict_layers`
/// 1, every per-layer list one longer. The other tensors keep their names, so their values.
pub fn with_nextn_block(s: &Skeleton, arch: &str) -> Skeleton {
    let count = format!("{arch}.block_count");
    let n = s
        .metadata
        .iter()
        .find_map(|(k, v)| match v {
            MetadataValue::U32(x) if *k == count => Some(*x as usize),
            _ => None,
        })
        .expect("block_count");
    let metadata = s
        .metadata
        .iter()
        .map(|(k, v)| {
            let v = match v {
                _ if *k == count => MetadataValue::U32(n as u32 + 1),
                _ if *k == format!("{arch}.nextn_predict_layers") => MetadataValue::U32(1),
                MetadataValue::Array {
                    element_type,
                    items,
                } if items.len() == n && k.starts_with(arch) => {
                    let mut items = items.clone();
                    items.push(items[n - 1].clone());
                    MetadataValue::Array {
                        element_type: *element_type,
                        items,
                    }
                }
                v => v.clone(),
            };
            (k.clone(), v)
        })
        .collect();
    let last = format!("blk.{}.", n - 1);
    let mut tensors = s.tensors.clone();
    for (name, dims) in &s.tensors {
        if let Some(rest) = name.strip_prefix(&last) {
            tensors.push((format!("blk.{n}.{rest}"), dims.clone()));
        }
    }
    Skeleton { metadata, tensors }
}

impl Variant {
    /// The variant's skeleton (before random values).
    pub fn skeleton_of(&self, base: &Skeleton) -> Skeleton {
        self.skeleton(base)
    }
}

/// `s` with its per-layer integer array `key` stored as booleans, as llama.cpp's converter
/// writes such flags (`test-llama-archs` writes integers).
pub fn with_bool_array(s: &Skeleton, key: &str) -> Skeleton {
    with_metadata(s, |k| {
        if k != key {
            return None;
        }
        s.metadata
            .iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| match v {
                MetadataValue::Array { items, .. } => Some(MetadataValue::Array {
                    element_type: ValueType::Bool,
                    items: items
                        .iter()
                        .map(|x| {
                            MetadataValue::Bool(!matches!(
                                x,
                                MetadataValue::U32(0) | MetadataValue::I32(0)
                            ))
                        })
                        .collect(),
                }),
                _ => None,
            })
    })
}
