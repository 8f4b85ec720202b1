//! KV cache variants for kestrel.
//!
//! Status: placeholder. It will hold the `KvCache` trait and its implementations: contiguous (f32/f16), quantized (q8_0/q4_0), paged (block pool + block tables) and the prefix cache (radix tree over token blocks).
#![forbid(unsafe_code)]
