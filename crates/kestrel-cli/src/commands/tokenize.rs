//! `kestrel tokenize -m MODEL [--json] [--no-bos] [--parse-special] TEXT`: ids and pieces.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use kestrel_tokenizer::{EncodeOptions, Tokenizer};
use serde_json::json;

use crate::output::print;

#[derive(Args, Debug)]
pub struct TokenizeArgs {
    /// The GGUF model file.
    #[arg(short, long)]
    pub model: PathBuf,
    /// Print `{"ids":[...],"pieces":[...]}`.
    #[arg(long)]
    pub json: bool,
    /// Do not add BOS even when the file asks for it.
    #[arg(long)]
    pub no_bos: bool,
    /// Turn control-token text in TEXT (`<|im_start|>`) into those tokens.
    #[arg(long)]
    pub parse_special: bool,
    /// Print only the ids, as `[1, 2, 3]` (llama-tokenize's `--ids`).
    #[arg(long, conflicts_with = "json")]
    pub ids: bool,
    /// The text to tokenize (`-` reads standard input).
    pub text: String,
}

pub fn run(args: &TokenizeArgs) -> Result<(), String> {
    let tok = Tokenizer::from_file(&args.model).map_err(|e| e.to_string())?;
    let text = if args.text == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| format!("reading standard input: {e}"))?;
        s
    } else {
        args.text.clone()
    };
    let opts = EncodeOptions::default()
        .add_special(!args.no_bos)
        .parse_special(args.parse_special);
    let ids = tok.encode(&text, opts).map_err(|e| e.to_string())?;
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| {
            tok.token_to_piece(id, true)
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    let mut out = String::new();
    if args.json {
        out = json!({ "ids": ids, "pieces": pieces }).to_string();
        out.push('\n');
    } else if args.ids {
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        let _ = writeln!(out, "[{}]", list.join(", "));
    } else {
        for (id, p) in ids.iter().zip(&pieces) {
            let _ = writeln!(out, "{id:6} -> '{}'", p.escape_debug());
        }
    }
    print(&out)
}
