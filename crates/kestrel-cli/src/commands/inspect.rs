//! `kestrel inspect FILE`: metadata, tensor table, type histogram, parameter and byte totals,
//! architecture and tokenizer summary; `--json` for one machine-readable document.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use kestrel_gguf::{GgmlType, GgufModel, Metadata, Value};
use serde_json::{json, Map, Value as Json};

use crate::output::print;

/// Arrays longer than this are summarized unless `--full`.
const ARRAY_PREVIEW: usize = 8;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The GGUF file (any shard of a split model).
    pub file: PathBuf,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Print long arrays (token lists, merges) in full.
    #[arg(long)]
    pub full: bool,
    /// Skip the tensor table in text output.
    #[arg(long)]
    pub no_tensors: bool,
}

pub fn run(args: &InspectArgs) -> Result<(), String> {
    let model = GgufModel::open(&args.file).map_err(|e| e.to_string())?;
    let text = if args.json {
        let doc = to_json(&model, args);
        let mut s = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        s.push('\n');
        s
    } else {
        to_text(&model, args)
    };
    print(&text)
}

fn file_size(model: &GgufModel) -> u64 {
    model.shards().iter().map(|f| f.bytes().len() as u64).sum()
}

fn type_histogram(model: &GgufModel) -> BTreeMap<GgmlType, (usize, u64)> {
    let mut h: BTreeMap<GgmlType, (usize, u64)> = BTreeMap::new();
    for t in model.tensors() {
        let e = h.entry(t.info.ggml_type()).or_default();
        e.0 += 1;
        e.1 += t.info.n_bytes();
    }
    h
}

fn human(n: u64) -> String {
    let f = n as f64;
    if f >= 1e9 {
        format!("{:.2}G", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.2}M", f / 1e6)
    } else if f >= 1e3 {
        format!("{:.2}K", f / 1e3)
    } else {
        n.to_string()
    }
}

fn mib(n: u64) -> String {
    format!("{:.2} MiB", n as f64 / (1024.0 * 1024.0))
}

/// A short rendering of a value for the text listing.
fn show(v: &Value<'_>, full: bool) -> String {
    match v {
        Value::String(b) => {
            let s = String::from_utf8_lossy(b);
            let mut out = format!("{s:?}");
            if !full && out.chars().count() > 100 {
                out = out.chars().take(97).collect::<String>() + "...";
            }
            out
        }
        Value::Array(a) => {
            let n = a.len();
            let shown = if full { n } else { n.min(ARRAY_PREVIEW) };
            let items: Vec<String> = a.iter().take(shown).map(|v| show(&v, full)).collect();
            let more = if shown < n {
                format!(", ... {} more", n - shown)
            } else {
                String::new()
            };
            format!("[{}{more}]", items.join(", "))
        }
        Value::F32(f) => format!("{f}"),
        Value::F64(f) => format!("{f}"),
        Value::Bool(b) => b.to_string(),
        other => other
            .as_integer()
            .map(|i| i.to_string())
            .unwrap_or_default(),
    }
}

