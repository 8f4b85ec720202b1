//! `KvError`: what can go wrong sizing or writing a KV cache.

/// An error from a KV cache.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum KvError {
    /// A write or view past the cache's capacity.
    #[error("KV cache is full: positions {start}..{end} requested, capacity is {capacity} tokens")]
    Full {
        /// First position.
        start: usize,
        /// One past the last.
        end: usize,
        /// Capacity in tokens.
        capacity: usize,
    },
    /// A layer index out of range.
    #[error("KV cache layer {layer} out of range ({n_layers} layers)")]
    Layer {
        /// The layer asked for.
        layer: usize,
        /// Layers held.
        n_layers: usize,
    },
    /// Keys or values of the wrong length.
    #[error("KV write to layer {layer}: {what} has {got} values, expected a multiple of {per_token} per token ({expected} for {n} tokens)")]
    Length {
        /// The layer.
        layer: usize,
        /// "keys" or "values".
        what: &'static str,
        /// Values given.
        got: usize,
        /// Values per token.
        per_token: usize,
        /// Tokens.
        n: usize,
        /// Values expected.
        expected: usize,
    },
    /// The cache would need more memory than can be had.
    #[error("KV cache of {tokens} tokens x {layers} layers needs {bytes} bytes, which cannot be allocated")]
    TooLarge {
        /// Tokens asked for.
        tokens: usize,
        /// Layers.
        layers: usize,
        /// Bytes needed (saturated).
        bytes: usize,
    },
    /// The block pool has too few free blocks.
    #[error("KV block pool exhausted: {needed} more blocks needed, {free} free of {total}")]
    OutOfBlocks {
        /// Blocks the request needs.
        needed: usize,
        /// Blocks free.
        free: usize,
        /// Blocks in the pool.
        total: usize,
    },
    /// A sequence id that is not live in the cache.
    #[error("KV cache has no sequence {0}")]
    UnknownSeq(usize),
    /// A block size that is not a power of two, or a pool of no blocks.
    #[error("KV block pool: {0}")]
    Pool(String),
    /// A recurrent state asked of a cache that keeps none (a transformer's).
    #[error("this cache keeps no recurrent state (the model has no state-space layers)")]
    NoState,
    /// A zero-sized dimension.
    #[error("KV layout has a zero dimension: {0}")]
    EmptyLayout(&'static str),
}
