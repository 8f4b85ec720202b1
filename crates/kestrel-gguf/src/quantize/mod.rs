//! `quantize_file`: a GGUF model re-encoded in a quantization mix (`Q4_K_M`, `Q8_0`, ...),
//! as `llama-quantize` does it: the same tensor types per tensor (llama.cpp's mixes, in
//! [`mix`]), the same metadata (every key kept in order, then `general.quantization_version`
//! and `general.file_type`), the same tensor order (by layer, then name) and the same blocks
//! (ggml's quantizers without an importance matrix), so the output is byte for byte
//! `llama-quantize`'s. Tensors stream through: the input is memory-mapped, each tensor is
//! converted in slabs of rows over `threads` threads and written out before the next.

mod ftype;
mod imatrix;
mod keep_split;
mod mix;
mod overrides;
mod prune;

use std::io::Write;
use std::path::{Path, PathBuf};

pub use ftype::FileType;
pub use imatrix::report::StatisticsReport;
pub use imatrix::{Imatrix, ImatrixEntry, ImatrixSums};
pub use overrides::KvOverride;

use crate::quant::{self, QuantError};
use crate::{GgmlType, GgufError, GgufModel, GgufStreamWriter, MetadataValue, TensorSpec, Value};
use mix::{Category, MixState, ModelFacts};

/// `general.quantization_version` as ggml writes it (`GGML_QNT_VERSION`).
pub const QUANTIZATION_VERSION: u32 = 2;

/// Rows converted at once are capped to about this many bytes of f32 values.
const SLAB_BYTES: usize = 64 << 20;

/// How to quantize.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    /// The mix.
    pub ftype: FileType,
    /// Worker threads (0: all cores).
    pub threads: usize,
    /// Allow quantized input tensors to be quantized again (`--allow-requantize`).
    pub allow_requantize: bool,
    /// Keep `output.weight` as it is (`--leave-output-tensor`).
    pub leave_output: bool,
    /// Every quantizable tensor gets the mix's default type (`--pure`).
    pub pure: bool,
    /// The importance matrix (`--imatrix`).
    pub imatrix: Option<Imatrix>,
    /// `output.weight`'s type (`--output-tensor-type`; tied token embeddings follow it).
    pub output_tensor_type: Option<GgmlType>,
    /// The token embeddings' type (`--token-embedding-type`).
    pub token_embedding_type: Option<GgmlType>,
    /// Types by tensor-name pattern (`--tensor-type PATTERN=TYPE`): the first pattern found
    /// anywhere in a quantizable tensor's name sets its type instead of the mix.
    pub tensor_types: Vec<TensorTypeRule>,
    /// Metadata set in the output (`--override-kv`), in order, before the importance
    /// matrix's keys.
    pub kv_overrides: Vec<KvOverride>,
    /// Blocks left out of the output (`--prune-layers`), the rest renumbered from 0 without
    /// gaps and `block_count` set to how many remain, as llama-quantize does (the mixes still
    /// see the input's `block_count`, as there).
    pub prune_layers: Vec<u32>,
    /// One output file per input shard, each with the tensors its shard held (`--keep-split`):
    /// tensors in shard and file order, the first file with all the metadata, every file with
    /// `split.no`, `split.count` and `split.tensors.count` appended, named
    /// `<output without .gguf>-0000N-of-0000M.gguf` (even for an unsplit input), as
    /// llama-quantize writes them.
    pub keep_split: bool,
}

/// One `--tensor-type` rule: a regular expression (lowercased, searched in the tensor name as
/// llama-quantize's `std::regex_search` does) and the type for tensors it matches.
#[derive(Clone, Debug)]
pub struct TensorTypeRule {
    /// The pattern as given (lowercased).
    pub pattern: String,
    regex: regex::Regex,
    /// The type.
    pub ggml_type: GgmlType,
}

