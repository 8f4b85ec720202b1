//! Chat templates: the file's Jinja template (`tokenizer.chat_template`, or a named alternate
//! `tokenizer.chat_template.<name>`) rendered with minijinja the way Hugging Face renders it
//! (`trim_blocks`, `lstrip_blocks`, `raise_exception`, `strftime_now`, Python string methods),
//! or a built-in template (chatml, llama2, llama3, gemma, mistral, phi3) written after
//! llama.cpp's `llm_chat_apply_template`.

use std::time::{SystemTime, UNIX_EPOCH};

use kestrel_gguf::Metadata;
use minijinja::{Environment, ErrorKind, Value};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

use crate::error::TemplateError;
use crate::tokenizer::Tokenizer;

/// The built-in templates, by name.
pub const BUILTIN_TEMPLATES: &[&str] = &[
    "chatml",
    "llama2",
    "llama3",
    "gemma",
    "mistral",
    "mistral-v1",
    "mistral-v3",
    "phi3",
];

/// One chat message. `content` is a string, `null`, or a list of `{"type":"text","text":..}`
/// parts; other fields (`tool_calls`, `name`, `tool_call_id`, ...) pass through to templates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The content.
    #[serde(default)]
    pub content: Json,
    /// Any other fields.
    #[serde(flatten)]
    pub extra: Map<String, Json>,
}

impl ChatMessage {
    /// A message with string content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: Json::String(content.into()),
            extra: Map::new(),
        }
    }

    /// The content as text (text parts joined; `null` is empty).
    pub fn text(&self) -> String {
        match &self.content {
            Json::String(s) => s.clone(),
            Json::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Json::as_str))
                .collect::<Vec<_>>()
                .join(""),
            Json::Null => String::new(),
            other => other.to_string(),
        }
    }
}

#[derive(Clone, Debug)]
enum Kind {
    Jinja(String),
    Builtin(&'static str),
}

/// A chat template ready to render.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    name: String,
    kind: Kind,
    bos: String,
    eos: String,
}

/// Options of one rendering.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RenderOptions {
    /// End with the assistant's turn header, so the model answers.
    pub add_generation_prompt: bool,
    /// Tool definitions (the `tools` global), if any.
    pub tools: Option<Json>,
    /// Extra globals (for example `enable_thinking`).
    pub extra: Map<String, Json>,
}

impl RenderOptions {
    /// Set `add_generation_prompt`.
    pub fn add_generation_prompt(mut self, yes: bool) -> Self {
        self.add_generation_prompt = yes;
        self
    }
    /// Set the tools.
    pub fn tools(mut self, tools: Option<Json>) -> Self {
        self.tools = tools;
        self
    }
}

fn trim_c(s: &str) -> &str {
    s.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r'))
}

fn canonical_builtin(name: &str) -> Option<&'static str> {
    Some(match name {
        "chatml" => "chatml",
        "llama2" => "llama2",
        "llama3" => "llama3",
        "gemma" => "gemma",
        "mistral" | "mistral-v7" => "mistral",
        "mistral-v1" => "mistral-v1",
        "mistral-v3" => "mistral-v3",
        "phi3" => "phi3",
        _ => return None,
    })
}

impl ChatTemplate {
    /// A built-in template by name (see [`BUILTIN_TEMPLATES`]).
    pub fn builtin(name: &str) -> Result<ChatTemplate, TemplateError> {
        let b = canonical_builtin(name).ok_or_else(|| TemplateError::NotFound(name.into()))?;
        Ok(ChatTemplate {
            name: b.to_string(),
            kind: Kind::Builtin(b),
            bos: String::new(),
            eos: String::new(),
        })
    }

    /// A Jinja template from source. `bos`/`eos` are the texts of the `bos_token`/`eos_token`
    /// globals. The source is compiled now, so syntax errors surface here.
    pub fn jinja(
        name: impl Into<String>,
        source: impl Into<String>,
        bos: impl Into<String>,
        eos: impl Into<String>,
    ) -> Result<ChatTemplate, TemplateError> {
        let t = ChatTemplate {
            name: name.into(),
            kind: Kind::Jinja(source.into()),
            bos: bos.into(),
            eos: eos.into(),
        };
        let mut env = environment();
        if let Kind::Jinja(src) = &t.kind {
            env.add_template_owned(t.name.clone(), src.clone())
                .map_err(|e| syntax(&t.name, &e))?;
        }
        Ok(t)
    }

