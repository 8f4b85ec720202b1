//! `kestrel synth --shape llama-8b --type Q4_K_M -o FILE [--layers N] [--seed S]`: a
//! random-weight GGUF of a real model's shape, for speed measurements where the real file is not
//! at hand (the GPU test machine; 8B-sized tests). llama.cpp runs the same file.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use kestrel::arch::synth::{synth_model, SynthShape, SynthType};

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// The shape: llama-1b, llama-8b, gemma3-270m or smollm2-135m.
    #[arg(long)]
    pub shape: String,
    /// The quantization: F16, Q8_0, Q4_0, Q4_1 or Q4_K_M.
    #[arg(long = "type", default_value = "Q4_K_M")]
    pub ty: String,
    /// Where to write the file.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Layers (0: the real model's count).
    #[arg(long, default_value_t = 0)]
    pub layers: usize,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn names<T>(all: &[(&str, T)]) -> String {
    all.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

pub fn run(args: &SynthArgs) -> Result<(), String> {
    let shape = SynthShape::from_name(&args.shape).ok_or_else(|| {
        format!(
            "--shape {}: expected one of {}",
            args.shape,
            names(SynthShape::ALL)
        )
    })?;
    let ty = SynthType::from_name(&args.ty).ok_or_else(|| {
        format!(
            "--type {}: expected one of {}",
            args.ty,
            names(SynthType::ALL)
        )
    })?;
    if args.layers > 1024 {
        return Err(format!("--layers {}: at most 1024", args.layers));
    }
    let t = Instant::now();
    let w = synth_model(shape, ty, args.layers, args.seed).map_err(|e| e.to_string())?;
    w.write_file(&args.output)
        .map_err(|e| format!("{}: {e}", args.output.display()))?;
    let bytes = std::fs::metadata(&args.output).map_or(0, |m| m.len());
    eprintln!(
        "wrote {} ({:.1} MiB) in {:.1} s",
        args.output.display(),
        bytes as f64 / (1 << 20) as f64,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
