//! Samplers and grammar-constrained decoding for kestrel.
//!
//! - [`SamplingConfig`] and [`Sampler`]: llama.cpp's default sampler chain (logit bias,
//!   penalties, top-k, typical-p, top-p, min-p, temperature, seeded draw; greedy at temperature 0).
//! - [`StopMatcher`]: incremental stop strings that never emit part of a match.
//! - [`Grammar`] (GBNF, llama.cpp syntax), [`GrammarMatcher`] (pushdown matcher over code
//!   points) and [`TokenTrie`] + [`TokenMask`] (allowed-token mask over a vocabulary trie);
//!   [`Sampler::sample_constrained`] samples under a grammar.
//! - [`json_schema_to_gbnf`] / [`Grammar::from_json_schema`]: JSON Schema to grammar.
//!
//! ```
//! use kestrel_sampling::{Sampler, SamplingConfig};
//! let cfg = SamplingConfig { temperature: 0.8, top_k: 40, top_p: 0.95, seed: Some(42), ..Default::default() };
//! let mut sampler = Sampler::new(&cfg, 4).unwrap();
//! let mut logits = vec![0.1, 2.5, -1.0, 0.3];
//! let history = [1u32, 3];
//! let token = sampler.sample(&mut logits, &history).unwrap();
//! assert!(token < 4);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod error;
mod grammar;
mod rng;
mod sampler;
mod samplers;
pub mod speculative;
mod stop;

pub use config::{SamplingConfig, MAX_DEVICE_TOP_K};
pub use error::SamplingError;
pub use grammar::json_schema::{
    text_to_gbnf as json_schema_text_to_gbnf, to_gbnf as json_schema_to_gbnf,
};
pub use grammar::matcher::GrammarMatcher;
pub use grammar::token_trie::{TokenMask, TokenTrie};
pub use grammar::Grammar;
pub use sampler::Sampler;
pub use stop::{StopMatcher, StopStep};
