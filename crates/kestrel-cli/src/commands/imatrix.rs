//! `kestrel imatrix -m MODEL -f TEXT -o OUT.gguf [-c 512] [--chunks N] [--process-output]
//! [--in-file F[,F...]]...`: an importance matrix as llama-imatrix computes it, written in its
//! GGUF format for `kestrel quantize --imatrix` (or `llama-quantize --imatrix`). With
//! `--in-file`, earlier matrices are combined and the text's rows added onto them; without
//! `-f`, the files are only combined (no model needed). `--show-statistics --in-file F` prints
//! F's statistics per tensor and per layer, as llama-imatrix does.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use kestrel::gguf::quantize::ImatrixSums;
use kestrel::{ImatrixOptions, LoadOptions, Model};

/// Largest text file read (bytes).
const MAX_TEXT: u64 = 64 << 20;

#[derive(Args, Debug)]
pub struct ImatrixArgs {
    /// The GGUF model file (needed with `-f`).
    #[arg(short, long)]
    pub model: Option<PathBuf>,
    /// The text to run (calibration data); without it, `--in-file`s are only combined.
    #[arg(short, long)]
    pub file: Option<PathBuf>,
    /// Earlier imatrix files (GGUF, or the legacy `.dat` format) to combine and continue (repeatable, or comma-separated).
    #[arg(long = "in-file", value_delimiter = ',')]
    pub in_files: Vec<PathBuf>,
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
    /// Print the first `--in-file`'s statistics per tensor and per layer (as
    /// `llama-imatrix --show-statistics`) and stop.
    #[arg(long)]
    pub show_statistics: bool,
}

pub fn run(args: &ImatrixArgs) -> Result<(), String> {
    let ctx = u32::try_from(args.ctx).map_err(|_| format!("-c {}: too large", args.ctx))?;
    if args.show_statistics {
        return show_statistics(args, ctx);
    }
    let mut prior = ImatrixSums::default();
    for f in &args.in_files {
        prior.combine_file(f, ctx).map_err(|e| e.to_string())?;
    }
    let Some(file) = &args.file else {
        if args.in_files.is_empty() {
            return Err("give a text (-f) or imatrix files to combine (--in-file)".into());
        }
        prior.finish_combined(ctx);
        prior
            .write(&args.output)
            .map_err(|e| format!("{}: {e}", args.output.display()))?;
        eprintln!(
            "{} files, {} matrices combined into {}",
            args.in_files.len(),
            prior.entries.len(),
            args.output.display()
        );
        return Ok(());
    };
    let model_path = args
        .model
        .as_ref()
        .ok_or("-f needs the model (-m) to run the text through")?;
    let len = std::fs::metadata(file)
        .map_err(|e| format!("{}: {e}", file.display()))?
        .len();
    if len > MAX_TEXT {
        return Err(format!(
            "{}: {len} bytes, at most {MAX_TEXT} are read",
            file.display()
        ));
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let opts = LoadOptions {
        threads: args.threads,
        ctx: args.ctx,
        ..LoadOptions::default()
    };
    let mut model = Model::load_file(model_path, opts).map_err(|e| e.to_string())?;
    let mut iopts = ImatrixOptions::default();
    iopts.n_ctx = args.ctx;
    iopts.chunks = args.chunks;
    iopts.process_output = args.process_output;
    let start = std::time::Instant::now();
    let mut run = model
        .imatrix_onto(prior, &text, &iopts, |i, p| {
            eprint!("[{i}]{:.4},", p.ppl);
            let _ = std::io::stderr().flush();
        })
        .map_err(|e| e.to_string())?;
    eprintln!();
    run.sums.datasets.push(file.to_string_lossy().into_owned());
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

/// `--show-statistics`: the tables llama-imatrix prints for its first `--in-file`.
fn show_statistics(args: &ImatrixArgs, ctx: u32) -> Result<(), String> {
    let file = args
        .in_files
        .first()
        .ok_or("--show-statistics needs the imatrix file (--in-file)")?;
    let mut sums = ImatrixSums::default();
    sums.combine_file(file, ctx).map_err(|e| e.to_string())?;
    let report = sums
        .statistics_report(&file.to_string_lossy())
        .ok_or_else(|| format!("{}: no tensor has counted values", file.display()))?;
    if let Some(w) = &report.warning {
        eprintln!("warning: {w}");
    }
    print!("{}", report.text);
    match report.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
