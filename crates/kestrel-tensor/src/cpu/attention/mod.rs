//! Causal multi-head attention over a KV cache, flash-style: for each (token, head) one pass over
//! the visible keys with an online softmax (running max and sum, the output row as the
//! accumulator), so no `n × kv_len` score matrix is ever stored. Supports GQA (`n_head` a multiple
//! of `n_kv_head`), a scale, sliding-window attention with llama.cpp's boundary, Gemma-2 logit
//! soft-capping, and f32, f16, q8_0 or q4_0 keys/values. Parallel over (token, head) pairs.
//!
//! One file per path, imports running one way (`params` and `kv` at the bottom):
//! - `params`: the settings and which keys a query sees;
//! - `kv`: the cache slices and the per-type dot products ([`KvSlice`], [`KvRows`]);
//! - `f16_ggml`: f16 caches under 64 query rows, rounding exactly as llama.cpp's default CPU
//!   flash attention does;
//! - `tiled`: 64 rows or more over f32/f16 caches, llama.cpp's tiled f32 path's roundings;
//! - `online`: kestrel's own f32 path for the rest (quantized caches, mixed types);
//! - `single`: one sequence ([`attention`], [`attention_paged`]), choosing among them;
//! - `batch`: several sequences' rows in one parallel region ([`attention_paged_batch`]);
//! - `latent`: keys and values of different sizes (DeepSeek's MLA, [`attention_latent`]);
//! - `sinks`: gpt-oss's per-head sink logits ([`apply_attention_sinks`]).

mod batch;
mod f16_ggml;
mod kv;
mod latent;
mod online;
mod params;
mod single;
mod sinks;
#[cfg(test)]
mod tests;
mod tiled;

pub use batch::{attention_paged_batch, PagedSeq};
pub use kv::{KvRows, KvSlice};
pub use latent::{attention_latent, LatentAttentionParams};
pub use params::{visible_keys, AttentionParams, GGML_FA_TILE_Q};
pub use single::{attention, attention_paged};
pub use sinks::apply_attention_sinks;