impl TensorTypeRule {
    /// Parses `PATTERN=TYPE` as llama-quantize does: the pattern lowercased, the type by its
    /// ggml name in any case (`q8_0`, `Q4_K`, `f16`).
    ///
    /// # Errors
    /// A missing `=`, pattern or type, an unknown type, a pattern that is not a regular
    /// expression (Rust's `regex` syntax: no look-around or back-references).
    pub fn parse(arg: &str) -> Result<TensorTypeRule, QuantizeError> {
        let bad = |why: String| QuantizeError::Refused(format!("--tensor-type {arg:?}: {why}"));
        let (pattern, ty) = arg
            .split_once('=')
            .ok_or_else(|| bad("expected PATTERN=TYPE".into()))?;
        if pattern.is_empty() {
            return Err(bad("missing tensor name".into()));
        }
        if ty.is_empty() {
            return Err(bad("missing quantization type".into()));
        }
        let ggml_type = parse_ggml_type(ty).ok_or_else(|| bad(format!("unknown type {ty:?}")))?;
        let pattern = pattern.to_lowercase();
        let regex = regex::Regex::new(&pattern).map_err(|e| bad(e.to_string()))?;
        Ok(TensorTypeRule {
            pattern,
            regex,
            ggml_type,
        })
    }

    /// Whether the rule's pattern occurs in `name`.
    pub fn matches(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }
}

/// A ggml type by its name in any case (`q4_k`, `F16`), as llama-quantize's `parse_ggml_type`.
pub fn parse_ggml_type(name: &str) -> Option<GgmlType> {
    GgmlType::from_name(name)
}

impl QuantizeOptions {
    /// The mix with llama-quantize's defaults.
    pub fn new(ftype: FileType) -> QuantizeOptions {
        QuantizeOptions {
            ftype,
            threads: 0,
            allow_requantize: false,
            leave_output: false,
            pure: false,
            imatrix: None,
            output_tensor_type: None,
            token_embedding_type: None,
            tensor_types: Vec::new(),
            kv_overrides: Vec::new(),
            prune_layers: Vec::new(),
            keep_split: false,
        }
    }
}

/// What went wrong quantizing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuantizeError {
    /// The input file could not be read, or the output not written.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// A tensor could not be (de)quantized.
    #[error("tensor {tensor}: {source}")]
    Quant {
        /// The tensor.
        tensor: String,
        /// Why.
        source: QuantError,
    },
    /// The output file could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The input or the options ask for something refused (as llama-quantize refuses it).
    #[error("{0}")]
    Refused(String),
}

/// One tensor as it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorReport {
    /// Its position (1-based) and the number of tensors.
    pub index: (usize, usize),
    /// Its name.
    pub name: String,
    /// Its dims.
    pub dims: Vec<u64>,
    /// Its type in the input and in the output.
    pub from: GgmlType,
    /// Its type in the output.
    pub to: GgmlType,
    /// Bytes in the input and in the output.
    pub bytes: (u64, u64),
}

/// The whole run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuantizeReport {
    /// Tensors written.
    pub tensors: usize,
    /// Tensors converted to another type.
    pub converted: usize,
    /// Tensor bytes in and out.
    pub bytes: (u64, u64),
    /// Tensors whose rows did not fit the mix's type, given a fallback type.
    pub fallbacks: usize,
    /// The files written (one, or one per input shard with `keep_split`; none for a dry run).
    pub outputs: Vec<PathBuf>,
}

impl QuantizeReport {
    /// Counts one tensor and tells `on_tensor` of it.
    fn add(
        &mut self,
        index: (usize, usize),
        s: &TensorSpec,
        from: GgmlType,
        bytes: (u64, u64),
        on_tensor: &mut dyn FnMut(&TensorReport),
    ) {
        self.tensors += 1;
        self.converted += usize::from(from != s.ggml_type);
        self.bytes.0 += bytes.0;
        self.bytes.1 += bytes.1;
        on_tensor(&TensorReport {
            index,
            name: s.name.clone(),
            dims: s.dims.clone(),
            from,
            to: s.ggml_type,
            bytes,
        });
    }
}

