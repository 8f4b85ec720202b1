//! Logit bias: adds a fixed value to chosen tokens' logits (`-inf` bans a token), first in the chain.

/// Adds each bias to its token's logit. Ids were checked against the vocabulary at construction.
pub(crate) fn apply(logits: &mut [f32], bias: &[(u32, f32)]) {
    for &(id, b) in bias {
        if let Some(l) = logits.get_mut(id as usize) {
            *l += b;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn adds_and_bans() {
        let mut l = vec![1.0, 2.0, 3.0];
        super::apply(&mut l, &[(0, 0.5), (2, f32::NEG_INFINITY)]);
        assert_eq!(l, vec![1.5, 2.0, f32::NEG_INFINITY]);
    }
}
