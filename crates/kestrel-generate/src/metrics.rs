//! `GenerateMetrics`: what a generation cost.

use std::time::Duration;

/// Counts and timings of one generation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerateMetrics {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub generated_tokens: usize,
    /// Time to process the prompt (until the first token's logits).
    pub prefill: Duration,
    /// Time for the remaining decode steps.
    pub decode: Duration,
}

impl GenerateMetrics {
    /// Prompt tokens per second.
    pub fn prefill_tok_s(&self) -> f64 {
        rate(self.prompt_tokens, self.prefill)
    }

    /// Generated tokens per second, over the decode steps (the first token comes from prefill).
    pub fn decode_tok_s(&self) -> f64 {
        rate(self.generated_tokens.saturating_sub(1), self.decode)
    }
}

fn rate(n: usize, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}