fn facts(file: &GgufModel) -> ModelFacts {
    let md = file.metadata();
    let arch = md.architecture().unwrap_or("").to_string();
    let first = |field: &str| -> u32 {
        match md.get(&format!("{arch}.{field}")) {
            Some(Value::Array(a)) => a
                .to_i64_vec()
                .and_then(|v| v.first().copied())
                .map_or(0, |x| x.clamp(0, u32::MAX as i64) as u32),
            Some(v) => v
                .as_integer()
                .map_or(0, |x| x.clamp(0, u32::MAX as i128) as u32),
            None => 0,
        }
    };
    let n_head = first("attention.head_count");
    let n_head_kv = match md.contains(&format!("{arch}.attention.head_count_kv")) {
        true => first("attention.head_count_kv"),
        false => n_head,
    };
    let n_layer = first("block_count");
    ModelFacts {
        n_gqa: n_head.checked_div(n_head_kv).unwrap_or(0),
        n_expert: first("expert_count"),
        is_70b: arch == "llama" && n_layer == 80 && n_head != n_head_kv,
        n_layer,
        arch,
    }
}

/// The dims ggml counts (`ggml_n_dims`: trailing 1s dropped, at least 1).
fn n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1)
}

/// The tensors' order in llama.cpp's loader: by layer (`blk.N.`, the rest first), then name.
fn llama_order(a: &str, b: &str) -> std::cmp::Ordering {
    let layer = |s: &str| -> i64 {
        s.strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(-1)
    };
    layer(a).cmp(&layer(b)).then_with(|| a.cmp(b))
}

/// llama.cpp's `llama_tensor_get_type` for a quantizable tensor: `--token-embedding-type` and
/// `--output-tensor-type` as they are (no fallback; `per_layer_token_embd` yields to a
/// `--tensor-type` rule naming it), else the mix's default type, a matching `--tensor-type`
/// rule's instead of the mix's choice, and the fallback for rows the type cannot split.
fn type_for(
    st: &mut MixState,
    m: &ModelFacts,
    opts: &QuantizeOptions,
    name: &str,
    dims: &[u64],
) -> Result<GgmlType, QuantizeError> {
    let ft = opts.ftype;
    let cat = Category::of(name);
    let rule = opts.tensor_types.iter().find(|r| r.matches(name));
    if let (Some(e), Category::TokenEmbd) = (opts.token_embedding_type, cat) {
        if name != "per_layer_token_embd.weight" || rule.is_none() {
            return Ok(e);
        }
    }
    if let (Some(o), Category::Output) = (opts.output_tensor_type, cat) {
        return Ok(o);
    }
    let mut to = ft.default_type();
    if to.is_quantized() {
        let ne0 = dims.first().copied().unwrap_or(1);
        let ne2 = dims.get(2).copied().unwrap_or(1);
        match rule {
            Some(r) => to = r.ggml_type,
            None if !opts.pure => {
                to = mix::mix_type(st, m, to, name, ne0, ne2, ft, cat)
                    .map_err(QuantizeError::Refused)?;
            }
            None => {}
        }
        to = mix::fallback(st, to, ne0).map_err(QuantizeError::Refused)?;
    }
    Ok(to)
}

/// What a run writes: each output tensor (in llama.cpp's order) with the input tensor it comes
/// from, and the output's `block_count` when layers were pruned.
struct Plan {
    specs: Vec<TensorSpec>,
    /// The input name of each of `specs` (the same unless layers were renumbered).
    sources: Vec<String>,
    /// The input shard of each of `specs`.
    shards: Vec<usize>,
    fallbacks: usize,
    block_count: Option<u32>,
}

