//! llama.cpp's random-weight architecture files, rebuilt without llama.cpp.
//!
//! `test-llama-archs` fills every tensor from `std::mt19937` seeded with `seed ^
//! std::hash<std::string>(name)` through `std::normal_distribution<float>(0, stdev)` (libstdc++:
//! Marsaglia's polar method over `generate_canonical<float>`). Those three are reproduced here
//! bit for bit, so a file's weights follow from its seed, deviation and tensor list; the tensor
//! list and metadata of each architecture kestrel matches are committed as `skeletons.json`
//! (written from llama.cpp's own files by this module). The rebuilt file has the same metadata
//! and the same tensor values as llama.cpp's, so llama.cpp's logits on its file are the logits
//! of the rebuilt one: CI needs no llama.cpp.

use std::collections::BTreeMap;
use std::path::Path;

use kestrel_gguf::{GgmlType, GgufFile, GgufModel, GgufWriter, MetadataValue, Value, ValueType};
use serde_json::{json, Value as Json};

/// `std::mt19937`.
struct Mt19937 {
    x: [u32; 624],
    i: usize,
}

impl Mt19937 {
    fn new(seed: u32) -> Mt19937 {
        let mut x = [0u32; 624];
        x[0] = seed;
        for i in 1..624 {
            x[i] = 1_812_433_253u32
                .wrapping_mul(x[i - 1] ^ (x[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { x, i: 624 }
    }

    fn next_u32(&mut self) -> u32 {
        if self.i >= 624 {
            for k in 0..624 {
                let y = (self.x[k] & 0x8000_0000) | (self.x[(k + 1) % 624] & 0x7fff_ffff);
                let mut v = self.x[(k + 397) % 624] ^ (y >> 1);
                if y & 1 != 0 {
                    v ^= 0x9908_b0df;
                }
                self.x[k] = v;
            }
            self.i = 0;
        }
        let mut y = self.x[self.i];
        self.i += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// libstdc++'s `generate_canonical<float, 24>`: one draw, divided in f32, kept below 1.
    fn canonical(&mut self) -> f32 {
        let r = self.next_u32() as f32 / 4_294_967_296.0f32;
        if r >= 1.0 {
            f32::from_bits(1.0f32.to_bits() - 1)
        } else {
            r
        }
    }
}

/// libstdc++'s `std::_Hash_bytes` (64-bit), as `std::hash<std::string>` calls it.
fn hash_bytes(b: &[u8], seed: u64) -> u64 {
    let mul: u64 = (0xc6a4_a793u64 << 32) + 0x5bd1_e995;
    let shift_mix = |v: u64| v ^ (v >> 47);
    let aligned = b.len() & !7;
    let mut h = seed ^ (b.len() as u64).wrapping_mul(mul);
    for c in b[..aligned].chunks_exact(8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let d = shift_mix(u64::from_le_bytes(w).wrapping_mul(mul)).wrapping_mul(mul);
        h = (h ^ d).wrapping_mul(mul);
    }
    if b.len() & 7 != 0 {
        let d = b[aligned..]
            .iter()
            .rev()
            .fold(0u64, |d, &x| (d << 8) + x as u64);
        h = (h ^ d).wrapping_mul(mul);
    }
    shift_mix(shift_mix(h).wrapping_mul(mul))
}

/// The values `test-llama-archs` gives tensor `name` of `n` values.
pub fn tensor_values(name: &str, n: usize, seed: u64, stdev: f32) -> Vec<f32> {
    let s = seed ^ hash_bytes(name.as_bytes(), 0xc70f_6907);
    // mt19937 keeps the seed modulo 2^32.
    let mut g = Mt19937::new(s as u32);
    let negative = name.contains("ssm_a");
    let mut saved = None;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let v = match saved.take() {
            Some(v) => v,
            None => {
                let (x, y, r2) = loop {
                    let x = 2.0f32 * g.canonical() - 1.0;
                    let y = 2.0f32 * g.canonical() - 1.0;
                    let r2 = x * x + y * y;
                    if r2 <= 1.0 && r2 != 0.0 {
                        break (x, y, r2);
                    }
                };
                let mult = (-2.0f32 * r2.ln() / r2).sqrt();
                saved = Some(x * mult);
                y * mult
            }
        };
        let v = v * stdev + 0.0;
        out.push(if negative { -v.abs() } else { v });
    }
    out
}

fn type_name(t: ValueType) -> &'static str {
    t.name()
}

fn type_of(name: &str) -> Option<ValueType> {
    (0..13)
        .filter_map(ValueType::from_id)
        .find(|t| t.name() == name)
}

fn scalar_json(v: &MetadataValue) -> Json {
    match v {
        MetadataValue::U8(x) => json!(x),
        MetadataValue::I8(x) => json!(x),
        MetadataValue::U16(x) => json!(x),
        MetadataValue::I16(x) => json!(x),
        MetadataValue::U32(x) => json!(x),
        MetadataValue::I32(x) => json!(x),
        MetadataValue::U64(x) => json!(x),
        MetadataValue::I64(x) => json!(x),
        // f32 through f64 exactly; JSON cannot hold infinities, so they are strings.
        MetadataValue::F32(x) if x.is_finite() => json!(*x as f64),
        MetadataValue::F32(x) => json!(x.to_string()),
        MetadataValue::F64(x) => json!(x),
        MetadataValue::Bool(x) => json!(x),
        MetadataValue::String(s) => json!(s),
        MetadataValue::Array { .. } => Json::Null,
    }
}

fn scalar_from(t: ValueType, j: &Json) -> Option<MetadataValue> {
    let int = || j.as_i64();
    Some(match t {
        ValueType::U8 => MetadataValue::U8(int()? as u8),
        ValueType::I8 => MetadataValue::I8(int()? as i8),
        ValueType::U16 => MetadataValue::U16(int()? as u16),
        ValueType::I16 => MetadataValue::I16(int()? as i16),
        ValueType::U32 => MetadataValue::U32(j.as_u64()? as u32),
        ValueType::I32 => MetadataValue::I32(int()? as i32),
        ValueType::U64 => MetadataValue::U64(j.as_u64()?),
        ValueType::I64 => MetadataValue::I64(int()?),
        ValueType::F32 => MetadataValue::F32(match j.as_str() {
            Some(s) => s.parse().ok()?,
            None => j.as_f64()? as f32,
        }),
        ValueType::F64 => MetadataValue::F64(j.as_f64()?),
        ValueType::Bool => MetadataValue::Bool(j.as_bool()?),
        ValueType::String => MetadataValue::String(j.as_str()?.to_string()),
        ValueType::Array => return None,
    })
}

/// `[type, value]`, or `["array", element type, [items]]`, or `["fill", element type, item, n]`
/// for an array of one repeated item (most of the files' 512-entry arrays), or
/// `["numbered", prefix, n]` for the strings `prefix0 .. prefix{n-1}` (the test vocabulary).
fn value_json(v: &MetadataValue) -> Json {
    match v {
        MetadataValue::Array {
            element_type,
            items,
        } => {
            let et = type_name(*element_type);
            let numbered = |prefix: &str| {
                items.iter().enumerate().all(
                    |(i, s)| matches!(s, MetadataValue::String(s) if *s == format!("{prefix}{i}")),
                )
            };
            if items.len() > 4 && numbered("tok_") {
                return json!(["numbered", "tok_", items.len()]);
            }
            match items.first() {
                Some(first) if items.len() > 4 && items.iter().all(|i| i == first) => {
                    json!(["fill", et, scalar_json(first), items.len()])
                }
                _ => json!([
                    "array",
                    et,
                    items.iter().map(scalar_json).collect::<Vec<_>>()
                ]),
            }
        }
        other => json!([type_name(other.value_type()), scalar_json(other)]),
    }
}

fn value_from(j: &Json) -> Option<MetadataValue> {
    let a = j.as_array()?;
    let tag = a.first()?.as_str()?;
    match tag {
        "numbered" => {
            let prefix = a.get(1)?.as_str()?;
            let n = a.get(2)?.as_u64()? as usize;
            Some(MetadataValue::Array {
                element_type: ValueType::String,
                items: (0..n)
                    .map(|i| MetadataValue::String(format!("{prefix}{i}")))
                    .collect(),
            })
        }
        "array" | "fill" => {
            let et = type_of(a.get(1)?.as_str()?)?;
            let items = if tag == "fill" {
                let item = scalar_from(et, a.get(2)?)?;
                vec![item; a.get(3)?.as_u64()? as usize]
            } else {
                a.get(2)?
                    .as_array()?
                    .iter()
                    .map(|i| scalar_from(et, i))
                    .collect::<Option<Vec<_>>>()?
            };
            Some(MetadataValue::Array {
                element_type: et,
                items,
            })
        }
        t => scalar_from(type_of(t)?, a.get(1)?),
    }
}

/// One file's metadata and tensor list (names, ggml dims, all F32).
pub struct Skeleton {
    metadata: Vec<(String, MetadataValue)>,
    tensors: Vec<(String, Vec<u64>)>,
}

/// The skeleton of a llama.cpp file (its tensors must all be F32, as `test-llama-archs` writes
/// them for the families kestrel matches).
pub fn skeleton_of(model: &GgufModel) -> Result<Skeleton, String> {
    let metadata = model
        .metadata()
        .iter()
        .map(|(k, v): (&str, Value<'_>)| (k.to_string(), v.to_owned_value()))
        .collect();
    let mut tensors = Vec::new();
    for t in model.tensors() {
        if t.info.ggml_type() != GgmlType::F32 {
            return Err(format!("{} is {}", t.info.name(), t.info.ggml_type()));
        }
        tensors.push((t.info.name().to_string(), t.info.dims().to_vec()));
    }
    Ok(Skeleton { metadata, tensors })
}

/// Skeletons as JSON: `{"common": [[key, value]...], "files": {stem: {"metadata": [[key,
/// value]...], "tensors": [[name, dims]...]}}}`; a key of the architecture's own is written
/// `.rest` for `{arch}.rest`, and the pairs every file has alike are written once, in `common`.
pub fn skeletons_json(skeletons: &BTreeMap<String, Skeleton>) -> String {
    let short = |s: &Skeleton| -> Vec<(String, Json)> {
        let arch = s
            .metadata
            .iter()
            .find(|(k, _)| k == "general.architecture")
            .and_then(|(_, v)| match v {
                MetadataValue::String(a) => Some(format!("{a}.")),
                _ => None,
            })
            .unwrap_or_default();
        s.metadata
            .iter()
            .map(|(k, v)| {
                let k = match k.strip_prefix(&arch) {
                    Some(rest) if !arch.is_empty() => format!(".{rest}"),
                    _ => k.clone(),
                };
                (k, value_json(v))
            })
            .collect()
    };
    /// A file's stem, its metadata with short keys, and its skeleton.
    type Entry<'a> = (&'a String, Vec<(String, Json)>, &'a Skeleton);
    let all: Vec<Entry<'_>> = skeletons.iter().map(|(k, s)| (k, short(s), s)).collect();
    let common: Vec<(String, Json)> = match all.first() {
        Some((_, first, _)) => first
            .iter()
            .filter(|kv| all.iter().all(|(_, md, _)| md.contains(kv)))
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    let files: serde_json::Map<String, Json> = all
        .iter()
        .map(|(stem, md, s)| {
            let own: Vec<Json> = md
                .iter()
                .filter(|kv| !common.contains(kv))
                .map(|(k, v)| json!([k, v]))
                .collect();
            let ts: Vec<Json> = s.tensors.iter().map(|(n, d)| json!([n, d])).collect();
            ((*stem).clone(), json!({ "metadata": own, "tensors": ts }))
        })
        .collect();
    let common: Vec<Json> = common.iter().map(|(k, v)| json!([k, v])).collect();
    let mut out =
        serde_json::to_string(&json!({ "common": common, "files": files })).expect("JSON");
    out.push('\n');
    out
}

/// Parses `skeletons.json`.
pub fn read_skeletons(path: &Path) -> BTreeMap<String, Skeleton> {
    let text = std::fs::read_to_string(path).expect("skeletons.json");
    let doc: Json = serde_json::from_str(&text).expect("skeletons.json is JSON");
    let common = doc["common"].as_array().expect("common");
    let mut out = BTreeMap::new();
    for (stem, s) in doc["files"].as_object().expect("files") {
        let own = s["metadata"].as_array().expect("metadata");
        let arch = own
            .iter()
            .chain(common)
            .find(|kv| kv[0] == "general.architecture")
            .and_then(|kv| kv[1][1].as_str())
            .expect("general.architecture")
            .to_string();
        let metadata = own
            .iter()
            .chain(common)
            .map(|kv| {
                let key = kv[0].as_str().expect("key");
                let key = match key.strip_prefix('.') {
                    Some(rest) => format!("{arch}.{rest}"),
                    None => key.to_string(),
                };
                let v = value_from(&kv[1]).unwrap_or_else(|| panic!("{stem}: bad value {key}"));
                (key, v)
            })
            .collect();
        let tensors = s["tensors"]
            .as_array()
            .expect("tensors")
            .iter()
            .map(|t| {
                let dims = t[1].as_array().expect("dims");
                (
                    t[0].as_str().expect("name").to_string(),
                    dims.iter().map(|d| d.as_u64().expect("dim")).collect(),
                )
            })
            .collect();
        out.insert(stem.clone(), Skeleton { metadata, tensors });
    }
    out
}

/// The file `test-llama-archs -s seed -d stdev` writes for this skeleton, in memory.
pub fn build(s: &Skeleton, seed: u64, stdev: f32) -> GgufModel {
    build_as(s, seed, stdev, all_f32)
}

/// [`build`] with the tensors `ty` names stored in that type (quantized from the same values by
/// kestrel's reference quantizer); the GGUF bytes, for llama.cpp to read too.
pub fn build_bytes_as(
    s: &Skeleton,
    seed: u64,
    stdev: f32,
    ty: impl Fn(&str, &[u64]) -> GgmlType,
) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (k, v) in &s.metadata {
        w.add_metadata(k, v.clone());
    }
    for (name, dims) in &s.tensors {
        let n = dims.iter().product::<u64>() as usize;
        let values = tensor_values(name, n, seed, stdev);
        let t = ty(name, dims);
        let bytes = if t == GgmlType::F32 {
            values.iter().flat_map(|v| v.to_le_bytes()).collect()
        } else {
            let mut out = vec![0u8; n / t.block_size() * t.type_size()];
            kestrel_gguf::quant::quantize(t, &values, &mut out).expect("quantize");
            out
        };
        w.add_tensor(name, t, dims, bytes).expect("tensor");
    }
    w.to_bytes().expect("GGUF")
}

fn build_as(
    s: &Skeleton,
    seed: u64,
    stdev: f32,
    ty: impl Fn(&str, &[u64]) -> GgmlType,
) -> GgufModel {
    if s.tensors.iter().any(|(n, d)| ty(n, d) != GgmlType::F32) {
        let bytes = build_bytes_as(s, seed, stdev, ty);
        let file = GgufFile::from_bytes(bytes).expect("GGUF parses");
        return GgufModel::from_shards(vec![file], Path::new("rebuilt.gguf")).expect("model");
    }
    let mut w = GgufWriter::new();
    for (k, v) in &s.metadata {
        w.add_metadata(k, v.clone());
    }
    for (name, dims) in &s.tensors {
        let n = dims.iter().product::<u64>() as usize;
        let bytes: Vec<u8> = tensor_values(name, n, seed, stdev)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        w.add_tensor(name, GgmlType::F32, dims, bytes)
            .expect("tensor");
    }
    let file = GgufFile::from_bytes(w.to_bytes().expect("GGUF")).expect("GGUF parses");
    GgufModel::from_shards(vec![file], Path::new("rebuilt.gguf")).expect("model")
}

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

fn all_f32(_: &str, _: &[u64]) -> GgmlType {
    GgmlType::F32
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
    let mut tensors: Vec<(String, Vec<u64>)> = s
        .tensors
        .iter()
        .filter(|(name, _)| !name.starts_with("blk."))
        .cloned()
        .collect();
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
    let mut tensors: Vec<(String, Vec<u64>)> = s
        .tensors
        .iter()
        .filter(|(name, _)| !name.starts_with("blk."))
        .cloned()
        .collect();
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
