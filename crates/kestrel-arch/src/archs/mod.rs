//! What each architecture family does differently from the common decoder. One file each.

pub(crate) mod gemma3;
pub(crate) mod llama;
pub(crate) mod qwen2;
pub(crate) mod qwen3;