/// The output types of every tensor of `file` (in llama.cpp's order) under `opts`.
fn plan(file: &GgufModel, opts: &QuantizeOptions) -> Result<Plan, QuantizeError> {
    let ft = opts.ftype;
    let m = facts(file);
    // Every shard's tensors (with their shard), in llama.cpp's loader order.
    let mut infos: Vec<(usize, &crate::TensorInfo)> = file
        .shards()
        .iter()
        .enumerate()
        .flat_map(|(i, f)| f.tensors().iter().map(move |t| (i, t)))
        .collect();
    infos.sort_by(|a, b| llama_order(a.1.name(), b.1.name()));
    // Pruned layers go first: llama-quantize counts the mixes' tensors over the kept ones.
    let mut layers = prune::LayerMap::new(&opts.prune_layers);
    let mut kept: Vec<(usize, &crate::TensorInfo, String)> = infos
        .into_iter()
        .filter_map(|(i, t)| layers.rename(t.name()).map(|n| (i, t, n)))
        .collect();
    // --keep-split: shard by shard, each in file order (the mixes then count in that order).
    if opts.keep_split {
        kept.sort_by_key(|(i, t, _)| (*i, t.offset()));
    }
    let mut st = MixState {
        has_imatrix: opts.imatrix.is_some(),
        has_tied_embeddings: file.tensor_info("output.weight").is_none(),
        output_type: opts.output_tensor_type,
        token_embd_type: opts.token_embedding_type,
        n_attention_wv: kept
            .iter()
            .filter(|(_, _, name)| {
                matches!(
                    Category::of(name),
                    Category::AttnV | Category::AttnQkv | Category::AttnKvB
                )
            })
            .count() as u32,
        ..MixState::default()
    };
    let mut specs = Vec::with_capacity(kept.len());
    let mut sources = Vec::with_capacity(kept.len());
    let mut shards = Vec::with_capacity(kept.len());
    for (shard, t, name) in &kept {
        let (name, dims) = (name.as_str(), t.dims());
        let mut to = t.ggml_type();
        if mix::allows_quantization(name, n_dims(dims), !opts.leave_output) {
            to = type_for(&mut st, &m, opts, name, dims)?;
            if opts.imatrix.is_none() && mix::requires_imatrix(name, to, ft) {
                return Err(QuantizeError::Refused(format!(
                    "{name}: {} needs an importance matrix (kestrel has none yet; llama-quantize refuses it too without one)",
                    to
                )));
            }
        }
        specs.push(TensorSpec {
            name: name.to_string(),
            ggml_type: to,
            dims: dims.to_vec(),
        });
        sources.push(t.name().to_string());
        shards.push(*shard);
    }
    Ok(Plan {
        specs,
        sources,
        shards,
        fallbacks: st.n_fallback as usize,
        block_count: layers.active().then(|| layers.block_count()),
    })
}

/// The output's metadata: the input's keys in order (split keys dropped), then
/// `general.quantization_version` and `general.file_type`, as llama.cpp's `gguf_set_val_*`
/// re-adds them at the end, then the overrides (`--override-kv`'s, the importance matrix's),
/// each moved to the end, then `block_count` when layers were pruned.
fn metadata(
    file: &GgufModel,
    opts: &QuantizeOptions,
    block_count: Option<u32>,
) -> Vec<(String, MetadataValue)> {
    let ft = opts.ftype;
    const DROP: &[&str] = &[
        "general.quantization_version",
        "general.file_type",
        "split.no",
        "split.count",
        "split.tensors.count",
    ];
    let mut md: Vec<(String, MetadataValue)> = file
        .metadata()
        .iter()
        .filter(|(k, _)| !DROP.contains(k))
        .map(|(k, v)| (k.to_string(), v.to_owned_value()))
        .collect();
    md.push((
        "general.quantization_version".into(),
        MetadataValue::U32(QUANTIZATION_VERSION),
    ));
    md.push(("general.file_type".into(), MetadataValue::U32(ft.id())));
    for o in &opts.kv_overrides {
        overrides::set_last(&mut md, &o.key, o.value.clone());
    }
    if let Some(im) = &opts.imatrix {
        // llama-quantize's overrides: strings cut to 127 bytes, counts as u32.
        let cut = |s: &str| {
            let mut end = s.len().min(127);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            MetadataValue::String(s[..end].to_string())
        };
        overrides::set_last(&mut md, "quantize.imatrix.file", cut(&im.file));
        if let Some(d) = im.datasets.first() {
            overrides::set_last(&mut md, "quantize.imatrix.dataset", cut(d));
        }
        overrides::set_last(
            &mut md,
            "quantize.imatrix.entries_count",
            MetadataValue::U32(im.entries.len() as u32),
        );
        if im.chunks > 0 {
            overrides::set_last(
                &mut md,
                "quantize.imatrix.chunks_count",
                MetadataValue::U32(im.chunks),
            );
        }
    }
    if let Some(n) = block_count {
        let arch = file.metadata().architecture().unwrap_or("").to_string();
        overrides::set_last(
            &mut md,
            &format!("{arch}.block_count"),
            MetadataValue::U32(n),
        );
    }
    md
}

