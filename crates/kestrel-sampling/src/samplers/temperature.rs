//! Temperature: divides the candidates' logits by `t` (`t > 0`; greedy handles `t <= 0`).

use super::Candidates;

/// Scales the logits by `1 / t`; `t == 1` is a no-op.
pub(crate) fn apply(c: &mut Candidates, t: f32) {
    if t == 1.0 {
        return;
    }
    for cand in &mut c.data {
        cand.logit /= t;
    }
}
