//! `POST /v1/chat/completions`: messages rendered with the model's chat template, optional
//! tools, `response_format` (`json_object`, `json_schema`) as a grammar, `logprobs`, `n`
//! choices, streaming.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kestrel::generate::{Completion, Token};
use kestrel::{ChatMessage, Grammar};
use serde::Deserialize;
use serde_json::{json, Value as Json_};

use super::generate::{self, chat_logprobs, finish_reason, usage, ChunkWriter, Envelope};
use super::params::Common;
use super::{body, new_id, unix_secs, AppState, State};
use crate::error::ApiError;
use crate::tools::{self, Tools};

/// Most messages per request.
pub const MAX_MESSAGES: usize = 4096;

#[derive(Debug, Deserialize)]
struct ChatBody {
    #[serde(flatten)]
    common: Common,
    messages: Option<Json_>,
    tools: Option<Json_>,
    tool_choice: Option<Json_>,
    response_format: Option<Json_>,
    logprobs: Option<Json_>,
    top_logprobs: Option<Json_>,
}

fn messages(v: Option<Json_>) -> Result<Vec<ChatMessage>, ApiError> {
    let list = match v {
        Some(Json_::Array(a)) if !a.is_empty() => a,
        Some(Json_::Array(_)) => return Err(ApiError::invalid("messages", "messages is empty")),
        None | Some(Json_::Null) => {
            return Err(ApiError::invalid("messages", "messages is required"))
        }
        Some(v) => {
            return Err(ApiError::invalid(
                "messages",
                format!("messages must be a list, got {v}"),
            ))
        }
    };
    if list.len() > MAX_MESSAGES {
        return Err(ApiError::invalid(
            "messages",
            format!("at most {MAX_MESSAGES} messages"),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.into_iter().enumerate() {
        let m: ChatMessage = serde_json::from_value(m).map_err(|e| {
            ApiError::invalid(format!("messages[{i}]"), format!("messages[{i}]: {e}"))
        })?;
        let role = match m.role.as_str() {
            "developer" => "system",
            r @ ("system" | "user" | "assistant" | "tool") => r,
            other => {
                return Err(ApiError::invalid(
                    format!("messages[{i}].role"),
                    format!("messages[{i}].role {other:?} is not system, developer, user, assistant or tool"),
                ))
            }
        };
        match &m.content {
            Json_::String(_) | Json_::Null => {}
            Json_::Array(parts) => {
                for p in parts {
                    if p.get("type").and_then(Json_::as_str) != Some("text") {
                        return Err(ApiError::invalid(
                            format!("messages[{i}].content"),
                            "only text content parts are supported",
                        ));
                    }
                }
            }
            other => {
                return Err(ApiError::invalid(
                    format!("messages[{i}].content"),
                    format!("content must be a string, a list of parts or null, got {other}"),
                ))
            }
        }
        out.push(ChatMessage {
            role: role.to_string(),
            ..m
        });
    }
    Ok(out)
}

/// `response_format` as a grammar: `text` none, `json_object` any JSON object, `json_schema`
/// its schema. A schema that cannot be compiled is a 400 (never unconstrained output).
pub(crate) fn response_format(v: &Option<Json_>) -> Result<Option<Grammar>, ApiError> {
    let Some(v) = v.as_ref().filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let bad = |m: String| ApiError::invalid("response_format", m);
    let kind = v.get("type").and_then(Json_::as_str).ok_or_else(|| {
        bad(format!(
            "response_format must be {{\"type\": ...}}, got {v}"
        ))
    })?;
    let schema = match kind {
        "text" => return Ok(None),
        "json_object" => json!({"type": "object"}),
        "json_schema" => {
            let js = v
                .get("json_schema")
                .ok_or_else(|| bad("json_schema is missing".into()))?;
            // OpenAI nests it: {"json_schema": {"name", "schema", "strict"}}; accept a bare schema too
            match js.get("schema") {
                Some(s) => s.clone(),
                None if js.get("name").is_some() => json!({}),
                None => js.clone(),
            }
        }
        other => return Err(bad(format!("unknown response_format type {other:?}"))),
    };
    Grammar::from_json_schema(&schema)
        .map(Some)
        .map_err(|e| bad(format!("the JSON Schema cannot be used: {e}")))
}

pub(crate) async fn handle(
    st: State,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let b: ChatBody = body(raw)?;
    let adapters = super::lora::choice(&st, &b.common.model, &b.common.lora)?;
    let p = b.common.parse(st.n_vocab)?;
    let mut opts = p.opts;
    opts.adapters = adapters;
    let mut msgs = messages(b.messages)?;
    let tools = tools::parse(&b.tools, &b.tool_choice)?;
    let format = response_format(&b.response_format)?;
    if let Some(g) = tools.as_ref().and_then(|t| t.grammar.clone()) {
        opts.grammar = Some(g);
    } else if let Some(g) = format {
        opts.grammar = Some(g);
    }
    let logprobs = match &b.logprobs {
        Some(Json_::Bool(true)) => true,
        None | Some(Json_::Null) | Some(Json_::Bool(false)) => false,
        Some(v) => {
            return Err(ApiError::invalid(
                "logprobs",
                format!("logprobs must be a boolean, got {v}"),
            ))
        }
    };
    let top = match &b.top_logprobs {
        None | Some(Json_::Null) => 0,
        Some(v) => v
            .as_u64()
            .filter(|&n| n <= kestrel::generate::MAX_TOP_LOGPROBS as u64)
            .ok_or_else(|| {
                ApiError::invalid(
                    "top_logprobs",
                    "top_logprobs must be an integer within [0, 20]",
                )
            })? as usize,
    };
    if logprobs {
        opts.logprobs = Some(top);
    }
    tools::prepare_messages(&mut msgs, tools.as_ref(), st.native_tools);
    let tool_list = tools
        .as_ref()
        .filter(|_| st.native_tools)
        .map(|t| t.list.clone());
    let ids = st.prompter.encode_chat(&msgs, tool_list, true)?;
    let sub = generate::submit(&st, vec![ids], p.n, &opts, p.max_tokens)?;
    let id = new_id("chatcmpl");
    let created = unix_secs();
    if p.stream {
        let w = ChatChunks {
            st: st.0.clone(),
            env: Envelope {
                id,
                object: "chat.completion.chunk",
                created,
                model: st.model_id.clone(),
            },
            tools,
            buffered: vec![String::new(); sub.jobs],
            started: vec![false; sub.jobs],
            logprobs,
        };
        return Ok(generate::stream(sub, w, p.include_usage, st.opts.timeout).into_response());
    }
    let prompt_tokens = sub.prompt_tokens;
    let choices = generate::collect(sub, st.opts.timeout).await?;
    let mut completion_tokens = 0;
    let mut cached = 0;
    let out: Vec<Json_> = choices
        .iter()
        .map(|c| {
            completion_tokens += c.completion.metrics.generated_tokens;
            cached = cached.max(c.completion.metrics.cached_tokens);
            let (message, finish) =
                message_of(&c.completion.text, c.completion.finish, tools.as_ref());
            json!({
                "index": c.index,
                "message": message,
                "logprobs": if logprobs { chat_logprobs(&st, &c.tokens) } else { Json_::Null },
                "finish_reason": finish,
            })
        })
        .collect();
    let env = Envelope {
        id,
        object: "chat.completion",
        created,
        model: st.model_id.clone(),
    };
    Ok(Json(env.with(
        Json_::Array(out),
        Some(usage(prompt_tokens, completion_tokens, cached)),
    ))
    .into_response())
}

/// The assistant message and finish reason for a finished text: tool calls parsed out when the
/// request has tools.
fn message_of(
    text: &str,
    finish: kestrel::FinishReason,
    tools: Option<&Tools>,
) -> (Json_, &'static str) {
    if let Some(t) = tools {
        if let Some((content, calls)) = tools::parse_calls(text, &t.names) {
            let calls: Vec<Json_> = calls
                .iter()
                .enumerate()
                .map(|(i, c)| c.to_json(i))
                .collect();
            return (
                json!({"role": "assistant", "content": content, "tool_calls": calls}),
                "tool_calls",
            );
        }
    }
    (
        json!({"role": "assistant", "content": text}),
        finish_reason(finish),
    )
}

/// Chat stream chunks. With tools, a choice's text is held until it ends, then sent as tool
/// calls or as content.
struct ChatChunks {
    st: Arc<AppState>,
    env: Envelope,
    tools: Option<Tools>,
    buffered: Vec<String>,
    started: Vec<bool>,
    logprobs: bool,
}

impl ChatChunks {
    fn chunk(&self, index: usize, delta: Json_, finish: Option<&str>, logprobs: Json_) -> Json_ {
        let choice =
            json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish});
        self.env.with(json!([choice]), None)
    }

    fn role(&mut self, index: usize, out: &mut Vec<Json_>) {
        if let Some(s) = self.started.get_mut(index) {
            if !*s {
                *s = true;
                out.push(self.chunk(
                    index,
                    json!({"role": "assistant", "content": ""}),
                    None,
                    Json_::Null,
                ));
            }
        }
    }
}

impl ChunkWriter for ChatChunks {
    fn token(&mut self, index: usize, tok: &Token) -> Vec<Json_> {
        let mut out = Vec::new();
        self.role(index, &mut out);
        if self.tools.is_some() {
            if let Some(b) = self.buffered.get_mut(index) {
                b.push_str(&tok.text);
            }
            return out;
        }
        if tok.text.is_empty() && (tok.special || !self.logprobs) {
            return out;
        }
        let lp = if self.logprobs {
            chat_logprobs(&self.st, std::slice::from_ref(tok))
        } else {
            Json_::Null
        };
        out.push(self.chunk(index, json!({"content": tok.text}), None, lp));
        out
    }

    fn done(&mut self, index: usize, c: &Completion) -> Vec<Json_> {
        let mut out = Vec::new();
        self.role(index, &mut out);
        let finish = match &self.tools {
            Some(t) => {
                let text = self.buffered.get(index).cloned().unwrap_or_default();
                let (msg, finish) = message_of(&text, c.finish, Some(t));
                let mut delta = json!({});
                if let Some(content) = msg.get("content").filter(|c| !c.is_null()) {
                    delta["content"] = content.clone();
                }
                if let Some(calls) = msg.get("tool_calls") {
                    delta["tool_calls"] = calls.clone();
                }
                out.push(self.chunk(index, delta, None, Json_::Null));
                finish
            }
            None => finish_reason(c.finish),
        };
        out.push(self.chunk(index, json!({}), Some(finish), Json_::Null));
        out
    }

    fn envelope(&self) -> &Envelope {
        &self.env
    }
}
