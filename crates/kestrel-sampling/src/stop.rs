//! Incremental stop strings: feed decoded pieces as tokens arrive; get back the text that is
//! safe to show now. Text before a stop string is emitted, the stop string is not, and a tail
//! that could still grow into a stop string is held back until it is resolved, so nothing is
//! ever emitted and then retracted. Pieces may be raw bytes that end inside a UTF-8 character.

/// What one [`StopMatcher::push`] produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopStep {
    /// Text safe to emit now (possibly empty).
    pub text: String,
    /// Index (into the stop strings) of the stop string that was hit, if one was.
    pub stop: Option<usize>,
}

impl StopStep {
    /// True when a stop string was hit: generation should end.
    pub fn stopped(&self) -> bool {
        self.stop.is_some()
    }
}

/// Matches stop strings across token boundaries.
///
/// ```
/// use kestrel_sampling::StopMatcher;
/// let mut m = StopMatcher::new(["</answer>"]);
/// let mut shown = String::new();
/// for piece in ["42 is", " it</", "ans", "wer> trailing"] {
///     let step = m.push(piece);
///     shown.push_str(&step.text);
///     if step.stopped() {
///         break;
///     }
/// }
/// assert_eq!(shown, "42 is it");
/// ```
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Decoded text not yet emitted: no stop string inside, and a possible stop-string prefix at its end.
    held: String,
    /// Bytes of an incomplete UTF-8 character at the end of the input so far.
    pending: Vec<u8>,
    stopped: Option<usize>,
}

impl StopMatcher {
    /// A matcher for these stop strings (empty strings are ignored).
    pub fn new<I, S>(stops: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            stops: stops
                .into_iter()
                .map(Into::into)
                .filter(|s: &String| !s.is_empty())
                .collect(),
            held: String::new(),
            pending: Vec::new(),
            stopped: None,
        }
    }

    /// The stop strings.
    pub fn stops(&self) -> &[String] {
        &self.stops
    }

    /// True once a stop string has been hit.
    pub fn is_stopped(&self) -> bool {
        self.stopped.is_some()
    }

    /// Text currently withheld (a possible start of a stop string).
    pub fn held(&self) -> &str {
        &self.held
    }

    /// Feeds a decoded text piece.
    pub fn push(&mut self, piece: &str) -> StopStep {
        self.push_bytes(piece.as_bytes())
    }

    /// Feeds a token's raw bytes; an incomplete UTF-8 character at the end is kept until the
    /// next piece completes it (invalid bytes become U+FFFD).
    pub fn push_bytes(&mut self, bytes: &[u8]) -> StopStep {
        if self.stopped.is_some() {
            return StopStep {
                text: String::new(),
                stop: self.stopped,
            };
        }
        self.pending.extend_from_slice(bytes);
        let complete = complete_utf8_len(&self.pending);
        let decoded = String::from_utf8_lossy(&self.pending[..complete]).into_owned();
        self.pending.drain(..complete);
        self.held.push_str(&decoded);
        self.scan()
    }

    fn scan(&mut self) -> StopStep {
        // earliest match; on equal starts, the stop string listed first
        let hit = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|at| (at, i)))
            .min();
        if let Some((at, i)) = hit {
            self.held.truncate(at);
            self.pending.clear();
            self.stopped = Some(i);
            return StopStep {
                text: std::mem::take(&mut self.held),
                stop: Some(i),
            };
        }
        let keep = self.holdback();
        let emit_len = self.held.len() - keep;
        let rest = self.held.split_off(emit_len);
        let text = std::mem::replace(&mut self.held, rest);
        StopStep { text, stop: None }
    }

    /// Length of the longest suffix of `held` that is a proper prefix of some stop string.
    fn holdback(&self) -> usize {
        let mut keep = 0;
        for s in &self.stops {
            let max = (s.len() - 1).min(self.held.len());
            for k in (keep + 1..=max).rev() {
                if s.is_char_boundary(k) && self.held.ends_with(&s[..k]) {
                    keep = k;
                    break;
                }
            }
        }
        keep
    }

    /// Ends the stream: returns whatever was withheld (nothing after a stop).
    pub fn finish(&mut self) -> String {
        if self.stopped.is_some() {
            return String::new();
        }
        let mut out = std::mem::take(&mut self.held);
        out.push_str(&String::from_utf8_lossy(&self.pending));
        self.pending.clear();
        out
    }

    /// Clears all state for a new generation (keeps the stop strings).
    pub fn reset(&mut self) {
        self.held.clear();
        self.pending.clear();
        self.stopped = None;
    }
}

/// Length of the prefix of `b` that holds no incomplete UTF-8 sequence at its end.
fn complete_utf8_len(b: &[u8]) -> usize {
    // look back at most 3 bytes for the lead byte of a sequence that is still incomplete
    for back in 1..=b.len().min(3) {
        let byte = b[b.len() - back];
        if byte & 0xC0 == 0x80 {
            continue; // continuation byte: keep looking for the lead
        }
        let need = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if need > back { b.len() - back } else { b.len() };
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&[u8]]) -> (String, Option<usize>, Vec<String>) {
        let mut m = StopMatcher::new(stops.iter().copied());
        let mut out = String::new();
        let mut steps = Vec::new();
        for p in pieces {
            let s = m.push_bytes(p);
            out.push_str(&s.text);
            steps.push(out.clone());
            if s.stopped() {
                return (out, s.stop, steps);
            }
        }
        out.push_str(&m.finish());
        (out, None, steps)
    }

    #[test]
    fn complete_utf8_len_keeps_partial_tails() {
        let e = "é".as_bytes();
        assert_eq!(complete_utf8_len(b"ab"), 2);
        assert_eq!(complete_utf8_len(&[b'a', e[0]]), 1);
        assert_eq!(complete_utf8_len(&[b'a', e[0], e[1]]), 3);
        let k = "語".as_bytes();
        assert_eq!(complete_utf8_len(&k[..2]), 0);
        assert_eq!(complete_utf8_len(&[0x80]), 1); // stray continuation: lossy, not held
    }

    #[test]
    fn near_misses_are_released_when_resolved() {
        let mut m = StopMatcher::new(["STOP"]);
        assert_eq!(m.push("abc ST").text, "abc ");
        assert_eq!(m.held(), "ST");
        assert_eq!(m.push("OX").text, "STOX");
        assert_eq!(m.push("S").text, "");
        assert_eq!(m.finish(), "S");
    }

    #[test]
    fn earliest_match_wins_and_later_pushes_are_empty() {
        let (out, stop, _) = run(&["world", "lo w"], &[b"hello world"]);
        assert_eq!((out.as_str(), stop), ("hel", Some(1)));
        let mut m = StopMatcher::new(["x"]);
        assert!(m.push("axb").stopped());
        assert_eq!(
            m.push("more"),
            StopStep {
                text: String::new(),
                stop: Some(0)
            }
        );
        assert_eq!(m.finish(), "");
    }
}
