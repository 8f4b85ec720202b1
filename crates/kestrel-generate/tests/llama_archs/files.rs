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

impl Skeleton {
    /// This skeleton without the tensors `drop` names.
    #[allow(dead_code)] // lora_experts.rs only
    pub fn without(&self, drop: impl Fn(&str) -> bool) -> Skeleton {
        Skeleton {
            metadata: self.metadata.clone(),
            tensors: self
                .tensors
                .iter()
                .filter(|(n, _)| !drop(n))
                .cloned()
                .collect(),
        }
    }

    /// Whether any tensor's name contains `part`.
    #[allow(dead_code)] // cuda_architectures.rs only
    pub fn has_tensor(&self, part: &str) -> bool {
        self.tensors.iter().any(|(n, _)| n.contains(part))
    }
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

fn all_f32(_: &str, _: &[u64]) -> GgmlType {
    GgmlType::F32
}

#[path = "variants.rs"]
mod variants;
// quantize_golden.rs uses the file builders only.
#[allow(unused_imports)]
pub use variants::*;
