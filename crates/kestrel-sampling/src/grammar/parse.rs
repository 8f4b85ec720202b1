//! GBNF parser with llama.cpp's syntax (`grammars/README.md`, `src/llama-grammar.cpp`): rules
//! `name ::= ...`, alternation, groups, `* + ?`, `{m}`, `{m,}`, `{m,n}`, character classes with
//! ranges and negation, `.`, literals with escapes, `#` comments, newlines inside groups and
//! after `|`. Repetitions are rewritten into generated rules exactly as llama.cpp does, so the
//! matcher only sees sequences, alternatives, rule references and character classes.
//! Token references (`<[id]>`, `<text>`, `!<...>`) are not supported and are a parse error.

use std::collections::HashMap;

use super::class::CharClass;
use crate::error::SamplingError;

/// A sequence element: a terminal character class or a reference to a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Item {
    Term(CharClass),
    Rule(u32),
}

/// One alternative: a sequence of items (empty = the empty string).
pub(crate) type Alt = Vec<Item>;

/// Parsed rules: `rules[id]` are the alternatives of the rule named `names[id]`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rules {
    pub names: Vec<String>,
    pub rules: Vec<Option<Vec<Alt>>>,
    ids: HashMap<String, u32>,
}

/// Bounds that keep hostile grammars from exhausting the stack or memory.
const MAX_NESTING: usize = 128;
/// llama.cpp's `MAX_REPETITION_THRESHOLD`.
const MAX_REPETITION: u64 = 2000;
/// Upper bound on items in all rules together after repetition rewriting.
const MAX_ITEMS: usize = 4_000_000;

impl Rules {
    pub fn id_of(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    fn symbol(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.rules.push(None);
        self.ids.insert(name.to_string(), id);
        id
    }

    fn generate(&mut self, base: &str) -> u32 {
        let id = self.names.len() as u32;
        let name = format!("{base}_{id}");
        self.names.push(name.clone());
        self.rules.push(None);
        self.ids.insert(name, id);
        id
    }

    fn add(&mut self, id: u32, alts: Vec<Alt>) {
        self.rules[id as usize] = Some(alts);
    }

    fn item_count(&self) -> usize {
        self.rules.iter().flatten().flatten().map(Vec::len).sum()
    }
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    rules: Rules,
    depth: usize,
    items: usize,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

/// Parses GBNF text into rules; every referenced rule must be defined.
pub(crate) fn parse(src: &str) -> Result<Rules, SamplingError> {
    let mut p = Parser {
        src,
        pos: 0,
        rules: Rules::default(),
        depth: 0,
        items: 0,
    };
    p.skip_space(true);
    while p.pos < src.len() {
        p.parse_rule()?;
    }
    if let Some(i) = p.rules.rules.iter().position(Option::is_none) {
        return Err(SamplingError::InvalidGrammar(format!(
            "undefined rule identifier '{}'",
            p.rules.names[i]
        )));
    }
    Ok(p.rules)
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.src[self.pos..].chars().nth(n)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn err(&self, message: impl Into<String>) -> SamplingError {
        self.err_at(self.pos, message)
    }

    fn err_at(&self, pos: usize, message: impl Into<String>) -> SamplingError {
        let before = &self.src[..pos];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        SamplingError::GrammarParse {
            line,
            column,
            message: message.into(),
        }
    }

    fn found(&self) -> String {
        match self.peek() {
            None => "end of input".into(),
            Some(c) => format!("{c:?}"),
        }
    }

    fn skip_space(&mut self, newline_ok: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '#' => {
                    while let Some(c) = self.peek() {
                        if c == '\r' || c == '\n' {
                            break;
                        }
                        self.pos += c.len_utf8();
                    }
                }
                '\r' | '\n' if newline_ok => self.pos += 1,
                _ => break,
            }
        }
    }

