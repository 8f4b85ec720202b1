//! Running a request's sequences through the engine: submit one job per (prompt, choice),
//! then either collect the finished choices or stream chunks over SSE as tokens arrive.
//! A `CancelGuard` cancels every job of a request when the request goes away (the client
//! disconnected, the stream was dropped, the deadline passed), so its KV blocks are freed.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use kestrel::generate::{CancelToken, Completion, Token};
use kestrel::{FinishReason, GenerateOptions};
use serde_json::{json, Value as Json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::params::budget;
use super::AppState;
use crate::engine::{Event, Job};
use crate::error::ApiError;

/// Cancels its tokens when dropped.
pub(crate) struct CancelGuard(Vec<CancelToken>);

impl Drop for CancelGuard {
    fn drop(&mut self) {
        for c in &self.0 {
            c.cancel();
        }
    }
}

/// A request's jobs in flight.
pub(crate) struct Submitted {
    rx: mpsc::UnboundedReceiver<(usize, Event)>,
    _guard: CancelGuard,
    pub jobs: usize,
    /// Prompt tokens, each prompt counted once.
    pub prompt_tokens: usize,
    deadline: Instant,
}

/// Queue `n` choices of each prompt. Refuses with 429 when the server's queue is full, 400
/// when a prompt and its budget do not fit the context.
pub(crate) fn submit(
    st: &AppState,
    prompts: Vec<Vec<u32>>,
    n: usize,
    opts: &GenerateOptions,
    max_tokens: Option<usize>,
) -> Result<Submitted, ApiError> {
    let jobs = prompts.len() * n;
    let mut budgets = Vec::with_capacity(prompts.len());
    for p in &prompts {
        if p.is_empty() {
            return Err(ApiError::invalid("prompt", "the prompt is empty"));
        }
        budgets.push(budget(max_tokens, p.len(), st.ctx)?);
    }
    let limit = st.opts.parallel + st.opts.queue;
    let before = st.metrics.inflight.fetch_add(jobs, Relaxed);
    if before + jobs > limit {
        st.metrics.inflight.fetch_sub(jobs, Relaxed);
        let mut e = ApiError::status(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            format!("the server is busy ({before} sequences queued or running, at most {limit}); retry shortly"),
        )
        .with_code("server_busy");
        e.retry_after = Some(1);
        return Err(e);
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let mut cancels = Vec::with_capacity(jobs);
    let prompt_tokens = prompts.iter().map(Vec::len).sum();
    let mut submitted = 0;
    for (pi, (prompt, max_new)) in prompts.into_iter().zip(budgets).enumerate() {
        for j in 0..n {
            let cancel = CancelToken::new();
            cancels.push(cancel.clone());
            let mut params = opts.params(&st.adapters)?;
            params.sampling.max_new_tokens = max_new;
            if let Some(seed) = params.sampling.seed {
                params.sampling.seed = Some(seed.wrapping_add(j as u64));
            }
            params.cancel = Some(cancel);
            let job = Job {
                index: pi * n + j,
                prompt: prompt.clone(),
                params,
                events: tx.clone(),
            };
            if !st.engine.submit(job) {
                st.metrics.inflight.fetch_sub(jobs - submitted, Relaxed);
                return Err(ApiError::status(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "the engine has stopped",
                ));
            }
            submitted += 1;
        }
    }
    Ok(Submitted {
        rx,
        _guard: CancelGuard(cancels),
        jobs,
        prompt_tokens,
        deadline: Instant::now() + st.opts.timeout,
    })
}

/// One finished choice.
pub(crate) struct Choice {
    pub index: usize,
    pub completion: Completion,
    /// Every token (with log-probabilities when asked).
    pub tokens: Vec<Token>,
}

/// OpenAI's finish reason.
pub(crate) fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Length => "length",
        _ => "stop",
    }
}

fn timeout_error(t: Duration) -> ApiError {
    ApiError::status(
        StatusCode::GATEWAY_TIMEOUT,
        "timeout_error",
        format!(
            "the request took longer than the server's limit of {} s",
            t.as_secs()
        ),
    )
}

/// Wait for every choice. The first failed job fails the request.
pub(crate) async fn collect(
    mut sub: Submitted,
    timeout: Duration,
) -> Result<Vec<Choice>, ApiError> {
    let mut tokens: Vec<Vec<Token>> = (0..sub.jobs).map(|_| Vec::new()).collect();
    let mut done: Vec<Option<Completion>> = (0..sub.jobs).map(|_| None).collect();
    let mut left = sub.jobs;
    while left > 0 {
        let ev = tokio::time::timeout_at(sub.deadline, sub.rx.recv())
            .await
            .map_err(|_| timeout_error(timeout))?;
        let Some((i, ev)) = ev else {
            return Err(ApiError::internal("the engine dropped the request"));
        };
        match ev {
            Event::Token(t) => {
                if let Some(v) = tokens.get_mut(i) {
                    v.push(t);
                }
            }
            Event::Done(r) => {
                let c = r.map_err(ApiError::from)?;
                if let Some(slot) = done.get_mut(i) {
                    *slot = Some(c);
                }
                left -= 1;
            }
        }
    }
    Ok(done
        .into_iter()
        .zip(tokens)
        .enumerate()
        .filter_map(|(index, (c, tokens))| {
            c.map(|completion| Choice {
                index,
                completion,
                tokens,
            })
        })
        .collect())
}

