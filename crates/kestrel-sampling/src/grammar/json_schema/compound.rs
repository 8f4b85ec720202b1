//! Compound schemas: `allOf`, arrays (`items`, `prefixItems`, counts), objects (properties,
//! `required`, `additionalProperties`), recursive references, strings other than a set.

use super::*;

impl Converter<'_> {
    pub(super) fn visit_all_of(
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

    pub(super) fn visit_array(
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

    pub(super) fn visit_array_items(
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
    pub(super) fn build_object(
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

    pub(super) fn recursive_refs(
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
    pub(super) fn not_strings(&mut self, strings: &[String]) -> String {
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
            crate::grammar::class::escape_char(c as u32, false)
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
