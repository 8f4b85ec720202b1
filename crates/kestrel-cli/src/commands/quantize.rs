//! `kestrel quantize IN.gguf OUT.gguf TYPE [-t N] [--allow-requantize] [--leave-output-tensor]
//! [--pure] [--imatrix FILE] [--output-tensor-type T] [--token-embedding-type T]
//! [--tensor-type PATTERN=T]... [--tensor-type-file F] [--prune-layers L,..] [--keep-split]`:
//! a model re-encoded in one of
//! llama-quantize's mixes, byte for byte what `llama-quantize` writes with the same options;
//! `kestrel quantize --dry-run IN.gguf TYPE` prints the types and sizes without writing.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use kestrel_gguf::quantize::{
    parse_ggml_type, quantize_dry_run, quantize_file, FileType, Imatrix, KvOverride,
    QuantizeOptions, TensorTypeRule,
};

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The model to quantize.
    pub input: PathBuf,
    /// The file to write (left out with --dry-run: then this is the mix).
    pub output: String,
    /// The mix, as llama-quantize names it: Q4_K_M, Q5_K_M, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
    /// Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q5_K_S, F16, BF16, F32, ...
    pub ftype: Option<String>,
    /// Threads (0: all cores).
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
    /// Quantize tensors that are already quantized (quality suffers).
    #[arg(long)]
    pub allow_requantize: bool,
    /// Keep output.weight as it is.
    #[arg(long)]
    pub leave_output_tensor: bool,
    /// Give every tensor the mix's default type (no k-quant mixture).
    #[arg(long)]
    pub pure: bool,
    /// An importance matrix from llama-imatrix: GGUF, or the legacy `.dat` format.
    #[arg(long)]
    pub imatrix: Option<PathBuf>,
    /// output.weight's type (a ggml type: q8_0, q6_k, f16, ...); tied embeddings follow it.
    #[arg(long, value_name = "TYPE")]
    pub output_tensor_type: Option<String>,
    /// The token embeddings' type.
    #[arg(long, value_name = "TYPE")]
    pub token_embedding_type: Option<String>,
    /// PATTERN=TYPE: tensors whose name contains a match of the regular expression get TYPE
    /// instead of the mix's choice (repeatable; the first match wins), e.g. attn_q=q8_0.
    #[arg(long, value_name = "PATTERN=TYPE")]
    pub tensor_type: Vec<String>,
    /// A file of PATTERN=TYPE rules separated by spaces or newlines (after any --tensor-type).
    #[arg(long, value_name = "FILE")]
    pub tensor_type_file: Option<PathBuf>,
    /// Print each tensor's type and size and the totals; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Set metadata in the output: KEY=TYPE:VALUE, TYPE int, float, bool or str (repeat for
    /// more; llama-quantize's option).
    #[arg(long = "override-kv", value_name = "KEY=TYPE:VALUE")]
    pub override_kv: Vec<String>,
    /// Leave these blocks out (comma-separated layer numbers) and renumber the rest, as
    /// llama-quantize's --prune-layers (the model must still make sense without them).
    #[arg(long = "prune-layers", value_name = "L0,L1,...")]
    pub prune_layers: Option<String>,
    /// Write one file per input shard (a split model stays split), named as llama-quantize
    /// names them: OUT without .gguf, then -00001-of-0000N.gguf.
    #[arg(long = "keep-split")]
    pub keep_split: bool,
    /// Print nothing per tensor.
    #[arg(short, long)]
    pub quiet: bool,
}

/// `--prune-layers`' list: layer numbers separated by commas.
fn prune_list(arg: &Option<String>) -> Result<Vec<u32>, String> {
    let Some(list) = arg else {
        return Ok(Vec::new());
    };
    list.split(',')
        .map(|id| {
            id.trim().parse().map_err(|_| {
                format!("--prune-layers: invalid layer id {id:?} (expected L0,L1,...)")
            })
        })
        .collect()
}

