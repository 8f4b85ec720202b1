//! `kestrel run -m MODEL -p PROMPT`: generate a continuation, streaming text to stdout; `--json`
//! prints ids, text and metrics as one document instead. Sampling, stop strings and grammars
//! come from the shared flags in `sampling.rs`.

use std::io::Write;

use clap::Args;
use serde_json::json;

use super::model_args::ModelArgs;
use super::sampling::SamplingArgs;
use crate::output::print;

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt (raw text; no chat template).
    #[arg(short, long)]
    pub prompt: String,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Do not add BOS even when the model's metadata asks for it.
    #[arg(long)]
    pub no_bos: bool,
    /// Print one JSON document with prompt ids, ids, text and metrics.
    #[arg(long)]
    pub json: bool,
    /// Prompt-lookup speculative decoding with n-grams up to N (0: off). Greedy output is
    /// unchanged; with --temp > 0 drafts are accepted by the rejection-sampling rule.
    #[arg(long, default_value_t = 0)]
    pub lookup: usize,
    /// Most tokens drafted per step with --lookup or --draft.
    #[arg(long, default_value_t = 8)]
    pub draft_max: usize,
    /// A draft model (same vocabulary) for speculative decoding (greedy or sampled).
    #[arg(long)]
    pub draft: Option<std::path::PathBuf>,
}

pub fn run(args: &RunArgs) -> Result<(), String> {
    let mut opts = args.sampling.options()?;
    opts.add_bos = !args.no_bos;
    let mut model = args.model.load()?;
    if args.lookup > 0 || args.draft.is_some() {
        return run_lookup(args, &mut model, &opts);
    }
    if args.json {
        let out = model
            .generate(&args.prompt, &opts)
            .map_err(|e| e.to_string())?;
        let doc = output_json(&out);
        return print(&format!("{doc}\n"));
    }
    let mut stdout = std::io::stdout();
    let mut closed = false;
    let out = model
        .generate_stream(&args.prompt, &opts, |piece| {
            closed = stdout
                .write_all(piece.as_bytes())
                .and_then(|_| stdout.flush())
                .is_err();
            !closed
        })
        .map_err(|e| e.to_string())?;
    if !closed {
        print("\n")?;
    }
    let m = &out.metrics;
    eprintln!(
        "prompt {} tokens ({:.1} tok/s), generated {} tokens ({:.1} tok/s), finish {:?}",
        m.prompt_tokens,
        m.prefill_tok_s(),
        m.generated_tokens,
        m.decode_tok_s(),
        out.finish
    );
    Ok(())
}

/// `--lookup N` or `--draft MODEL`: generation with speculation; prints the text (or
/// the JSON document) with the acceptance rate and forward passes.
fn run_lookup(
    args: &RunArgs,
    model: &mut kestrel::Model,
    opts: &kestrel::GenerateOptions,
) -> Result<(), String> {
    let lookup = kestrel::generate::LookupOptions {
        ngram: args.lookup,
        max_draft: args.draft_max,
    };
    let (out, stats) = match &args.draft {
        Some(path) => {
            let load = kestrel::LoadOptions {
                threads: args.model.threads,
                ctx: args.model.ctx,
                ..kestrel::LoadOptions::default()
            };
            let mut draft = kestrel::Model::load_file(path, load).map_err(|e| e.to_string())?;
            model.generate_speculative(&mut draft, &args.prompt, opts, args.draft_max)
        }
        None => model.generate_lookup(&args.prompt, opts, lookup),
    }
    .map_err(|e| e.to_string())?;
    let m = &out.metrics;
    if args.json {
        let mut doc = output_json(&out);
        doc["speculative"] = json!({
            "passes": stats.passes,
            "drafted": stats.drafted,
            "accepted": stats.accepted,
            "acceptance": stats.acceptance(),
        });
        return print(&format!("{doc}\n"));
    }
    print(&format!("{}\n", out.text))?;
    eprintln!(
        "speculative: {} tokens in {} passes, acceptance {:.2} ({}/{}), decode {:.1} tok/s",
        m.generated_tokens,
        stats.passes,
        stats.acceptance(),
        stats.accepted,
        stats.drafted,
        m.decode_tok_s()
    );
    Ok(())
}

/// `--json`'s document for one generation.
fn output_json(out: &kestrel::Output) -> serde_json::Value {
    let m = &out.metrics;
    json!({
        "prompt_ids": out.prompt_ids,
        "ids": out.ids,
        "text": out.text,
        "finish_reason": format!("{:?}", out.finish),
        "metrics": {
            "prompt_tokens": m.prompt_tokens,
            "generated_tokens": m.generated_tokens,
            "prefill_tok_s": m.prefill_tok_s(),
            "decode_tok_s": m.decode_tok_s(),
            "time_to_first_token_ms": m.time_to_first_token.as_secs_f64() * 1e3,
            "peak_memory_bytes": m.peak_memory_bytes,
        },
    })
}
