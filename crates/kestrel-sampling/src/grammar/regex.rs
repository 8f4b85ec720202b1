//! JSON Schema `pattern` → GBNF: a small regex parser (literals, escapes, classes with ranges
//! and negation, `\d \w \s` and their negations, `.`, groups `( )` `(?: )` `(?<name> )`,
//! alternation, `* + ?`, `{m}` `{m,}` `{m,n}`, `^` and `$` at the ends) whose output matches
//! the *JSON-encoded* string content: `"` and `\` and control characters inside the matched
//! text are emitted as their JSON escapes. Unanchored ends allow any prefix/suffix. Lookaround,
//! backreferences, word boundaries, inline flags and anchors elsewhere are typed errors.

use super::class::escape_char;
use crate::error::SamplingError;

const MAX_DEPTH: usize = 64;
const MAX_REPEAT: u32 = 2000;

#[derive(Debug, Clone)]
enum Node {
    Lit(u32),
    Class(Vec<(u32, u32)>, bool),
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    Repeat(Box<Node>, u32, Option<u32>),
}

struct P<'a> {
    chars: Vec<char>,
    i: usize,
    depth: usize,
    pointer: &'a str,
}

fn unsupported(pointer: &str, what: &str) -> SamplingError {
    SamplingError::UnsupportedSchema {
        keyword: format!("pattern: {what}"),
        pointer: pointer.to_string(),
    }
}

fn invalid(pointer: &str, what: &str) -> SamplingError {
    SamplingError::InvalidSchema {
        pointer: pointer.to_string(),
        message: format!("pattern: {what}"),
    }
}

const DIGIT: &[(u32, u32)] = &[(0x30, 0x39)];
const WORD: &[(u32, u32)] = &[(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)];
const SPACE: &[(u32, u32)] = &[(0x09, 0x0D), (0x20, 0x20)];

/// ASCII complement of a shorthand class (`\D`, `\W`, `\S`): only ASCII is generated, so the
/// result is inside the Unicode-aware complement the validator uses.
fn ascii_complement(r: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut next = 0x20;
    for &(lo, hi) in r {
        if lo > next {
            out.push((next, lo - 1));
        }
        next = next.max(hi + 1);
    }
    if next <= 0x7E {
        out.push((next, 0x7E));
    }
    out
}

