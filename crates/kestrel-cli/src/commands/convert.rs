//! `kestrel convert DIR -o OUT [--outtype f32|f16|bf16|q8_0|auto] [--split-max-tensors N]
//! [--split-max-size SIZE] [--no-tensor-first-split] [--vocab-only] [--model-name NAME]
//! [--metadata FILE] [--fp8-as-q8] [--fuse-qkv]`: a Hugging Face checkpoint
//! (the decoder families docs/convert.md lists; BERT encoders) to GGUF, with kestrel's own
//! converter. A PEFT LoRA adapter folder (`adapter_config.json`) converts to a GGUF adapter
//! (`--base`: the base model's folder, for its `config.json`), as llama.cpp's
//! `convert_lora_to_gguf.py` does.

use std::path::PathBuf;

use clap::Args;
use kestrel::convert::{convert_hf, convert_lora, ConvertOptions, OutType, Split};

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
    /// Split the output into files of at most this many tensors each, named
    /// `OUT-00001-of-0000N.gguf` (as llama.cpp's converter; 0: no limit).
    #[arg(long, default_value_t = 0)]
    pub split_max_tensors: usize,
    /// Split the output into files of at most this much tensor data each: bytes, or a number
    /// followed by K, M or G (powers of 1000, as llama.cpp's converter reads them; 0: no limit).
    #[arg(long, default_value = "0")]
    pub split_max_size: String,
    /// With a split output, the first file holds only the metadata.
    #[arg(long)]
    pub no_tensor_first_split: bool,
    /// Write only the vocabulary and metadata, no tensors.
    #[arg(long)]
    pub vocab_only: bool,
    /// The model's name (`general.name`), over what the checkpoint gives.
    #[arg(long)]
    pub model_name: Option<String>,
    /// A JSON file of `general.*` values (llama.cpp's authorship override file) over what the
    /// checkpoint gives.
    #[arg(long)]
    pub metadata: Option<PathBuf>,
    /// Write the matrices an FP8 checkpoint stores in FP8 as Q8_0, whatever --outtype says.
    #[arg(long)]
    pub fp8_as_q8: bool,
    /// Write each layer's Q, K and V projections as one fused `attn_qkv` (the families
    /// docs/convert.md lists).
    #[arg(long)]
    pub fuse_qkv: bool,
}

pub fn run(args: &ConvertArgs) -> Result<(), String> {
    let outtype = OutType::parse(&args.outtype).ok_or_else(|| {
        format!(
            "--outtype {}: expected f32, f16, bf16, q8_0 or auto",
            args.outtype
        )
    })?;
    let max_bytes = Split::parse_size(&args.split_max_size).ok_or_else(|| {
        format!(
            "--split-max-size {}: expected a number of bytes, optionally followed by K, M or G",
            args.split_max_size
        )
    })?;
    let split = Split::new(args.split_max_tensors, max_bytes)
        .metadata_only_first(args.no_tensor_first_split);
    let opts = ConvertOptions::new(outtype)
        .with_progress(!args.quiet)
        .with_split(split)
        .with_vocab_only(args.vocab_only)
        .with_model_name(args.model_name.clone())
        .with_metadata(args.metadata.clone())
        .with_fp8_as_q8(args.fp8_as_q8)
        .with_fuse_qkv(args.fuse_qkv);
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
    let files = match r.files.as_slice() {
        [first, .., last] => format!(
            "{} files, {} ... {}",
            r.files.len(),
            first.display(),
            last.display()
        ),
        _ => args.output.display().to_string(),
    };
    eprintln!(
        "wrote {files} ({}, {} tensors, {} bytes)",
        r.arch, r.tensors, r.bytes
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
