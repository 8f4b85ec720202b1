//! `GenerateParams`: what one generation asks for: sampling, an optional grammar, cancellation.

use kestrel_sampling::{Grammar, SamplingConfig};

use crate::CancelToken;

/// Parameters of one generation.
///
/// ```
/// use kestrel_generate::GenerateParams;
/// use kestrel_sampling::{Grammar, SamplingConfig};
/// let params = GenerateParams {
///     sampling: SamplingConfig { temperature: 0.7, seed: Some(1), max_new_tokens: 64, ..Default::default() },
///     grammar: Some(Grammar::from_gbnf(r#"root ::= "yes" | "no""#).unwrap()),
///     ..Default::default()
/// };
/// assert_eq!(params.sampling.max_new_tokens, 64);
/// ```
#[derive(Clone, Debug, Default)]
pub struct GenerateParams {
    /// Sampler chain, token budget (`max_new_tokens`), stop ids and stop strings.
    pub sampling: SamplingConfig,
    /// Constrain the output to this grammar (GBNF or a compiled JSON Schema).
    pub grammar: Option<Grammar>,
    /// Stop when this token is cancelled.
    pub cancel: Option<CancelToken>,
    /// Report each token's log-probability and this many most likely alternatives (at most
    /// [`MAX_TOP_LOGPROBS`](crate::MAX_TOP_LOGPROBS)); `None`: none.
    pub logprobs: Option<usize>,
    /// The generator's LoRA adapters this generation uses, by index in
    /// [`Generator::adapters`](crate::Generator::adapters), each with its scale; adapters not
    /// listed are off (llama-server's per-request `lora` list). `None`: the generator's scales.
    pub adapters: Option<Vec<(usize, f32)>>,
}

impl GenerateParams {
    /// Greedy decoding of up to `max_new_tokens` tokens, nothing else.
    pub fn greedy(max_new_tokens: usize) -> Self {
        GenerateParams {
            sampling: SamplingConfig {
                max_new_tokens,
                ..SamplingConfig::greedy()
            },
            ..Default::default()
        }
    }
}
