//! `GenerateMetrics`: what a generation cost.

use std::time::Duration;

/// Counts and timings of one generation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerateMetrics {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys and values were already in the session's cache (not prefilled).
    pub cached_tokens: usize,
    /// Tokens generated.
    pub generated_tokens: usize,
    /// Time to process the prompt (until the first token's logits).
    pub prefill: Duration,
    /// Time for the remaining decode steps.
    pub decode: Duration,
    /// Time from the call to the first generated token.
    pub time_to_first_token: Duration,
    /// The process's peak resident memory when the generation ended (Linux `VmHWM`), if known.
    pub peak_memory_bytes: Option<u64>,
}

impl GenerateMetrics {
    /// Prompt tokens prefilled per second (cached tokens excluded).
    pub fn prefill_tok_s(&self) -> f64 {
        rate(
            self.prompt_tokens.saturating_sub(self.cached_tokens),
            self.prefill,
        )
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

/// The process's peak resident set size, from `/proc/self/status` (`None` elsewhere).
pub(crate) fn peak_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_skip_cached_tokens_and_the_first_token() {
        let m = GenerateMetrics {
            prompt_tokens: 30,
            cached_tokens: 10,
            generated_tokens: 11,
            prefill: Duration::from_secs(2),
            decode: Duration::from_secs(5),
            ..Default::default()
        };
        assert_eq!(m.prefill_tok_s(), 10.0);
        assert_eq!(m.decode_tok_s(), 2.0);
        assert_eq!(GenerateMetrics::default().decode_tok_s(), 0.0);
    }

    #[test]
    fn peak_memory_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(peak_memory_bytes().unwrap() > 1 << 20);
        }
    }
}
