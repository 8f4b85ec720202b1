//! `kestrel convert DIR -o OUT [--outtype f32|f16]`: a Hugging Face checkpoint (BERT encoders
//! for now) to GGUF, with kestrel's own converter.

use std::path::PathBuf;

use clap::Args;
use kestrel::convert::{convert_hf, ConvertOptions, OutType};

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The checkpoint folder (`config.json`, `model.safetensors`, `vocab.txt` or
    /// `tokenizer.json`, and for sentence-transformers models `modules.json`).
    pub dir: PathBuf,
    /// The GGUF file to write.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Element type of the matrices: f32 (exact) or f16.
    #[arg(long, default_value = "f32")]
    pub outtype: String,
}

pub fn run(args: &ConvertArgs) -> Result<(), String> {
    let outtype = OutType::parse(&args.outtype)
        .ok_or_else(|| format!("--outtype {}: expected f32 or f16", args.outtype))?;
    let r = convert_hf(&args.dir, &args.output, &ConvertOptions { outtype })
        .map_err(|e| e.to_string())?;
    eprintln!(
        "wrote {} ({}, {} tensors, {} bytes)",
        args.output.display(),
        r.arch,
        r.tensors,
        r.bytes
    );
    Ok(())
}
