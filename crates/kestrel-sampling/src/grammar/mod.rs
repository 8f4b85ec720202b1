//! Grammar-constrained decoding: GBNF grammars ([`Grammar::from_gbnf`]) and JSON Schemas
//! ([`Grammar::from_json_schema`]) compiled to rules, a pushdown matcher over Unicode code
//! points ([`GrammarMatcher`]) and the allowed-token mask computed against a prefix trie of the
//! vocabulary ([`TokenTrie`], [`TokenMask`]).

pub(crate) mod class;
pub(crate) mod completion;
pub(crate) mod json_schema;
pub(crate) mod matcher;
pub(crate) mod parse;
pub(crate) mod regex;
pub(crate) mod token_trie;

use std::sync::Arc;

use class::CharClass;
use parse::{Item, Rules};

use crate::error::SamplingError;

/// A flattened grammar symbol: alternatives are runs of symbols closed by `End`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sym {
    End,
    Term(u32),
    Rule(u32),
}

/// The compiled rules the matcher walks.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub syms: Vec<Sym>,
    /// Start position in `syms` of each alternative of each rule.
    pub alts: Vec<Vec<u32>>,
    pub classes: Vec<CharClass>,
    pub names: Vec<String>,
    pub root: u32,
    pub source: String,
}

/// A compiled grammar, cheap to clone and share between threads and matchers.
///
/// ```
/// use kestrel_sampling::{Grammar, GrammarMatcher};
/// let g = Grammar::from_gbnf(r#"root ::= "yes" | "no""#).unwrap();
/// let mut m = GrammarMatcher::new(&g);
/// m.accept_bytes(b"ye").unwrap();
/// assert!(!m.is_complete());
/// assert!(m.accept_bytes(b"x").is_err()); // rejected, state unchanged
/// m.accept_bytes(b"s").unwrap();
/// assert!(m.is_complete());
/// ```
#[derive(Debug, Clone)]
pub struct Grammar {
    pub(crate) inner: Arc<Compiled>,
}

impl Grammar {
    /// Parses GBNF text (llama.cpp syntax) with start rule `root`.
    pub fn from_gbnf(text: &str) -> Result<Self, SamplingError> {
        Self::from_gbnf_with_root(text, "root")
    }

    /// Parses GBNF text with a chosen start rule.
    pub fn from_gbnf_with_root(text: &str, root: &str) -> Result<Self, SamplingError> {
        let rules = parse::parse(text)?;
        let root_id = rules.id_of(root).ok_or_else(|| {
            SamplingError::InvalidGrammar(format!("grammar has no '{root}' rule"))
        })?;
        check_left_recursion(&rules)?;
        Ok(Self {
            inner: Arc::new(compile(rules, root_id, text.to_string())),
        })
    }

    /// Compiles a JSON Schema to GBNF ([`json_schema_to_gbnf`](crate::json_schema_to_gbnf))
    /// and parses it: the grammar matches JSON texts valid against the schema.
    pub fn from_json_schema(schema: &serde_json::Value) -> Result<Self, SamplingError> {
        Self::from_gbnf(&json_schema::to_gbnf(schema)?)
    }

    /// Like [`Grammar::from_json_schema`], from the schema's text: object properties are
    /// generated in the order they are written (use this for schema files).
    pub fn from_json_schema_str(schema: &str) -> Result<Self, SamplingError> {
        Self::from_gbnf(&json_schema::text_to_gbnf(schema)?)
    }

    /// The GBNF text this grammar was built from.
    pub fn source(&self) -> &str {
        &self.inner.source
    }

    /// The rules after rewriting groups and repetitions into generated rules (named
    /// `parent_N`, as llama.cpp prints them), one per line: for inspecting a grammar.
    pub fn dump_rules(&self) -> String {
        let g = &self.inner;
        let mut out = String::new();
        for (r, starts) in g.alts.iter().enumerate() {
            out.push_str(&g.names[r]);
            out.push_str(" ::=");
            for (i, &start) in starts.iter().enumerate() {
                if i > 0 {
                    out.push_str(" |");
                }
                let mut pos = start as usize;
                while let Some(&sym) = g.syms.get(pos) {
                    match sym {
                        Sym::End => break,
                        Sym::Term(c) => {
                            out.push(' ');
                            out.push_str(&g.classes[c as usize].to_gbnf());
                        }
                        Sym::Rule(x) => {
                            out.push(' ');
                            out.push_str(&g.names[x as usize]);
                        }
                    }
                    pos += 1;
                }
            }
            out.push('\n');
        }
        out
    }

