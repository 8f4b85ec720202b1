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
//! Status: loading a file and greedy generation on the CPU. Aliases and downloads, sampling,
//! chat, batching, embeddings and the `Backend` registry come with their issues.

mod error;
mod model;

pub use error::Error;
pub use kestrel_generate::{GenerateMetrics, Perplexity};
pub use kestrel_gguf as gguf;
pub use kestrel_kv::KvDType;
pub use kestrel_tensor as tensor;
pub use kestrel_tokenizer as tokenizer;
pub use model::{GenerateOptions, LoadOptions, Model, Output};

/// The instruction set kestrel's CPU kernels run with in this process (`scalar`, `avx2`,
/// `avx512`): the best the CPU has, capped by the `KESTREL_ISA` environment variable.
///
/// ```
/// assert!(["scalar", "avx2", "avx512"].contains(&kestrel::cpu_isa()));
/// ```
pub fn cpu_isa() -> &'static str {
    kestrel_tensor::cpu::dispatch::active_isa().name()
}
