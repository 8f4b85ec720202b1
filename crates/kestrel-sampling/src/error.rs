//! The crate's error type: every fallible operation in kestrel-sampling returns [`SamplingError`].

use thiserror::Error;

/// Errors from building samplers, sampling, parsing grammars and compiling JSON schemas.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SamplingError {
    /// A [`crate::SamplingConfig`] field holds a value the sampler cannot use.
    #[error("invalid sampling config: `{field}` {reason}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The logits slice does not have the vocabulary size the sampler was built for.
    #[error("logits have {got} entries, the sampler was built for a vocabulary of {expected}")]
    VocabMismatch {
        /// Vocabulary size given to [`crate::Sampler::new`].
        expected: usize,
        /// Length of the slice passed in.
        got: usize,
    },
    /// A token id is outside the vocabulary (in the history, a logit bias or a token to accept).
    #[error("token id {id} is outside the vocabulary of {vocab_size}")]
    TokenOutOfRange {
        /// The token id.
        id: u32,
        /// Vocabulary size.
        vocab_size: usize,
    },
    /// Top-k candidates given as ids and logits of different counts
    /// ([`crate::Sampler::pick_top`]).
    #[error("top-k candidates: {ids} ids but {logits} logits")]
    CandidateMismatch {
        /// Ids given.
        ids: usize,
        /// Logits given.
        logits: usize,
    },
    /// Top-k candidates that are not in the sampler's order (larger logits first in
    /// `total_cmp`'s order, ties by lower id; no NaN or -inf), at `index`
    /// ([`crate::Sampler::pick_top`]).
    #[error("top-k candidates out of the sampler's order at {index}")]
    UnorderedCandidates {
        /// The first candidate out of order.
        index: usize,
    },
    /// Nothing can be sampled: every logit is `-inf`/NaN, or the grammar allows no token.
    #[error("no token can be sampled: every candidate is -inf, NaN or masked by the grammar")]
    NoCandidates,
    /// GBNF text that does not parse.
    #[error("grammar parse error at {line}:{column}: {message}")]
    GrammarParse {
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// What was expected or found.
        message: String,
    },
    /// A grammar that parses but cannot be used (undefined rule, no `root`, left recursion).
    #[error("invalid grammar: {0}")]
    InvalidGrammar(String),
    /// The grammar matcher cannot accept this input in its current state; its state is unchanged.
    #[error("grammar rejected {0}")]
    GrammarRejected(String),
    /// A JSON Schema keyword (or keyword value) that the grammar compiler does not support.
    #[error("JSON schema: unsupported `{keyword}` at `{pointer}`")]
    UnsupportedSchema {
        /// The keyword, e.g. `uniqueItems`, or `format: email`.
        keyword: String,
        /// JSON pointer to the schema object holding it.
        pointer: String,
    },
    /// A JSON Schema that is malformed (wrong value type, dangling `$ref`, bad pattern, ...).
    #[error("JSON schema: invalid at `{pointer}`: {message}")]
    InvalidSchema {
        /// JSON pointer to the offending schema object.
        pointer: String,
        /// What is wrong.
        message: String,
    },
    /// Nesting deeper than the parser/compiler allows (guards the stack against hostile input).
    #[error("{what} nests deeper than {limit} levels")]
    TooDeep {
        /// What is nested: "grammar group", "JSON schema", "pattern".
        what: &'static str,
        /// The limit.
        limit: usize,
    },
}
