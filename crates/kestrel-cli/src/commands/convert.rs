//! `kestrel convert DIR -o OUT [--outtype f32|f16|bf16|q8_0|auto]`: a Hugging Face checkpoint
//! (Llama/Mistral/Mixtral, Qwen2/3 and their MoE, Gemma 2/3, Phi-3, SmolLM3, OLMo 2/3, OLMoE, Granite, gpt-oss decoders; BERT encoders) to GGUF, with kestrel's own
//! converter. A PEFT LoRA adapter folder (`adapter_config.json`) converts to a GGUF adapter
//! (`--base`: the base model's folder, for its `config.json`), as llama.cpp's
//! `convert_lora_to_gguf.py` does.

use std::path::PathBuf;

use clap::Args;
use kestrel::convert::{convert_hf, convert_lora, ConvertOptions, OutType};

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
    /// For a LoRA adapter folder: the base model's folder (only its config.json is read);
    /// default: the adapter's `base_model_name_or_path` where that is a local folder.
    #[arg(long)]
    pub base: Option<PathBuf>,
}

pub fn run(args: &ConvertArgs) -> Result<(), String> {
    let outtype = OutType::parse(&args.outtype).ok_or_else(|| {
        format!(
            "--outtype {}: expected f32, f16, bf16, q8_0 or auto",
            args.outtype
        )
    })?;
    let opts = ConvertOptions::new(outtype).with_progress(!args.quiet);
    let r = if args.dir.join("adapter_config.json").is_file() {
        let base = match &args.base {
            Some(b) => b.clone(),
            None => local_base(&args.dir)?,
        };
        convert_lora(&args.dir, &base, &args.output, &opts).map_err(|e| e.to_string())?
    } else {
        if args.base.is_some() {
            return Err(format!(
                "--base is for LoRA adapters, and {} has no adapter_config.json",
                args.dir.display()
            ));
        }
        convert_hf(&args.dir, &args.output, &opts).map_err(|e| e.to_string())?
    };
    eprintln!(
        "wrote {} ({}, {} tensors, {} bytes)",
        args.output.display(),
        r.arch,
        r.tensors,
        r.bytes
    );
    Ok(())
}

/// The adapter's `base_model_name_or_path`, where it names a local folder with a config.json.
fn local_base(adapter: &std::path::Path) -> Result<PathBuf, String> {
    let cfg = adapter.join("adapter_config.json");
    let text = std::fs::read_to_string(&cfg).map_err(|e| format!("{}: {e}", cfg.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", cfg.display()))?;
    let named = v.get("base_model_name_or_path").and_then(|b| b.as_str());
    match named.map(PathBuf::from) {
        Some(p) if p.join("config.json").is_file() => Ok(p),
        _ => Err(format!(
            "{} is a LoRA adapter: give the base model's folder with --base (its \
             base_model_name_or_path {named:?} is not a local folder with a config.json)",
            adapter.display()
        )),
    }
}
