//! `kestrel convert DIR -o OUT [--outtype f32|f16|bf16|q8_0|auto]`: a Hugging Face checkpoint
//! (Llama/Mistral/Mixtral, Qwen2/3 and their MoE, Gemma 2/3, Phi-3, SmolLM3, OLMo 2/3, OLMoE, Granite, gpt-oss decoders; BERT encoders) to GGUF, with kestrel's own
//! converter.

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
    /// Element type of the matrices: f32 (exact), f16, bf16, q8_0 (bf16 and q8_0 for decoders),
    /// or auto (the checkpoint's own 16-bit type, as llama.cpp guesses it).
    #[arg(long, default_value = "f32")]
    pub outtype: String,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn run(args: &ConvertArgs) -> Result<(), String> {
    let outtype = OutType::parse(&args.outtype).ok_or_else(|| {
        format!(
            "--outtype {}: expected f32, f16, bf16, q8_0 or auto",
            args.outtype
        )
    })?;
    let opts = ConvertOptions::new(outtype).with_progress(!args.quiet);
    let r = convert_hf(&args.dir, &args.output, &opts).map_err(|e| e.to_string())?;
    eprintln!(
        "wrote {} ({}, {} tensors, {} bytes)",
        args.output.display(),
        r.arch,
        r.tensors,
        r.bytes
    );
    Ok(())
}