impl P<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn parse_alt(&mut self) -> Result<Node, SamplingError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(SamplingError::TooDeep {
                what: "pattern",
                limit: MAX_DEPTH,
            });
        }
        let mut alts = vec![self.parse_seq()?];
        while self.peek() == Some('|') {
            self.i += 1;
            alts.push(self.parse_seq()?);
        }
        self.depth -= 1;
        Ok(if alts.len() == 1 {
            alts.remove(0)
        } else {
            Node::Alt(alts)
        })
    }

    fn parse_seq(&mut self) -> Result<Node, SamplingError> {
        let mut seq = Vec::new();
        while let Some(c) = self.peek() {
            let atom = match c {
                '|' | ')' => break,
                '(' => {
                    self.i += 1;
                    if self.peek() == Some('?') {
                        match (self.chars.get(self.i + 1), self.chars.get(self.i + 2)) {
                            (Some(':'), _) => self.i += 2,
                            (Some('<'), Some(&n)) if n != '=' && n != '!' => {
                                while self.peek().is_some_and(|c| c != '>') {
                                    self.i += 1;
                                }
                                self.i += 1;
                            }
                            (Some('P'), Some('<')) => {
                                while self.peek().is_some_and(|c| c != '>') {
                                    self.i += 1;
                                }
                                self.i += 1;
                            }
                            _ => {
                                return Err(unsupported(self.pointer, "lookaround or inline flags"))
                            }
                        }
                    }
                    let inner = self.parse_alt()?;
                    if self.peek() != Some(')') {
                        return Err(invalid(self.pointer, "unbalanced parentheses"));
                    }
                    self.i += 1;
                    inner
                }
                '[' => self.parse_class()?,
                '.' => {
                    self.i += 1;
                    Node::Class(vec![(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)], true)
                }
                '^' | '$' => return Err(unsupported(self.pointer, "anchors inside the pattern")),
                '*' | '+' | '?' | '{' => {
                    return Err(invalid(self.pointer, "quantifier without an item"))
                }
                '\\' => self.parse_escape(false)?,
                c => {
                    self.i += 1;
                    Node::Lit(c as u32)
                }
            };
            let atom = self.parse_quantifier(atom)?;
            seq.push(atom);
        }
        Ok(if seq.len() == 1 {
            seq.remove(0)
        } else {
            Node::Seq(seq)
        })
    }

    fn parse_quantifier(&mut self, atom: Node) -> Result<Node, SamplingError> {
        let (min, max) = match self.peek() {
            Some('*') => {
                self.i += 1;
                (0, None)
            }
            Some('+') => {
                self.i += 1;
                (1, None)
            }
            Some('?') => {
                self.i += 1;
                (0, Some(1))
            }
            Some('{') => {
                let close = self.chars[self.i..].iter().position(|&c| c == '}');
                let Some(close) = close else {
                    // a lone '{' is a literal in ECMA-262 patterns
                    return Ok(atom);
                };
                let body: String = self.chars[self.i + 1..self.i + close].iter().collect();
                let parse = |s: &str| {
                    s.trim()
                        .parse::<u32>()
                        .map_err(|_| invalid(self.pointer, "bad repetition count"))
                };
                let (min, max) = match body.split_once(',') {
                    None => {
                        let n = parse(&body)?;
                        (n, Some(n))
                    }
                    Some((a, b)) => (
                        if a.trim().is_empty() { 0 } else { parse(a)? },
                        if b.trim().is_empty() {
                            None
                        } else {
                            Some(parse(b)?)
                        },
                    ),
                };
                self.i += close + 1;
                if min > MAX_REPEAT || max.is_some_and(|m| m > MAX_REPEAT || m < min) {
                    return Err(invalid(self.pointer, "repetition count out of range"));
                }
                (min, max)
            }
            _ => return Ok(atom),
        };
        // lazy and possessive suffixes do not change the language
        if matches!(self.peek(), Some('?') | Some('+')) {
            self.i += 1;
        }
        Ok(Node::Repeat(Box::new(atom), min, max))
    }

    /// An escape; `in_class` allows `\b` as backspace.
    fn parse_escape(&mut self, in_class: bool) -> Result<Node, SamplingError> {
        self.i += 1;
        let Some(c) = self.peek() else {
            return Err(invalid(self.pointer, "trailing backslash"));
        };
        self.i += 1;
        let hex = |p: &mut Self, n: usize| -> Result<u32, SamplingError> {
            let s: String = p
                .chars
                .get(p.i..p.i + n)
                .map(|c| c.iter().collect())
                .unwrap_or_default();
            let v =
                u32::from_str_radix(&s, 16).map_err(|_| invalid(p.pointer, "bad hex escape"))?;
            p.i += n;
            Ok(v)
        };
        Ok(match c {
            'd' => Node::Class(DIGIT.to_vec(), false),
            'w' => Node::Class(WORD.to_vec(), false),
            's' => Node::Class(SPACE.to_vec(), false),
            'D' => Node::Class(ascii_complement(DIGIT), false),
            'W' => Node::Class(ascii_complement(WORD), false),
            'S' => Node::Class(ascii_complement(SPACE), false),
            'n' => Node::Lit(0x0A),
            't' => Node::Lit(0x09),
            'r' => Node::Lit(0x0D),
            'f' => Node::Lit(0x0C),
            'v' => Node::Lit(0x0B),
            '0' => Node::Lit(0),
            'b' if in_class => Node::Lit(0x08),
            'x' => Node::Lit(hex(self, 2)?),
            'u' => Node::Lit(hex(self, 4)?),
            'b' | 'B' => return Err(unsupported(self.pointer, "word boundaries")),
            '1'..='9' | 'k' => return Err(unsupported(self.pointer, "backreferences")),
            'p' | 'P' => return Err(unsupported(self.pointer, "Unicode property classes")),
            c if c.is_ascii_alphanumeric() => {
                return Err(unsupported(self.pointer, &format!("escape \\{c}")))
            }
            c => Node::Lit(c as u32),
        })
    }

    fn parse_class(&mut self) -> Result<Node, SamplingError> {
        self.i += 1;
        let negated = self.peek() == Some('^');
        if negated {
            self.i += 1;
        }
        let mut ranges = Vec::new();
        let mut first = true;
        loop {
            let Some(c) = self.peek() else {
                return Err(invalid(self.pointer, "unbalanced square brackets"));
            };
            if c == ']' && !first {
                self.i += 1;
                break;
            }
            first = false;
            let lo = if c == '\\' {
                match self.parse_escape(true)? {
                    Node::Lit(v) => v,
                    Node::Class(r, _) => {
                        ranges.extend(r);
                        continue;
                    }
                    _ => return Err(invalid(self.pointer, "bad escape in class")),
                }
            } else {
                self.i += 1;
                c as u32
            };
            if self.peek() == Some('-') && self.chars.get(self.i + 1).is_some_and(|&c| c != ']') {
                self.i += 1;
                let hi = if self.peek() == Some('\\') {
                    match self.parse_escape(true)? {
                        Node::Lit(v) => v,
                        _ => return Err(invalid(self.pointer, "class shorthand as a range end")),
                    }
                } else {
                    let h = self.peek().map_or(0, |c| c as u32);
                    self.i += 1;
                    h
                };
                if hi < lo {
                    return Err(invalid(self.pointer, "range out of order in class"));
                }
                ranges.push((lo, hi));
            } else {
                ranges.push((lo, lo));
            }
        }
        Ok(Node::Class(ranges, negated))
    }
}

