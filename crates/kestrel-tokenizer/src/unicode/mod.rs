//! Code point classes as llama.cpp sees them (general category from Unicode 15.1, White_Space),
//! and the GPT-2 byte-to-unicode alphabet.

mod table;

use std::sync::OnceLock;

pub use table::UNICODE_VERSION;

/// Class bits of a code point (one category bit each; `WHITESPACE` is separate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Class(u8);

impl Class {
    /// Unassigned (`Cn`).
    pub const UNDEFINED: u8 = 1;
    /// `\p{N}`.
    pub const NUMBER: u8 = 2;
    /// `\p{L}`.
    pub const LETTER: u8 = 4;
    /// `\p{Z}`.
    pub const SEPARATOR: u8 = 8;
    /// `\p{M}`.
    pub const MARK: u8 = 16;
    /// `\p{P}`.
    pub const PUNCTUATION: u8 = 32;
    /// `\p{S}`.
    pub const SYMBOL: u8 = 64;
    /// `\p{C}` other than unassigned.
    pub const CONTROL: u8 = 128;

    /// The raw category bits.
    pub fn bits(self) -> u8 {
        self.0
    }
    /// `\p{L}`.
    pub fn is_letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }
    /// `\p{N}`.
    pub fn is_number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }
    /// `\p{P}`.
    pub fn is_punctuation(self) -> bool {
        self.0 & Self::PUNCTUATION != 0
    }
    /// `\p{S}`.
    pub fn is_symbol(self) -> bool {
        self.0 & Self::SYMBOL != 0
    }
    /// `\p{M}`.
    pub fn is_mark(self) -> bool {
        self.0 & Self::MARK != 0
    }
    /// `\p{C}` (not unassigned).
    pub fn is_control(self) -> bool {
        self.0 & Self::CONTROL != 0
    }
}

fn bmp() -> &'static [u8] {
    static BMP: OnceLock<Vec<u8>> = OnceLock::new();
    BMP.get_or_init(|| {
        let mut v = vec![0u8; 0x10000];
        for (i, w) in table::RANGES.iter().enumerate() {
            let end = table::RANGES.get(i + 1).map_or(0x110000, |n| n.0);
            let (s, e) = (w.0 as usize, (end as usize).min(0x10000));
            if s < e {
                v[s..e].fill(w.1);
            }
        }
        v
    })
}

/// The class of a code point.
pub fn class(c: char) -> Class {
    let cp = c as u32;
    if cp < 0x10000 {
        return Class(bmp()[cp as usize]);
    }
    let i = table::RANGES.partition_point(|r| r.0 <= cp);
    Class(table::RANGES[i.saturating_sub(1)].1)
}

/// Unicode White_Space (what llama.cpp and regex `\s` treat as whitespace).
pub fn is_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{9}'..='\u{d}'
            | ' '
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

/// GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the other 68
/// bytes are shifted to U+0100 and up.
pub fn byte_to_char_table() -> &'static [char; 256] {
    static T: OnceLock<[char; 256]> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = ['\0'; 256];
        let mut n = 0u32;
        for b in 0..256u32 {
            let printable = (0x21..=0x7e).contains(&b)
                || (0xa1..=0xac).contains(&b)
                || (0xae..=0xff).contains(&b);
            t[b as usize] = if printable {
                char::from_u32(b).unwrap_or('\0')
            } else {
                let c = char::from_u32(256 + n).unwrap_or('\0');
                n += 1;
                c
            };
        }
        t
    })
}

/// The inverse of [`byte_to_char_table`]: `None` for characters outside the alphabet.
pub fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    match cp {
        0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff => Some(cp as u8),
        0x100..=0x143 => {
            let k = (cp - 0x100) as usize;
            // the k-th non-printable byte
            (0u16..256)
                .map(|b| b as u8)
                .filter(|&b| !matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff))
                .nth(k)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert!(class('a').is_letter());
        assert!(class('7').is_number());
        assert!(class('٣').is_number());
        assert!(class('!').is_punctuation());
        assert!(class('$').is_symbol());
        assert!(class('\u{301}').is_mark());
        assert!(class('中').is_letter());
        assert!(class('😀').is_symbol());
        assert_eq!(class('\u{1C89}').bits(), Class::UNDEFINED); // assigned only in Unicode 16
        assert!(is_whitespace('\u{3000}') && !is_whitespace('\u{200b}'));
    }

    #[test]
    fn byte_alphabet_round_trips() {
        let t = byte_to_char_table();
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b));
        }
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
    }
}