/// llama-quantize's refusals for the planned types: requantizing without
/// `allow_requantize`, a type kestrel cannot write (weighted-only types without an imatrix).
fn check(file: &GgufModel, plan: &Plan, opts: &QuantizeOptions) -> Result<(), QuantizeError> {
    for (s, source) in plan.specs.iter().zip(&plan.sources) {
        let t = file
            .tensor_info(source)
            .ok_or_else(|| QuantizeError::Refused(format!("tensor {source} vanished")))?;
        if s.ggml_type != t.ggml_type() {
            if t.ggml_type().is_quantized() && !opts.allow_requantize {
                return Err(QuantizeError::Refused(format!(
                    "{}: requantizing from {} is disabled (pass --allow-requantize)",
                    s.name,
                    t.ggml_type()
                )));
            }
            let weighted = opts.imatrix.is_some() && quant::weighted::supports_weights(s.ggml_type);
            if !quant::can_quantize_chunk(s.ggml_type) && !weighted {
                return Err(QuantizeError::Refused(format!(
                    "{}: kestrel cannot quantize to {} yet",
                    s.name, s.ggml_type
                )));
            }
        }
    }
    Ok(())
}

/// What [`quantize_file`] would write, without writing it (`--dry-run`): each tensor's
/// type and size, and the totals; the same refusals.
///
/// # Errors
/// As [`quantize_file`], short of writing.
pub fn quantize_dry_run(
    input: &Path,
    opts: &QuantizeOptions,
    on_tensor: &mut dyn FnMut(&TensorReport),
) -> Result<QuantizeReport, QuantizeError> {
    let file = GgufModel::open(input)?;
    let plan = plan(&file, opts)?;
    check(&file, &plan, opts)?;
    let mut report = QuantizeReport {
        fallbacks: plan.fallbacks,
        ..QuantizeReport::default()
    };
    let n = plan.specs.len();
    for (i, (s, source)) in plan.specs.iter().zip(&plan.sources).enumerate() {
        let t = file
            .tensor_info(source)
            .ok_or_else(|| QuantizeError::Refused(format!("tensor {source} vanished")))?;
        let from = t.ggml_type();
        let values: u64 = s.dims.iter().product();
        let size = |ty: GgmlType| values / ty.block_size() as u64 * ty.type_size() as u64;
        report.add(
            (i + 1, n),
            s,
            from,
            (size(from), size(s.ggml_type)),
            on_tensor,
        );
    }
    Ok(report)
}

