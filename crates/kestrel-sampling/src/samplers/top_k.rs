//! Top-k: keeps the `k` highest logits, found by partial selection (not a full sort) and left sorted.

use super::Candidates;

/// Keeps the top `k` candidates (`k == 0` disables), sorted descending.
pub(crate) fn apply(c: &mut Candidates, k: usize) {
    if k == 0 {
        return;
    }
    let k = k.min(c.data.len());
    if !c.sorted {
        c.sort_top(k);
    }
    c.data.truncate(k);
    c.sorted = true;
}

#[cfg(test)]
mod tests {
    use crate::samplers::cands;

    #[test]
    fn keeps_the_k_best_sorted() {
        let mut c = cands(&[0.1, 5.0, 3.0, 4.0, -1.0]);
        super::apply(&mut c, 3);
        let ids: Vec<u32> = c.data.iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![1, 3, 2]);
        super::apply(&mut c, 10);
        assert_eq!(c.data.len(), 3);
    }
}