fn to_text(model: &GgufModel, args: &InspectArgs) -> String {
    let md = model.metadata();
    let first = &model.shards()[0];
    let mut s = String::new();
    let _ = writeln!(s, "file: {}", args.file.display());
    let _ = writeln!(
        s,
        "GGUF v{}, {} shard(s), {} bytes, alignment {}, data section at offset {}",
        first.version(),
        model.shards().len(),
        file_size(model),
        first.alignment(),
        first.data_offset()
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "metadata ({} keys):", md.len());
    let width = md.keys().map(str::len).max().unwrap_or(0);
    for (k, v) in md.iter() {
        let _ = writeln!(
            s,
            "  {k:width$}  {:<24} {}",
            v.type_description(),
            show(&v, args.full)
        );
    }
    if !args.no_tensors {
        let _ = writeln!(s);
        let _ = writeln!(s, "tensors ({}):", model.n_tensors());
        let nw = model
            .tensors()
            .map(|t| t.info.name().len())
            .max()
            .unwrap_or(4);
        let _ = writeln!(
            s,
            "  {:>4}  {:nw$}  {:<7}  {:<22}  {:>12}",
            "#", "name", "type", "shape", "bytes"
        );
        for (i, t) in model.tensors().enumerate() {
            let shape = format!("{:?}", t.info.dims());
            let _ = writeln!(
                s,
                "  {i:>4}  {:nw$}  {:<7}  {shape:<22}  {:>12}",
                t.info.name(),
                t.info.ggml_type().name(),
                t.info.n_bytes()
            );
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "types:");
    for (t, (n, b)) in type_histogram(model) {
        let _ = writeln!(s, "  {:<7} {n:>5} tensors  {:>12}", t.name(), mib(b));
    }
    let _ = writeln!(
        s,
        "total: {} tensors, {} parameters ({}), {} of tensor data ({:.2} bits per weight)",
        model.n_tensors(),
        model.n_params(),
        human(model.n_params()),
        mib(model.tensor_bytes()),
        model.tensor_bytes() as f64 * 8.0 / model.n_params().max(1) as f64
    );
    let _ = writeln!(s);
    let _ = write!(s, "{}", summary_text(&md));
    s
}

/// Architecture and tokenizer facts worth a line each.
fn summary(md: &Metadata<'_>) -> (Map<String, Json>, Map<String, Json>) {
    let mut arch = Map::new();
    let name = md.architecture().unwrap_or("unknown");
    arch.insert("architecture".into(), json!(name));
    for k in [
        "general.name",
        "general.file_type",
        "general.quantization_version",
    ] {
        if let Some(v) = md.get(k) {
            arch.insert(
                k.trim_start_matches("general.").into(),
                value_json(&v, false),
            );
        }
    }
    for field in [
        "context_length",
        "embedding_length",
        "block_count",
        "feed_forward_length",
        "attention.head_count",
        "attention.head_count_kv",
        "attention.key_length",
        "attention.value_length",
        "attention.layer_norm_rms_epsilon",
        "attention.sliding_window",
        "rope.freq_base",
        "rope.dimension_count",
        "rope.scaling.type",
        "vocab_size",
    ] {
        if let Some(v) = md.arch_get(field) {
            arch.insert(field.into(), value_json(&v, false));
        }
    }
    let mut tok = Map::new();
    for (key, label) in [
        ("tokenizer.ggml.model", "model"),
        ("tokenizer.ggml.pre", "pre"),
        ("tokenizer.ggml.bos_token_id", "bos_token_id"),
        ("tokenizer.ggml.eos_token_id", "eos_token_id"),
        ("tokenizer.ggml.eot_token_id", "eot_token_id"),
        ("tokenizer.ggml.padding_token_id", "padding_token_id"),
        ("tokenizer.ggml.unknown_token_id", "unknown_token_id"),
        ("tokenizer.ggml.add_bos_token", "add_bos_token"),
        ("tokenizer.ggml.add_eos_token", "add_eos_token"),
        ("tokenizer.ggml.add_space_prefix", "add_space_prefix"),
    ] {
        if let Some(v) = md.get(key) {
            tok.insert(label.into(), value_json(&v, false));
        }
    }
    if let Ok(a) = md.get_array("tokenizer.ggml.tokens") {
        tok.insert("vocab_size".into(), json!(a.len()));
    }
    if let Ok(a) = md.get_array("tokenizer.ggml.merges") {
        tok.insert("merges".into(), json!(a.len()));
    }
    let templates: Vec<&str> = md
        .keys()
        .filter(|k| k.starts_with("tokenizer.chat_template"))
        .collect();
    tok.insert("chat_templates".into(), json!(templates));
    (arch, tok)
}

fn summary_text(md: &Metadata<'_>) -> String {
    let (arch, tok) = summary(md);
    let line = |m: &Map<String, Json>| {
        m.iter()
            .map(|(k, v)| {
                format!(
                    "{k}={}",
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string())
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("architecture: {}\ntokenizer: {}\n", line(&arch), line(&tok))
}

/// A metadata value as JSON; long arrays become a summary unless `full`.
fn value_json(v: &Value<'_>, full: bool) -> Json {
    match v {
        Value::String(b) => json!(String::from_utf8_lossy(b)),
        Value::Bool(b) => json!(b),
        // Print an f32 by its shortest decimal form (1e-6, not 9.99999997e-7).
        Value::F32(f) => json!(f.to_string().parse::<f64>().unwrap_or(f64::from(*f))),
        Value::F64(f) => json!(f),
        Value::Array(a) => {
            if full || a.len() <= ARRAY_PREVIEW {
                Json::Array(a.iter().map(|v| value_json(&v, full)).collect())
            } else {
                json!({
                    "type": "array",
                    "element_type": a.element_type().name(),
                    "len": a.len(),
                    "head": a.iter().take(ARRAY_PREVIEW).map(|v| value_json(&v, false)).collect::<Vec<_>>(),
                })
            }
        }
        other => match other.as_integer() {
            Some(i) => i64::try_from(i)
                .map(Json::from)
                .unwrap_or_else(|_| json!(i as u64)),
            None => Json::Null,
        },
    }
}

fn to_json(model: &GgufModel, args: &InspectArgs) -> Json {
    let md = model.metadata();
    let first = &model.shards()[0];
    let mut meta = Map::new();
    let mut types = Map::new();
    for (k, v) in md.iter() {
        meta.insert(k.into(), value_json(&v, args.full));
        let t = match v {
            Value::Array(a) => format!("array[{}]", a.element_type()),
            ref v => v.value_type().name().to_string(),
        };
        types.insert(k.into(), json!(t));
    }
    let tensors: Vec<Json> = model
        .tensors()
        .map(|t| {
            json!({
                "name": t.info.name(),
                "type": t.info.ggml_type().name(),
                "shape": t.info.dims(),
                "n_elements": t.info.n_elements(),
                "offset": t.info.offset(),
                "bytes": t.info.n_bytes(),
            })
        })
        .collect();
    let hist: Map<String, Json> = type_histogram(model)
        .into_iter()
        .map(|(t, (n, b))| (t.name().to_string(), json!({"tensors": n, "bytes": b})))
        .collect();
    let (arch, tok) = summary(&md);
    json!({
        "path": args.file.display().to_string(),
        "version": first.version(),
        "shards": model.shards().len(),
        "file_size": file_size(model),
        "alignment": first.alignment(),
        "data_offset": first.data_offset(),
        "metadata": meta,
        "metadata_types": types,
        "tensors": tensors,
        "type_histogram": hist,
        "n_tensors": model.n_tensors(),
        "n_params": model.n_params(),
        "tensor_bytes": model.tensor_bytes(),
        "architecture": arch,
        "tokenizer": tok,
    })
}
