//! `ApiError`: every failure a client sees, in OpenAI's error shape
//! (`{"error": {"message", "type", "param", "code"}}`) with the matching HTTP status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for a person.
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, ...
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// A machine-readable code (`context_length_exceeded`, `model_not_found`, ...).
    pub code: Option<&'static str>,
    /// Seconds a client should wait before retrying (429, 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A 400 about `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()),
            code: None,
            retry_after: None,
        }
    }

    /// A 400 about the request as a whole.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// Another status, typed `kind`.
    pub fn status(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// A 500: the engine failed.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// Set the machine-readable code.
    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.status.as_u16(),
            self.kind,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}

impl From<kestrel::Error> for ApiError {
    fn from(e: kestrel::Error) -> ApiError {
        match e {
            kestrel::Error::Generate(g) => ApiError::from(*g),
            // templates, tokenizer, grammar and option errors come from what the client sent
            other => ApiError::bad_request(other.to_string()),
        }
    }
}

impl From<kestrel::generate::GenerateError> for ApiError {
    fn from(e: kestrel::generate::GenerateError) -> ApiError {
        use kestrel::generate::GenerateError as G;
        match e {
            G::ContextTooSmall { .. } => {
                ApiError::bad_request(e.to_string()).with_code("context_length_exceeded")
            }
            G::EmptyPrompt | G::InvalidOption { .. } | G::Sampling(_) | G::Tokenizer(_) => {
                ApiError::bad_request(e.to_string())
            }
            G::Kv(kestrel::generate::KvError::OutOfBlocks { .. }) => {
                ApiError::bad_request(e.to_string()).with_code("context_length_exceeded")
            }
            other => ApiError::internal(other.to_string()),
        }
    }
}
