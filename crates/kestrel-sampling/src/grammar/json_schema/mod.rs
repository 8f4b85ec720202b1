//! JSON Schema (a `serde_json::Value`) → GBNF, following llama.cpp's
//! `common/json-schema-to-grammar.cpp`: the same primitive rules, rule naming, whitespace
//! (`space ::= | " " | "\n"{1,2} [ \t]{0,20}`), property order (required first in order, then
//! optional ones in order), `additionalProperties` defaulting to false, integer ranges. Unlike
//! llama.cpp, every keyword that would constrain the value but is not translated is an error
//! naming the keyword and the JSON pointer, `\u` escapes exclude lone surrogates (so every
//! generated string is valid JSON), `number` bounds are honoured, and nesting is bounded.
//!
//! Here the converter's core (rules, primitives, one schema's visit); `keywords.rs` reads
//! keyword values and `$ref`s, `compound.rs` builds `allOf`, arrays and objects, `text.rs` the
//! GBNF pieces (literals, names, repetitions, integer ranges), `order.rs` property order.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use serde_json::{Map, Value};

use super::regex::pattern_to_gbnf;
use crate::error::SamplingError;

mod compound;
mod keywords;
mod order;
mod text;
use order::{key_orders, Ordered};
use text::*;

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
