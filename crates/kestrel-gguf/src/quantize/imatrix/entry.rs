//! One weight matrix's collected activations, as `llama-imatrix` sums them.

/// One weight matrix's collected activations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImatrixEntry {
    /// Sum of squares of each input column, per expert (`n_expert × width`, one expert for a
    /// dense matrix).
    pub in_sum2: Vec<f32>,
    /// Sum of each input column, laid out as `in_sum2`.
    pub in_sum: Vec<f32>,
    /// Rows seen, per expert.
    pub counts: Vec<f32>,
}
