//! The decode loop for kestrel.
//!
//! [`Generator`] holds a model ready to run — its config, the CPU engine, the prefill and decode
//! plans compiled from one graph, and a KV cache — and runs greedy generation over token ids
//! with a per-token callback, stopping at the model's end-of-generation tokens, plus perplexity
//! as llama-perplexity computes it.
//!
//! Status: greedy decoding over ids. Sampling, stop strings, sessions, batching and speculative
//! decoding come with their issues.

mod error;
mod generator;
mod metrics;

pub use error::GenerateError;
pub use generator::{Generation, Generator, GeneratorOptions, Perplexity};
pub use metrics::GenerateMetrics;
