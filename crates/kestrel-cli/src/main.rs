//! `kestrel`: the command-line tool. Each subcommand lives in `commands/`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;
mod output;

/// kestrel: run GGUF language models.
#[derive(Parser, Debug)]
#[command(name = "kestrel", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show a GGUF file's metadata, tensors, types and sizes.
    Inspect(commands::inspect::InspectArgs),
    /// Tokenize text with a model's tokenizer: ids and pieces.
    Tokenize(commands::tokenize::TokenizeArgs),
    /// Turn token ids back into text.
    Detokenize(commands::detokenize::DetokenizeArgs),
    /// Render a conversation with the model's chat template.
    Template(commands::template::TemplateArgs),
    /// Generate a continuation of a prompt.
    Run(commands::run::RunArgs),
    /// Chat interactively with the model's chat template.
    Chat(commands::chat::ChatArgs),
    /// Raw next-token logits of token ids (no tokenizer needed), for checks against llama.cpp.
    Logits(commands::logits::LogitsArgs),
    /// Perplexity of a text file, as llama-perplexity computes it.
    Perplexity(commands::perplexity::PerplexityArgs),
    /// Prompt-processing and generation speed, as llama-bench measures them.
    Bench(commands::bench::BenchArgs),
    /// Serve the model over an OpenAI-compatible HTTP API.
    Serve(commands::serve::ServeArgs),
    /// Embed texts (encoder or decoder models) and print their cosine similarities.
    Embed(commands::embed::EmbedArgs),
    /// Convert a Hugging Face checkpoint to GGUF: 63 decoder architectures as llama.cpp's converter does (Llama, Mistral, Qwen, Gemma, Phi, DeepSeek, gpt-oss, Granite, Nemotron, Mamba and hybrids: docs/convert.md lists them), and BERT encoders.
    Convert(commands::convert::ConvertArgs),
    /// Quantize a GGUF model to one of llama-quantize's mixes (Q4_K_M, Q8_0, ...).
    Quantize(commands::quantize::QuantizeArgs),
    /// Compute an importance matrix (llama-imatrix's GGUF format) for `quantize --imatrix`.
    Imatrix(commands::imatrix::ImatrixArgs),
    /// Write a random-weight GGUF of a real model's shape (for speed measurements).
    Synth(commands::synth::SynthArgs),
    /// Merge LoRA adapters into a model file, as llama-export-lora does.
    ExportLora(commands::export_lora::ExportLoraArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => commands::inspect::run(&args),
        Command::Tokenize(args) => commands::tokenize::run(&args),
        Command::Detokenize(args) => commands::detokenize::run(&args),
        Command::Template(args) => commands::template::run(&args),
        Command::Run(args) => commands::run::run(&args),
        Command::Chat(args) => commands::chat::run(&args),
        Command::Logits(args) => commands::logits::run(&args),
        Command::Perplexity(args) => commands::perplexity::run(&args),
        Command::Bench(args) => commands::bench::run(&args),
        Command::Serve(args) => commands::serve::run(&args),
        Command::Embed(args) => commands::embed::run(&args),
        Command::Convert(args) => commands::convert::run(&args),
        Command::Quantize(args) => commands::quantize::run(&args),
        Command::Imatrix(args) => commands::imatrix::run(&args),
        Command::Synth(args) => commands::synth::run(&args),
        Command::ExportLora(args) => commands::export_lora::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
