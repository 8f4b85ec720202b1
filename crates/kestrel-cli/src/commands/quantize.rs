//! `kestrel quantize IN.gguf OUT.gguf TYPE [-t N] [--allow-requantize] [--leave-output-tensor]
//! [--pure] [--imatrix FILE]`: a model re-encoded in one of llama-quantize's mixes, byte for
//! byte what `llama-quantize` writes.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use kestrel_gguf::quantize::{quantize_file, FileType, Imatrix, QuantizeOptions};

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The model to quantize.
    pub input: PathBuf,
    /// The file to write.
    pub output: PathBuf,
    /// The mix, as llama-quantize names it: Q4_K_M, Q5_K_M, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
    /// Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q5_K_S, F16, BF16, F32, ...
    pub ftype: String,
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
    /// An importance matrix from llama-imatrix (GGUF format).
    #[arg(long)]
    pub imatrix: Option<PathBuf>,
    /// Print nothing per tensor.
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn run(args: &QuantizeArgs) -> Result<(), String> {
    let ftype = FileType::parse(&args.ftype).ok_or_else(|| {
        format!(
            "unknown type {:?}: expected one of {}",
            args.ftype,
            FileType::names().collect::<Vec<_>>().join(", ")
        )
    })?;
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
        ..QuantizeOptions::new(ftype)
    };
    let t0 = Instant::now();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let quiet = args.quiet;
    let mut err = std::io::stderr();
    let r = quantize_file(&args.input, &args.output, &opts, &mut |t| {
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
    })
    .map_err(|e| e.to_string())?;
    eprintln!(
        "wrote {} ({}): {} tensors, {} converted, {:.2} MiB -> {:.2} MiB in {:.2} s{}",
        args.output.display(),
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