    fn parse_name(&mut self) -> Result<&str, SamplingError> {
        let start = self.pos;
        while self.peek().is_some_and(is_word_char) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err(format!("expecting a rule name, found {}", self.found())));
        }
        Ok(&self.src[start..self.pos])
    }

    fn parse_int(&mut self) -> Result<u64, SamplingError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err(format!("expecting an integer, found {}", self.found())));
        }
        self.src[start..self.pos]
            .parse::<u64>()
            .map_err(|_| self.err_at(start, "integer too large"))
    }

    fn parse_hex(&mut self, digits: usize) -> Result<u32, SamplingError> {
        let start = self.pos;
        let mut v: u32 = 0;
        for _ in 0..digits {
            match self.peek().and_then(|c| c.to_digit(16)) {
                Some(d) => {
                    v = (v << 4) | d;
                    self.pos += 1;
                }
                None => return Err(self.err_at(start, format!("expecting {digits} hex digits"))),
            }
        }
        Ok(v)
    }

    /// One (possibly escaped) character inside a literal or class.
    fn parse_char(&mut self) -> Result<u32, SamplingError> {
        let start = self.pos;
        match self.bump() {
            None => Err(self.err("unexpected end of input")),
            Some('\\') => match self.bump() {
                Some('x') => self.parse_hex(2),
                Some('u') => self.parse_hex(4),
                Some('U') => self.parse_hex(8),
                Some('t') => Ok('\t' as u32),
                Some('r') => Ok('\r' as u32),
                Some('n') => Ok('\n' as u32),
                Some(c @ ('\\' | '"' | '[' | ']')) => Ok(c as u32),
                _ => Err(self.err_at(start, "unknown escape")),
            },
            Some(c) => Ok(c as u32),
        }
    }

    fn parse_rule(&mut self) -> Result<(), SamplingError> {
        let name = self.parse_name()?.to_string();
        self.skip_space(false);
        if !self.src[self.pos..].starts_with("::=") {
            return Err(self.err(format!(
                "expecting ::= after rule name '{name}', found {}",
                self.found()
            )));
        }
        self.pos += 3;
        self.skip_space(true);
        let id = self.rules.symbol(&name);
        if self.rules.rules[id as usize].is_some() {
            return Err(self.err(format!("rule '{name}' is defined twice")));
        }
        self.parse_alternates(&name, id, false)?;
        match self.peek() {
            Some('\r') => {
                self.pos += 1;
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
            }
            Some('\n') => self.pos += 1,
            None => {}
            Some(_) => {
                return Err(self.err(format!("expecting newline or end, found {}", self.found())))
            }
        }
        self.skip_space(true);
        Ok(())
    }

    fn parse_alternates(&mut self, name: &str, id: u32, nested: bool) -> Result<(), SamplingError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(SamplingError::TooDeep {
                what: "grammar group",
                limit: MAX_NESTING,
            });
        }
        let mut alts = vec![self.parse_sequence(name, nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.skip_space(true);
            alts.push(self.parse_sequence(name, nested)?);
        }
        self.depth -= 1;
        self.rules.add(id, alts);
        Ok(())
    }

    fn parse_sequence(&mut self, name: &str, nested: bool) -> Result<Alt, SamplingError> {
        let mut seq: Alt = Vec::new();
        let mut last_start = 0usize;
        let mut have_last = false;
        while let Some(c) = self.peek() {
            let item_pos = self.pos;
            match c {
                '"' => {
                    self.pos += 1;
                    last_start = seq.len();
                    have_last = true;
                    loop {
                        match self.peek() {
                            None => return Err(self.err("unterminated string literal")),
                            Some('"') => break,
                            Some(_) => {
                                let ch = self.parse_char()?;
                                seq.push(Item::Term(CharClass::single(ch)));
                            }
                        }
                    }
                    self.pos += 1;
                    self.skip_space(nested);
                }
                '[' => {
                    self.pos += 1;
                    let negated = self.peek() == Some('^');
                    if negated {
                        self.pos += 1;
                    }
                    let mut ranges = Vec::new();
                    loop {
                        match self.peek() {
                            None => return Err(self.err("unterminated character class")),
                            Some(']') => break,
                            Some(_) => {
                                let lo = self.parse_char()?;
                                let mut hi = lo;
                                if self.peek() == Some('-')
                                    && self.peek_at(1).is_some_and(|c| c != ']')
                                {
                                    self.pos += 1;
                                    hi = self.parse_char()?;
                                }
                                ranges.push((lo, hi));
                            }
                        }
                    }
                    self.pos += 1;
                    last_start = seq.len();
                    have_last = true;
                    seq.push(Item::Term(CharClass::new(ranges, negated)));
                    self.skip_space(nested);
                }
                '<' | '!' => {
                    return Err(
                        self.err("token references (<[id]>, <text>, !<...>) are not supported")
                    );
                }
                c if is_word_char(c) => {
                    let rname = self.parse_name()?.to_string();
                    let id = self.rules.symbol(&rname);
                    self.skip_space(nested);
                    last_start = seq.len();
                    have_last = true;
                    seq.push(Item::Rule(id));
                }
                '(' => {
                    self.pos += 1;
                    self.skip_space(true);
                    let sub = self.rules.generate(name);
                    self.parse_alternates(name, sub, true)?;
                    if self.peek() != Some(')') {
                        return Err(self.err(format!("expecting ')', found {}", self.found())));
                    }
                    self.pos += 1;
                    last_start = seq.len();
                    have_last = true;
                    seq.push(Item::Rule(sub));
                    self.skip_space(nested);
                }
                '.' => {
                    self.pos += 1;
                    last_start = seq.len();
                    have_last = true;
                    seq.push(Item::Term(CharClass::any()));
                    self.skip_space(nested);
                }
                '*' | '+' | '?' => {
                    self.pos += 1;
                    self.skip_space(nested);
                    let (min, max) = match c {
                        '*' => (0, None),
                        '+' => (1, None),
                        _ => (0, Some(1)),
                    };
                    self.repeat(&mut seq, last_start, have_last, min, max, name, item_pos)?;
                }
                '{' => {
                    self.pos += 1;
                    self.skip_space(nested);
                    let min = self.parse_int()?;
                    self.skip_space(nested);
                    let max = match self.peek() {
                        Some('}') => Some(min),
                        Some(',') => {
                            self.pos += 1;
                            self.skip_space(nested);
                            if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                                let m = self.parse_int()?;
                                self.skip_space(nested);
                                Some(m)
                            } else {
                                None
                            }
                        }
                        _ => {
                            return Err(self.err(format!(
                                "expecting ',' or '}}' in repetition, found {}",
                                self.found()
                            )))
                        }
                    };
                    if self.peek() != Some('}') {
                        return Err(self.err(format!("expecting '}}', found {}", self.found())));
                    }
                    self.pos += 1;
                    self.skip_space(nested);
                    if min > MAX_REPETITION || max.is_some_and(|m| m > MAX_REPETITION) {
                        return Err(self
                            .err_at(item_pos, format!("repetition count above {MAX_REPETITION}")));
                    }
                    if max.is_some_and(|m| m < min) {
                        return Err(
                            self.err_at(item_pos, "repetition maximum is below the minimum")
                        );
                    }
                    self.repeat(&mut seq, last_start, have_last, min, max, name, item_pos)?;
                }
                _ => break,
            }
        }
        Ok(seq)
    }

    /// llama.cpp's rewrite: `S{m,n}` → `S` m times then `n-m` nested optional rules
    /// (`S'(x) ::= S S'(x-1) |`); `S{m,}` → `S` m times then `S' ::= S S' |`.
    #[allow(clippy::too_many_arguments)]
    fn repeat(
        &mut self,
        seq: &mut Alt,
        last_start: usize,
        have_last: bool,
        min: u64,
        max: Option<u64>,
        name: &str,
        at: usize,
    ) -> Result<(), SamplingError> {
        if !have_last || last_start >= seq.len() {
            return Err(self.err_at(at, "expecting an item before the repetition operator"));
        }
        let prev: Alt = seq[last_start..].to_vec();
        let copies = min.max(max.unwrap_or(0)).max(1) as usize;
        self.items += prev.len() * copies + 2 * copies;
        if self.items > MAX_ITEMS {
            return Err(self.err_at(at, "grammar grows too large after expanding repetitions"));
        }
        if min == 0 {
            seq.truncate(last_start);
        } else {
            for _ in 1..min {
                seq.extend_from_slice(&prev);
            }
        }
        let n_opt = match max {
            None => 1,
            Some(m) => m - min,
        };
        let mut last_rec = 0u32;
        for i in 0..n_opt {
            let id = self.rules.generate(name);
            let mut alt = prev.clone();
            if i > 0 || max.is_none() {
                alt.push(Item::Rule(if max.is_none() { id } else { last_rec }));
            }
            self.rules.add(id, vec![alt, Vec::new()]);
            last_rec = id;
        }
        if n_opt > 0 {
            seq.push(Item::Rule(last_rec));
        }
        debug_assert!(self.rules.item_count() < MAX_ITEMS * 2);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_pos(src: &str) -> (usize, usize, String) {
        match parse(src) {
            Err(SamplingError::GrammarParse {
                line,
                column,
                message,
            }) => (line, column, message),
            other => panic!("expected a parse error for {src:?}, got {other:?}"),
        }
    }

    #[test]
    fn rules_alternatives_and_generated_names() {
        let r = parse("root ::= \"a\" | b ( \"c\" | [d-f] )*\nb ::= [^x]").unwrap();
        assert_eq!(r.id_of("root"), Some(0));
        assert!(r.names.iter().any(|n| n.starts_with("root_")));
        let root = r.rules[0].as_ref().unwrap();
        assert_eq!(root.len(), 2);
    }

    #[test]
    fn errors_have_line_and_column() {
        let (l, c, _) = err_pos("root ::= \"a\"\nfoo ::= [a-");
        assert_eq!((l, c), (2, 12));
        let (l, c, m) = err_pos("root ::= x y\n  bad");
        assert_eq!((l, c), (2, 6), "{m}");
        let (l, _, m) = err_pos("root ::= \"\\q\"");
        assert_eq!(l, 1);
        assert!(m.contains("escape"));
        err_pos("root ::= *");
        err_pos("root ::= \"a\"{2,1}");
        err_pos("root ::= \"a\"{3000}");
        err_pos("root ::= <[12]>");
        err_pos("root ::= (\"a\"");
        err_pos("root := \"a\"");
    }

    #[test]
    fn undefined_and_duplicate_rules() {
        assert!(
            matches!(parse("root ::= missing"), Err(SamplingError::InvalidGrammar(m)) if m.contains("missing"))
        );
        assert!(matches!(
            parse("root ::= \"a\"\nroot ::= \"b\""),
            Err(SamplingError::GrammarParse { .. })
        ));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let src = format!("root ::= {}\"a\"{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(matches!(parse(&src), Err(SamplingError::TooDeep { .. })));
    }

    #[test]
    fn escapes() {
        let r = parse(r#"root ::= "\x41\u3042\U0001F600\t\n\r\\\"\[\]" [\]-]"#).unwrap();
        let root = &r.rules[0].as_ref().unwrap()[0];
        let want = [0x41, 0x3042, 0x1F600, 9, 10, 13, 0x5C, 0x22, 0x5B, 0x5D];
        for (item, w) in root.iter().zip(want) {
            assert_eq!(item, &Item::Term(CharClass::single(w)));
        }
        assert_eq!(
            root[10],
            Item::Term(CharClass::new(vec![(0x5D, 0x5D), (0x2D, 0x2D)], false))
        );
    }
}
