//! Tool calling: validate `tools` and `tool_choice`, tell the model about the tools (through
//! the chat template's `tools` global when the template uses one, else in a system message
//! asking for `<tool_call>{"name": .., "arguments": {..}}</tool_call>`, the Hermes/Qwen
//! convention), force a call with a grammar when `tool_choice` requires one, and parse calls
//! out of the model's text (`<tool_call>` blocks, a bare `{"name", "arguments"}` object as
//! Llama 3 writes it, or Mistral's `[TOOL_CALLS][..]`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use kestrel::{ChatMessage, Grammar};
use serde_json::{json, Map, Value as Json};

use crate::error::ApiError;

/// Most tools per request.
pub const MAX_TOOLS: usize = 128;

/// How a request uses its tools.
#[derive(Debug)]
pub struct Tools {
    /// The `tools` list as sent (validated).
    pub list: Json,
    /// Tool names.
    pub names: Vec<String>,
    /// A grammar forcing a call (`tool_choice` `required` or a named function).
    pub grammar: Option<Grammar>,
}

/// A parsed tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as a JSON string (OpenAI's `arguments`).
    pub arguments: String,
}

impl ToolCall {
    /// OpenAI's shape, with a fresh id.
    pub fn to_json(&self, index: usize) -> Json {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = format!(
            "call_{:08x}{:04x}",
            crate::api::unix_nanos() as u32,
            NEXT.fetch_add(1, Relaxed) & 0xffff
        );
        json!({
            "index": index,
            "id": id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }
}

/// Validate `tools` and `tool_choice`; `None` when the request uses no tools.
pub fn parse(tools: &Option<Json>, choice: &Option<Json>) -> Result<Option<Tools>, ApiError> {
    let list = match tools {
        None | Some(Json::Null) => return Ok(None),
        Some(Json::Array(a)) if a.is_empty() => return Ok(None),
        Some(Json::Array(a)) => a,
        Some(v) => {
            return Err(ApiError::invalid(
                "tools",
                format!("tools must be a list, got {v}"),
            ))
        }
    };
    if list.len() > MAX_TOOLS {
        return Err(ApiError::invalid(
            "tools",
            format!("at most {MAX_TOOLS} tools"),
        ));
    }
    let mut names = Vec::with_capacity(list.len());
    let mut schemas = Vec::with_capacity(list.len());
    for t in list {
        let f = t
            .get("function")
            .filter(|_| t.get("type").and_then(Json::as_str).unwrap_or("function") == "function")
            .ok_or_else(|| {
                ApiError::invalid(
                    "tools",
                    "each tool must be {\"type\": \"function\", \"function\": {...}}",
                )
            })?;
        let name = f
            .get("name")
            .and_then(Json::as_str)
            .filter(|n| {
                !n.is_empty()
                    && n.len() <= 64
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            })
            .ok_or_else(|| {
                ApiError::invalid(
                    "tools",
                    "a tool's function.name must be 1 to 64 of a-z, A-Z, 0-9, _ and -",
                )
            })?;
        let params = match f.get("parameters") {
            None | Some(Json::Null) => json!({"type": "object"}),
            Some(p @ Json::Object(_)) => p.clone(),
            Some(_) => {
                return Err(ApiError::invalid(
                    "tools",
                    format!("tool {name}: parameters must be a JSON Schema object"),
                ))
            }
        };
        names.push(name.to_string());
        schemas.push(json!({
            "type": "object",
            "properties": {"name": {"const": name}, "arguments": params},
            "required": ["name", "arguments"],
        }));
    }
    let forced = match choice {
        None | Some(Json::Null) => None,
        Some(Json::String(s)) => match s.as_str() {
            "none" => return Ok(None),
            "auto" => None,
            "required" => Some(json!({"anyOf": schemas})),
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!(
                        "tool_choice must be none, auto, required or a function, got {other:?}"
                    ),
                ))
            }
        },
        Some(v @ Json::Object(_)) => {
            let name = v
                .pointer("/function/name")
                .and_then(Json::as_str)
                .ok_or_else(|| ApiError::invalid("tool_choice", "tool_choice must name {\"type\": \"function\", \"function\": {\"name\": ...}}"))?;
            let i = names.iter().position(|n| n == name).ok_or_else(|| {
                ApiError::invalid(
                    "tool_choice",
                    format!("tool_choice names {name:?}, which is not in tools"),
                )
            })?;
            Some(schemas[i].clone())
        }
        Some(v) => {
            return Err(ApiError::invalid(
                "tool_choice",
                format!("bad tool_choice {v}"),
            ))
        }
    };
    let grammar = match forced {
        Some(schema) => Some(Grammar::from_json_schema(&schema).map_err(|e| {
            ApiError::invalid(
                "tools",
                format!("a tool's parameters are not a usable JSON Schema: {e}"),
            )
        })?),
        None => None,
    };
    Ok(Some(Tools {
        list: Json::Array(list.clone()),
        names,
        grammar,
    }))
}

