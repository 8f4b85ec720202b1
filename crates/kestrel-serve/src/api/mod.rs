//! The HTTP API: shared state, request-body handling, and one module per endpoint family.

pub(crate) mod chat;
pub(crate) mod completions;
pub(crate) mod embeddings;
pub(crate) mod generate;
pub(crate) mod lora;
pub(crate) mod models;
pub(crate) mod params;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use kestrel::Prompter;
use serde::de::DeserializeOwned;

use crate::engine::Engine;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::ServeOptions;

/// What every handler shares.
pub(crate) struct AppState {
    pub engine: Engine,
    pub prompter: Prompter,
    pub metrics: Arc<Metrics>,
    pub opts: ServeOptions,
    /// The model id `/v1/models` lists and requests may name.
    pub model_id: String,
    /// Context length (tokens) of every sequence.
    pub ctx: usize,
    pub n_vocab: usize,
    pub n_embd: usize,
    /// Facts about the model for `/v1/models`.
    pub model_meta: serde_json::Value,
    /// Unix time the server started.
    pub created: u64,
    /// The chat template reads a `tools` global.
    pub native_tools: bool,
    /// The model's LoRA adapters (their scales as loaded).
    pub adapters: Vec<kestrel::AdapterInfo>,
    /// The adapters' current scales (for requests that choose none).
    pub adapter_scales: std::sync::Mutex<Vec<f32>>,
}

pub(crate) type State = axum::extract::State<Arc<AppState>>;

/// Seconds since the Unix epoch.
pub(crate) fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Nanoseconds since the Unix epoch (ids).
pub(crate) fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// A fresh response id with `prefix` (`chatcmpl`, `cmpl`).
pub(crate) fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{:x}{:06x}",
        unix_nanos() as u64,
        NEXT.fetch_add(1, Relaxed) & 0xff_ffff
    )
}

/// The JSON body of a request: too large is 413, not JSON or of the wrong shape is 400.
pub(crate) fn body<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|e| {
        let status = e.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::status(
                status,
                "invalid_request_error",
                "the request body is too large",
            )
        } else {
            ApiError::status(status, "invalid_request_error", e.body_text())
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        let what = if e.is_syntax() || e.is_eof() {
            "the body is not valid JSON"
        } else {
            "the body has a field of the wrong type"
        };
        ApiError::bad_request(format!("{what}: {e}"))
    })
}

impl AppState {
    /// The adapters' current scales.
    pub(crate) fn scales(&self) -> Vec<f32> {
        self.adapter_scales
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A request's `model` must be this server's (or absent).
    pub(crate) fn check_model(&self, model: &Option<String>) -> Result<(), ApiError> {
        match model {
            Some(m) if !self.serves(m) => Err(self.unknown_model(m)),
            _ => Ok(()),
        }
    }

    /// `model` names this server's model (empty, its id, or `default`).
    pub(crate) fn serves(&self, model: &str) -> bool {
        model.is_empty() || model == self.model_id || model == "default"
    }

    /// The 404 for a `model` this server does not serve.
    pub(crate) fn unknown_model(&self, model: &str) -> ApiError {
        ApiError::status(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "the model {model:?} does not exist; this server serves {:?}",
                self.model_id
            ),
        )
        .with_code("model_not_found")
    }
}
