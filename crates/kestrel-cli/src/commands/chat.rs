//! `kestrel chat -m MODEL`: an interactive chat. Each line typed is a user turn; the reply
//! streams as it is generated. The conversation is rendered with the model's chat template and
//! the model's KV cache is reused between turns, so only the new turn is prefilled.
//! `/reset` starts over, `/exit` (or end of input) quits.

use std::io::{BufRead, Read, Write};

use clap::Args;
use kestrel::ChatMessage;

use super::model_args::ModelArgs;
use super::sampling::SamplingArgs;

/// Longest line read from the terminal (bytes).
const MAX_LINE: usize = 1 << 20;

#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A system message that opens the conversation.
    #[arg(long)]
    pub system: Option<String>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Print token counts and speeds after each reply (to stderr).
    #[arg(long)]
    pub stats: bool,
}

pub fn run(args: &ChatArgs) -> Result<(), String> {
    let opts = args.sampling.options()?;
    let mut model = args.model.load()?;
    let opening: Vec<ChatMessage> = args
        .system
        .iter()
        .map(|s| ChatMessage::new("system", s.as_str()))
        .collect();
    let mut messages = opening.clone();
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout();
    let mut line = String::new();
    loop {
        write!(out, "> ")
            .and_then(|_| out.flush())
            .map_err(|e| e.to_string())?;
        line.clear();
        let n = Read::take(&mut input, MAX_LINE as u64)
            .read_line(&mut line)
            .map_err(|e| format!("reading input: {e}"))?;
        if n == 0 {
            writeln!(out).map_err(|e| e.to_string())?;
            return Ok(());
        }
        let text = line.trim();
        match text {
            "" => continue,
            "/exit" | "/quit" => return Ok(()),
            "/reset" => {
                messages = opening.clone();
                continue;
            }
            _ => {}
        }
        messages.push(ChatMessage::new("user", text));
        let mut closed = false;
        let reply = model.chat_stream(&messages, &opts, |piece| {
            closed = out
                .write_all(piece.as_bytes())
                .and_then(|_| out.flush())
                .is_err();
            !closed
        });
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                // the turn is dropped; the conversation goes on
                messages.pop();
                eprintln!("error: {e}");
                continue;
            }
        };
        if closed {
            return Ok(());
        }
        writeln!(out).map_err(|e| e.to_string())?;
        if args.stats {
            let m = &reply.metrics;
            eprintln!(
                "[prompt {} tokens ({} cached, {:.1} tok/s), reply {} tokens ({:.1} tok/s), finish {:?}]",
                m.prompt_tokens,
                m.cached_tokens,
                m.prefill_tok_s(),
                m.generated_tokens,
                m.decode_tok_s(),
                reply.finish
            );
        }
        messages.push(ChatMessage::new("assistant", reply.text));
    }
}