    /// The template for a model: `name` selects `tokenizer.chat_template.<name>` or a built-in;
    /// without a name, the file's `tokenizer.chat_template`, else a built-in guessed from the
    /// architecture and vocabulary.
    pub fn from_metadata(
        md: &Metadata<'_>,
        tokenizer: &Tokenizer,
        name: Option<&str>,
    ) -> Result<ChatTemplate, TemplateError> {
        let text = |id: Option<u32>| {
            id.and_then(|i| tokenizer.token_text(i).ok())
                .map(|t| String::from_utf8_lossy(t).into_owned())
                .unwrap_or_default()
        };
        let st = tokenizer.special_tokens();
        let (bos, eos) = (text(st.bos), text(st.eos));
        let get = |key: &str| md.get(key).and_then(|v| v.as_str().map(str::to_string));
        let t = match name {
            Some(n) => match get(&format!("tokenizer.chat_template.{n}")) {
                Some(src) => Self::jinja(n, src, bos, eos)?,
                None => Self::builtin(n)?,
            },
            None => match get("tokenizer.chat_template") {
                Some(src) => Self::jinja("tokenizer.chat_template", src, bos, eos)?,
                None => {
                    let arch = md
                        .get("general.architecture")
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    Self::builtin(guess_builtin(&arch, tokenizer))?
                }
            },
        };
        Ok(t)
    }

    /// The template's name (`tokenizer.chat_template`, a named alternate, or a built-in).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Jinja source (`None` for a built-in).
    pub fn source(&self) -> Option<&str> {
        match &self.kind {
            Kind::Jinja(src) => Some(src),
            Kind::Builtin(_) => None,
        }
    }

    /// True for a built-in template.
    pub fn is_builtin(&self) -> bool {
        matches!(self.kind, Kind::Builtin(_))
    }

    /// Render a conversation.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        opts: &RenderOptions,
    ) -> Result<String, TemplateError> {
        for m in messages {
            if m.role.is_empty() {
                return Err(TemplateError::BadMessages(
                    "a message has an empty role".into(),
                ));
            }
        }
        match &self.kind {
            Kind::Builtin(b) => Ok(render_builtin(b, messages, opts.add_generation_prompt)),
            Kind::Jinja(src) => {
                let mut env = environment();
                env.add_template_owned(self.name.clone(), src.clone())
                    .map_err(|e| syntax(&self.name, &e))?;
                let tmpl = env
                    .get_template(&self.name)
                    .map_err(|e| syntax(&self.name, &e))?;
                let mut ctx = opts.extra.clone();
                ctx.insert(
                    "messages".into(),
                    serde_json::to_value(messages)
                        .map_err(|e| TemplateError::BadMessages(e.to_string()))?,
                );
                ctx.insert(
                    "add_generation_prompt".into(),
                    Json::Bool(opts.add_generation_prompt),
                );
                ctx.insert("bos_token".into(), Json::String(self.bos.clone()));
                ctx.insert("eos_token".into(), Json::String(self.eos.clone()));
                if let Some(t) = &opts.tools {
                    ctx.insert("tools".into(), t.clone());
                }
                tmpl.render(Value::from_serialize(&ctx)).map_err(|e| {
                    let mut message = e
                        .detail()
                        .map(str::to_string)
                        .unwrap_or_else(|| e.to_string());
                    if e.kind() != ErrorKind::InvalidOperation {
                        message = format!("{}: {message}", e.kind());
                    }
                    TemplateError::Render {
                        name: self.name.clone(),
                        line: e.line(),
                        message,
                    }
                })
            }
        }
    }
}

fn syntax(name: &str, e: &minijinja::Error) -> TemplateError {
    TemplateError::Syntax {
        name: name.to_string(),
        line: e.line(),
        message: e
            .detail()
            .map(str::to_string)
            .unwrap_or_else(|| e.to_string()),
    }
}

