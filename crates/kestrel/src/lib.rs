//! kestrel: a Rust inference engine for GGUF language models.
//!
//! ```no_run
//! use kestrel::{GenerateOptions, LoadOptions, Model};
//! let mut model = Model::load_file("gemma-3-270m-q4_k_m.gguf", LoadOptions::default())?;
//! let out = model.generate_stream("Once upon a time", &GenerateOptions::default(), |piece| {
//!     print!("{piece}");
//!     true
//! })?;
//! eprintln!("\n{:.1} tok/s", out.metrics.decode_tok_s());
//! # Ok::<(), kestrel::Error>(())
//! ```
//!
//! Sampling, grammars and JSON Schemas, stop strings, streaming (callback and iterator), chat
//! with the model's template and a reused KV cache:
//!
//! ```no_run
//! use kestrel::{ChatMessage, GenerateOptions, LoadOptions, Model};
//! let mut model = Model::load_file("SmolLM2-135M-Instruct.Q4_1.gguf", LoadOptions::default())?;
//! let opts = GenerateOptions::default().with_temperature(0.7).with_seed(1).with_max_tokens(64);
//! let reply = model.chat(&[ChatMessage::new("user", "Name a colour.")], &opts)?;
//! println!("{} ({} tokens)", reply.text, reply.usage.completion_tokens);
//! let person = GenerateOptions::default()
//!     .with_json_schema(r#"{"type":"object","properties":{"name":{"type":"string","maxLength":20}},"required":["name"]}"#)?;
//! let json = model.generate("A person as JSON: ", &person)?;
//! println!("{}", json.text);
//! # Ok::<(), kestrel::Error>(())
//! ```
//!
//! Status: CPU; single sequences and continuous batching ([`Model::generate_batch`]),
//! embeddings from decoder models ([`Model::embed`]), token log-probabilities
//! ([`GenerateOptions::with_logprobs`]), aliases and hub downloads ([`Model::load`]), sentence
//! embeddings from encoder (BERT) models ([`EncoderModel`], converted from Hugging Face
//! checkpoints by [`convert`]), and the [`Backend`] registry. CUDA is not in this build.

mod adapters;
pub mod backend;
pub mod convert;
mod device;
mod encoder;
mod error;
pub mod hub;
mod info;
mod model;
mod options;
mod prompter;
mod session_pool;

pub use adapters::{find_adapter, AdapterInfo};
pub use backend::{Backend, TextModel};
pub use encoder::{cosine, EncoderModel};
pub use error::Error;
pub use hub::discover;
pub use info::ModelInfo;
pub use kestrel_arch as arch;
pub use kestrel_generate as generate;
pub use kestrel_generate::{
    CancelToken, FinishReason, GenerateMetrics, ImatrixOptions, ImatrixRun, KlDivergence,
    KldAccumulator, LogProbHeader, LogProbReader, Perplexity, Token, TokenIter,
};
pub use kestrel_gguf as gguf;
pub use kestrel_kv::KvDType;
pub use kestrel_sampling::{Grammar, SamplingConfig};
pub use kestrel_tensor as tensor;
pub use kestrel_tokenizer as tokenizer;
pub use kestrel_tokenizer::ChatMessage;
pub use model::{Classification, Model, Output, Response, Usage};
pub use options::{GenerateOptions, LoadOptions};
pub use prompter::Prompter;

/// The instruction set kestrel's CPU kernels run with in this process (`scalar`; x86-64
/// `avx2`, `avx512`; aarch64 `neon`, `dotprod`, `i8mm`): the best the CPU has, capped by the
/// `KESTREL_ISA` environment variable.
///
/// ```
/// let isa = kestrel::cpu_isa();
/// assert!(["scalar", "avx2", "avx512", "neon", "dotprod", "i8mm"].contains(&isa));
/// ```
pub fn cpu_isa() -> &'static str {
    kestrel_tensor::cpu::isa::active_isa().name()
}
