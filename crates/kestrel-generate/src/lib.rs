//! The decode loop for kestrel: generators, sessions, batching and speculative decoding.
//!
//! Status: placeholder. It will hold `Generator`, `Session`, streaming, stop conditions, the continuous-batching scheduler, speculative decoding and generation metrics.
#![forbid(unsafe_code)]