/// A built-in for a file without a template.
fn guess_builtin(arch: &str, tok: &Tokenizer) -> &'static str {
    let has = |t: &str| tok.token_id(t).is_some();
    if arch.starts_with("gemma") || has("<start_of_turn>") {
        "gemma"
    } else if has("<|start_header_id|>") {
        "llama3"
    } else if arch.starts_with("phi3") || has("<|assistant|>") {
        "phi3"
    } else if has("<|im_start|>") {
        "chatml"
    } else if has("[SYSTEM_PROMPT]") {
        "mistral"
    } else if arch == "llama" && has("[INST]") {
        "mistral-v3"
    } else if arch == "llama" {
        "llama2"
    } else {
        "chatml"
    }
}

fn render_builtin(name: &str, chat: &[ChatMessage], add_ass: bool) -> String {
    let mut ss = String::new();
    match name {
        "chatml" => {
            for m in chat {
                ss += &format!("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.text());
            }
            if add_ass {
                ss += "<|im_start|>assistant\n";
            }
        }
        "mistral" => {
            for m in chat {
                let c = m.text();
                match m.role.as_str() {
                    "system" => ss += &format!("[SYSTEM_PROMPT] {c}[/SYSTEM_PROMPT]"),
                    "user" => ss += &format!("[INST] {c}[/INST]"),
                    _ => ss += &format!(" {c}</s>"),
                }
            }
        }
        "mistral-v1" | "mistral-v3" => {
            let lead = if name == "mistral-v1" { " " } else { "" };
            let trim_assistant = name == "mistral-v3";
            let mut inside = false;
            for m in chat {
                if !inside {
                    ss += &format!("{lead}[INST] ");
                    inside = true;
                }
                let c = m.text();
                match m.role.as_str() {
                    "system" => ss += &format!("{c}\n\n"),
                    "user" => ss += &format!("{c}{lead}[/INST]"),
                    _ => {
                        let c = if trim_assistant {
                            trim_c(&c).to_string()
                        } else {
                            c
                        };
                        ss += &format!(" {c}</s>");
                        inside = false;
                    }
                }
            }
        }
        "llama2" => {
            let mut inside = true;
            ss += "[INST] ";
            for m in chat {
                let c = m.text();
                if !inside {
                    inside = true;
                    ss += "[INST] ";
                }
                match m.role.as_str() {
                    "system" => ss += &format!("{c}\n"),
                    "user" => ss += &format!("{c} [/INST]"),
                    _ => {
                        ss += &format!("{c}</s>");
                        inside = false;
                    }
                }
            }
        }
        "phi3" => {
            for m in chat {
                ss += &format!("<|{}|>\n{}<|end|>\n", m.role, m.text());
            }
            if add_ass {
                ss += "<|assistant|>\n";
            }
        }
        "gemma" => {
            let mut system = String::new();
            for m in chat {
                if m.role == "system" {
                    system += trim_c(&m.text());
                    continue;
                }
                let role = if m.role == "assistant" {
                    "model"
                } else {
                    m.role.as_str()
                };
                ss += &format!("<start_of_turn>{role}\n");
                if !system.is_empty() && role != "model" {
                    ss += &format!("{system}\n\n");
                    system.clear();
                }
                ss += &format!("{}<end_of_turn>\n", trim_c(&m.text()));
            }
            if add_ass {
                ss += "<start_of_turn>model\n";
            }
        }
        "llama3" => {
            for m in chat {
                ss += &format!(
                    "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>",
                    m.role,
                    trim_c(&m.text())
                );
            }
            if add_ass {
                ss += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            }
        }
        _ => {}
    }
    ss
}

/// A minijinja environment configured like Hugging Face's template environment.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |msg: String| -> Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
        },
    );
    env.add_function("strftime_now", |fmt: String| strftime_now(&fmt));
    env.add_filter("tojson", tojson);
    env
}

