//! Character classes: the terminals of a grammar, as sorted, merged code-point ranges (a literal
//! character is a one-point class, `.` is the negation of nothing), with an ASCII bitmap.

/// A set of Unicode code points: `ranges` (inclusive, sorted, disjoint, non-adjacent), negated or not.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CharClass {
    ranges: Vec<(u32, u32)>,
    negated: bool,
    ascii: [u64; 2],
}

impl CharClass {
    /// Builds a class from (unsorted, possibly overlapping) inclusive ranges.
    pub fn new(mut ranges: Vec<(u32, u32)>, negated: bool) -> Self {
        ranges.retain(|&(lo, hi)| lo <= hi);
        ranges.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match merged.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        let mut c = Self {
            ranges: merged,
            negated,
            ascii: [0; 2],
        };
        for ch in 0..128u32 {
            if c.matches_slow(ch) {
                c.ascii[(ch / 64) as usize] |= 1 << (ch % 64);
            }
        }
        c
    }

    /// One code point.
    pub fn single(c: u32) -> Self {
        Self::new(vec![(c, c)], false)
    }

    /// Any code point (`.`).
    pub fn any() -> Self {
        Self::new(Vec::new(), true)
    }

    fn matches_slow(&self, c: u32) -> bool {
        let inside = self
            .ranges
            .binary_search_by(|&(lo, hi)| {
                if hi < c {
                    std::cmp::Ordering::Less
                } else if lo > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok();
        inside != self.negated
    }

    /// True when the code point is in the class.
    #[inline]
    pub fn matches(&self, c: u32) -> bool {
        if c < 128 {
            self.ascii[(c / 64) as usize] & (1 << (c % 64)) != 0
        } else {
            self.matches_slow(c)
        }
    }

    /// True when some code point in `lo..=hi` is in the class.
    pub fn matches_any_in(&self, lo: u32, hi: u32) -> bool {
        if self.negated {
            // some point is outside every range unless one range covers all of lo..=hi
            !self.ranges.iter().any(|&(a, b)| a <= lo && hi <= b)
        } else {
            self.ranges.iter().any(|&(a, b)| a <= hi && lo <= b)
        }
    }

    /// `Some(m)` when every non-ASCII code point is in the class (`m == true`) or none is.
    pub fn non_ascii_uniform(&self) -> Option<bool> {
        let covers_all = self
            .ranges
            .iter()
            .any(|&(lo, hi)| lo <= 0x80 && hi >= 0x10FFFF);
        let touches_none = self.ranges.iter().all(|&(_, hi)| hi < 0x80);
        match (covers_all, touches_none) {
            (true, _) => Some(!self.negated),
            (_, true) => Some(self.negated),
            _ => None,
        }
    }

    /// The smallest non-ASCII code point in the class that is a character (no surrogates).
    pub fn first_non_ascii(&self) -> Option<u32> {
        let mut c = 0x80u32;
        loop {
            if (0xD800..=0xDFFF).contains(&c) {
                c = 0xE000;
            }
            if c > 0x10FFFF {
                return None;
            }
            let range = self.ranges.iter().find(|&&(lo, hi)| lo <= c && c <= hi);
            match (range, self.negated) {
                (Some(_), false) | (None, true) => return Some(c),
                (Some(&(_, hi)), true) => c = hi + 1,
                (None, false) => {
                    // the next range above c, if any
                    c = self.ranges.iter().find(|&&(lo, _)| lo > c)?.0;
                }
            }
        }
    }

    /// The class in GBNF syntax (for printing grammars).
    pub fn to_gbnf(&self) -> String {
        if self.negated && self.ranges.is_empty() {
            return ".".into();
        }
        if !self.negated && self.ranges.len() == 1 && self.ranges[0].0 == self.ranges[0].1 {
            return format!("\"{}\"", escape_char(self.ranges[0].0, true));
        }
        let mut s = String::from(if self.negated { "[^" } else { "[" });
        for &(lo, hi) in &self.ranges {
            s.push_str(&escape_char(lo, false));
            if hi != lo {
                s.push('-');
                s.push_str(&escape_char(hi, false));
            }
        }
        s.push(']');
        s
    }
}

/// A code point escaped for a GBNF literal (`in_string`) or character class.
pub(crate) fn escape_char(c: u32, in_string: bool) -> String {
    match c {
        0x0A => "\\n".into(),
        0x0D => "\\r".into(),
        0x09 => "\\t".into(),
        0x5C => "\\\\".into(),
        0x22 if in_string => "\\\"".into(),
        0x5D | 0x5B | 0x2D | 0x5E if !in_string => format!("\\x{c:02X}"),
        c if c < 0x20 || c == 0x7F => format!("\\x{c:02X}"),
        c => match char::from_u32(c) {
            Some(ch) => ch.to_string(),
            None if c <= 0xFFFF => format!("\\u{c:04X}"),
            None => format!("\\U{c:08X}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_match() {
        let c = CharClass::new(
            vec![
                (b'a' as u32, b'f' as u32),
                (b'c' as u32, b'k' as u32),
                (b'l' as u32, b'l' as u32),
                (0x3042, 0x3042),
            ],
            false,
        );
        assert_eq!(c.ranges, vec![(97, 108), (0x3042, 0x3042)]);
        assert!(c.matches('a' as u32) && c.matches('l' as u32) && c.matches(0x3042));
        assert!(!c.matches('m' as u32) && !c.matches(0x3043));
        let n = CharClass::new(vec![(0, 0x1F), ('"' as u32, '"' as u32)], true);
        assert!(
            n.matches('a' as u32) && n.matches(0x1F600) && !n.matches('"' as u32) && !n.matches(10)
        );
    }

    #[test]
    fn first_non_ascii_skips_ascii_gaps_and_surrogates() {
        assert_eq!(CharClass::any().first_non_ascii(), Some(0x80));
        assert_eq!(CharClass::single('a' as u32).first_non_ascii(), None);
        let c = CharClass::new(vec![(0x41, 0x5A), (0xD900, 0xE005)], false);
        assert_eq!(c.first_non_ascii(), Some(0xE000));
        let n = CharClass::new(vec![(0, 0xFF), (0x100, 0xD7FF)], true);
        assert_eq!(n.first_non_ascii(), Some(0xE000));
        let all = CharClass::new(vec![(0, 0x10FFFF)], true);
        assert_eq!(all.first_non_ascii(), None);
    }

    #[test]
    fn partial_ranges() {
        let c = CharClass::new(vec![(0x3041, 0x309F)], false);
        assert!(c.matches_any_in(0x3000, 0x3FFF));
        assert!(!c.matches_any_in(0x4000, 0x4FFF));
        let n = CharClass::new(vec![(0x80, 0x7FF)], true);
        assert!(!n.matches_any_in(0xC0, 0xFF));
        assert!(n.matches_any_in(0x800, 0xFFF));
        assert!(CharClass::any().matches_any_in(0x10000, 0x10FFFF));
    }
}
