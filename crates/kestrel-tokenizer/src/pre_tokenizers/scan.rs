//! Hand-written scanners for the most used split patterns, following llama.cpp's own
//! scanners (which define the reference behaviour, including at piece boundaries).
//!
//! Each scanner walks one piece (`seg`, code points) and reports sub-pieces as half-open
//! code point ranges relative to `seg`.

use crate::unicode::{class, is_whitespace, Class};

#[derive(Clone, Copy)]
struct Flags {
    /// 0 outside the piece.
    bits: u8,
    ws: bool,
}

impl Flags {
    const NONE: Flags = Flags { bits: 0, ws: false };
    fn any(self) -> bool {
        self.bits != 0 || self.ws
    }
    fn letter(self) -> bool {
        self.bits & Class::LETTER != 0
    }
    fn number(self) -> bool {
        self.bits & Class::NUMBER != 0
    }
}

struct Seg<'a> {
    c: &'a [char],
}

impl Seg<'_> {
    fn cpt(&self, i: usize) -> Option<char> {
        self.c.get(i).copied()
    }
    fn flags(&self, i: usize) -> Flags {
        match self.c.get(i) {
            Some(&c) => Flags {
                bits: class(c).bits(),
                ws: is_whitespace(c),
            },
            None => Flags::NONE,
        }
    }
}

fn lower_ascii(c: Option<char>) -> Option<char> {
    c.map(|c| c.to_ascii_lowercase())
}

/// Contraction at `pos`: returns its length (2 or 3), if any. `fold` makes it case-insensitive.
fn contraction(s: &Seg<'_>, pos: usize, fold: bool) -> Option<usize> {
    if s.cpt(pos) != Some('\'') || pos + 1 >= s.c.len() {
        return None;
    }
    let f = |c: Option<char>| if fold { lower_ascii(c) } else { c };
    let n1 = f(s.cpt(pos + 1));
    if matches!(n1, Some('s' | 't' | 'm' | 'd')) {
        return Some(2);
    }
    if pos + 2 < s.c.len() {
        let n2 = f(s.cpt(pos + 2));
        if matches!(
            (n1, n2),
            (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
        ) {
            return Some(3);
        }
    }
    None
}

/// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
pub fn gpt2(seg: &[char], push: &mut impl FnMut(usize, usize)) {
    let s = Seg { c: seg };
    let end = seg.len();
    let mut prev = 0;
    let mut emit = |to: usize, prev: &mut usize| {
        if to > *prev {
            push(*prev, to);
        }
        *prev = to;
    };
    let mut pos = 0;
    while pos < end {
        let cpt = seg[pos];
        let flags = s.flags(pos);
        if let Some(n) = contraction(&s, pos, false) {
            pos += n;
            emit(pos, &mut prev);
            continue;
        }
        let mut f2 = if cpt == ' ' { s.flags(pos + 1) } else { flags };
        if f2.letter() {
            pos += usize::from(cpt == ' ');
            while f2.letter() {
                pos += 1;
                f2 = s.flags(pos);
            }
            emit(pos, &mut prev);
            continue;
        }
        if f2.number() {
            pos += usize::from(cpt == ' ');
            while f2.number() {
                pos += 1;
                f2 = s.flags(pos);
            }
            emit(pos, &mut prev);
            continue;
        }
        if !(f2.ws || f2.letter() || f2.number()) && f2.any() {
            pos += usize::from(cpt == ' ');
            while !(f2.ws || f2.letter() || f2.number()) && f2.any() {
                pos += 1;
                f2 = s.flags(pos);
            }
            emit(pos, &mut prev);
            continue;
        }
        let mut nws = 0;
        while s.flags(pos + nws).ws {
            nws += 1;
        }
        if nws > 1 && pos + nws < end {
            pos += nws - 1;
            emit(pos, &mut prev);
            continue;
        }
        if nws > 0 {
            pos += nws;
            emit(pos, &mut prev);
            continue;
        }
        pos += 1;
        emit(pos, &mut prev);
    }
}

/// The Llama 3 pattern (`max_digits` = 3) and the Qwen 2 pattern (`max_digits` = 1):
/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
pub fn llama3(seg: &[char], max_digits: usize, push: &mut impl FnMut(usize, usize)) {
    let s = Seg { c: seg };
    let end = seg.len();
    let mut prev = 0;
    let mut emit = |to: usize, prev: &mut usize| {
        if to > *prev {
            push(*prev, to);
        }
        *prev = to;
    };
    let mut pos = 0;
    while pos < end {
        let cpt = seg[pos];
        let flags = s.flags(pos);
        if let Some(n) = contraction(&s, pos, true) {
            pos += n;
            emit(pos, &mut prev);
            continue;
        }
        if !(cpt == '\r' || cpt == '\n' || flags.number())
            && (flags.letter() || s.flags(pos + 1).letter())
        {
            pos += 1;
            while s.flags(pos).letter() {
                pos += 1;
            }
            emit(pos, &mut prev);
            continue;
        }
        if flags.number() {
            let mut ini = pos;
            while s.flags(pos).number() {
                pos += 1;
                if pos - ini >= max_digits {
                    emit(pos, &mut prev);
                    ini = pos;
                }
            }
            emit(pos, &mut prev);
            continue;
        }
        let mut f2 = if cpt == ' ' { s.flags(pos + 1) } else { flags };
        if !(f2.ws || f2.letter() || f2.number()) && flags.any() {
            pos += usize::from(cpt == ' ');
            while !(f2.ws || f2.letter() || f2.number()) && f2.any() {
                pos += 1;
                f2 = s.flags(pos);
            }
            while matches!(s.cpt(pos), Some('\r' | '\n')) {
                pos += 1;
            }
            emit(pos, &mut prev);
            continue;
        }
        let mut nws = 0;
        let mut last_rn = 0;
        while s.flags(pos + nws).ws {
            if matches!(s.cpt(pos + nws), Some('\r' | '\n')) {
                last_rn = pos + nws + 1;
            }
            nws += 1;
        }
        if last_rn > 0 {
            pos = last_rn;
            emit(pos, &mut prev);
            continue;
        }
        if nws > 1 && pos + nws < end {
            pos += nws - 1;
            emit(pos, &mut prev);
            continue;
        }
        if nws > 0 {
            pos += nws;
            emit(pos, &mut prev);
            continue;
        }
        pos += 1;
        emit(pos, &mut prev);
    }
}

/// `[^\n]+|[\n]+`
pub fn newlines(seg: &[char], push: &mut impl FnMut(usize, usize)) {
    let mut pos = 0;
    while pos < seg.len() {
        let nl = seg[pos] == '\n';
        let start = pos;
        while pos < seg.len() && (seg[pos] == '\n') == nl {
            pos += 1;
        }
        push(start, pos);
    }
}
