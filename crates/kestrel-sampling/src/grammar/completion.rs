//! Shortest completions from the grammar's structure: the fewest bytes each rule can derive
//! (a fixed point over its alternatives) and the fewest that finish an alternative from any
//! position. A matcher stack "continue at `pos`, then the rest" is finished by the rest of its
//! alternative and then by each frame below it, so its cost is a sum along the stack, however
//! deep the nesting (a search over bytes would have to walk every level).

use super::class::CharClass;
use super::{Compiled, Sym};

/// Cost of what cannot be completed (an empty class, a rule with no finite derivation).
pub(crate) const INF: u32 = u32::MAX / 4;

/// Per grammar: each class's representative character, each rule's fewest bytes and the
/// alternative that gives them, each position's fewest bytes to the end of its alternative.
#[derive(Debug)]
pub(crate) struct MinLengths {
    /// The character a completion writes for each class (`None`: the class is empty).
    repr: Vec<Option<char>>,
    /// Fewest bytes of each rule, and the index of the alternative that derives them.
    rule: Vec<(u32, u32)>,
    /// Fewest bytes from each position of `syms` to the end of its alternative.
    rest: Vec<u32>,
}

impl MinLengths {
    pub fn new(g: &Compiled) -> Self {
        let repr: Vec<Option<char>> = g.classes.iter().map(representative).collect();
        let term = |cls: u32| repr[cls as usize].map_or(INF, |c| c.len_utf8() as u32);
        let mut rule = vec![(INF, u32::MAX); g.alts.len()];
        // Bellman-Ford over the rules: costs only fall, an alternative is kept only when it is
        // strictly cheaper, so following the kept alternatives always terminates.
        loop {
            let mut changed = false;
            for (r, alts) in g.alts.iter().enumerate() {
                for (i, &start) in alts.iter().enumerate() {
                    let mut cost = 0u32;
                    let mut pos = start as usize;
                    loop {
                        cost = match g.syms[pos] {
                            Sym::End => break,
                            Sym::Term(cls) => cost.saturating_add(term(cls)),
                            Sym::Rule(s) => cost.saturating_add(rule[s as usize].0),
                        }
                        .min(INF);
                        pos += 1;
                    }
                    if cost < rule[r].0 {
                        rule[r] = (cost, i as u32);
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let mut rest = vec![0u32; g.syms.len() + 1];
        for pos in (0..g.syms.len()).rev() {
            rest[pos] = match g.syms[pos] {
                Sym::End => 0,
                Sym::Term(cls) => term(cls).saturating_add(rest[pos + 1]).min(INF),
                Sym::Rule(r) => rule[r as usize].0.saturating_add(rest[pos + 1]).min(INF),
            };
        }
        Self { repr, rule, rest }
    }

    /// Fewest bytes from `pos` to the end of its alternative.
    #[inline]
    pub fn rest(&self, pos: u32) -> u32 {
        self.rest[pos as usize]
    }

    /// Appends the cheapest text from `pos` to the end of its alternative (`work` is scratch).
    pub fn emit_rest(&self, g: &Compiled, pos: u32, out: &mut Vec<u8>, work: &mut Vec<u32>) {
        if self.rest(pos) >= INF {
            return;
        }
        work.clear();
        work.push(pos);
        let mut buf = [0u8; 4];
        while let Some(pos) = work.pop() {
            match g.syms[pos as usize] {
                Sym::End => {}
                Sym::Term(cls) => {
                    if let Some(c) = self.repr[cls as usize] {
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                    work.push(pos + 1);
                }
                Sym::Rule(r) => {
                    work.push(pos + 1);
                    let (_, alt) = self.rule[r as usize];
                    work.push(g.alts[r as usize][alt as usize]);
                }
            }
        }
    }
}

/// The character a completion writes for a class: printable ASCII first (so quotes and
/// brackets, not control characters), then newline and tab, other ASCII, then the smallest
/// non-ASCII character (the shortest in UTF-8).
fn representative(class: &CharClass) -> Option<char> {
    let ascii = (0x20..0x7F)
        .chain([0x0A, 0x09])
        .chain(0..0x20)
        .chain([0x7F]);
    for c in ascii {
        if class.matches(c) {
            return char::from_u32(c);
        }
    }
    class.first_non_ascii().and_then(char::from_u32)
}

#[cfg(test)]
mod tests {
    use super::super::Grammar;
    use super::*;

    fn lengths(src: &str) -> (Grammar, MinLengths) {
        let g = Grammar::from_gbnf(src).unwrap();
        let m = MinLengths::new(&g.inner);
        (g, m)
    }

    /// The cheapest text for the root rule's first alternative.
    fn root_completion(g: &Grammar, m: &MinLengths) -> Vec<u8> {
        let mut out = Vec::new();
        let start = g.inner.alts[g.inner.root as usize][0];
        m.emit_rest(&g.inner, start, &mut out, &mut Vec::new());
        out
    }

    #[test]
    fn rule_minimums_follow_the_cheapest_alternative() {
        let (g, m) = lengths(
            r#"root ::= item ("," item)*
item ::= "[" item "]" | num | "nothing"
num ::= [1-9] [0-9]*"#,
        );
        let root = g.inner.root as usize;
        assert_eq!(m.rule[root].0, 1); // one digit
        assert_eq!(root_completion(&g, &m), b"1");
    }

    #[test]
    fn recursion_with_free_alternatives_terminates() {
        let (g, m) = lengths(
            r#"root ::= a "!"
a ::= "(" a ")" | b
b ::= "x"? | "[" a "]""#,
        );
        let out = root_completion(&g, &m);
        assert_eq!(out, b"!");
    }

    #[test]
    fn empty_and_non_ascii_classes() {
        let (g, m) = lengths(r#"root ::= [ぁ-ゟ] | [^\x00-\U0010FFFF] "a""#);
        assert_eq!(m.rule[g.inner.root as usize].0, 3);
        let out = root_completion(&g, &m);
        assert_eq!(out, "ぁ".as_bytes());
    }
}