    /// Number of rules after rewriting groups and repetitions.
    pub fn rule_count(&self) -> usize {
        self.inner.alts.len()
    }
}

fn compile(rules: Rules, root: u32, source: String) -> Compiled {
    let mut syms = Vec::new();
    let mut alts = Vec::with_capacity(rules.rules.len());
    let mut classes: Vec<CharClass> = Vec::new();
    let mut class_ids: std::collections::HashMap<CharClass, u32> = std::collections::HashMap::new();
    for rule in rules.rules.into_iter().flatten() {
        let mut starts = Vec::with_capacity(rule.len());
        for alt in rule {
            starts.push(syms.len() as u32);
            for item in alt {
                syms.push(match item {
                    Item::Rule(r) => Sym::Rule(r),
                    Item::Term(c) => {
                        let next = classes.len() as u32;
                        let id = *class_ids.entry(c.clone()).or_insert(next);
                        if id == next {
                            classes.push(c);
                        }
                        Sym::Term(id)
                    }
                });
            }
            syms.push(Sym::End);
        }
        alts.push(starts);
    }
    Compiled {
        syms,
        alts,
        classes,
        names: rules.names,
        root,
        source,
    }
}

/// Rejects left recursion as llama.cpp does (`llama_grammar_detect_left_recursion`): a rule that
/// can reach itself through leftmost references (looking past rules that may be empty).
fn check_left_recursion(rules: &Rules) -> Result<(), SamplingError> {
    let n = rules.rules.len();
    let alts = |r: usize| rules.rules[r].as_deref().unwrap_or(&[]);
    // nullable rules, by fixpoint
    let mut nullable = vec![false; n];
    loop {
        let mut changed = false;
        for r in 0..n {
            if nullable[r] {
                continue;
            }
            let can = alts(r).iter().any(|alt| {
                alt.iter().all(|it| match it {
                    Item::Term(_) => false,
                    Item::Rule(x) => nullable[*x as usize],
                })
            });
            if can {
                nullable[r] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // leftmost-reference graph, then cycle detection with an explicit stack
    let left: Vec<Vec<u32>> = (0..n)
        .map(|r| {
            let mut out = Vec::new();
            for alt in alts(r) {
                for it in alt {
                    match it {
                        Item::Term(_) => break,
                        Item::Rule(x) => {
                            out.push(*x);
                            if !nullable[*x as usize] {
                                break;
                            }
                        }
                    }
                }
            }
            out
        })
        .collect();
    let mut color = vec![0u8; n]; // 0 new, 1 on stack, 2 done
    for start in 0..n {
        if color[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        color[start] = 1;
        while let Some(&mut (r, ref mut i)) = stack.last_mut() {
            if let Some(&next) = left[r].get(*i) {
                *i += 1;
                let next = next as usize;
                match color[next] {
                    0 => {
                        color[next] = 1;
                        stack.push((next, 0));
                    }
                    1 => {
                        return Err(SamplingError::InvalidGrammar(format!(
                            "left recursion through rule '{}' (llama.cpp rejects it too; rewrite it right-recursively)",
                            rules.names[next]
                        )))
                    }
                    _ => {}
                }
            } else {
                color[r] = 2;
                stack.pop();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_recursion_is_rejected() {
        for src in [
            "root ::= root \"a\" | \"b\"",
            "root ::= x\nx ::= y \"a\"\ny ::= \"\" | root",
            "root ::= e? root \"a\" | \"b\"\ne ::= \"e\"",
        ] {
            assert!(
                matches!(Grammar::from_gbnf(src), Err(SamplingError::InvalidGrammar(m)) if m.contains("left recursion")),
                "{src}"
            );
        }
        Grammar::from_gbnf("root ::= \"a\" root | \"b\"").unwrap();
    }

    #[test]
    fn missing_root() {
        assert!(matches!(
            Grammar::from_gbnf("start ::= \"a\""),
            Err(SamplingError::InvalidGrammar(_))
        ));
        Grammar::from_gbnf_with_root("start ::= \"a\"", "start").unwrap();
    }

    #[test]
    fn dump_shows_rewritten_rules() {
        let g = Grammar::from_gbnf("root ::= [a-c]+ \"\\n\" .").unwrap();
        let d = g.dump_rules();
        assert!(d.starts_with("root ::= [a-c] root_1 \"\\n\" .\n"), "{d}");
        assert!(d.contains("root_1 ::= [a-c] root_1 |\n"), "{d}");
    }
}