/// Characters JSON does not allow raw inside a string (we also keep DEL out, as llama.cpp).
const JSON_RAW_FORBIDDEN: &[(u32, u32)] = &[(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F)];

fn in_ranges(r: &[(u32, u32)], c: u32) -> bool {
    r.iter().any(|&(lo, hi)| lo <= c && c <= hi)
}

/// `r` minus `sub`.
fn subtract(r: &[(u32, u32)], sub: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for &(lo, hi) in r {
        let mut pieces = vec![(lo, hi)];
        for &(a, b) in sub {
            pieces = pieces
                .into_iter()
                .flat_map(|(x, y)| {
                    let mut v = Vec::new();
                    if b < x || a > y {
                        v.push((x, y));
                    } else {
                        if a > x {
                            v.push((x, a - 1));
                        }
                        if b < y {
                            v.push((b + 1, y));
                        }
                    }
                    v
                })
                .collect();
        }
        out.extend(pieces);
    }
    out
}

/// The JSON-escaped form of a character, as GBNF literal text (without the quotes).
fn json_escaped(c: u32) -> Option<String> {
    Some(match c {
        0x22 => "\\\\\\\"".into(), // \"
        0x5C => "\\\\\\\\".into(), // \\
        0x0A => "\\\\n".into(),
        0x0D => "\\\\r".into(),
        0x09 => "\\\\t".into(),
        0x08 => "\\\\b".into(),
        0x0C => "\\\\f".into(),
        c if c < 0x20 || c == 0x7F => format!("\\\\u{c:04x}"),
        _ => return None,
    })
}

fn lit_text(c: u32) -> String {
    json_escaped(c).unwrap_or_else(|| escape_char(c, true))
}

fn class_expr(ranges: &[(u32, u32)], negated: bool) -> String {
    let mut alts = Vec::new();
    let raw: Vec<(u32, u32)>;
    let specials = [0x22u32, 0x5C, 0x0A, 0x0D, 0x09];
    let included: Vec<u32> = specials
        .iter()
        .copied()
        .filter(|&c| in_ranges(ranges, c) != negated)
        .collect();
    if negated {
        let mut r = ranges.to_vec();
        r.extend_from_slice(JSON_RAW_FORBIDDEN);
        let mut s = String::from("[^");
        for (lo, hi) in r {
            s.push_str(&escape_char(lo, false));
            if hi != lo {
                s.push('-');
                s.push_str(&escape_char(hi, false));
            }
        }
        s.push(']');
        alts.push(s);
    } else {
        raw = subtract(ranges, JSON_RAW_FORBIDDEN);
        if !raw.is_empty() {
            let mut s = String::from("[");
            for &(lo, hi) in &raw {
                s.push_str(&escape_char(lo, false));
                if hi != lo {
                    s.push('-');
                    s.push_str(&escape_char(hi, false));
                }
            }
            s.push(']');
            alts.push(s);
        }
    }
    for c in included {
        alts.push(format!("\"{}\"", lit_text(c)));
    }
    match alts.len() {
        0 => "[^\\x00-\\U0010FFFF]".into(), // matches nothing
        1 => alts.remove(0),
        _ => format!("({})", alts.join(" | ")),
    }
}