fn ggml_type(flag: &str, name: &Option<String>) -> Result<Option<kestrel_gguf::GgmlType>, String> {
    name.as_deref()
        .map(|n| parse_ggml_type(n).ok_or_else(|| format!("{flag}: unknown ggml type {n:?}")))
        .transpose()
}

pub fn run(args: &QuantizeArgs) -> Result<(), String> {
    let (output, ftype_name) = match (&args.ftype, args.dry_run) {
        (Some(f), _) => (Some(PathBuf::from(&args.output)), f.as_str()),
        (None, true) => (None, args.output.as_str()),
        (None, false) => return Err("expected IN OUT TYPE (only --dry-run leaves OUT out)".into()),
    };
    let ftype = FileType::parse(ftype_name).ok_or_else(|| {
        format!(
            "unknown type {ftype_name:?}: expected one of {}",
            FileType::names().collect::<Vec<_>>().join(", ")
        )
    })?;
    let mut rules = args.tensor_type.clone();
    if let Some(f) = &args.tensor_type_file {
        let text = std::fs::read_to_string(f)
            .map_err(|e| format!("--tensor-type-file {}: {e}", f.display()))?;
        rules.extend(text.split_whitespace().map(str::to_string));
    }
    let tensor_types = rules
        .iter()
        .map(|r| TensorTypeRule::parse(r).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let imatrix = match &args.imatrix {
        Some(p) => Some(Imatrix::load(p).map_err(|e| e.to_string())?),
        None => None,
    };
    let opts = QuantizeOptions {
        imatrix,
        threads: args.threads,
        allow_requantize: args.allow_requantize,
        leave_output: args.leave_output_tensor,
        pure: args.pure,
        output_tensor_type: ggml_type("--output-tensor-type", &args.output_tensor_type)?,
        token_embedding_type: ggml_type("--token-embedding-type", &args.token_embedding_type)?,
        tensor_types,
        kv_overrides: args
            .override_kv
            .iter()
            .map(|o| KvOverride::parse(o).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?,
        prune_layers: prune_list(&args.prune_layers)?,
        keep_split: args.keep_split,
        ..QuantizeOptions::new(ftype)
    };
    let t0 = Instant::now();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let quiet = args.quiet;
    let mut err = std::io::stderr();
    let mut print = |t: &kestrel_gguf::quantize::TensorReport| {
        if quiet {
            return;
        }
        let dims: Vec<String> = t.dims.iter().map(|d| d.to_string()).collect();
        let _ = writeln!(
            err,
            "[{:4}/{:4}] {:<36} [{}] {} -> {}, {:.2} MiB -> {:.2} MiB",
            t.index.0,
            t.index.1,
            t.name,
            dims.join(", "),
            t.from,
            t.to,
            mib(t.bytes.0),
            mib(t.bytes.1)
        );
    };
    let Some(output) = output else {
        let r = quantize_dry_run(&args.input, &opts, &mut print).map_err(|e| e.to_string())?;
        eprintln!(
            "dry run ({}): {} tensors, {} would be converted, {:.2} MiB -> {:.2} MiB{}",
            ftype.name(),
            r.tensors,
            r.converted,
            mib(r.bytes.0),
            mib(r.bytes.1),
            if r.fallbacks > 0 {
                format!("; {} tensors would take a fallback type", r.fallbacks)
            } else {
                String::new()
            }
        );
        return Ok(());
    };
    let r = quantize_file(&args.input, &output, &opts, &mut print).map_err(|e| e.to_string())?;
    let written: Vec<String> = r.outputs.iter().map(|p| p.display().to_string()).collect();
    eprintln!(
        "wrote {} ({}): {} tensors, {} converted, {:.2} MiB -> {:.2} MiB in {:.2} s{}",
        written.join(", "),
        ftype.name(),
        r.tensors,
        r.converted,
        mib(r.bytes.0),
        mib(r.bytes.1),
        t0.elapsed().as_secs_f64(),
        if r.fallbacks > 0 {
            format!(
                "; {} tensors took a fallback type (rows not a whole number of blocks)",
                r.fallbacks
            )
        } else {
            String::new()
        }
    );
    Ok(())
}
