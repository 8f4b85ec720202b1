//! Repetition, frequency and presence penalties over the last `penalty_last_n` tokens, as
//! llama.cpp's `penalties` sampler: for a token seen `count` times in the window,
//! `logit = logit <= 0 ? logit * repeat : logit / repeat`, then
//! `logit -= count * frequency + presence`.

use crate::error::SamplingError;

/// The penalty parameters; `counts` is a vocabulary-sized scratch of zeros, left zeroed.
pub(crate) struct Penalties {
    pub last_n: i32,
    pub repeat: f32,
    pub frequency: f32,
    pub presence: f32,
}

impl Penalties {
    /// True when applying would change nothing.
    pub fn is_neutral(&self) -> bool {
        self.last_n == 0 || (self.repeat == 1.0 && self.frequency == 0.0 && self.presence == 0.0)
    }

    /// Penalizes the logits of the tokens in the window at the end of `history`.
    pub fn apply(
        &self,
        logits: &mut [f32],
        history: &[u32],
        counts: &mut [u32],
    ) -> Result<(), SamplingError> {
        if self.is_neutral() {
            return Ok(());
        }
        let window = if self.last_n < 0 {
            history
        } else {
            &history[history.len().saturating_sub(self.last_n as usize)..]
        };
        if let Some(&id) = window.iter().find(|&&t| t as usize >= logits.len()) {
            return Err(SamplingError::TokenOutOfRange {
                id,
                vocab_size: logits.len(),
            });
        }
        for &t in window {
            counts[t as usize] += 1;
        }
        for &t in window {
            let count = std::mem::take(&mut counts[t as usize]);
            if count == 0 {
                continue; // already applied for an earlier occurrence
            }
            let l = &mut logits[t as usize];
            if *l <= 0.0 {
                *l *= self.repeat;
            } else {
                *l /= self.repeat;
            }
            *l -= count as f32 * self.frequency + self.presence;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_penalty_divides_positive_and_multiplies_negative() {
        let p = Penalties {
            last_n: 64,
            repeat: 2.0,
            frequency: 0.0,
            presence: 0.0,
        };
        let mut l = vec![4.0, -4.0, 1.0, 0.0];
        let mut counts = vec![0; 4];
        p.apply(&mut l, &[0, 1, 1, 3], &mut counts).unwrap();
        assert_eq!(l, vec![2.0, -8.0, 1.0, 0.0]);
        assert!(counts.iter().all(|&c| c == 0));
    }

    #[test]
    fn frequency_and_presence_and_window() {
        let p = Penalties {
            last_n: 3,
            repeat: 1.0,
            frequency: 0.5,
            presence: 1.0,
        };
        let mut l = vec![0.0; 3];
        let mut counts = vec![0; 3];
        // window is the last 3: [1, 1, 2]; token 0 is outside it
        p.apply(&mut l, &[0, 0, 1, 1, 2], &mut counts).unwrap();
        assert_eq!(l, vec![0.0, -2.0, -1.5]);
        let whole = Penalties { last_n: -1, ..p };
        let mut l = vec![0.0; 3];
        whole.apply(&mut l, &[0, 0, 1, 1, 2], &mut counts).unwrap();
        assert_eq!(l, vec![-2.0, -2.0, -1.5]);
    }

    #[test]
    fn out_of_range_history_is_an_error_and_leaves_logits() {
        let p = Penalties {
            last_n: 8,
            repeat: 1.3,
            frequency: 0.0,
            presence: 0.0,
        };
        let mut l = vec![1.0; 3];
        let mut counts = vec![0; 3];
        assert!(p.apply(&mut l, &[1, 7], &mut counts).is_err());
        assert_eq!(l, vec![1.0; 3]);
    }
}
