//! An OpenAI-compatible HTTP server over the kestrel facade.
//!
//! Status: placeholder. It will hold an axum server with /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /health and /metrics, driven by the continuous-batching scheduler.
#![forbid(unsafe_code)]
