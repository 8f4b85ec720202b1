//! `POST /v1/completions`: raw prompts (a string, a list of strings, token ids, or lists of
//! token ids), `n` choices each, `echo`, legacy `logprobs`, streaming.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kestrel::generate::{Completion, Token};
use serde::Deserialize;
use serde_json::{json, Value as Json_};

use super::generate::{self, finish_reason, token_piece, usage, ChunkWriter, Envelope};
use super::params::Common;
use super::{body, new_id, unix_secs, AppState, State};
use crate::error::ApiError;

/// Most prompts per request.
pub const MAX_PROMPTS: usize = 64;

#[derive(Debug, Deserialize)]
struct CompletionBody {
    #[serde(flatten)]
    common: Common,
    prompt: Option<Json_>,
    echo: Option<Json_>,
    logprobs: Option<Json_>,
    response_format: Option<Json_>,
}

/// The prompts as token ids (and their texts, for `echo`).
pub(crate) fn prompts(
    st: &AppState,
    v: Option<Json_>,
    field: &str,
) -> Result<Vec<(Vec<u32>, String)>, ApiError> {
    let bad = |m: String| ApiError::invalid(field, m);
    let ids_of = |a: &[Json_]| -> Result<Vec<u32>, ApiError> {
        a.iter()
            .map(|x| {
                x.as_u64()
                    .filter(|&i| (i as usize) < st.n_vocab)
                    .map(|i| i as u32)
                    .ok_or_else(|| bad(format!("token id {x} is not an id below {}", st.n_vocab)))
            })
            .collect()
    };
    let text = |s: &str| -> Result<(Vec<u32>, String), ApiError> {
        Ok((st.prompter.encode(s, true, false)?, s.to_string()))
    };
    let decode = |ids: &[u32]| {
        st.prompter
            .tokenizer()
            .decode(ids, kestrel::tokenizer::DecodeOptions::default())
            .unwrap_or_default()
    };
    let list = match v {
        None | Some(Json_::Null) => return Err(bad(format!("{field} is required"))),
        Some(Json_::String(s)) => return Ok(vec![text(&s)?]),
        Some(Json_::Array(a)) => a,
        Some(v) => return Err(bad(format!("{field} must be a string or a list, got {v}"))),
    };
    if list.is_empty() {
        return Err(bad(format!("{field} is empty")));
    }
    if list.iter().all(Json_::is_number) {
        let ids = ids_of(&list)?;
        let t = decode(&ids);
        return Ok(vec![(ids, t)]);
    }
    if list.len() > MAX_PROMPTS {
        return Err(bad(format!("at most {MAX_PROMPTS} prompts per request")));
    }
    list.iter()
        .map(|p| match p {
            Json_::String(s) => text(s),
            Json_::Array(a) => {
                let ids = ids_of(a)?;
                let t = decode(&ids);
                Ok((ids, t))
            }
            other => Err(bad(format!(
                "each prompt must be a string or a list of token ids, got {other}"
            ))),
        })
        .collect()
}

