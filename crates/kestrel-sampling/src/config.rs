//! `SamplingConfig`: every knob of the sampler pipeline, stop conditions and token budget,
//! with the seed project's defaults and a `validate()` that rejects unusable values.

use serde::{Deserialize, Serialize};

use crate::error::SamplingError;

/// Sampling parameters, stop conditions and token budget for one generation.
///
/// The defaults are the seed project's: temperature 1.0, no filtering (`top_k` 0, `top_p` 1.0,
/// `min_p` 0.0, `typical_p` 1.0), neutral penalties, 256 new tokens, a random seed.
/// Field meanings follow llama.cpp's `common_params_sampling`.
///
/// ```
/// use kestrel_sampling::SamplingConfig;
/// let cfg = SamplingConfig { temperature: 0.7, top_k: 40, seed: Some(42), ..Default::default() };
/// cfg.validate().unwrap();
/// let back: SamplingConfig = serde_json::from_str(&serde_json::to_string(&cfg).unwrap()).unwrap();
/// assert_eq!(back, cfg);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplingConfig {
    /// Softmax temperature; `0.0` means greedy argmax (no softmax, no RNG). Must be `>= 0`.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; `0` disables.
    pub top_k: usize,
    /// Nucleus sampling: keep the smallest set whose probability reaches `top_p`; `1.0` disables.
    pub top_p: f32,
    /// Keep tokens whose probability is at least `min_p` times the most likely one's; `0.0` disables.
    pub min_p: f32,
    /// Locally typical sampling mass; `1.0` disables.
    pub typical_p: f32,
    /// Minimum number of candidates top-p, min-p and typical-p keep (llama.cpp's `min_keep`).
    pub min_keep: usize,
    /// Repetition penalty: positive logits of recent tokens are divided by it, negative ones
    /// multiplied; `1.0` disables.
    pub repeat_penalty: f32,
    /// Subtracted once per occurrence of a token in the penalty window; `0.0` disables.
    pub frequency_penalty: f32,
    /// Subtracted once from every token present in the penalty window; `0.0` disables.
    pub presence_penalty: f32,
    /// How many of the most recent history tokens the penalties look at: `0` disables the
    /// penalties, `-1` uses the whole history.
    pub penalty_last_n: i32,
    /// Added to the logit of a token before anything else; `f32::NEG_INFINITY` bans it.
    pub logit_bias: Vec<(u32, f32)>,
    /// RNG seed; `None` draws one from the OS. Seeds up to `u32::MAX` seed the Mersenne Twister
    /// exactly as llama.cpp's `--seed` does; larger ones are folded to 32 bits.
    pub seed: Option<u64>,
    /// Maximum number of tokens to generate.
    pub max_new_tokens: usize,
    /// Tokens that end generation (in addition to the model's end-of-generation tokens).
    pub stop_token_ids: Vec<u32>,
    /// Strings that end generation; the match itself is not emitted (see [`crate::StopMatcher`]).
    pub stop_strings: Vec<String>,
    /// With a grammar: mask the whole vocabulary before sampling (`true`), or, as llama.cpp does by
    /// default (`false`), sample first and compute the mask only when the sampled token is not
    /// allowed.
    pub grammar_first: bool,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            typical_p: 1.0,
            min_keep: 0,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            logit_bias: Vec::new(),
            seed: None,
            max_new_tokens: 256,
            stop_token_ids: Vec::new(),
            stop_strings: Vec::new(),
            grammar_first: false,
        }
    }
}

fn bad(field: &'static str, reason: impl Into<String>) -> SamplingError {
    SamplingError::InvalidConfig {
        field,
        reason: reason.into(),
    }
}

/// The largest top-k [`SamplingConfig::device_top_k`] hands to a GPU (kestrel-tensor's
/// `cuda::MAX_TOP_K`, which kestrel-generate checks it equals).
pub const MAX_DEVICE_TOP_K: usize = 256;

