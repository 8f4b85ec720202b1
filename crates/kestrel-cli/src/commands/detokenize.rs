//! `kestrel detokenize -m MODEL IDS...`: token ids back to text.

use std::path::PathBuf;

use clap::Args;
use kestrel_tokenizer::{DecodeOptions, Tokenizer};

use crate::output::print;

#[derive(Args, Debug)]
pub struct DetokenizeArgs {
    /// The GGUF model file.
    #[arg(short, long)]
    pub model: PathBuf,
    /// Render control tokens (`<bos>`, `<|im_end|>`) as text.
    #[arg(long)]
    pub special: bool,
    /// Token ids (separated by spaces or commas; `[1, 2]` as printed by `tokenize --ids` works).
    #[arg(required = true, num_args = 1..)]
    pub ids: Vec<String>,
}

pub fn run(args: &DetokenizeArgs) -> Result<(), String> {
    let mut ids = Vec::new();
    for a in &args.ids {
        for part in a.split(|c: char| c == ',' || c == '[' || c == ']' || c.is_whitespace()) {
            if part.is_empty() {
                continue;
            }
            ids.push(
                part.parse::<u32>()
                    .map_err(|_| format!("`{part}` is not a token id"))?,
            );
        }
    }
    let tok = Tokenizer::from_file(&args.model).map_err(|e| e.to_string())?;
    let text = tok
        .decode(&ids, DecodeOptions::default().special(args.special))
        .map_err(|e| e.to_string())?;
    print(&format!("{text}\n"))
}
