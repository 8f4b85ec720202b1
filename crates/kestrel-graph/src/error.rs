//! `GraphError`: a graph that does not fit together.

/// An error building or compiling a graph.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
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
}
