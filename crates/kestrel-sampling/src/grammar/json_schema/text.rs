//! GBNF text pieces the converter builds rules from: errors naming a keyword and its JSON
//! pointer, literals, rule names, repetitions, and llama.cpp's integer-range rules.

use super::*;

pub(super) fn unsupported(keyword: impl Into<String>, pointer: &str) -> SamplingError {
    SamplingError::UnsupportedSchema {
        keyword: keyword.into(),
        pointer: if pointer.is_empty() {
            "#".into()
        } else {
            format!("#{pointer}")
        },
    }
}

pub(super) fn invalid(pointer: &str, message: impl Into<String>) -> SamplingError {
    SamplingError::InvalidSchema {
        pointer: if pointer.is_empty() {
            "#".into()
        } else {
            format!("#{pointer}")
        },
        message: message.into(),
    }
}

pub(super) fn escape_pointer(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// A GBNF string literal for `s` (llama.cpp's `format_literal`).
pub(super) fn format_literal(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub(super) fn sanitize(name: &str) -> String {
    let mut out = String::new();
    let mut dash = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            out.push(c);
            dash = false;
        } else if !dash {
            out.push('-');
            dash = true;
        }
    }
    out
}

/// llama.cpp's `build_repetition`.
pub(super) fn build_repetition(item: &str, min: u64, max: Option<u64>, sep: &str) -> String {
    if max == Some(0) {
        return String::new();
    }
    if min == 0 && max == Some(1) {
        return format!("{item}?");
    }
    if sep.is_empty() {
        return match (min, max) {
            (1, None) => format!("{item}+"),
            (0, None) => format!("{item}*"),
            (m, None) => format!("{item}{{{m},}}"),
            (m, Some(x)) => format!("{item}{{{m},{x}}}"),
        };
    }
    let rest = build_repetition(
        &format!("({sep} {item})"),
        min.saturating_sub(1),
        max.map(|m| m - 1),
        "",
    );
    let result = format!("{item} {rest}");
    if min == 0 {
        format!("({result})?")
    } else {
        result
    }
}