/// Make the conversation one the template can render: for a template without tool support,
/// describe the tools in the system message, write earlier calls as `<tool_call>` text and
/// tool results as user turns; for one with it, parse earlier calls' `arguments` strings into
/// objects (templates print them with `tojson`).
pub fn prepare_messages(messages: &mut Vec<ChatMessage>, tools: Option<&Tools>, native: bool) {
    for m in messages.iter_mut() {
        if let Some(Json::Array(calls)) = m.extra.get_mut("tool_calls") {
            for c in calls.iter_mut() {
                if let Some(f) = c.get_mut("function") {
                    if let Some(Json::String(a)) = f.get("arguments") {
                        if let Ok(obj) = serde_json::from_str::<Json>(a) {
                            f["arguments"] = obj;
                        }
                    }
                }
            }
        }
    }
    if native {
        return;
    }
    for m in messages.iter_mut() {
        if m.role == "assistant" {
            if let Some(Json::Array(calls)) = m.extra.remove("tool_calls") {
                let mut text = m.text();
                for c in calls {
                    let f = c.get("function").cloned().unwrap_or(Json::Null);
                    let call = json!({"name": f.get("name"), "arguments": f.get("arguments")});
                    text.push_str(&format!("<tool_call>\n{call}\n</tool_call>"));
                }
                m.content = Json::String(text);
            }
        } else if m.role == "tool" {
            m.role = "user".into();
            m.content = Json::String(format!("<tool_response>\n{}\n</tool_response>", m.text()));
            m.extra.remove("tool_call_id");
        }
    }
    if let Some(t) = tools {
        let text = format!(
            "You can call these tools (JSON Schema of each function):\n{}\n\nTo call a tool, answer with only:\n<tool_call>\n{{\"name\": <function name>, \"arguments\": <arguments object>}}\n</tool_call>",
            t.list
        );
        match messages.first_mut() {
            Some(m) if m.role == "system" => {
                let old = m.text();
                m.content = Json::String(format!("{old}\n\n{text}"));
            }
            _ => messages.insert(0, ChatMessage::new("system", text)),
        }
    }
}

/// Calls in the model's text, and the text before them; `None` when there are none.
pub fn parse_calls(text: &str, names: &[String]) -> Option<(Option<String>, Vec<ToolCall>)> {
    let call_of = |v: &Json| -> Option<ToolCall> {
        let name = v.get("name")?.as_str()?;
        if !names.iter().any(|n| n == name) {
            return None;
        }
        let args = v
            .get("arguments")
            .or_else(|| v.get("parameters"))
            .cloned()
            .unwrap_or(Json::Object(Map::new()));
        let arguments = match args {
            Json::String(s) => s,
            other => other.to_string(),
        };
        Some(ToolCall {
            name: name.to_string(),
            arguments,
        })
    };
    let before = |i: usize| Some(text[..i].trim().to_string()).filter(|s| !s.is_empty());
    if let Some(start) = text.find("<tool_call>") {
        let mut calls = Vec::new();
        let mut rest = &text[start..];
        while let Some(s) = rest.find("<tool_call>") {
            let body = &rest[s + "<tool_call>".len()..];
            let (inner, next) = match body.find("</tool_call>") {
                Some(e) => (&body[..e], &body[e + "</tool_call>".len()..]),
                None => (body, ""),
            };
            let v: Json = serde_json::from_str(inner.trim()).ok()?;
            calls.push(call_of(&v)?);
            rest = next;
        }
        return Some((before(start), calls));
    }
    let t = text.trim();
    if let Some(list) = t.strip_prefix("[TOOL_CALLS]") {
        let v: Json = serde_json::from_str(list.trim()).ok()?;
        let calls = v
            .as_array()?
            .iter()
            .map(call_of)
            .collect::<Option<Vec<_>>>()?;
        return (!calls.is_empty()).then_some((None, calls));
    }
    if t.starts_with('{') {
        let v: Json = serde_json::from_str(t).ok()?;
        return Some((None, vec![call_of(&v)?]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Json {
        json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
    }

    #[test]
    fn parses_the_three_conventions() {
        let names = vec!["get_weather".to_string()];
        let (pre, calls) = parse_calls(
            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
            &names,
        )
        .unwrap();
        assert_eq!(pre.as_deref(), Some("Let me check."));
        assert_eq!(calls[0].arguments, r#"{"city":"Paris"}"#);
        let (_, calls) = parse_calls(
            r#"{"name": "get_weather", "parameters": {"city": "Oslo"}}"#,
            &names,
        )
        .unwrap();
        assert_eq!(calls[0].arguments, r#"{"city":"Oslo"}"#);
        let (_, calls) = parse_calls(
            r#"[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome"}}]"#,
            &names,
        )
        .unwrap();
        assert_eq!(calls[0].name, "get_weather");
        assert!(parse_calls("It is sunny.", &names).is_none());
        assert!(parse_calls(r#"{"name": "rm_rf", "arguments": {}}"#, &names).is_none());
    }

    #[test]
    fn validates_and_forces() {
        let t = parse(&Some(weather()), &Some(json!("required")))
            .unwrap()
            .unwrap();
        assert!(t.grammar.is_some());
        let t = parse(&Some(weather()), &Some(json!("auto")))
            .unwrap()
            .unwrap();
        assert!(t.grammar.is_none());
        assert!(parse(&Some(weather()), &Some(json!("none")))
            .unwrap()
            .is_none());
        let e = parse(
            &Some(weather()),
            &Some(json!({"type": "function", "function": {"name": "nope"}})),
        )
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
        assert!(parse(
            &Some(json!([{"type": "function", "function": {"name": "bad name!"}}])),
            &None
        )
        .is_err());
    }

    #[test]
    fn rewrites_history_for_plain_templates() {
        let t = parse(&Some(weather()), &None).unwrap().unwrap();
        let mut msgs: Vec<ChatMessage> = serde_json::from_value(json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"}
        ]))
        .unwrap();
        prepare_messages(&mut msgs, Some(&t), false);
        assert_eq!(msgs[0].role, "system");
        assert!(msgs[0].text().contains("get_weather"));
        assert!(msgs[2].text().contains("<tool_call>") && msgs[2].text().contains("Paris"));
        assert_eq!(msgs[3].role, "user");
        assert!(msgs[3].text().contains("18C, sunny"));
    }
}
