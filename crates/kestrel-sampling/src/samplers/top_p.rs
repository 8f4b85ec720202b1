//! Top-p (nucleus): keeps the smallest prefix of the sorted candidates whose probability mass
//! reaches `p`. Like llama.cpp, on a large unsorted list it first sorts only the top 256 and
//! sorts the rest only when those do not reach `p`.

use super::Candidates;

const HEAD: usize = 256;

/// Applies top-p (`p >= 1` disables).
pub(crate) fn apply(c: &mut Candidates, p: f32, min_keep: usize) {
    if p >= 1.0 || c.data.is_empty() {
        return;
    }
    c.softmax(false);
    let n = c.data.len();
    let mut sorted_upto = if c.sorted {
        n
    } else if n > 1024 {
        c.sort_top(HEAD);
        HEAD
    } else {
        c.sort_all();
        n
    };
    let mut cum = 0.0f32;
    let mut last = n;
    let mut i = 0;
    while i < n {
        if i == sorted_upto {
            // the head did not reach p: sort the remainder (all of it is below the head)
            c.data[sorted_upto..].sort_unstable_by(super::by_logit_desc);
            sorted_upto = n;
        }
        cum += c.data[i].p;
        if cum >= p && i + 1 >= min_keep {
            last = i + 1;
            break;
        }
        i += 1;
    }
    c.data.truncate(last);
    c.sorted = true;
}

#[cfg(test)]
mod tests {
    use crate::samplers::cands;

    #[test]
    fn keeps_the_nucleus() {
        // p = [0.5, 0.25, 0.125, 0.125] from logits ln-spaced
        let l = [0.0f32, -(2f32.ln()), -(4f32.ln()), -(4f32.ln())];
        let mut c = cands(&l);
        super::apply(&mut c, 0.7, 0);
        let ids: Vec<u32> = c.data.iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![0, 1]);
        let mut c = cands(&l);
        super::apply(&mut c, 0.1, 3);
        assert_eq!(c.data.len(), 3);
    }

    #[test]
    fn large_list_beyond_the_sorted_head() {
        // 5000 equal logits: p = 0.9 needs 4500 of them, beyond the 256-long head
        let mut c = cands(&vec![0.0f32; 5000]);
        super::apply(&mut c, 0.9, 0);
        assert!((4499..=4501).contains(&c.data.len()), "{}", c.data.len());
        assert!(c.data.windows(2).all(|w| w[0].id < w[1].id));
    }
}
