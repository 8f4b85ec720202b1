//! `kestrel imatrix -m MODEL -f TEXT -o OUT.gguf [-c 512] [--chunks N] [--process-output]`:
//! an importance matrix as llama-imatrix computes it, written in its GGUF format for
//! `kestrel quantize --imatrix` (or `llama-quantize --imatrix`).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use kestrel::{ImatrixOptions, LoadOptions, Model};

/// Largest text file read (bytes).
const MAX_TEXT: u64 = 64 << 20;

#[derive(Args, Debug)]
pub struct ImatrixArgs {
    /// The GGUF model file.
    #[arg(short, long)]
    pub model: PathBuf,
    /// The text to run (calibration data).
    #[arg(short, long)]
    pub file: PathBuf,
    /// The imatrix file to write.
    #[arg(short, long, default_value = "imatrix.gguf")]
    pub output: PathBuf,
    /// Window size in tokens.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    pub ctx: usize,
    /// Evaluate only the first N windows.
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Collect the output matrix too.
    #[arg(long)]
    pub process_output: bool,
    /// Threads (0: all cores).
    #[arg(short, long, default_value_t = 0)]
    pub threads: usize,
}

pub fn run(args: &ImatrixArgs) -> Result<(), String> {
    let len = std::fs::metadata(&args.file)
        .map_err(|e| format!("{}: {e}", args.file.display()))?
        .len();
    if len > MAX_TEXT {
        return Err(format!(
            "{}: {len} bytes, at most {MAX_TEXT} are read",
            args.file.display()
        ));
    }
    let text =
        std::fs::read_to_string(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let opts = LoadOptions {
        threads: args.threads,
        ctx: args.ctx,
        ..LoadOptions::default()
    };
    let mut model = Model::load_file(&args.model, opts).map_err(|e| e.to_string())?;
    let mut iopts = ImatrixOptions::default();
    iopts.n_ctx = args.ctx;
    iopts.chunks = args.chunks;
    iopts.process_output = args.process_output;
    let start = std::time::Instant::now();
    let mut run = model
        .imatrix(&text, &iopts, |i, p| {
            eprint!("[{i}]{:.4},", p.ppl);
            let _ = std::io::stderr().flush();
        })
        .map_err(|e| e.to_string())?;
    eprintln!();
    run.sums.datasets = vec![args.file.to_string_lossy().into_owned()];
    run.sums
        .write(&args.output)
        .map_err(|e| format!("{}: {e}", args.output.display()))?;
    eprintln!(
        "{} windows of {} tokens in {:.1} s; ppl = {:.4} ± {:.5}; {} matrices written to {}",
        run.perplexity.chunks,
        args.ctx,
        start.elapsed().as_secs_f64(),
        run.perplexity.ppl,
        run.perplexity.err,
        run.sums.entries.len(),
        args.output.display()
    );
    Ok(())
}
