//! `GraphError`: a graph that does not fit together.

/// An error building or compiling a graph.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// Input widths or rows that the op cannot combine.
    #[error("node {node:?}: {reason}")]
    Shape {
        /// The node being added.
        node: String,
        /// What does not fit.
        reason: String,
    },
    /// A node id that is not in the graph.
    #[error("node {0} does not exist")]
    NoSuchNode(usize),
    /// A graph with no output.
    #[error("the graph has no output")]
    NoOutput,
    /// A plan asked to run more tokens than it was compiled for.
    #[error("a step of {tokens} tokens exceeds the plan's {max} tokens")]
    TooManyTokens {
        /// Tokens in the step.
        tokens: usize,
        /// The plan's bound.
        max: usize,
    },
    /// A weight the graph names that the model cannot supply as expected.
    #[error("weight {name:?}: {reason}")]
    Weight {
        /// GGUF tensor name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A step that would run past the KV cache.
    #[error("context full: the step needs {needed} positions, the cache holds {capacity}")]
    ContextFull {
        /// Positions needed.
        needed: usize,
        /// Cache capacity.
        capacity: usize,
    },
    /// A kernel refused its inputs.
    #[error(transparent)]
    Tensor(#[from] kestrel_tensor::TensorError),
    /// The KV cache refused a write or view.
    #[error(transparent)]
    Kv(#[from] kestrel_kv::KvError),
    /// A bug in kestrel, not in the input.
    #[error("internal error: {0}")]
    Internal(String),
    /// An op this backend does not run yet.
    #[error("op {op} (node {node:?}) is not supported on {backend} yet")]
    Unsupported {
        /// The op's name.
        op: &'static str,
        /// The node.
        node: String,
        /// The backend.
        backend: &'static str,
    },
    /// A batched step whose segments or output rows do not fit the step.
    #[error("bad batch: {0}")]
    Batch(String),
}