/// Quantizes `input` into `output` (written through a temporary file renamed into place);
/// `on_tensor` hears of each tensor as it is written.
///
/// # Errors
/// `Refused` for a quantized input tensor without `allow_requantize`, a type
/// that needs an importance matrix, or a type kestrel cannot quantize to yet; `Gguf`, `Quant`
/// or `Io` for unreadable input and failed writes.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    opts: &QuantizeOptions,
    on_tensor: &mut dyn FnMut(&TensorReport),
) -> Result<QuantizeReport, QuantizeError> {
    // Any shard of a split input opens them all; the output is one file (split keys dropped),
    // as llama-quantize writes without --keep-split, or one per shard with it.
    let file = GgufModel::open(input)?;
    let plan = plan(&file, opts)?;
    check(&file, &plan, opts)?;
    let md = metadata(&file, opts, plan.block_count);
    let mut report = QuantizeReport {
        fallbacks: plan.fallbacks,
        ..QuantizeReport::default()
    };
    let all: Vec<usize> = (0..plan.specs.len()).collect();
    let parts = if opts.keep_split {
        keep_split::parts(output, &plan.shards, md, file.shards()[0].alignment())?
    } else {
        vec![keep_split::Part {
            path: output.to_path_buf(),
            metadata: md,
            alignment: file.shards()[0].alignment(),
            tensors: all,
        }]
    };
    let mut bufs = (Vec::new(), Vec::new());
    for part in &parts {
        write_part(&file, &plan, opts, part, &mut bufs, &mut report, on_tensor)?;
    }
    report.outputs = parts.into_iter().map(|p| p.path).collect();
    Ok(report)
}

/// Writes one output file (through a temporary file renamed into place): `part`'s metadata
/// and, converted, the tensors of `plan` it lists.
fn write_part(
    file: &GgufModel,
    plan: &Plan,
    opts: &QuantizeOptions,
    part: &keep_split::Part,
    (f32_buf, out_buf): &mut (Vec<f32>, Vec<u8>),
    report: &mut QuantizeReport,
    on_tensor: &mut dyn FnMut(&TensorReport),
) -> Result<(), QuantizeError> {
    let output = &part.path;
    let io = |source| QuantizeError::Io {
        path: output.to_path_buf(),
        source,
    };
    let tmp = output.with_extension("gguf.tmp");
    let sink = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(&tmp).map_err(io)?);
    let specs: Vec<TensorSpec> = part
        .tensors
        .iter()
        .map(|&i| plan.specs[i].clone())
        .collect();
    let mut w = GgufStreamWriter::new(sink, part.alignment, &part.metadata, &specs)?;
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let n = plan.specs.len();
    for &i in &part.tensors {
        let (s, source) = (&plan.specs[i], &plan.sources[i]);
        let t = file.tensor(source)?;
        let from = t.info.ggml_type();
        let data = t.data;
        let bytes_out = if from == s.ggml_type {
            w.write(data)?;
            data.len() as u64
        } else {
            // The importance matrix names the input's layers (llama.cpp's remap_imatrix).
            let im = tensor_imatrix(opts, source, s.ggml_type, &s.dims)?;
            convert(
                &s.name,
                data,
                from,
                s.ggml_type,
                &s.dims,
                im,
                threads,
                f32_buf,
                out_buf,
                &mut w,
            )?
        };
        report.add(
            (i + 1, n),
            s,
            from,
            (data.len() as u64, bytes_out),
            on_tensor,
        );
    }
    let mut sink = w.finish()?;
    sink.flush().map_err(io)?;
    drop(sink);
    std::fs::rename(&tmp, output).map_err(io)?;
    Ok(())
}

