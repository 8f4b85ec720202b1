//! Min-p: keeps tokens whose probability is at least `p` times the most likely token's, i.e.
//! whose logit is at least `max_logit + ln p`; works unsorted in one pass, as llama.cpp does.

use super::Candidates;

/// Applies min-p (`p <= 0` disables).
pub(crate) fn apply(c: &mut Candidates, p: f32, min_keep: usize) {
    if p <= 0.0 || c.data.is_empty() {
        return;
    }
    if !c.sorted {
        let max = c.data.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
        let min_logit = max + p.ln();
        let kept = c.data.iter().filter(|c| c.logit >= min_logit).count();
        if kept > 0 && kept >= min_keep {
            c.data.retain(|c| c.logit >= min_logit);
            return;
        }
        c.sort_all();
    }
    let min_logit = c.data[0].logit + p.ln();
    let mut i = 1;
    while i < c.data.len() {
        if c.data[i].logit < min_logit && i >= min_keep {
            break;
        }
        i += 1;
    }
    c.data.truncate(i);
}

#[cfg(test)]
mod tests {
    use crate::samplers::cands;

    #[test]
    fn keeps_tokens_within_ratio_of_the_best() {
        // p relative to best: [1, 0.5, 0.25, 0.1]
        let l = [0.0f32, 0.5f32.ln(), 0.25f32.ln(), 0.1f32.ln()];
        let mut c = cands(&l);
        super::apply(&mut c, 0.3, 0);
        let ids: Vec<u32> = c.data.iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![0, 1]);
        let mut c = cands(&l);
        super::apply(&mut c, 0.3, 3);
        assert_eq!(c.data.len(), 3);
    }
}
