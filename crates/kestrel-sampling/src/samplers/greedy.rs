//! Greedy: argmax over the logits (first index on ties), no softmax and no RNG.

/// Index of the largest logit, skipping NaN and `-inf`; `None` when nothing is left.
pub(crate) fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_nan() || l == f32::NEG_INFINITY {
            continue;
        }
        if best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map(|(i, _)| i as u32)
}

#[cfg(test)]
mod tests {
    #[test]
    fn argmax_first_on_ties_and_skips_nan() {
        assert_eq!(super::argmax(&[1.0, f32::NAN, 3.0, 3.0]), Some(2));
        assert_eq!(super::argmax(&[f32::NEG_INFINITY, f32::NAN]), None);
    }
}