impl SamplingConfig {
    /// Greedy decoding: temperature 0, everything else default.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// True when sampling is greedy argmax (`temperature <= 0`).
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// True when the next token is the logits' argmax and nothing else reads the logits:
    /// greedy, no logit bias, neutral penalties. A GPU generator then finds the token on the
    /// device and copies back its id instead of the logits.
    pub fn is_plain_greedy(&self) -> bool {
        self.is_greedy() && self.reads_only_the_logits()
    }

    /// `Some(top_k)` when the next token depends on the logits only through their `top_k`
    /// best (1 to 256: the most a GPU finds on the device): a draw (temperature above 0) with
    /// top-k on, no logit bias, neutral penalties. A GPU generator then finds those candidates
    /// on the device, copies back 8 bytes each instead of the logits, and goes on with
    /// [`Sampler::pick_top`](crate::Sampler::pick_top), which draws what
    /// [`Sampler::sample`](crate::Sampler::sample) would.
    pub fn device_top_k(&self) -> Option<usize> {
        (!self.is_greedy()
            && (1..=MAX_DEVICE_TOP_K).contains(&self.top_k)
            && self.reads_only_the_logits())
        .then_some(self.top_k)
    }

    /// No logit bias and neutral penalties: nothing but the logits decides the token.
    fn reads_only_the_logits(&self) -> bool {
        self.logit_bias.is_empty()
            && (self.penalty_last_n == 0
                || (self.repeat_penalty == 1.0
                    && self.frequency_penalty == 0.0
                    && self.presence_penalty == 0.0))
    }

