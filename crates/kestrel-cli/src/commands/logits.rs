//! `kestrel logits -m MODEL --ids 1,5,9 [--all-positions] [--json] [--device cpu|cuda]`: the raw
//! next-token logits of a token-id prompt, without a tokenizer (files whose tokenizer is
//! `no_vocab` included), to check any file against llama.cpp's logits or one engine against
//! another. `--json` prints `{"logits": [...]}` (the last position), or a list per position
//! with `--all-positions`; otherwise each position's top tokens.

use std::path::PathBuf;

use clap::Args;
use kestrel::generate::{logits_of_ids, LogitsOptions, MAX_LOGITS_IDS};
use kestrel_gguf::GgufModel;
use serde_json::json;

use crate::output::print;

/// Arguments of `kestrel logits`.
#[derive(Args, Debug)]
pub struct LogitsArgs {
    /// The GGUF model file.
    #[arg(short, long)]
    pub model: PathBuf,
    /// Token ids, comma-separated (e.g. 1,5,9,17,33).
    #[arg(long, value_delimiter = ',', required = true)]
    pub ids: Vec<u32>,
    /// Every position's logits, not only the last's.
    #[arg(long)]
    pub all_positions: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Where to run: cpu, cuda, cuda:N or auto.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// CPU threads (0: all cores).
    #[arg(short, long, default_value_t = 0)]
    pub threads: usize,
    /// Top tokens shown per position without --json.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// LoRA adapters.
    #[command(flatten)]
    pub lora: super::lora_args::LoraArgs,
}

/// Runs `kestrel logits`.
pub fn run(args: &LogitsArgs) -> Result<(), String> {
    if args.ids.len() > MAX_LOGITS_IDS {
        return Err(format!(
            "--ids: {} ids, at most {MAX_LOGITS_IDS}",
            args.ids.len()
        ));
    }
    let model = GgufModel::open(&args.model).map_err(|e| e.to_string())?;
    let opts = LogitsOptions {
        all_positions: args.all_positions,
        device: args.device.clone(),
        threads: args.threads,
        lora: args.lora.adapters()?,
    };
    let rows = logits_of_ids(&model, &args.ids, &opts).map_err(|e| e.to_string())?;
    if args.json {
        let value = if args.all_positions {
            json!({ "logits": rows })
        } else {
            json!({ "logits": rows.last().cloned().unwrap_or_default() })
        };
        return print(&format!("{value}\n"));
    }
    let first = if args.all_positions {
        0
    } else {
        args.ids.len() - 1
    };
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let mut idx: Vec<usize> = (0..row.len()).collect();
        idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        let top: Vec<String> = idx
            .iter()
            .take(args.top.max(1))
            .map(|&t| format!("{t}:{:.4}", row[t]))
            .collect();
        out.push_str(&format!("position {}: {}\n", first + i, top.join(" ")));
    }
    print(&out)
}
