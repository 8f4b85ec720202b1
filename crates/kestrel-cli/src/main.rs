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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => commands::inspect::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