fn emit(n: &Node) -> String {
    match n {
        Node::Lit(c) => format!("\"{}\"", lit_text(*c)),
        Node::Class(r, neg) => class_expr(r, *neg),
        Node::Seq(items) => {
            let mut parts: Vec<String> = Vec::new();
            let mut lit = String::new();
            for it in items {
                if let Node::Lit(c) = it {
                    lit.push_str(&lit_text(*c));
                    continue;
                }
                if !lit.is_empty() {
                    parts.push(format!("\"{lit}\""));
                    lit.clear();
                }
                let e = emit(it);
                if !e.is_empty() {
                    parts.push(e);
                }
            }
            if !lit.is_empty() {
                parts.push(format!("\"{lit}\""));
            }
            parts.join(" ")
        }
        Node::Alt(alts) => format!(
            "({})",
            alts.iter().map(emit).collect::<Vec<_>>().join(" | ")
        ),
        Node::Repeat(inner, min, max) => {
            let e = emit(inner);
            if e.is_empty() {
                return String::new();
            }
            let q = match (min, max) {
                (0, None) => "*".to_string(),
                (1, None) => "+".to_string(),
                (0, Some(1)) => "?".to_string(),
                (m, None) => format!("{{{m},}}"),
                (m, Some(x)) if m == x => format!("{{{m}}}"),
                (m, Some(x)) => format!("{{{m},{x}}}"),
            };
            format!("({e}){q}")
        }
    }
}

/// GBNF for the content of a JSON string matching `pattern` (between the quotes).
/// `any_char` is the name of the rule for one JSON string character (for unanchored ends).
pub(crate) fn pattern_to_gbnf(
    pattern: &str,
    any_char: &str,
    pointer: &str,
) -> Result<String, SamplingError> {
    let mut body = pattern;
    let anchored_start = body.starts_with('^');
    if anchored_start {
        body = &body[1..];
    }
    let trailing_backslashes = body
        .strip_suffix('$')
        .map_or(0, |b| b.len() - b.trim_end_matches('\\').len());
    let anchored_end = body.ends_with('$') && trailing_backslashes.is_multiple_of(2);
    if anchored_end {
        body = &body[..body.len() - 1];
    }
    let mut p = P {
        chars: body.chars().collect(),
        i: 0,
        depth: 0,
        pointer,
    };
    let node = p.parse_alt()?;
    if p.i < p.chars.len() {
        return Err(invalid(pointer, "unbalanced parentheses"));
    }
    let mut e = emit(&node);
    if matches!(node, Node::Alt(_)) || e.is_empty() {
        e = format!("({e})");
    }
    if !anchored_start {
        e = format!("{any_char}* {e}");
    }
    if !anchored_end {
        e = format!("{e} {any_char}*");
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Grammar, GrammarMatcher};

    fn matches(pattern: &str, json_content: &str) -> bool {
        let body = pattern_to_gbnf(pattern, "char", "/").unwrap();
        let src = format!("root ::= {body}\nchar ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{{4}})\n");
        let g = Grammar::from_gbnf(&src).unwrap_or_else(|e| panic!("{pattern}: {e}\n{src}"));
        let mut m = GrammarMatcher::new(&g);
        m.accept_str(json_content).is_ok() && m.is_complete()
    }

    #[test]
    fn basic_patterns() {
        assert!(matches("^[A-Z]{3}-\\d{2,4}$", "ABC-123"));
        assert!(!matches("^[A-Z]{3}-\\d{2,4}$", "ABC-1"));
        assert!(matches("^(foo|ba[rz])+$", "foobazbar"));
        assert!(!matches("^(foo|ba[rz])+$", "fooba"));
        assert!(matches("^a.c$", "abc"));
        assert!(matches("^(?:x|y)?z$", "z"));
        assert!(matches("^\\w+@\\w+\\.com$", "me@site.com"));
    }

    #[test]
    fn json_escapes_inside_the_string() {
        // the pattern matches a quote; inside JSON it appears as \"
        assert!(matches("^a\"b$", "a\\\"b"));
        assert!(!matches("^a\"b$", "a\"b"));
        assert!(matches("^[^x]$", "\\n"));
        assert!(!matches("^[^x]$", "\n"));
        assert!(matches("^\\\\$", "\\\\"));
    }

    #[test]
    fn unanchored_ends_allow_anything_around() {
        assert!(matches("ab", "xxabyy"));
        assert!(matches("^ab", "aby"));
        assert!(!matches("^ab", "xab"));
    }

    #[test]
    fn unsupported_constructs_are_typed_errors() {
        for p in [
            "^(?=a)b$", "^\\bx$", "^(a)\\1$", "^a^b$", "^(?i)a$", "^\\p{L}$",
        ] {
            assert!(
                matches!(
                    pattern_to_gbnf(p, "char", "/x"),
                    Err(SamplingError::UnsupportedSchema { .. })
                ),
                "{p}"
            );
        }
        for p in ["^(a$", "^[a$", "^*a$", "^a{3,1}$"] {
            assert!(pattern_to_gbnf(p, "char", "/x").is_err(), "{p}");
        }
    }
}
