//! `kestrel perplexity -m MODEL -f FILE [-c 512]`: perplexity as llama-perplexity computes it
//! (non-overlapping windows, scoring the second half of each).

use std::path::PathBuf;

use clap::Args;
use kestrel::{LoadOptions, Model};

use crate::output::print;

/// Largest text file read (bytes).
const MAX_TEXT: u64 = 64 << 20;

#[derive(Args, Debug)]
pub struct PerplexityArgs {
    /// The GGUF model file.
    #[arg(short, long)]
    pub model: PathBuf,
    /// The text file.
    #[arg(short, long)]
    pub file: PathBuf,
    /// Window size in tokens.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    pub ctx: usize,
    /// Threads (0: all cores).
    #[arg(short, long, default_value_t = 0)]
    pub threads: usize,
    /// KV cache type: f16 (default), f32, q8_0 or q4_0.
    #[arg(long = "cache-type", default_value = "f16")]
    pub cache_type: String,
}

pub fn run(args: &PerplexityArgs) -> Result<(), String> {
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
    let load = LoadOptions {
        threads: args.threads,
        ctx: args.ctx,
        kv_dtype: super::model_args::kv_dtype(&args.cache_type)?,
        ..LoadOptions::default()
    };
    let mut model = Model::load_file(&args.model, load).map_err(|e| e.to_string())?;
    let start = std::time::Instant::now();
    let p = model
        .perplexity(&text, args.ctx)
        .map_err(|e| e.to_string())?;
    eprintln!(
        "{} windows of {} tokens, {} tokens scored in {:.1} s",
        p.chunks,
        args.ctx,
        p.scored,
        start.elapsed().as_secs_f64()
    );
    print(&format!("ppl = {:.4} ± {:.5}\n", p.ppl, p.err))
}
