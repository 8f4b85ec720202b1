//! Architecture builders for kestrel: read GGUF metadata into typed configs and build graphs.
//!
//! Status: placeholder. It will hold `LlamaConfig`, `Gemma3Config`, `Qwen2Config`, ... and a registry keyed by `general.architecture`, with a generic decoder fallback for llama-style tensor names.
#![forbid(unsafe_code)]
