//! `kestrel export-lora -m BASE.gguf --lora A.gguf [--lora-scaled B.gguf 0.5] -o OUT.gguf`:
//! LoRA adapters merged into a model file, as llama.cpp's `llama-export-lora` writes it (merged
//! weights F32 where the base is F32, else F16; every other tensor copied as it is).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use kestrel::arch::{export_merged, LoraAdapter};
use kestrel::gguf::GgufModel;

use super::lora_args::LoraArgs;

/// Arguments of `kestrel export-lora`.
#[derive(Args, Debug)]
pub struct ExportLoraArgs {
    /// The base model (GGUF).
    #[arg(short, long)]
    pub model: PathBuf,
    /// The merged model to write.
    #[arg(short, long)]
    pub output: PathBuf,
    /// The adapters.
    #[command(flatten)]
    pub lora: LoraArgs,
}

/// Runs `kestrel export-lora`.
pub fn run(args: &ExportLoraArgs) -> Result<(), String> {
    let adapters = args.lora.adapters()?;
    if adapters.is_empty() {
        return Err("give at least one adapter (--lora FILE or --lora-scaled FILE SCALE)".into());
    }
    let base =
        GgufModel::open(&args.model).map_err(|e| format!("{}: {e}", args.model.display()))?;
    let loaded = adapters
        .iter()
        .map(|(p, s)| {
            Ok((
                Arc::new(LoraAdapter::open(p).map_err(|e| e.to_string())?),
                *s,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let report = export_merged(&base, &loaded, &args.output).map_err(|e| e.to_string())?;
    println!(
        "wrote {}: {} tensors, {} with adapters merged in",
        args.output.display(),
        report.tensors,
        report.merged
    );
    Ok(())
}
