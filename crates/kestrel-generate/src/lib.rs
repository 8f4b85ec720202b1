//! The decode loop for kestrel.
//!
//! [`Generator`] holds a model ready to run — its config, the CPU engine, the prefill and decode
//! plans compiled from one graph, the tokenizer and a default [`Session`] — and runs:
//! - sampled, grammar-constrained, streamed generation: [`Generator::iter`] (an iterator of
//!   [`Token`]s), [`Generator::generate`] (a [`TokenStream`] callback), on the default session
//!   or one of the caller's ([`Generator::new_session`]), with stop ids, incremental stop
//!   strings, cancellation ([`CancelToken`]) and [`GenerateMetrics`];
//! - the greedy loop over ids ([`Generator::generate_ids`]) and single steps
//!   ([`Generator::prefill`], [`Generator::step`]) for tests and benchmarks;
//! - perplexity and KL divergence against a base as llama-perplexity computes them, in its
//!   log-probability file format (`perplexity/`).
//!
//! A session keeps its tokens and KV cache between generations: a prompt that starts with the
//! same tokens (a system prompt, earlier chat turns) reuses them instead of prefilling again.
//!
//! [`Scheduler`] batches many requests continuously: one forward pass per step over a paged KV
//! pool serves every running sequence ([`Generator::batch_generate`]).
//!
//! Status: prefix caching, quantized KV and speculative decoding come with their issue.

mod adapter_use;
mod adapters;
mod batch;
mod batch_store;
mod cancel;
mod core;
mod cuda_seqs;
mod embed;
mod encoder;
mod error;
mod generator;
mod imatrix;
mod logits;
mod metrics;
mod params;
mod perplexity;
mod session;
mod speculative;
mod stream;
mod weights;

pub use batch::{BatchEvent, BatchOptions, BatchRequest, RequestId, Scheduler};
pub use cancel::CancelToken;
pub use embed::Pooling;
pub use encoder::{Encoder, EncoderOptions};
pub use error::GenerateError;
pub use generator::{kv_layout, Generation, Generator, GeneratorOptions};
pub use imatrix::{ImatrixOptions, ImatrixRun};
pub use kestrel_kv::{KvError, PoolStats};
pub use logits::{logits_of_ids, LogitsOptions, MAX_LOGITS_IDS};
pub use metrics::GenerateMetrics;
pub use params::GenerateParams;
pub use perplexity::{
    Estimate, KlDivergence, KldAccumulator, LogProbHeader, LogProbReader, LogProbRow,
    LogProbWriter, Percentiles, Perplexity,
};
pub use session::Session;
pub use speculative::{lookup_draft, LookupOptions, SpecStats};
pub use stream::{
    Completion, FinishReason, StreamError, Token, TokenIter, TokenLogprob, TokenStream,
    MAX_TOP_LOGPROBS,
};
