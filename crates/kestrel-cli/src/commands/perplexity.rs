//! `kestrel perplexity -m MODEL -f FILE [-c 512] [--chunks N]`: perplexity as llama-perplexity
//! computes it (non-overlapping windows, scoring the second half of each), and KL divergence
//! against a base in llama-perplexity's file format:
//! - `--kl-divergence-base BASE -f FILE` writes BASE (the log-probabilities of every scored
//!   position) while computing the perplexity;
//! - `--kl-divergence-base BASE --kl-divergence` compares this model with BASE over BASE's own
//!   tokens and window (no text file needed), printing llama-perplexity's statistics.
//!
//! A base written by `llama-perplexity --kl-divergence-base` is read here, and one written here
//! is read by `llama-perplexity --kl-divergence`.

use std::path::PathBuf;

use clap::Args;
use kestrel::{LoadOptions, LogProbReader, Model};

use crate::output::print;

/// Largest text file read (bytes).
const MAX_TEXT: u64 = 64 << 20;

#[derive(Args, Debug)]
pub struct PerplexityArgs {
    /// The GGUF model file.
    #[arg(short, long)]
    pub model: PathBuf,
    /// The text file (not needed with --kl-divergence: the base holds its tokens).
    #[arg(short, long)]
    pub file: Option<PathBuf>,
    /// Window size in tokens (with --kl-divergence: the base's).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    pub ctx: usize,
    /// Evaluate only the first N windows.
    #[arg(long)]
    pub chunks: Option<usize>,
    /// The log-probability file: written, or read with --kl-divergence.
    #[arg(long = "kl-divergence-base", value_name = "FILE")]
    pub kl_base: Option<PathBuf>,
    /// Compare with the base in --kl-divergence-base instead of writing it.
    #[arg(long = "kl-divergence", requires = "kl_base")]
    pub kl_divergence: bool,
    /// Threads (0: all cores).
    #[arg(short, long, default_value_t = 0)]
    pub threads: usize,
    /// KV cache type: f16 (default), f32, q8_0 or q4_0.
    #[arg(long = "cache-type", default_value = "f16")]
    pub cache_type: String,
    /// Where to run: cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// LoRA adapters.
    #[command(flatten)]
    pub lora: super::lora_args::LoraArgs,
}

pub fn run(args: &PerplexityArgs) -> Result<(), String> {
    if args.kl_divergence {
        return kl_divergence(args);
    }
    let Some(file) = &args.file else {
        return Err(
            "-f FILE: the text to evaluate (or --kl-divergence to compare with a base)".into(),
        );
    };
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
    let mut model = load(args, args.ctx)?;
    let start = std::time::Instant::now();
    let p = match &args.kl_base {
        Some(base) => model.kl_divergence_base(&text, args.ctx, args.chunks, base),
        None => model.perplexity_chunks(&text, args.ctx, args.chunks),
    }
    .map_err(|e| e.to_string())?;
    eprintln!(
        "{} windows of {} tokens, {} tokens scored in {:.1} s",
        p.chunks,
        args.ctx,
        p.scored,
        start.elapsed().as_secs_f64()
    );
    if let Some(base) = &args.kl_base {
        eprintln!("log-probabilities written to {}", base.display());
    }
    print(&format!("ppl = {:.4} ± {:.5}\n", p.ppl, p.err))
}

fn load(args: &PerplexityArgs, ctx: usize) -> Result<Model, String> {
    let opts = LoadOptions {
        threads: args.threads,
        ctx,
        kv_dtype: super::model_args::kv_dtype(&args.cache_type)?,
        device: args.device.clone(),
        lora: args.lora.adapters()?,
        ..LoadOptions::default()
    };
    let model = Model::load_file(&args.model, opts).map_err(|e| e.to_string())?;
    super::model_args::note_device(&model);
    Ok(model)
}

fn kl_divergence(args: &PerplexityArgs) -> Result<(), String> {
    let Some(path) = &args.kl_base else {
        return Err("--kl-divergence needs --kl-divergence-base FILE".into());
    };
    // The header says which window the base was computed with; the model is loaded for it.
    let head = LogProbReader::open(path)
        .map_err(|e| e.to_string())?
        .header();
    let mut model = load(args, head.n_ctx)?;
    let chunks = args.chunks.unwrap_or(head.n_chunk).min(head.n_chunk);
    eprintln!(
        "{}: {} of {} windows of {} tokens, vocabulary {}",
        path.display(),
        chunks,
        head.n_chunk,
        head.n_ctx,
        head.n_vocab
    );
    eprintln!("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p");
    let start = std::time::Instant::now();
    let stats = model
        .kl_divergence(path, Some(chunks), |acc| {
            let s = acc.stats();
            eprintln!(
                "{:4}    {:9.4} ± {:9.4}    {:10.5} ± {:10.5}    {:10.5} ± {:10.5}    {:6.3} ± {:6.3} %    {:6.3} ± {:6.3} %",
                s.chunks,
                s.ppl.value,
                s.ppl.err,
                s.ln_ppl_ratio.value,
                s.ln_ppl_ratio.err,
                s.kld.value,
                s.kld.err,
                100.0 * s.p_diff_rms.value,
                100.0 * s.p_diff_rms.err,
                100.0 * s.same_top.value,
                100.0 * s.same_top.err
            );
        })
        .map_err(|e| e.to_string())?;
    eprintln!(
        "{} tokens scored in {:.1} s",
        stats.count,
        start.elapsed().as_secs_f64()
    );
    print(&format!("{stats}"))
}
