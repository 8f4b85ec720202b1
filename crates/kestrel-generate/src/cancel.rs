//! `CancelToken`: a shared flag that stops a generation at the next token.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A cloneable cancellation flag. Give a clone to a generation through
/// [`GenerateParams::cancel`](crate::GenerateParams::cancel); calling [`cancel`](Self::cancel)
/// from any thread ends it before its next decode step, with
/// [`FinishReason::Cancelled`](crate::FinishReason::Cancelled).
///
/// ```
/// use kestrel_generate::CancelToken;
/// let token = CancelToken::new();
/// let other = token.clone();
/// assert!(!token.is_cancelled());
/// other.cancel();
/// assert!(token.is_cancelled());
/// ```
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask every generation holding a clone of this token to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// True once [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}
