//! The model flags `run`, `chat` and `serve` share (`-m MODEL -t THREADS -c CTX --device D`,
//! `--lora`/`--lora-scaled`), and
//! loading the model they name.

use std::path::PathBuf;

use clap::Args;
use kestrel::{LoadOptions, Model};

use super::lora_args::LoraArgs;

/// Which model to load, and how.
#[derive(Args, Debug)]
pub struct ModelArgs {
    /// The GGUF model file.
    #[arg(short, long)]
    pub model: PathBuf,
    /// Threads (0: all cores).
    #[arg(short, long, default_value_t = 0)]
    pub threads: usize,
    /// Context length (0: the model's, at most 4096).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    pub ctx: usize,
    /// KV cache type: f16 (default), f32, q8_0 or q4_0.
    #[arg(long = "cache-type", default_value = "f16")]
    pub cache_type: String,
    /// Where to run: cpu, cuda, cuda:N or auto (a GPU when one is found, else the CPU).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// LoRA adapters.
    #[command(flatten)]
    pub lora: LoraArgs,
}

impl ModelArgs {
    /// Loads the model with these threads and context length.
    pub fn load(&self) -> Result<Model, String> {
        let kv_dtype = kv_dtype(&self.cache_type)?;
        let opts = LoadOptions {
            threads: self.threads,
            ctx: self.ctx,
            kv_dtype,
            device: self.device.clone(),
            lora: self.lora.adapters()?,
            ..LoadOptions::default()
        };
        let model = Model::load_file(&self.model, opts).map_err(|e| e.to_string())?;
        note_device(&model);
        Ok(model)
    }
}

/// One stderr line when `auto` fell back to the CPU, saying why.
pub fn note_device(model: &Model) {
    if let Some(note) = model.device_note() {
        eprintln!("kestrel: {note}");
    }
}

/// Parse a `--cache-type` value.
pub fn kv_dtype(s: &str) -> Result<kestrel::KvDType, String> {
    kestrel::KvDType::parse(s)
        .ok_or_else(|| format!("--cache-type {s}: expected f16, f32, q8_0 or q4_0"))
}
