//! `tests/batch.rs` again with every q8_0-family matrix packed (`KESTREL_REPACK=all`: Q4_1,
//! Q5_0, Q8_0 and the tied embeddings of both real models in exact-block-sum numerics): batched
//! greedy output still equals single-sequence output (a row's result never depends on the other
//! rows of a call), and the scheduler tests hold.

/// Read by `batch.rs`'s `generator`.
const REPACK_ALL: bool = true;

#[path = "batch.rs"]
mod batch;