/// llama.cpp's `build_min_max_int`: GBNF for the decimal integers in `[min, max]`
/// (either bound may be open).
pub(super) fn build_min_max_int(
    min: Option<i64>,
    max: Option<i64>,
    out: &mut String,
    decimals_left: i64,
    top_level: bool,
) {
    fn digit_range(out: &mut String, from: u8, to: u8) {
        out.push('[');
        out.push(from as char);
        if from != to {
            out.push('-');
            out.push(to as char);
        }
        out.push(']');
    }
    fn more_digits(out: &mut String, min: i64, max: i64) {
        out.push_str("[0-9]");
        if min == max && min == 1 {
            return;
        }
        out.push('{');
        out.push_str(&min.to_string());
        if max != min {
            out.push(',');
            if max != i64::MAX {
                out.push_str(&max.to_string());
            }
        }
        out.push('}');
    }
    fn uniform_range(out: &mut String, from: &[u8], to: &[u8]) {
        let mut i = 0;
        while i < from.len() && i < to.len() && from[i] == to[i] {
            i += 1;
        }
        if i > 0 {
            out.push('"');
            out.push_str(std::str::from_utf8(&from[..i]).unwrap_or(""));
            out.push('"');
        }
        if i < from.len() && i < to.len() {
            if i > 0 {
                out.push(' ');
            }
            let sub_len = from.len() - i - 1;
            if sub_len > 0 {
                let from_sub = &from[i + 1..];
                let to_sub = &to[i + 1..];
                let zeros = vec![b'0'; sub_len];
                let nines = vec![b'9'; sub_len];
                let mut to_reached = false;
                out.push('(');
                if from_sub == zeros.as_slice() {
                    digit_range(out, from[i], to[i] - 1);
                    out.push(' ');
                    more_digits(out, sub_len as i64, sub_len as i64);
                } else {
                    out.push('[');
                    out.push(from[i] as char);
                    out.push_str("] (");
                    uniform_range(out, from_sub, &nines);
                    out.push(')');
                    if from[i] < to[i] - 1 {
                        out.push_str(" | ");
                        if to_sub == nines.as_slice() {
                            digit_range(out, from[i] + 1, to[i]);
                            to_reached = true;
                        } else {
                            digit_range(out, from[i] + 1, to[i] - 1);
                        }
                        out.push(' ');
                        more_digits(out, sub_len as i64, sub_len as i64);
                    }
                }
                if !to_reached {
                    out.push_str(" | ");
                    digit_range(out, to[i], to[i]);
                    out.push(' ');
                    uniform_range(out, &zeros, to_sub);
                }
                out.push(')');
            } else {
                out.push('[');
                out.push(from[i] as char);
                out.push('-');
                out.push(to[i] as char);
                out.push(']');
            }
        }
    }

    match (min, max) {
        (Some(mut lo), Some(hi)) => {
            if lo < 0 && hi < 0 {
                out.push_str("\"-\" (");
                build_min_max_int(Some(-hi), Some(-lo), out, decimals_left, true);
                out.push(')');
                return;
            }
            if lo < 0 {
                out.push_str("\"-\" (");
                build_min_max_int(Some(0), Some(-lo), out, decimals_left, true);
                out.push_str(") | ");
                lo = 0;
            }
            let mut min_s = lo.to_string();
            let max_s = hi.to_string();
            for digits in min_s.len()..max_s.len() {
                uniform_range(out, min_s.as_bytes(), "9".repeat(digits).as_bytes());
                min_s = format!("1{}", "0".repeat(digits));
                out.push_str(" | ");
            }
            uniform_range(out, min_s.as_bytes(), max_s.as_bytes());
        }
        (Some(lo), None) => {
            let less = (decimals_left - 1).max(1);
            if lo < 0 {
                out.push_str("\"-\" (");
                build_min_max_int(None, Some(-lo), out, decimals_left, false);
                out.push_str(") | [0] | [1-9] ");
                more_digits(out, 0, decimals_left - 1);
            } else if lo == 0 {
                if top_level {
                    out.push_str("[0] | [1-9] ");
                    more_digits(out, 0, less);
                } else {
                    more_digits(out, 1, decimals_left);
                }
            } else if lo <= 9 {
                let c = b'0' + lo as u8;
                let start = if top_level { b'1' } else { b'0' };
                if c > start {
                    digit_range(out, start, c - 1);
                    out.push(' ');
                    more_digits(out, 1, less);
                    out.push_str(" | ");
                }
                digit_range(out, c, b'9');
                out.push(' ');
                more_digits(out, 0, less);
            } else {
                let s = lo.to_string();
                let len = s.len() as i64;
                let c = s.as_bytes()[0];
                if c > b'1' {
                    digit_range(out, if top_level { b'1' } else { b'0' }, c - 1);
                    out.push(' ');
                    more_digits(out, len, less);
                    out.push_str(" | ");
                }
                digit_range(out, c, c);
                out.push_str(" (");
                build_min_max_int(Some(s[1..].parse().unwrap_or(0)), None, out, less, false);
                out.push(')');
                if c < b'9' {
                    out.push_str(" | ");
                    digit_range(out, c + 1, b'9');
                    out.push(' ');
                    more_digits(out, len - 1, less);
                }
            }
        }
        (None, Some(hi)) => {
            let less = (decimals_left - 1).max(1);
            if hi >= 0 {
                if top_level {
                    out.push_str("\"-\" [1-9] ");
                    more_digits(out, 0, less);
                    out.push_str(" | ");
                }
                build_min_max_int(Some(0), Some(hi), out, decimals_left, true);
            } else {
                out.push_str("\"-\" (");
                build_min_max_int(Some(-hi), None, out, decimals_left, false);
                out.push(')');
            }
        }
        (None, None) => out.push_str("[0] | [1-9] [0-9]{0,15}"),
    }
}

/// Largest magnitude the range builders are used with (16 digits, as llama.cpp's).
pub(super) const MAX_BOUND: f64 = 9.0e15;