    /// Checks every field; the first bad one is reported as [`SamplingError::InvalidConfig`].
    pub fn validate(&self) -> Result<(), SamplingError> {
        if !self.temperature.is_finite() {
            return Err(bad(
                "temperature",
                format!("must be finite, got {}", self.temperature),
            ));
        }
        if self.temperature < 0.0 {
            return Err(bad(
                "temperature",
                format!("must be >= 0 (0 is greedy), got {}", self.temperature),
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(bad(
                "top_p",
                format!("must be in (0, 1], got {}", self.top_p),
            ));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(bad(
                "min_p",
                format!("must be in [0, 1], got {}", self.min_p),
            ));
        }
        if !(self.typical_p > 0.0 && self.typical_p <= 1.0) {
            return Err(bad(
                "typical_p",
                format!("must be in (0, 1], got {}", self.typical_p),
            ));
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return Err(bad(
                "repeat_penalty",
                format!("must be finite and > 0, got {}", self.repeat_penalty),
            ));
        }
        if !self.frequency_penalty.is_finite() {
            return Err(bad(
                "frequency_penalty",
                format!("must be finite, got {}", self.frequency_penalty),
            ));
        }
        if !self.presence_penalty.is_finite() {
            return Err(bad(
                "presence_penalty",
                format!("must be finite, got {}", self.presence_penalty),
            ));
        }
        if self.penalty_last_n < -1 {
            return Err(bad(
                "penalty_last_n",
                format!(
                    "must be -1 (whole history), 0 (off) or positive, got {}",
                    self.penalty_last_n
                ),
            ));
        }
        for &(id, bias) in &self.logit_bias {
            if bias.is_nan() || bias == f32::INFINITY {
                return Err(bad(
                    "logit_bias",
                    format!("bias for token {id} must be finite or -inf, got {bias}"),
                ));
            }
        }
        if self.max_new_tokens == 0 {
            return Err(bad("max_new_tokens", "must be at least 1"));
        }
        if let Some(i) = self.stop_strings.iter().position(String::is_empty) {
            return Err(bad("stop_strings", format!("entry {i} is empty")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_seed_projects() {
        let c = SamplingConfig::default();
        assert_eq!(c.temperature, 1.0);
        assert_eq!((c.top_k, c.top_p, c.min_p, c.typical_p), (0, 1.0, 0.0, 1.0));
        assert_eq!(
            (c.repeat_penalty, c.frequency_penalty, c.presence_penalty),
            (1.0, 0.0, 0.0)
        );
        assert_eq!(c.max_new_tokens, 256);
        assert!(c.seed.is_none() && c.logit_bias.is_empty() && c.stop_strings.is_empty());
        c.validate().unwrap();
        SamplingConfig::greedy().validate().unwrap();
    }

    #[test]
    fn plain_greedy_is_greedy_with_nothing_else_reading_the_logits() {
        let g = SamplingConfig::greedy();
        assert!(g.is_plain_greedy());
        assert!(!SamplingConfig::default().is_plain_greedy());
        let biased = SamplingConfig {
            logit_bias: vec![(3, 0.0)],
            ..g.clone()
        };
        assert!(!biased.is_plain_greedy());
        let penalized = SamplingConfig {
            repeat_penalty: 1.1,
            penalty_last_n: 64,
            ..g.clone()
        };
        assert!(!penalized.is_plain_greedy());
        // Penalties over an empty window change nothing.
        assert!(SamplingConfig {
            penalty_last_n: 0,
            ..penalized
        }
        .is_plain_greedy());
        // Filters do not matter to an argmax.
        assert!(SamplingConfig { top_k: 5, ..g }.is_plain_greedy());
    }

    #[test]
    fn bad_values_are_typed_errors() {
        let cases: Vec<(SamplingConfig, &str)> = vec![
            (
                SamplingConfig {
                    temperature: -0.5,
                    ..Default::default()
                },
                "temperature",
            ),
            (
                SamplingConfig {
                    temperature: f32::NAN,
                    ..Default::default()
                },
                "temperature",
            ),
            (
                SamplingConfig {
                    top_p: 0.0,
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SamplingConfig {
                    top_p: 1.5,
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SamplingConfig {
                    top_p: f32::NAN,
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SamplingConfig {
                    min_p: -0.1,
                    ..Default::default()
                },
                "min_p",
            ),
            (
                SamplingConfig {
                    min_p: f32::NAN,
                    ..Default::default()
                },
                "min_p",
            ),
            (
                SamplingConfig {
                    typical_p: 0.0,
                    ..Default::default()
                },
                "typical_p",
            ),
            (
                SamplingConfig {
                    repeat_penalty: 0.0,
                    ..Default::default()
                },
                "repeat_penalty",
            ),
            (
                SamplingConfig {
                    frequency_penalty: f32::INFINITY,
                    ..Default::default()
                },
                "frequency_penalty",
            ),
            (
                SamplingConfig {
                    presence_penalty: f32::NAN,
                    ..Default::default()
                },
                "presence_penalty",
            ),
            (
                SamplingConfig {
                    penalty_last_n: -2,
                    ..Default::default()
                },
                "penalty_last_n",
            ),
            (
                SamplingConfig {
                    logit_bias: vec![(3, f32::NAN)],
                    ..Default::default()
                },
                "logit_bias",
            ),
            (
                SamplingConfig {
                    max_new_tokens: 0,
                    ..Default::default()
                },
                "max_new_tokens",
            ),
            (
                SamplingConfig {
                    stop_strings: vec![String::new()],
                    ..Default::default()
                },
                "stop_strings",
            ),
        ];
        for (cfg, field) in cases {
            match cfg.validate() {
                Err(SamplingError::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: expected InvalidConfig, got {other:?}"),
            }
        }
        let ban = SamplingConfig {
            logit_bias: vec![(3, f32::NEG_INFINITY)],
            ..Default::default()
        };
        ban.validate().unwrap();
    }

    #[test]
    fn serde_fills_missing_fields_with_defaults_and_rejects_unknown() {
        let c: SamplingConfig = serde_json::from_str(r#"{"temperature":0.5,"seed":7}"#).unwrap();
        assert_eq!(c.temperature, 0.5);
        assert_eq!(c.seed, Some(7));
        assert_eq!(c.max_new_tokens, 256);
        assert!(serde_json::from_str::<SamplingConfig>(r#"{"temprature":0.5}"#).is_err());
    }
}
