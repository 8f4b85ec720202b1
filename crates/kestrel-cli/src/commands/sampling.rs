//! The sampling, stop and grammar flags `kestrel run` and `kestrel chat` share, with
//! llama.cpp's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05).

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::Args;
use kestrel::GenerateOptions;

/// Largest grammar or schema file read (bytes).
const MAX_GRAMMAR: u64 = 1 << 20;

#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Most tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 256)]
    pub n_predict: usize,
    /// Temperature (0: greedy argmax).
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Keep the k most likely tokens (0: off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Nucleus sampling mass (1.0: off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Minimum probability relative to the most likely token (0.0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Locally typical sampling mass (1.0: off).
    #[arg(long, default_value_t = 1.0)]
    pub typical: f32,
    /// Repetition penalty (1.0: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the penalties look back over (0: off, -1: all).
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    pub repeat_last_n: i32,
    /// Presence penalty (0.0: off).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Frequency penalty (0.0: off).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// RNG seed (default: random; the seed used is printed with the stats).
    #[arg(short = 's', long)]
    pub seed: Option<u64>,
    /// A string that ends generation (not printed); repeat for several.
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Constrain the output to a GBNF grammar file (llama.cpp's syntax).
    #[arg(long, conflicts_with_all = ["grammar", "json_schema"])]
    pub grammar_file: Option<PathBuf>,
    /// Constrain the output to GBNF given inline.
    #[arg(long, conflicts_with = "json_schema")]
    pub grammar: Option<String>,
    /// Constrain the output to JSON valid against a JSON Schema: a file, or the schema itself
    /// when it starts with `{`.
    #[arg(short = 'j', long)]
    pub json_schema: Option<String>,
}

fn read_bounded(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_GRAMMAR + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if text.len() as u64 > MAX_GRAMMAR {
        return Err(format!(
            "{}: larger than {MAX_GRAMMAR} bytes",
            path.display()
        ));
    }
    Ok(text)
}

impl SamplingArgs {
    /// The generation options these flags ask for; a bad grammar or schema is an error that
    /// names the file.
    pub fn options(&self) -> Result<GenerateOptions, String> {
        let mut o = GenerateOptions::default()
            .with_max_tokens(self.n_predict)
            .with_temperature(self.temp)
            .with_top_k(self.top_k)
            .with_top_p(self.top_p)
            .with_min_p(self.min_p)
            .with_repetition_penalty(self.repeat_penalty)
            .with_stop_strings(self.stop.iter().cloned());
        o.sampling.typical_p = self.typical;
        o.sampling.penalty_last_n = self.repeat_last_n;
        o.sampling.presence_penalty = self.presence_penalty;
        o.sampling.frequency_penalty = self.frequency_penalty;
        o.sampling.seed = self.seed;
        if let Some(path) = &self.grammar_file {
            let text = read_bounded(path)?;
            o = o
                .with_gbnf(&text)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        if let Some(text) = &self.grammar {
            o = o.with_gbnf(text).map_err(|e| format!("--grammar: {e}"))?;
        }
        if let Some(arg) = &self.json_schema {
            let (text, name) = if arg.trim_start().starts_with('{') {
                (arg.clone(), "--json-schema".to_string())
            } else {
                let p = Path::new(arg);
                (read_bounded(p)?, p.display().to_string())
            };
            o = o
                .with_json_schema(&text)
                .map_err(|e| format!("{name}: {e}"))?;
        }
        o.sampling
            .validate()
            .map_err(|e| format!("sampling options: {e}"))?;
        Ok(o)
    }
}