/// `tojson` as Hugging Face defines it: Python's `json.dumps` separators, no HTML escaping,
/// optional `indent`.
fn tojson(v: Value, kwargs: minijinja::value::Kwargs) -> Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let _ = kwargs.get::<Option<bool>>("ensure_ascii");
    let _ = kwargs.get::<Option<bool>>("sort_keys");
    kwargs.assert_all_used()?;
    let j = serde_json::to_value(&v)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    py_json(&j, indent, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

fn py_json(v: &Json, indent: Option<usize>, depth: usize, out: &mut String) {
    let nl = |out: &mut String, d: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * d));
        }
    };
    let (item_sep, key_sep) = if indent.is_some() {
        (",", ": ")
    } else {
        (", ", ": ")
    };
    match v {
        Json::Array(a) if !a.is_empty() => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                nl(out, depth + 1);
                py_json(x, indent, depth + 1, out);
            }
            nl(out, depth);
            out.push(']');
        }
        Json::Object(m) if !m.is_empty() => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                nl(out, depth + 1);
                out.push_str(&Json::String(k.clone()).to_string());
                out.push_str(key_sep);
                py_json(x, indent, depth + 1, out);
            }
            nl(out, depth);
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// `strftime_now(format)`: the current UTC time with the common `strftime` codes.
fn strftime_now(fmt: &str) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    strftime(secs, fmt)
}

fn strftime(secs: i64, fmt: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = secs.div_euclid(86400);
    let sod = secs.rem_euclid(86400);
    // civil from days (Howard Hinnant's algorithm)
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let wd = days.rem_euclid(7) as usize;
    let (h, mi, s) = (sod / 3600, (sod / 60) % 60, sod % 60);
    let mut out = String::new();
    let mut it = fmt.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('Y') => out += &y.to_string(),
            Some('y') => out += &format!("{:02}", y.rem_euclid(100)),
            Some('m') => out += &format!("{m:02}"),
            Some('d') => out += &format!("{d:02}"),
            Some('-') => match it.next() {
                Some('d') => out += &d.to_string(),
                Some('m') => out += &m.to_string(),
                Some(o) => {
                    out.push_str("%-");
                    out.push(o);
                }
                None => out.push_str("%-"),
            },
            Some('B') => out += MONTHS[(m - 1) as usize],
            Some('b') => out += &MONTHS[(m - 1) as usize][..3],
            Some('A') => out += DAYS[wd],
            Some('a') => out += &DAYS[wd][..3],
            Some('H') => out += &format!("{h:02}"),
            Some('M') => out += &format!("{mi:02}"),
            Some('S') => out += &format!("{s:02}"),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_known_date() {
        // 2024-07-26 12:34:56 UTC, a Friday
        assert_eq!(
            strftime(1_721_997_296, "%d %b %Y %A %H:%M:%S"),
            "26 Jul 2024 Friday 12:34:56"
        );
    }

    #[test]
    fn raise_exception_is_a_render_error_with_line() {
        let t = ChatTemplate::jinja("t", "line one\n{{ raise_exception('no system') }}", "", "")
            .expect("compiles");
        let e = t
            .render(&[], &RenderOptions::default())
            .expect_err("raises");
        match e {
            TemplateError::Render { line, message, .. } => {
                assert_eq!(line, Some(2));
                assert!(message.contains("no system"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn syntax_error_has_line() {
        let e = ChatTemplate::jinja("t", "ok\n{% if %}", "", "").expect_err("bad");
        assert!(
            matches!(e, TemplateError::Syntax { line: Some(2), .. }),
            "{e:?}"
        );
    }

    #[test]
    fn pycompat_and_tojson() {
        let t = ChatTemplate::jinja(
            "t",
            "{{ messages[0].content.strip().upper() }}|{{ tools | tojson }}",
            "",
            "",
        )
        .expect("compiles");
        let out = t
            .render(
                &[ChatMessage::new("user", "  hi  ")],
                &RenderOptions::default().tools(Some(serde_json::json!([{"a": "<b>"}]))),
            )
            .expect("renders");
        assert_eq!(out, r#"HI|[{"a": "<b>"}]"#);
    }

    #[test]
    fn gemma_builtin_merges_system() {
        let t = ChatTemplate::builtin("gemma").expect("builtin");
        let out = t
            .render(
                &[
                    ChatMessage::new("system", "Be brief. "),
                    ChatMessage::new("user", "Hi"),
                    ChatMessage::new("assistant", "Hello!"),
                ],
                &RenderOptions::default().add_generation_prompt(true),
            )
            .expect("renders");
        assert_eq!(
            out,
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>model\n"
        );
    }
}
