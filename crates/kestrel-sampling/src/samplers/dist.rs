//! Dist: draws a token from the softmax of the remaining candidates with the seeded RNG,
//! exactly as llama.cpp's `dist` sampler (one canonical double, cumulative scan in list order).

use super::Candidates;
use crate::rng::Mt19937;

/// Returns the index (into `c.data`) of the drawn candidate; `c` must not be empty.
pub(crate) fn draw(c: &mut Candidates, rng: &mut Mt19937) -> usize {
    let n = c.data.len();
    if n <= 1 {
        return 0;
    }
    let max_l = if c.sorted {
        c.data[0].logit
    } else {
        c.data.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit))
    };
    let mut sum = 0.0f64;
    for cand in &mut c.data {
        cand.p = (cand.logit - max_l).exp();
        sum += f64::from(cand.p);
    }
    let target = sum * rng.next_f64();
    let mut run = 0.0f64;
    for (i, cand) in c.data.iter().enumerate() {
        run += f64::from(cand.p);
        if run >= target {
            return i;
        }
    }
    n - 1
}