/// The fields every response object and chunk carries.
pub(crate) struct Envelope {
    pub id: String,
    /// `chat.completion`, `chat.completion.chunk`, `text_completion`.
    pub object: &'static str,
    pub created: u64,
    pub model: String,
}

impl Envelope {
    /// The object with `choices` (and `usage`).
    pub(crate) fn with(&self, choices: Json, usage: Option<Json>) -> Json {
        let mut v = json!({
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "kestrel",
            "choices": choices,
        });
        if let Some(u) = usage {
            v["usage"] = u;
        }
        v
    }
}

/// Turns engine events into the chunks of one endpoint's stream.
pub(crate) trait ChunkWriter: Send + 'static {
    /// Chunks for a token of choice `index`.
    fn token(&mut self, index: usize, tok: &Token) -> Vec<Json>;
    /// Chunks for the end of choice `index`.
    fn done(&mut self, index: usize, c: &Completion) -> Vec<Json>;
    /// The stream's envelope.
    fn envelope(&self) -> &Envelope;
    /// The final usage chunk.
    fn usage(&self, prompt_tokens: usize, completion_tokens: usize) -> Json {
        self.envelope()
            .with(json!([]), Some(usage(prompt_tokens, completion_tokens, 0)))
    }
}

struct StreamState<W> {
    sub: Submitted,
    writer: W,
    out: VecDeque<SseEvent>,
    left: usize,
    completion_tokens: usize,
    include_usage: bool,
    timeout: Duration,
    ended: bool,
}

fn data(v: &Json) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

/// Stream the request's chunks over SSE, ending with `data: [DONE]`.
pub(crate) fn stream<W: ChunkWriter>(
    sub: Submitted,
    writer: W,
    include_usage: bool,
    timeout: Duration,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let left = sub.jobs;
    let state = StreamState {
        sub,
        writer,
        out: VecDeque::new(),
        left,
        completion_tokens: 0,
        include_usage,
        timeout,
        ended: false,
    };
    let s = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(ev) = s.out.pop_front() {
                return Some((Ok(ev), s));
            }
            if s.ended {
                return None;
            }
            if s.left == 0 {
                if s.include_usage {
                    let u = s.writer.usage(s.sub.prompt_tokens, s.completion_tokens);
                    s.out.push_back(data(&u));
                }
                s.out.push_back(SseEvent::default().data("[DONE]"));
                s.ended = true;
                continue;
            }
            match tokio::time::timeout_at(s.sub.deadline, s.sub.rx.recv()).await {
                Err(_) => {
                    s.out.push_back(data(&timeout_error(s.timeout).body()));
                    s.ended = true;
                }
                Ok(None) => {
                    s.out.push_back(data(
                        &ApiError::internal("the engine dropped the request").body(),
                    ));
                    s.ended = true;
                }
                Ok(Some((i, Event::Token(t)))) => {
                    for c in s.writer.token(i, &t) {
                        s.out.push_back(data(&c));
                    }
                }
                Ok(Some((i, Event::Done(r)))) => {
                    s.left -= 1;
                    match r {
                        Ok(c) => {
                            s.completion_tokens += c.metrics.generated_tokens;
                            for ch in s.writer.done(i, &c) {
                                s.out.push_back(data(&ch));
                            }
                        }
                        Err(e) => s.out.push_back(data(&ApiError::from(e).body())),
                    }
                }
            }
        }
    });
    Sse::new(s).keep_alive(KeepAlive::default())
}

/// OpenAI's `usage` object.
pub(crate) fn usage(prompt_tokens: usize, completion_tokens: usize, cached: usize) -> Json {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

/// The text of a token id (lossy UTF-8) and its bytes.
pub(crate) fn token_piece(st: &AppState, id: u32) -> (String, Vec<u8>) {
    let bytes = st
        .prompter
        .tokenizer()
        .decode(&[id], kestrel::tokenizer::DecodeOptions::default())
        .map(String::into_bytes)
        .unwrap_or_default();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// Chat-style `logprobs.content` entries for `tokens`.
pub(crate) fn chat_logprobs(st: &AppState, tokens: &[Token]) -> Json {
    let content: Vec<Json> = tokens
        .iter()
        .filter(|t| !t.special)
        .filter_map(|t| {
            let lp = t.logprob.as_ref()?;
            let (text, bytes) = token_piece(st, t.id);
            let top: Vec<Json> = lp
                .top
                .iter()
                .map(|&(id, l)| {
                    let (tt, tb) = token_piece(st, id);
                    json!({"token": tt, "logprob": l, "bytes": tb})
                })
                .collect();
            Some(json!({"token": text, "logprob": lp.logprob, "bytes": bytes, "top_logprobs": top}))
        })
        .collect();
    json!({ "content": content })
}
