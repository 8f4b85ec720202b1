//! The sampler stages, one file each, in the order llama.cpp's default chain applies them:
//! logit bias → penalties → top-k → typical-p → top-p → min-p → temperature → dist
//! (greedy argmax replaces the last three when the temperature is 0).
//!
//! Stages before top-k work on the full logits slice; from top-k on they work on a
//! [`Candidates`] list owned by the sampler and reused between tokens.

pub(crate) mod dist;
pub(crate) mod greedy;
pub(crate) mod logit_bias;
pub(crate) mod min_p;
pub(crate) mod penalties;
pub(crate) mod temperature;
pub(crate) mod top_k;
pub(crate) mod top_p;
pub(crate) mod typical;

use std::cmp::Ordering;

/// One token under consideration: id, (possibly transformed) logit, probability once computed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Candidate {
    pub id: u32,
    pub logit: f32,
    pub p: f32,
}

/// The candidate list: `data` is truncated as stages filter; `sorted` means descending by logit.
#[derive(Debug, Default)]
pub(crate) struct Candidates {
    pub data: Vec<Candidate>,
    pub sorted: bool,
}

/// Descending by logit, ties by ascending id, so the order never depends on the input order.
#[inline]
pub(crate) fn by_logit_desc(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

impl Candidates {
    /// Refills the list from the logits, skipping `-inf` and NaN (they can never be drawn).
    pub fn fill(&mut self, logits: &[f32]) {
        self.data.clear();
        self.data.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_nan() && **l != f32::NEG_INFINITY)
                .map(|(i, &logit)| Candidate {
                    id: i as u32,
                    logit,
                    p: 0.0,
                }),
        );
        self.sorted = false;
    }

    /// Sorts descending by logit: the top `k` by partial selection first when `k` is small.
    pub fn sort_top(&mut self, k: usize) {
        let n = self.data.len();
        let k = k.min(n);
        if k == 0 {
            return;
        }
        if k < n {
            self.data.select_nth_unstable_by(k - 1, by_logit_desc);
        }
        self.data[..k].sort_unstable_by(by_logit_desc);
    }

    /// Sorts the whole list descending by logit (a no-op when already sorted).
    pub fn sort_all(&mut self) {
        if !self.sorted {
            self.data.sort_unstable_by(by_logit_desc);
            self.sorted = true;
        }
    }

    /// Softmax of the logits into `p` (llama.cpp's `llama_sampler_softmax_impl`), optionally sorting.
    pub fn softmax(&mut self, sort: bool) {
        if sort {
            self.sort_all();
        }
        let max_l = if self.sorted {
            self.data.first().map_or(0.0, |c| c.logit)
        } else {
            self.data
                .iter()
                .fold(f32::NEG_INFINITY, |m, c| m.max(c.logit))
        };
        let mut sum = 0.0f32;
        for c in &mut self.data {
            c.p = (c.logit - max_l).exp();
            sum += c.p;
        }
        for c in &mut self.data {
            c.p /= sum;
        }
    }
}

#[cfg(test)]
pub(crate) fn cands(logits: &[f32]) -> Candidates {
    let mut c = Candidates::default();
    c.fill(logits);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_skips_dead_logits_and_sort_top_orders_the_head() {
        let mut c = cands(&[0.5, f32::NEG_INFINITY, 3.0, f32::NAN, 1.0, 3.0, -2.0]);
        assert_eq!(c.data.len(), 5);
        c.sort_top(2);
        assert_eq!((c.data[0].id, c.data[1].id), (2, 5));
        c.sort_all();
        let ids: Vec<u32> = c.data.iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![2, 5, 4, 0, 6]);
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut c = cands(&[1.0, 2.0, 3.0]);
        c.softmax(false);
        let s: f32 = c.data.iter().map(|c| c.p).sum();
        assert!((s - 1.0).abs() < 1e-6);
        assert!(c.data[2].p > c.data[1].p && c.data[1].p > c.data[0].p);
    }
}