/// The importance weights of tensor `name` (one row of `ne0` per expert), as llama-quantize
/// picks them: none where the matrix has no entry (an error where the type needs one), an
/// error where the entry's size does not fit (the token embeddings aside).
fn tensor_imatrix<'a>(
    opts: &'a QuantizeOptions,
    name: &str,
    to: GgmlType,
    dims: &[u64],
) -> Result<Option<&'a [f32]>, QuantizeError> {
    let ne0 = dims.first().copied().unwrap_or(1);
    let ne2 = dims.get(2).copied().unwrap_or(1);
    let im = match opts.imatrix.as_ref().and_then(|m| m.entries.get(name)) {
        Some(e) if e.len() as u64 == ne0 * ne2 => Some(&e[..]),
        Some(e) if !mix::is_token_embd(name) => {
            return Err(QuantizeError::Refused(format!(
                "importance matrix size {} is different from tensor size {} for {name}",
                e.len(),
                ne0 * ne2
            )))
        }
        _ => None,
    };
    if im.is_none() && mix::requires_imatrix(name, to, opts.ftype) {
        return Err(QuantizeError::Refused(format!(
            "missing importance matrix for tensor {name} in a very low-bit quantization ({to})"
        )));
    }
    if im.is_some() && to.is_quantized() && !quant::weighted::supports_weights(to) {
        return Err(QuantizeError::Refused(format!(
            "{name}: kestrel cannot quantize to {to} with an importance matrix yet"
        )));
    }
    Ok(im.filter(|_| to.is_quantized()))
}

/// Converts one tensor in slabs of rows, each slab's rows split over `threads` threads; with
/// importance weights, row by row (each expert's rows with its own weights).
#[allow(clippy::too_many_arguments)]
fn convert<W: Write>(
    name: &str,
    data: &[u8],
    from: GgmlType,
    to: GgmlType,
    dims: &[u64],
    im: Option<&[f32]>,
    threads: usize,
    f32_buf: &mut Vec<f32>,
    out_buf: &mut Vec<u8>,
    w: &mut GgufStreamWriter<W>,
) -> Result<u64, QuantizeError> {
    let qerr = |source| QuantizeError::Quant {
        tensor: name.to_string(),
        source,
    };
    let ne0 = dims.first().copied().unwrap_or(1);
    let bad = || QuantizeError::Refused(format!("{name}: rows of {ne0} do not fit its types"));
    let row_in = from.row_bytes(ne0).ok_or_else(bad)? as usize;
    let row_out = to.row_bytes(ne0).ok_or_else(bad)? as usize;
    let ne0 = ne0 as usize;
    let n_rows = data.len().checked_div(row_in).unwrap_or(0);
    let slab = (SLAB_BYTES / (ne0 * 4).max(1)).clamp(1, n_rows.max(1));
    let mut total = 0u64;
    for r0 in (0..n_rows).step_by(slab) {
        let rows = slab.min(n_rows - r0);
        f32_buf.clear();
        f32_buf.resize(rows * ne0, 0.0);
        out_buf.clear();
        out_buf.resize(rows * row_out, 0);
        let src = &data[r0 * row_in..(r0 + rows) * row_in];
        let per = rows.div_ceil(threads.max(1));
        let ne1 = dims.get(1).copied().unwrap_or(1).max(1) as usize;
        std::thread::scope(|scope| -> Result<(), QuantizeError> {
            let jobs: Vec<_> = src
                .chunks(per * row_in)
                .zip(f32_buf.chunks_mut(per * ne0))
                .zip(out_buf.chunks_mut(per * row_out))
                .enumerate()
                .map(|(k, ((s, f), o))| {
                    scope.spawn(move || -> Result<(), QuantError> {
                        quant::dequantize(from, s, f)?;
                        let Some(im) = im else {
                            return quant::quantize_chunk(to, f, o);
                        };
                        let first = r0 + k * per;
                        for (j, (fr, or)) in f
                            .chunks_exact(ne0)
                            .zip(o.chunks_exact_mut(row_out))
                            .enumerate()
                        {
                            let e = (first + j) / ne1;
                            let w = &im[e * ne0..(e + 1) * ne0];
                            quant::weighted::quantize_rows(to, fr, or, ne0, w)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for j in jobs {
                j.join()
                    .map_err(|_| QuantizeError::Refused(format!("{name}: a worker panicked")))?
                    .map_err(qerr)?;
            }
            Ok(())
        })?;
        w.write(out_buf)?;
        total += out_buf.len() as u64;
    }
    Ok(total)
}
