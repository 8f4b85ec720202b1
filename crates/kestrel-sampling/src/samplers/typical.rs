//! Locally typical sampling (llama.cpp's `typical`): keeps the tokens whose surprise
//! `-ln p` is closest to the entropy, until their mass exceeds `p`.

use super::{Candidate, Candidates};

/// Reusable buffers so the stage allocates nothing per token.
#[derive(Debug, Default)]
pub(crate) struct TypicalScratch {
    pub scores: Vec<f32>,
    pub order: Vec<u32>,
    pub tmp: Vec<Candidate>,
}

/// Applies typical-p (`p >= 1` disables).
pub(crate) fn apply(c: &mut Candidates, p: f32, min_keep: usize, s: &mut TypicalScratch) {
    if p >= 1.0 || c.data.is_empty() {
        return;
    }
    c.softmax(true);
    let entropy: f32 = c
        .data
        .iter()
        .filter(|c| c.p > 0.0)
        .map(|c| -c.p * c.p.ln())
        .sum();
    s.scores.clear();
    s.scores
        .extend(c.data.iter().map(|c| (-c.p.ln() - entropy).abs()));
    s.order.clear();
    s.order.extend(0..c.data.len() as u32);
    let scores = &s.scores;
    s.order.sort_unstable_by(|&a, &b| {
        scores[a as usize]
            .total_cmp(&scores[b as usize])
            .then(a.cmp(&b))
    });
    let mut cum = 0.0f32;
    let mut last = s.order.len();
    for (i, &idx) in s.order.iter().enumerate() {
        cum += c.data[idx as usize].p;
        if cum > p && (min_keep == 0 || i + 1 >= min_keep) {
            last = i + 1;
            break;
        }
    }
    s.tmp.clear();
    s.tmp
        .extend(s.order[..last].iter().map(|&i| c.data[i as usize]));
    c.data.clear();
    c.data.extend_from_slice(&s.tmp);
    c.sorted = false;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samplers::cands;

    #[test]
    fn drops_the_atypical_tail() {
        // p ~ [0.5, 0.5, 2e-5]: entropy ~ ln 2, so the two big tokens are perfectly typical.
        let mut c = cands(&[0.0, 0.0, -10.0]);
        super::apply(&mut c, 0.6, 0, &mut TypicalScratch::default());
        let mut ids: Vec<u32> = c.data.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![0, 1]);
    }
}