pub(crate) async fn handle(
    st: State,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let b: CompletionBody = body(raw)?;
    let adapters = super::lora::choice(&st, &b.common.model, &b.common.lora)?;
    let p = b.common.parse(st.n_vocab)?;
    let mut opts = p.opts;
    opts.adapters = adapters;
    if let Some(g) = super::chat::response_format(&b.response_format)? {
        opts.grammar = Some(g);
    }
    let echo = match &b.echo {
        None | Some(Json_::Null) => false,
        Some(Json_::Bool(e)) => *e,
        Some(v) => {
            return Err(ApiError::invalid(
                "echo",
                format!("echo must be a boolean, got {v}"),
            ))
        }
    };
    let logprobs = match &b.logprobs {
        None | Some(Json_::Null) => None,
        Some(v) => Some(v.as_u64().filter(|&n| n <= 5).ok_or_else(|| {
            ApiError::invalid("logprobs", "logprobs must be an integer within [0, 5]")
        })? as usize),
    };
    opts.logprobs = logprobs;
    let prompts = prompts(&st, b.prompt, "prompt")?;
    let texts: Vec<String> = prompts.iter().map(|p| p.1.clone()).collect();
    let ids = prompts.into_iter().map(|p| p.0).collect();
    let n = p.n;
    let sub = generate::submit(&st, ids, n, &opts, p.max_tokens)?;
    let id = new_id("cmpl");
    let created = unix_secs();
    let echoes = |index: usize| {
        if echo {
            texts.get(index / n).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    if p.stream {
        let w = TextChunks {
            st: st.0.clone(),
            env: Envelope {
                id,
                object: "text_completion",
                created,
                model: st.model_id.clone(),
            },
            echo: (0..sub.jobs)
                .map(|i| Some(echoes(i)).filter(|e| !e.is_empty()))
                .collect(),
            logprobs: logprobs.is_some(),
        };
        return Ok(generate::stream(sub, w, p.include_usage, st.opts.timeout).into_response());
    }
    let prompt_tokens = sub.prompt_tokens;
    let choices = generate::collect(sub, st.opts.timeout).await?;
    let mut completion_tokens = 0;
    let out: Vec<Json_> = choices
        .iter()
        .map(|c| {
            completion_tokens += c.completion.metrics.generated_tokens;
            let lp = if logprobs.is_some() {
                legacy_logprobs(&st, &c.tokens)
            } else {
                Json_::Null
            };
            json!({
                "index": c.index,
                "text": format!("{}{}", echoes(c.index), c.completion.text),
                "logprobs": lp,
                "finish_reason": finish_reason(c.completion.finish),
            })
        })
        .collect();
    let env = Envelope {
        id,
        object: "text_completion",
        created,
        model: st.model_id.clone(),
    };
    Ok(Json(env.with(
        Json_::Array(out),
        Some(usage(prompt_tokens, completion_tokens, 0)),
    ))
    .into_response())
}

/// The completions API's `logprobs` object.
fn legacy_logprobs(st: &AppState, tokens: &[Token]) -> Json_ {
    let mut toks = Vec::new();
    let mut lps = Vec::new();
    let mut tops = Vec::new();
    let mut offsets = Vec::new();
    let mut off = 0;
    for t in tokens.iter().filter(|t| !t.special) {
        let Some(lp) = &t.logprob else { continue };
        let (text, _) = token_piece(st, t.id);
        offsets.push(off);
        off += text.len();
        toks.push(Json_::String(text));
        lps.push(json!(lp.logprob));
        let mut m = serde_json::Map::new();
        for &(id, l) in &lp.top {
            m.insert(token_piece(st, id).0, json!(l));
        }
        tops.push(Json_::Object(m));
    }
    json!({"tokens": toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

struct TextChunks {
    st: Arc<AppState>,
    env: Envelope,
    /// Prompt text still to send first, per choice (`echo`).
    echo: Vec<Option<String>>,
    logprobs: bool,
}

impl TextChunks {
    fn chunk(&self, index: usize, text: String, finish: Option<&str>, lp: Json_) -> Json_ {
        let choice = json!({"index": index, "text": text, "logprobs": lp, "finish_reason": finish});
        self.env.with(json!([choice]), None)
    }

    fn echo(&mut self, index: usize, out: &mut Vec<Json_>) {
        if let Some(e) = self.echo.get_mut(index).and_then(Option::take) {
            out.push(self.chunk(index, e, None, Json_::Null));
        }
    }
}

impl ChunkWriter for TextChunks {
    fn token(&mut self, index: usize, tok: &Token) -> Vec<Json_> {
        let mut out = Vec::new();
        self.echo(index, &mut out);
        if tok.text.is_empty() && (tok.special || !self.logprobs) {
            return out;
        }
        let lp = if self.logprobs {
            legacy_logprobs(&self.st, std::slice::from_ref(tok))
        } else {
            Json_::Null
        };
        out.push(self.chunk(index, tok.text.clone(), None, lp));
        out
    }

    fn done(&mut self, index: usize, c: &Completion) -> Vec<Json_> {
        let mut out = Vec::new();
        self.echo(index, &mut out);
        out.push(self.chunk(
            index,
            String::new(),
            Some(finish_reason(c.finish)),
            Json_::Null,
        ));
        out
    }

    fn envelope(&self) -> &Envelope {
        &self.env
    }
}
