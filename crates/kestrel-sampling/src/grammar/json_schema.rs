//! JSON Schema (a `serde_json::Value`) → GBNF, following llama.cpp's
//! `common/json-schema-to-grammar.cpp`: the same primitive rules, rule naming, whitespace
//! (`space ::= | " " | "\n"{1,2} [ \t]{0,20}`), property order (required first in order, then
//! optional ones in order), `additionalProperties` defaulting to false, integer ranges. Unlike
//! llama.cpp, every keyword that would constrain the value but is not translated is an error
//! naming the keyword and the JSON pointer, `\u` escapes exclude lone surrogates (so every
//! generated string is valid JSON), `number` bounds are honoured, and nesting is bounded.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use serde_json::{Map, Value};

use super::regex::pattern_to_gbnf;
use crate::error::SamplingError;

const MAX_DEPTH: usize = 64;

const SPACE_RULE: &str = r#"| " " | "\n"{1,2} [ \t]{0,20}"#;

/// (name, body, dependencies)
const PRIMITIVES: &[(&str, &str, &[&str])] = &[
    ("boolean", r#"("true" | "false") space"#, &[]),
    ("decimal-part", "[0-9]{1,16}", &[]),
    ("decimal-nz", "[0-9]{0,15} [1-9]", &[]),
    ("integral-part", "[0] | [1-9] [0-9]{0,15}", &[]),
    (
        "number",
        r#"("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space"#,
        &["integral-part", "decimal-part"],
    ),
    (
        "integer",
        r#"("-"? integral-part) space"#,
        &["integral-part"],
    ),
    (
        "value",
        "object | array | string | number | boolean | null",
        &["object", "array", "string", "number", "boolean", "null"],
    ),
    (
        "object",
        r#""{" space ( string ":" space value ("," space string ":" space value)* )? "}" space"#,
        &["string", "value"],
    ),
    (
        "array",
        r#""[" space ( value ("," space value)* )? "]" space"#,
        &["value"],
    ),
    (
        "uuid",
        r#""\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"" space"#,
        &[],
    ),
    (
        "char",
        r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))"#,
        &[],
    ),
    ("string", r#""\"" char* "\"" space"#, &["char"]),
    ("null", r#""null" space"#, &[]),
    (
        "date",
        r#"[12] [0-9]{3} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) )"#,
        &[],
    ),
    (
        "time",
        r#"([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )"#,
        &[],
    ),
    ("date-time", r#"date "T" time"#, &["date", "time"]),
    ("date-string", r#""\"" date "\"" space"#, &["date"]),
    ("time-string", r#""\"" time "\"" space"#, &["time"]),
    (
        "date-time-string",
        r#""\"" date-time "\"" space"#,
        &["date-time"],
    ),
    (
        "email-string",
        r#""\"" [a-zA-Z0-9_+-]{1,20} ("." [a-zA-Z0-9_+-]{1,20}){0,2} "@" dns-label ("." dns-label){0,3} "." [a-z]{2,6} "\"" space"#,
        &["dns-label"],
    ),
    (
        "ipv4-string",
        r#""\"" ipv4-octet "." ipv4-octet "." ipv4-octet "." ipv4-octet "\"" space"#,
        &["ipv4-octet"],
    ),
    (
        "ipv4-octet",
        r#"[0-9] | [1-9] [0-9] | "1" [0-9] [0-9] | "2" [0-4] [0-9] | "25" [0-5]"#,
        &[],
    ),
    (
        "uri-string",
        r#""\"" ("http" "s"? | "ftp") "://" dns-label ("." dns-label){0,4} ("/" [a-zA-Z0-9._~-]{0,30}){0,8} "\"" space"#,
        &["dns-label"],
    ),
    (
        "dns-label",
        "[a-zA-Z0-9] ([a-zA-Z0-9-]{0,20} [a-zA-Z0-9])?",
        &[],
    ),
];

/// Keywords that only annotate (ignored).
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "$schema",
    "$id",
    "$comment",
    "examples",
    "example",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$defs",
    "definitions",
    "contentMediaType",
    "contentEncoding",
];

/// Keywords the converter translates.
const HANDLED: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "format",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "uniqueItems",
];

fn unsupported(keyword: impl Into<String>, pointer: &str) -> SamplingError {
    SamplingError::UnsupportedSchema {
        keyword: keyword.into(),
        pointer: if pointer.is_empty() {
            "#".into()
        } else {
            format!("#{pointer}")
        },
    }
}

fn invalid(pointer: &str, message: impl Into<String>) -> SamplingError {
    SamplingError::InvalidSchema {
        pointer: if pointer.is_empty() {
            "#".into()
        } else {
            format!("#{pointer}")
        },
        message: message.into(),
    }
}

fn escape_pointer(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// A GBNF string literal for `s` (llama.cpp's `format_literal`).
fn format_literal(s: &str) -> String {
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

fn sanitize(name: &str) -> String {
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
fn build_repetition(item: &str, min: u64, max: Option<u64>, sep: &str) -> String {
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
fn build_min_max_int(
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
const MAX_BOUND: f64 = 9.0e15;

/// A JSON value that remembers object key order (serde_json's `Map` sorts keys unless the
/// `preserve_order` feature is on), used only to read property order from schema text.
enum Ordered {
    Obj(Vec<(String, Ordered)>),
    Arr(Vec<Ordered>),
    Leaf,
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Ordered, E> {
                Ok(Ordered::Leaf)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Ordered, E> {
                Ok(Ordered::Leaf)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Ordered, E> {
                Ok(Ordered::Leaf)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Ordered, E> {
                Ok(Ordered::Leaf)
            }
            fn visit_str<E>(self, _: &str) -> Result<Ordered, E> {
                Ok(Ordered::Leaf)
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Leaf)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Ordered, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element()? {
                    v.push(x);
                }
                Ok(Ordered::Arr(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Ordered, A::Error> {
                let mut v = Vec::new();
                while let Some((k, x)) = a.next_entry::<String, Ordered>()? {
                    v.push((k, x));
                }
                Ok(Ordered::Obj(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Key order of every object in the schema text, by JSON pointer.
fn key_orders(o: &Ordered, ptr: &mut String, out: &mut HashMap<String, Vec<String>>) {
    match o {
        Ordered::Obj(kv) => {
            out.insert(ptr.clone(), kv.iter().map(|(k, _)| k.clone()).collect());
            for (k, v) in kv {
                let len = ptr.len();
                ptr.push('/');
                ptr.push_str(&escape_pointer(k));
                key_orders(v, ptr, out);
                ptr.truncate(len);
            }
        }
        Ordered::Arr(items) => {
            for (i, v) in items.iter().enumerate() {
                let len = ptr.len();
                ptr.push_str(&format!("/{i}"));
                key_orders(v, ptr, out);
                ptr.truncate(len);
            }
        }
        Ordered::Leaf => {}
    }
}

/// Like [`to_gbnf`], from schema text: properties keep the order they are written in (as
/// llama.cpp does) whatever serde_json's key-ordering feature.
pub fn text_to_gbnf(text: &str) -> Result<String, SamplingError> {
    let bad = |e: serde_json::Error| invalid("", format!("not JSON: {e}"));
    let value: Value = serde_json::from_str(text).map_err(bad)?;
    let ordered: Ordered = serde_json::from_str(text).map_err(bad)?;
    let mut orders = HashMap::new();
    key_orders(&ordered, &mut String::new(), &mut orders);
    convert(&value, orders)
}

struct Converter<'a> {
    root: &'a Value,
    orders: HashMap<String, Vec<String>>,
    rules: BTreeMap<String, String>,
    resolving: HashSet<String>,
    depth: usize,
}

/// Compiles a JSON Schema to GBNF text whose `root` rule matches exactly the JSON texts the
/// converter can guarantee valid (see the crate README for what is supported).
///
/// ```
/// use serde_json::json;
/// let gbnf = kestrel_sampling::json_schema_to_gbnf(&json!({
///     "type": "object",
///     "properties": { "name": { "type": "string" }, "age": { "type": "integer", "minimum": 0 } },
///     "required": ["name"]
/// })).unwrap();
/// assert!(gbnf.contains("root ::="));
/// let err = kestrel_sampling::json_schema_to_gbnf(&json!({ "type": "array", "uniqueItems": true }));
/// assert!(err.is_err());
/// ```
pub fn to_gbnf(schema: &Value) -> Result<String, SamplingError> {
    convert(schema, HashMap::new())
}

fn convert(schema: &Value, orders: HashMap<String, Vec<String>>) -> Result<String, SamplingError> {
    let mut c = Converter {
        root: schema,
        orders,
        rules: BTreeMap::new(),
        resolving: HashSet::new(),
        depth: 0,
    };
    c.rules.insert("space".into(), SPACE_RULE.into());
    c.visit(schema, "", "")?;
    let mut out = String::new();
    for (name, body) in &c.rules {
        out.push_str(name);
        out.push_str(" ::= ");
        out.push_str(body);
        out.push('\n');
    }
    Ok(out)
}

impl Converter<'_> {
    fn add_rule(&mut self, name: &str, body: String) -> String {
        let esc = sanitize(name);
        let esc = if esc.is_empty() { "r".to_string() } else { esc };
        match self.rules.get(&esc) {
            None => {
                self.rules.insert(esc.clone(), body);
                esc
            }
            Some(b) if *b == body => esc,
            Some(_) => {
                let mut i = 0;
                loop {
                    let key = format!("{esc}{i}");
                    match self.rules.get(&key) {
                        None => {
                            self.rules.insert(key.clone(), body);
                            return key;
                        }
                        Some(b) if *b == body => return key,
                        Some(_) => i += 1,
                    }
                }
            }
        }
    }

    fn add_primitive(&mut self, name: &str, prim: &str) -> String {
        let Some(&(_, body, deps)) = PRIMITIVES.iter().find(|p| p.0 == prim) else {
            return name.to_string();
        };
        let n = self.add_rule(name, body.to_string());
        for dep in deps {
            if !self.rules.contains_key(*dep) {
                self.add_primitive(dep, dep);
            }
        }
        n
    }

    fn is_reserved(name: &str) -> bool {
        name == "root" || name == "space" || PRIMITIVES.iter().any(|p| p.0 == name)
    }

    fn visit(&mut self, schema: &Value, name: &str, ptr: &str) -> Result<String, SamplingError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(SamplingError::TooDeep {
                what: "JSON schema",
                limit: MAX_DEPTH,
            });
        }
        let r = self.visit_inner(schema, name, ptr);
        self.depth -= 1;
        r
    }

    fn visit_inner(
        &mut self,
        schema: &Value,
        name: &str,
        ptr: &str,
    ) -> Result<String, SamplingError> {
        let rule_name = if Self::is_reserved(name) {
            format!("{name}-")
        } else if name.is_empty() {
            "root".to_string()
        } else {
            name.to_string()
        };
        let obj = match schema {
            Value::Bool(true) => {
                let v = self.add_primitive("value", "value");
                return Ok(self.add_rule(&rule_name, v));
            }
            Value::Bool(false) => return Err(invalid(ptr, "the schema `false` matches nothing")),
            Value::Object(o) => o,
            _ => return Err(invalid(ptr, "a schema must be an object or a boolean")),
        };
        for k in obj.keys() {
            if !ANNOTATIONS.contains(&k.as_str()) && !HANDLED.contains(&k.as_str()) {
                return Err(unsupported(k.clone(), ptr));
            }
        }
        let constraint_keys = || {
            obj.keys()
                .filter(|k| !ANNOTATIONS.contains(&k.as_str()))
                .cloned()
                .collect::<Vec<_>>()
        };
        if let Some(u) = obj.get("uniqueItems") {
            if u != &Value::Bool(false) {
                return Err(unsupported("uniqueItems", ptr));
            }
        }

        if let Some(r) = obj.get("$ref") {
            if let Some(k) = constraint_keys().into_iter().find(|k| k != "$ref") {
                return Err(unsupported(format!("{k} beside $ref"), ptr));
            }
            let r = r
                .as_str()
                .ok_or_else(|| invalid(ptr, "$ref must be a string"))?;
            let target = self.resolve_ref(r, ptr)?;
            return Ok(self.add_rule(&rule_name, target));
        }

        let types: Option<Vec<&str>> = match obj.get("type") {
            None => None,
            Some(Value::String(t)) => Some(vec![t.as_str()]),
            Some(Value::Array(ts)) => Some(
                ts.iter()
                    .map(|t| {
                        t.as_str()
                            .ok_or_else(|| invalid(ptr, "`type` entries must be strings"))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Some(_) => return Err(invalid(ptr, "`type` must be a string or an array")),
        };

        for key in ["oneOf", "anyOf"] {
            if let Some(alts) = obj.get(key) {
                let alts = alts
                    .as_array()
                    .ok_or_else(|| invalid(ptr, format!("`{key}` must be an array")))?;
                if alts.is_empty() {
                    return Err(invalid(ptr, format!("`{key}` is empty")));
                }
                if let Some(k) = constraint_keys()
                    .into_iter()
                    .find(|k| k != key && k != "type")
                {
                    return Err(unsupported(format!("{k} beside {key}"), ptr));
                }
                let mut names = Vec::new();
                for (i, alt) in alts.iter().enumerate() {
                    let sub = format!(
                        "{name}{}{i}",
                        if name.is_empty() { "alternative-" } else { "-" }
                    );
                    names.push(self.visit(alt, &sub, &format!("{ptr}/{key}/{i}"))?);
                }
                return Ok(self.add_rule(&rule_name, names.join(" | ")));
            }
        }

        if let Some(ts) = &types {
            if ts.len() != 1 {
                if ts.is_empty() {
                    return Err(invalid(ptr, "`type` is an empty array"));
                }
                let mut names = Vec::new();
                for (i, t) in ts.iter().enumerate() {
                    let mut copy = obj.clone();
                    copy.insert("type".into(), Value::String((*t).to_string()));
                    let sub = format!(
                        "{name}{}{i}",
                        if name.is_empty() { "alternative-" } else { "-" }
                    );
                    names.push(self.visit(&Value::Object(copy), &sub, ptr)?);
                }
                return Ok(self.add_rule(&rule_name, names.join(" | ")));
            }
        }
        let ty: Option<&str> = types.as_ref().map(|t| t[0]);
        if let Some(t) = ty {
            if ![
                "string", "number", "integer", "boolean", "null", "object", "array",
            ]
            .contains(&t)
            {
                return Err(invalid(ptr, format!("unknown type `{t}`")));
            }
        }

        if let Some(c) = obj.get("const") {
            let lit = format_literal(&serde_json::to_string(c).unwrap_or_default());
            return Ok(self.add_rule(&rule_name, format!("{lit} space")));
        }
        if let Some(e) = obj.get("enum") {
            let e = e
                .as_array()
                .ok_or_else(|| invalid(ptr, "`enum` must be an array"))?;
            if e.is_empty() {
                return Err(invalid(ptr, "`enum` is empty"));
            }
            let alts: Vec<String> = e
                .iter()
                .map(|v| format_literal(&serde_json::to_string(v).unwrap_or_default()))
                .collect();
            return Ok(self.add_rule(&rule_name, format!("({}) space", alts.join(" | "))));
        }

        let is = |t: &str| ty.is_none() || ty == Some(t);

        if let Some(all) = obj.get("allOf") {
            if !is("object") {
                return Err(unsupported("allOf on a non-object type", ptr));
            }
            return self.visit_all_of(obj, all, name, &rule_name, ptr);
        }

        if is("object")
            && (obj.contains_key("properties")
                || obj
                    .get("additionalProperties")
                    .is_some_and(|a| a != &Value::Bool(true))
                || obj.contains_key("required"))
        {
            let mut props = self.properties_of(obj, ptr)?;
            if let Some(order) = self.orders.get(&format!("{ptr}/properties")) {
                props.sort_by_key(|(k, _)| order.iter().position(|o| o == k));
            }
            let required = Self::required_of(obj, ptr)?;
            let body = self.build_object(
                &props,
                &required,
                name,
                obj.get("additionalProperties"),
                ptr,
            )?;
            return Ok(self.add_rule(&rule_name, body));
        }

        if is("array") && (obj.contains_key("items") || obj.contains_key("prefixItems")) {
            return self.visit_array(obj, name, &rule_name, ptr);
        }

        if is("string") {
            if let Some(p) = obj.get("pattern") {
                let p = p
                    .as_str()
                    .ok_or_else(|| invalid(ptr, "`pattern` must be a string"))?;
                if obj.contains_key("minLength")
                    || obj.contains_key("maxLength")
                    || obj.contains_key("format")
                {
                    return Err(unsupported(
                        "pattern together with minLength/maxLength/format",
                        ptr,
                    ));
                }
                let ch = self.add_primitive("char", "char");
                let body = pattern_to_gbnf(p, &ch, &format!("{ptr}/pattern"))?;
                return Ok(self.add_rule(&rule_name, format!("\"\\\"\" ({body}) \"\\\"\" space")));
            }
            if let Some(f) = obj.get("format") {
                let f = f
                    .as_str()
                    .ok_or_else(|| invalid(ptr, "`format` must be a string"))?;
                if obj.contains_key("minLength") || obj.contains_key("maxLength") {
                    return Err(unsupported("format together with minLength/maxLength", ptr));
                }
                let is_uuid = f == "uuid"
                    || (f.len() == 5
                        && f.starts_with("uuid")
                        && (b'1'..=b'5').contains(&f.as_bytes()[4]));
                if is_uuid {
                    let n = self
                        .add_primitive(if rule_name == "root" { "root" } else { "uuid" }, "uuid");
                    return Ok(if n == rule_name {
                        n
                    } else {
                        self.add_rule(&rule_name, n)
                    });
                }
                let prim = format!("{f}-string");
                if PRIMITIVES.iter().any(|p| p.0 == prim) {
                    let n = self.add_primitive(&prim, &prim);
                    return Ok(self.add_rule(&rule_name, n));
                }
                if ty == Some("string") || ty.is_none() {
                    return Err(unsupported(format!("format: {f}"), ptr));
                }
            }
            if obj.contains_key("minLength") || obj.contains_key("maxLength") {
                let min = Self::uint(obj, "minLength", ptr)?.unwrap_or(0);
                let max = Self::uint(obj, "maxLength", ptr)?;
                if max.is_some_and(|m| m < min) {
                    return Err(invalid(ptr, "maxLength is below minLength"));
                }
                if min > 2000 || max.is_some_and(|m| m > 2000) {
                    return Err(unsupported("minLength/maxLength above 2000", ptr));
                }
                let ch = self.add_primitive("char", "char");
                let rep = build_repetition(&ch, min, max, "");
                return Ok(self.add_rule(&rule_name, format!("\"\\\"\" {rep} \"\\\"\" space")));
            }
        }

        let bounded = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]
            .iter()
            .any(|k| obj.contains_key(*k));
        if bounded {
            match ty {
                Some("integer") => {
                    let (lo, hi) = self.int_bounds(obj, ptr)?;
                    let mut out = String::from("(");
                    build_min_max_int(lo, hi, &mut out, 16, true);
                    out.push_str(") space");
                    return Ok(self.add_rule(&rule_name, out));
                }
                Some("number") => {
                    let body = self.number_range(obj, ptr)?;
                    return Ok(self.add_rule(&rule_name, body));
                }
                _ => {}
            }
        }

        if ty == Some("array") && (obj.contains_key("minItems") || obj.contains_key("maxItems")) {
            // arrays without `items`: any values
            let v = self.add_primitive("value", "value");
            return self.visit_array_items(obj, &v, &rule_name, ptr);
        }

        match ty {
            None => {
                // keywords left here constrain some type (numbers, arrays) without saying which
                // is generated; a free value could break them
                if let Some(k) = constraint_keys().into_iter().find(|k| k != "uniqueItems") {
                    return Err(unsupported(format!("{k} without `type`"), ptr));
                }
                let v = self.add_primitive("value", "value");
                Ok(self.add_rule(&rule_name, v))
            }
            Some("object") => {
                let n = self.add_primitive("object", "object");
                Ok(self.add_rule(&rule_name, n))
            }
            Some("array") => {
                let n = self.add_primitive("array", "array");
                Ok(self.add_rule(&rule_name, n))
            }
            Some(t) => {
                let n = self.add_primitive(t, t);
                Ok(self.add_rule(&rule_name, n))
            }
        }
    }

    fn uint(obj: &Map<String, Value>, key: &str, ptr: &str) -> Result<Option<u64>, SamplingError> {
        match obj.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                        .map(|f| f as u64)
                })
                .map(Some)
                .ok_or_else(|| invalid(ptr, format!("`{key}` must be a non-negative integer"))),
        }
    }

    fn num(obj: &Map<String, Value>, key: &str, ptr: &str) -> Result<Option<f64>, SamplingError> {
        match obj.get(key) {
            None => Ok(None),
            Some(v) => {
                let f = v
                    .as_f64()
                    .ok_or_else(|| invalid(ptr, format!("`{key}` must be a number")))?;
                if !f.is_finite() || f.abs() > MAX_BOUND {
                    return Err(unsupported(format!("{key} beyond ±9e15"), ptr));
                }
                Ok(Some(f))
            }
        }
    }

    /// Integer bounds: `[lo, hi]`, from inclusive and exclusive keywords (the tighter wins).
    fn int_bounds(
        &self,
        obj: &Map<String, Value>,
        ptr: &str,
    ) -> Result<(Option<i64>, Option<i64>), SamplingError> {
        let mut lo: Option<i64> = None;
        let mut hi: Option<i64> = None;
        if let Some(v) = Self::num(obj, "minimum", ptr)? {
            lo = Some(v.ceil() as i64);
        }
        if let Some(v) = Self::num(obj, "exclusiveMinimum", ptr)? {
            let b = v.floor() as i64 + 1;
            lo = Some(lo.map_or(b, |l| l.max(b)));
        }
        if let Some(v) = Self::num(obj, "maximum", ptr)? {
            hi = Some(v.floor() as i64);
        }
        if let Some(v) = Self::num(obj, "exclusiveMaximum", ptr)? {
            let b = v.ceil() as i64 - 1;
            hi = Some(hi.map_or(b, |h| h.min(b)));
        }
        if let (Some(l), Some(h)) = (lo, hi) {
            if l > h {
                return Err(invalid(ptr, "no integer lies between the bounds"));
            }
        }
        Ok((lo, hi))
    }

    /// Numbers within bounds: integers in range, and `k.ddd` where the whole interval
    /// `[k, k+1)` (or `(-(k+1), -k]`) lies inside the bounds.
    fn number_range(
        &mut self,
        obj: &Map<String, Value>,
        ptr: &str,
    ) -> Result<String, SamplingError> {
        let lo_incl = Self::num(obj, "minimum", ptr)?;
        let lo_excl = Self::num(obj, "exclusiveMinimum", ptr)?;
        let hi_incl = Self::num(obj, "maximum", ptr)?;
        let hi_excl = Self::num(obj, "exclusiveMaximum", ptr)?;
        let (int_lo, int_hi) = self.int_bounds(obj, ptr).unwrap_or((Some(1), Some(0)));
        let lo = match (lo_incl, lo_excl) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let hi = match (hi_incl, hi_excl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.add_primitive("decimal-nz", "decimal-nz");
        let mut alts = Vec::new();
        if !matches!((int_lo, int_hi), (Some(l), Some(h)) if l > h) {
            let mut out = String::new();
            build_min_max_int(int_lo, int_hi, &mut out, 16, true);
            alts.push(format!("({out})"));
        }
        // k.ddd (ddd not all zeros) lies in (k, k+1): fine when k >= lo and k + 1 <= hi
        let k_lo = lo.map_or(0, |l| l.ceil() as i64).max(0);
        let k_hi = hi.map(|h| h.floor() as i64 - 1);
        if k_hi.is_none_or(|h| h >= k_lo) {
            let mut out = String::new();
            build_min_max_int(Some(k_lo), k_hi, &mut out, 16, true);
            alts.push(format!("({out}) \".\" decimal-nz"));
        }
        // -m.ddd lies in (-(m+1), -m): fine when -(m+1) >= lo and -m <= hi
        let m_lo = hi.map_or(0, |h| (-h).ceil() as i64).max(0);
        let m_hi = lo.map(|l| (-l).floor() as i64 - 1);
        if m_hi.is_none_or(|h| h >= m_lo) {
            let mut out = String::new();
            build_min_max_int(Some(m_lo), m_hi, &mut out, 16, true);
            alts.push(format!("\"-\" ({out}) \".\" decimal-nz"));
        }
        if alts.is_empty() {
            return Err(invalid(
                ptr,
                "no number the grammar can write lies between the bounds",
            ));
        }
        Ok(format!("({}) space", alts.join(" | ")))
    }

    fn properties_of(
        &self,
        obj: &Map<String, Value>,
        ptr: &str,
    ) -> Result<Vec<(String, Value)>, SamplingError> {
        match obj.get("properties") {
            None => Ok(Vec::new()),
            Some(Value::Object(p)) => Ok(p.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
            Some(_) => Err(invalid(ptr, "`properties` must be an object")),
        }
    }

    fn required_of(obj: &Map<String, Value>, ptr: &str) -> Result<Vec<String>, SamplingError> {
        match obj.get("required") {
            None => Ok(Vec::new()),
            Some(Value::Array(r)) => r
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| invalid(ptr, "`required` entries must be strings"))
                })
                .collect(),
            Some(_) => Err(invalid(ptr, "`required` must be an array")),
        }
    }

    fn resolve_ref(&mut self, r: &str, ptr: &str) -> Result<String, SamplingError> {
        let Some(fragment) = r.strip_prefix('#') else {
            return Err(unsupported(
                format!("$ref {r} (only local #/... references)"),
                ptr,
            ));
        };
        let ref_name = format!("ref{}", sanitize(fragment));
        if self.rules.contains_key(&ref_name) || self.resolving.contains(r) {
            return Ok(ref_name);
        }
        let target = self
            .root
            .pointer(fragment)
            .ok_or_else(|| invalid(ptr, format!("$ref {r} does not resolve")))?;
        self.resolving.insert(r.to_string());
        let name = self.visit(target, &ref_name, fragment)?;
        self.resolving.remove(r);
        Ok(name)
    }

    fn visit_all_of(
        &mut self,
        obj: &Map<String, Value>,
        all: &Value,
        name: &str,
        rule_name: &str,
        ptr: &str,
    ) -> Result<String, SamplingError> {
        let all = all
            .as_array()
            .ok_or_else(|| invalid(ptr, "`allOf` must be an array"))?;
        if let Some(k) = obj
            .keys()
            .find(|k| !ANNOTATIONS.contains(&k.as_str()) && *k != "allOf" && *k != "type")
        {
            return Err(unsupported(format!("{k} beside allOf"), ptr));
        }
        let mut props: Vec<(String, Value)> = Vec::new();
        let mut required: Vec<String> = Vec::new();
        for (i, comp) in all.iter().enumerate() {
            let cptr = format!("{ptr}/allOf/{i}");
            let mut comp = comp;
            let mut seen = 0;
            while let Some(r) = comp.get("$ref").and_then(Value::as_str) {
                seen += 1;
                if seen > MAX_DEPTH {
                    return Err(SamplingError::TooDeep {
                        what: "JSON schema",
                        limit: MAX_DEPTH,
                    });
                }
                comp = r
                    .strip_prefix('#')
                    .and_then(|f| self.root.pointer(f))
                    .ok_or_else(|| invalid(&cptr, format!("$ref {r} does not resolve")))?;
            }
            let c = comp
                .as_object()
                .ok_or_else(|| invalid(&cptr, "allOf entries must be objects"))?;
            for k in c.keys() {
                if !ANNOTATIONS.contains(&k.as_str())
                    && !["type", "properties", "required", "additionalProperties"]
                        .contains(&k.as_str())
                {
                    return Err(unsupported(format!("{k} inside allOf"), &cptr));
                }
            }
            if c.get("type").is_some_and(|t| t != "object") {
                return Err(unsupported("allOf of non-object schemas", &cptr));
            }
            for (k, v) in self.properties_of(c, &cptr)? {
                if let Some(existing) = props.iter().find(|(n, _)| *n == k) {
                    if existing.1 != v {
                        return Err(unsupported(
                            format!("allOf with two different schemas for property `{k}`"),
                            &cptr,
                        ));
                    }
                } else {
                    props.push((k, v));
                }
            }
            required.extend(Self::required_of(c, &cptr)?);
        }
        let body = self.build_object(&props, &required, name, None, ptr)?;
        Ok(self.add_rule(rule_name, body))
    }

    fn visit_array(
        &mut self,
        obj: &Map<String, Value>,
        name: &str,
        rule_name: &str,
        ptr: &str,
    ) -> Result<String, SamplingError> {
        let sep = if name.is_empty() { "" } else { "-" };
        let tuple = match (obj.get("prefixItems"), obj.get("items")) {
            (Some(Value::Array(t)), _) => Some((t, "prefixItems")),
            (None, Some(Value::Array(t))) => Some((t, "items")),
            _ => None,
        };
        if let Some((items, key)) = tuple {
            if obj.contains_key("minItems") || obj.contains_key("maxItems") {
                return Err(unsupported("minItems/maxItems with tuple items", ptr));
            }
            let mut rule = String::from("\"[\" space ");
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    rule.push_str(" \",\" space ");
                }
                rule.push_str(&self.visit(
                    it,
                    &format!("{name}{sep}tuple-{i}"),
                    &format!("{ptr}/{key}/{i}"),
                )?);
            }
            rule.push_str(" \"]\" space");
            return Ok(self.add_rule(rule_name, rule));
        }
        let item_rule = match obj.get("items") {
            Some(items) => {
                self.visit(items, &format!("{name}{sep}item"), &format!("{ptr}/items"))?
            }
            None => self.add_primitive("value", "value"),
        };
        self.visit_array_items(obj, &item_rule, rule_name, ptr)
    }

    fn visit_array_items(
        &mut self,
        obj: &Map<String, Value>,
        item_rule: &str,
        rule_name: &str,
        ptr: &str,
    ) -> Result<String, SamplingError> {
        let min = Self::uint(obj, "minItems", ptr)?.unwrap_or(0);
        let max = Self::uint(obj, "maxItems", ptr)?;
        if max.is_some_and(|m| m < min) {
            return Err(invalid(ptr, "maxItems is below minItems"));
        }
        if min > 2000 || max.is_some_and(|m| m > 2000) {
            return Err(unsupported("minItems/maxItems above 2000", ptr));
        }
        let rep = build_repetition(item_rule, min, max, "\",\" space");
        Ok(self.add_rule(rule_name, format!("\"[\" space {rep} \"]\" space")))
    }

    /// llama.cpp's `_build_object_rule`: required properties in order, then each optional
    /// property may follow in order; additional properties (when allowed) after them.
    fn build_object(
        &mut self,
        props: &[(String, Value)],
        required: &[String],
        name: &str,
        additional: Option<&Value>,
        ptr: &str,
    ) -> Result<String, SamplingError> {
        let sep = if name.is_empty() { "" } else { "-" };
        let mut props: Vec<(String, Value)> = props.to_vec();
        // required names without a property schema: any value
        for r in required {
            if !props.iter().any(|(n, _)| n == r) {
                props.push((r.clone(), Value::Bool(true)));
            }
        }
        let mut kv: BTreeMap<String, String> = BTreeMap::new();
        let mut req = Vec::new();
        let mut opt = Vec::new();
        for (pname, pschema) in &props {
            let sub = format!("{name}{sep}{pname}");
            let prule = self.visit(
                pschema,
                &sub,
                &format!("{ptr}/properties/{}", escape_pointer(pname)),
            )?;
            let key_lit = format_literal(&serde_json::to_string(pname).unwrap_or_default());
            let kv_rule = self.add_rule(
                &format!("{sub}-kv"),
                format!("{key_lit} space \":\" space {prule}"),
            );
            kv.insert(pname.clone(), kv_rule);
            if required.contains(pname) {
                req.push(pname.clone());
            } else {
                opt.push(pname.clone());
            }
        }
        let allow_extra = match additional {
            Some(Value::Bool(true)) => Some(None),
            Some(s @ Value::Object(_)) => Some(Some(s)),
            Some(Value::Bool(false)) | None => None,
            Some(_) => {
                return Err(invalid(
                    ptr,
                    "`additionalProperties` must be a boolean or a schema",
                ))
            }
        };
        if let Some(extra) = allow_extra {
            let sub = format!("{name}{sep}additional");
            let value_rule = match extra {
                Some(s) => self.visit(
                    s,
                    &format!("{sub}-value"),
                    &format!("{ptr}/additionalProperties"),
                )?,
                None => self.add_primitive("value", "value"),
            };
            let key_rule = if props.is_empty() {
                self.add_primitive("string", "string")
            } else {
                let names: Vec<String> = props.iter().map(|(n, _)| n.clone()).collect();
                let body = self.not_strings(&names);
                self.add_rule(&format!("{sub}-k"), body)
            };
            let kv_rule = self.add_rule(
                &format!("{sub}-kv"),
                format!("{key_rule} \":\" space {value_rule}"),
            );
            kv.insert("*".into(), kv_rule);
            opt.push("*".into());
        }
        let mut rule = String::from("\"{\" space ");
        for (i, r) in req.iter().enumerate() {
            if i > 0 {
                rule.push_str(" \",\" space ");
            }
            rule.push_str(&kv[r]);
        }
        if !opt.is_empty() {
            rule.push_str(" (");
            if !req.is_empty() {
                rule.push_str(" \",\" space ( ");
            }
            for i in 0..opt.len() {
                if i > 0 {
                    rule.push_str(" | ");
                }
                rule.push_str(&self.recursive_refs(&opt[i..], false, name, &kv));
            }
            if !req.is_empty() {
                rule.push_str(" )");
            }
            rule.push_str(" )?");
        }
        rule.push_str(" \"}\" space");
        Ok(rule)
    }

    fn recursive_refs(
        &mut self,
        ks: &[String],
        first_optional: bool,
        name: &str,
        kv: &BTreeMap<String, String>,
    ) -> String {
        let Some(k) = ks.first() else {
            return String::new();
        };
        let kv_rule = &kv[k];
        let comma = format!("( \",\" space {kv_rule} )");
        let mut res = if first_optional {
            format!("{comma}{}", if k == "*" { "*" } else { "?" })
        } else if k == "*" {
            format!("{kv_rule} {comma}*")
        } else {
            kv_rule.clone()
        };
        if ks.len() > 1 {
            let body = self.recursive_refs(&ks[1..], true, name, kv);
            let sep = if name.is_empty() { "" } else { "-" };
            let r = self.add_rule(&format!("{name}{sep}{k}-rest"), body);
            res.push(' ');
            res.push_str(&r);
        }
        res
    }

    /// llama.cpp's `_not_strings`: a JSON string that is none of `strings` (keys of additional
    /// properties must differ from the declared ones).
    fn not_strings(&mut self, strings: &[String]) -> String {
        #[derive(Default)]
        struct Node {
            children: BTreeMap<char, Node>,
            end: bool,
        }
        let mut trie = Node::default();
        for s in strings {
            let mut n = &mut trie;
            for c in s.chars() {
                n = n.children.entry(c).or_default();
            }
            n.end = true;
        }
        let ch = self.add_primitive("char", "char");
        fn class_char(c: char) -> String {
            super::class::escape_char(c as u32, false)
        }
        fn visit(n: &Node, ch: &str, out: &mut String) {
            let mut rejects = String::new();
            let mut first = true;
            for (c, child) in &n.children {
                rejects.push_str(&class_char(*c));
                if !first {
                    out.push_str(" | ");
                }
                first = false;
                out.push('[');
                out.push_str(&class_char(*c));
                out.push(']');
                if !child.children.is_empty() {
                    out.push_str(" (");
                    visit(child, ch, out);
                    out.push(')');
                } else if child.end {
                    out.push_str(&format!(" {ch}+"));
                }
            }
            if !n.children.is_empty() {
                if !first {
                    out.push_str(" | ");
                }
                out.push_str(&format!("[^\"\\\\{rejects}] {ch}*"));
            }
        }
        let mut out = String::from("[\"] ( ");
        visit(&trie, &ch, &mut out);
        out.push_str(" )");
        if !trie.end {
            out.push('?');
        }
        out.push_str(" [\"] space");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Grammar, GrammarMatcher};
    use serde_json::json;

    fn accepts(schema: &Value, text: &str) -> bool {
        let g = Grammar::from_json_schema(schema)
            .unwrap_or_else(|e| panic!("{e}\n{}", to_gbnf(schema).unwrap_or_default()));
        let mut m = GrammarMatcher::new(&g);
        m.accept_str(text).is_ok() && m.is_complete()
    }

    #[test]
    fn objects_required_and_optional() {
        let s = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}}, "required": ["a"]});
        for ok in [
            r#"{"a": 1}"#,
            r#"{"a": 1, "b": "x"}"#,
            r#"{"a": -3, "c": true}"#,
            r#"{"a": 0, "b": "", "c": false}"#,
        ] {
            assert!(accepts(&s, ok), "{ok}");
        }
        for bad in [
            r#"{}"#,
            r#"{"b": "x"}"#,
            r#"{"a": 1, "d": 2}"#,
            r#"{"a": 01}"#,
            r#"{"a": 1, "c": true, "b": "x"}"#,
        ] {
            assert!(!accepts(&s, bad), "{bad}");
        }
    }

    #[test]
    fn integer_ranges() {
        for (lo, hi) in [
            (Some(0), Some(150)),
            (Some(-20), Some(7)),
            (Some(5), None),
            (None, Some(-3)),
            (Some(-7), None),
            (None, Some(42)),
            (Some(100), Some(1000)),
        ] {
            let mut s = json!({"type": "integer"});
            if let Some(l) = lo {
                s["minimum"] = json!(l);
            }
            if let Some(h) = hi {
                s["maximum"] = json!(h);
            }
            for v in -1200i64..=1200 {
                let want = lo.is_none_or(|l| v >= l) && hi.is_none_or(|h| v <= h);
                assert_eq!(accepts(&s, &v.to_string()), want, "{v} in {lo:?}..{hi:?}");
            }
        }
        let s = json!({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10});
        assert!(accepts(&s, "1") && accepts(&s, "9") && !accepts(&s, "0") && !accepts(&s, "10"));
    }

    #[test]
    fn number_ranges() {
        let s = json!({"type": "number", "minimum": -1.5, "maximum": 2.5});
        for ok in ["-1", "0", "2", "0.75", "1.999", "-0.5"] {
            assert!(accepts(&s, ok), "{ok}");
        }
        for bad in ["3", "-2", "2.6", "-1.75"] {
            assert!(!accepts(&s, bad), "{bad}");
        }
        let s = json!({"type": "number", "exclusiveMinimum": 0});
        assert!(
            accepts(&s, "0.5")
                && accepts(&s, "12")
                && !accepts(&s, "0")
                && !accepts(&s, "-0.5")
                && !accepts(&s, "0.0")
        );
        let s = json!({"type": "number", "exclusiveMaximum": -2});
        assert!(
            accepts(&s, "-3") && accepts(&s, "-2.5") && !accepts(&s, "-2") && !accepts(&s, "-1.5")
        );
    }

    #[test]
    fn arrays_enums_consts_unions_refs_formats() {
        let s = json!({"type": "array", "items": {"enum": ["a", 1, null]}, "minItems": 1, "maxItems": 3});
        assert!(
            accepts(&s, r#"["a", 1]"#)
                && !accepts(&s, "[]")
                && !accepts(&s, r#"["a","a","a","a"]"#)
                && !accepts(&s, r#"["b"]"#)
        );
        let s = json!({"anyOf": [{"type": "string", "format": "date"}, {"const": {"x": 1}}]});
        assert!(
            accepts(&s, r#""2024-02-28""#)
                && accepts(&s, r#"{"x":1}"#)
                && !accepts(&s, r#""2024-13-01""#)
                && !accepts(&s, r#""2023-02-30""#)
                && !accepts(&s, r#""2023-04-31""#)
        );
        let s = json!({"$defs": {"p": {"type": "object", "properties": {"next": {"$ref": "#/$defs/p"}}}}, "$ref": "#/$defs/p"});
        assert!(accepts(&s, r#"{"next": {"next": {}}}"#));
        let s = json!({"type": "string", "format": "uuid"});
        assert!(accepts(&s, r#""123e4567-e89b-12d3-a456-426614174000""#));
        let s = json!({"type": "string", "minLength": 2, "maxLength": 3});
        assert!(
            accepts(&s, r#""ab""#)
                && accepts(&s, r#""\n\"x""#)
                && !accepts(&s, r#""a""#)
                && !accepts(&s, r#""abcd""#)
        );
        let s = json!({"type": "object", "additionalProperties": {"type": "integer"}});
        assert!(accepts(&s, r#"{"x": 1, "y": 2}"#) && !accepts(&s, r#"{"x": "1"}"#));
        let s = json!({"type": "object", "properties": {"k": {"type": "null"}}, "additionalProperties": true});
        assert!(accepts(&s, r#"{"k": null, "z": [1]}"#) && !accepts(&s, r#"{"k": null, "k": 1}"#));
    }

    #[test]
    fn lone_surrogate_escapes_are_not_generated() {
        let s = json!({"type": "string"});
        assert!(accepts(&s, r#""\u00e9""#));
        assert!(!accepts(&s, r#""\ud800""#));
    }

    #[test]
    fn unsupported_keywords_name_keyword_and_pointer() {
        let cases = [
            (
                json!({"type": "array", "uniqueItems": true}),
                "uniqueItems",
                "#",
            ),
            (
                json!({"type": "object", "properties": {"a/b": {"not": {}}}}),
                "not",
                "#/properties/a~1b",
            ),
            (
                json!({"properties": {"x": {"type": "string", "format": "ipv6"}}}),
                "format: ipv6",
                "#/properties/x",
            ),
            (
                json!({"type": "object", "patternProperties": {}}),
                "patternProperties",
                "#",
            ),
            (
                json!({"type": "number", "multipleOf": 2}),
                "multipleOf",
                "#",
            ),
            (json!({"if": {}, "then": {}}), "if", "#"),
            (
                json!({"$ref": "https://example.com/s.json"}),
                "$ref https://example.com/s.json (only local #/... references)",
                "#",
            ),
        ];
        for (schema, kw, ptr) in cases {
            match to_gbnf(&schema) {
                Err(SamplingError::UnsupportedSchema { keyword, pointer }) => {
                    assert_eq!((keyword.as_str(), pointer.as_str()), (kw, ptr));
                }
                other => panic!("{schema}: {other:?}"),
            }
        }
    }

    #[test]
    fn deep_nesting_errors_instead_of_overflowing() {
        let mut s = json!({"type": "string"});
        for _ in 0..10_000 {
            let mut m = Map::new();
            m.insert("type".into(), json!("array"));
            m.insert("items".into(), s);
            s = Value::Object(m);
        }
        assert!(matches!(to_gbnf(&s), Err(SamplingError::TooDeep { .. })));
        drop_deep(s);
    }

    /// serde_json drops deep values recursively; unwind it iteratively.
    fn drop_deep(mut v: Value) {
        while let Some(inner) = v.get_mut("items").map(Value::take) {
            v = inner;
        }
    }
}
