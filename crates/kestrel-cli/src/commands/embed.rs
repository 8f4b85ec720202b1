//! `kestrel embed -m MODEL [-t N] [--json] TEXT...`: one L2-normalized embedding per text, from
//! an encoder (BERT) or a decoder model, pooled as the file says; with two or more texts, their
//! cosine similarities too.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use kestrel::gguf::GgufModel;
use kestrel::{cosine, EncoderModel, LoadOptions, Model};
use serde_json::json;

use crate::output::print;

#[derive(Args, Debug)]
pub struct EmbedArgs {
    /// The GGUF model file.
    #[arg(short, long)]
    pub model: PathBuf,
    /// Threads (0: all cores).
    #[arg(short, long, default_value_t = 0)]
    pub threads: usize,
    /// Print `{"embeddings":[[...]],"similarity":[[...]]}`.
    #[arg(long)]
    pub json: bool,
    /// The texts to embed.
    #[arg(required = true)]
    pub texts: Vec<String>,
}

pub fn run(args: &EmbedArgs) -> Result<(), String> {
    let opts = LoadOptions {
        threads: args.threads,
        ..LoadOptions::default()
    };
    let encoder = GgufModel::open(&args.model)
        .map_err(|e| e.to_string())?
        .metadata()
        .architecture()
        .is_ok_and(|a| a == "bert");
    let vectors: Vec<Vec<f32>> = if encoder {
        let mut m = EncoderModel::load_file(&args.model, opts).map_err(|e| e.to_string())?;
        m.embed_batch(&args.texts).map_err(|e| e.to_string())?
    } else {
        let mut m = Model::load_file(&args.model, opts).map_err(|e| e.to_string())?;
        args.texts
            .iter()
            .map(|t| m.embed(t))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?
    };
    let sim: Vec<Vec<f32>> = vectors
        .iter()
        .map(|a| vectors.iter().map(|b| cosine(a, b)).collect())
        .collect();
    let mut out = String::new();
    if args.json {
        out = json!({ "embeddings": vectors, "similarity": sim }).to_string();
        out.push('\n');
    } else {
        for (t, v) in args.texts.iter().zip(&vectors) {
            let head: Vec<String> = v.iter().take(8).map(|x| format!("{x:.4}")).collect();
            let _ = writeln!(out, "{t:?}: [{}, ...] ({} dims)", head.join(", "), v.len());
        }
        if vectors.len() > 1 {
            let _ = writeln!(out, "cosine similarity:");
            for row in &sim {
                let cells: Vec<String> = row.iter().map(|c| format!("{c:6.3}")).collect();
                let _ = writeln!(out, "  {}", cells.join(" "));
            }
        }
    }
    print(&out)
}
