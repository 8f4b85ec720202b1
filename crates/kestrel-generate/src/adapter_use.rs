//! [`AdapterUse`]: a sequence's LoRA adapter scales as a function of the position. Ordinary
//! adapters act everywhere; an activated LoRA (aLoRA) from the last start of its invocation
//! sequence in the prompt on. Sessions and the batched scheduler keep one per sequence, cut
//! prefill chunks where it changes and reuse a cache only up to where two uses differ.

/// Where an adapter never acts.
pub(crate) const NEVER: usize = usize::MAX;

/// Where the last occurrence of `seq` in `prompt` starts (`None` when it has none, or `seq`
/// is empty).
pub(crate) fn last_start(prompt: &[u32], seq: &[u32]) -> Option<usize> {
    if seq.is_empty() || seq.len() > prompt.len() {
        return None;
    }
    (0..=prompt.len() - seq.len())
        .rev()
        .find(|&i| &prompt[i..i + seq.len()] == seq)
}

/// One sequence's adapter scales by position: adapter `k` runs at `scales[k]` from position
/// `from[k]` on and not before (0 for an ordinary adapter, an activated LoRA's invocation
/// start, `usize::MAX` for one whose invocation the prompt lacks).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AdapterUse {
    pub(crate) scales: Vec<f32>,
    pub(crate) from: Vec<usize>,
}

impl AdapterUse {
    /// `scales` at every position.
    pub(crate) fn everywhere(scales: Vec<f32>) -> Self {
        let from = vec![0; scales.len()];
        AdapterUse { scales, from }
    }

    fn scale_at(&self, k: usize, pos: usize) -> f32 {
        if pos >= self.from[k] {
            self.scales[k]
        } else {
            0.0
        }
    }

    /// Appends the scales at `pos` to `out`.
    pub(crate) fn extend_at(&self, pos: usize, out: &mut Vec<f32>) {
        out.extend((0..self.scales.len()).map(|k| self.scale_at(k, pos)));
    }

    /// The first position after `pos` where a scale changes.
    pub(crate) fn next_change(&self, pos: usize) -> Option<usize> {
        self.from
            .iter()
            .zip(&self.scales)
            .filter(|&(&f, &s)| f > pos && f != NEVER && s != 0.0)
            .map(|(&f, _)| f)
            .min()
    }

    /// The first position whose scales differ between `self` and `other`: `usize::MAX` when
    /// none does, 0 when they are for different numbers of adapters.
    pub(crate) fn first_difference(&self, other: &AdapterUse) -> usize {
        if self.scales.len() != other.scales.len() {
            return 0;
        }
        (0..self.scales.len())
            .filter_map(|k| {
                // Both are step functions of the position: compare them where either steps.
                let mut at = [0, self.from[k], other.from[k]];
                at.sort_unstable();
                at.into_iter()
                    .filter(|&p| p != NEVER)
                    .find(|&p| self.scale_at(k, p) != other.scale_at(k, p))
            })
            .min()
            .unwrap_or(NEVER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(scales: &[f32], from: &[usize]) -> AdapterUse {
        AdapterUse {
            scales: scales.to_vec(),
            from: from.to_vec(),
        }
    }

    #[test]
    fn invocations_are_found_last_first() {
        assert_eq!(last_start(&[1, 2, 3, 1, 2, 4], &[1, 2]), Some(3));
        assert_eq!(last_start(&[1, 2, 3], &[2, 3]), Some(1));
        assert_eq!(last_start(&[1, 2, 3], &[3, 4]), None);
        assert_eq!(last_start(&[1], &[1, 1]), None);
        assert_eq!(last_start(&[1, 2], &[]), None);
        assert_eq!(last_start(&[5, 5, 5], &[5, 5]), Some(1));
    }

    #[test]
    fn scales_step_where_an_adapter_starts() {
        let a = u(&[1.0, 0.5], &[0, 4]);
        let mut out = Vec::new();
        a.extend_at(3, &mut out);
        a.extend_at(4, &mut out);
        assert_eq!(out, [1.0, 0.0, 1.0, 0.5]);
        assert_eq!(a.next_change(0), Some(4));
        assert_eq!(a.next_change(4), None);
        // An adapter that never acts, or acts at 0, changes nothing.
        assert_eq!(u(&[1.0, 0.0], &[NEVER, 3]).next_change(0), None);
    }

    #[test]
    fn differences_are_found_at_the_first_position() {
        let base = AdapterUse::everywhere(vec![1.0, 0.0]);
        assert_eq!(base.first_difference(&base), NEVER);
        // The aLoRA from 7 on: the same as the base before 7.
        assert_eq!(base.first_difference(&u(&[1.0, 0.5], &[0, 7])), 7);
        // Its invocation moved: the same before the earlier start.
        assert_eq!(
            u(&[1.0, 0.5], &[0, 9]).first_difference(&u(&[1.0, 0.5], &[0, 7])),
            7
        );
        // Not found: the base's everywhere.
        assert_eq!(base.first_difference(&u(&[1.0, 0.5], &[0, NEVER])), NEVER);
        // Another scale of an ordinary adapter: from the start.
        assert_eq!(base.first_difference(&u(&[0.5, 0.0], &[0, 0])), 0);
        // A different adapter count never matches.
        assert_eq!(base.first_difference(&AdapterUse::everywhere(vec![1.0])), 0);
    }
}
