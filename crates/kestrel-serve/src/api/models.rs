//! `GET /v1/models`, `GET /v1/models/{id}` and `GET /health`.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value as Json_};

use super::State;
use crate::error::ApiError;

fn model_object(st: &super::AppState) -> Json_ {
    json!({
        "id": st.model_id,
        "object": "model",
        "created": st.created,
        "owned_by": "kestrel",
        "meta": st.model_meta,
    })
}

pub(crate) async fn list(st: State) -> Json<Json_> {
    Json(json!({"object": "list", "data": [model_object(&st)]}))
}

pub(crate) async fn get(st: State, Path(id): Path<String>) -> Result<Json<Json_>, ApiError> {
    st.check_model(&Some(id))?;
    Ok(Json(model_object(&st)))
}

pub(crate) async fn health(st: State) -> Json<Json_> {
    use std::sync::atomic::Ordering::Relaxed;
    Json(json!({
        "status": "ok",
        "model": st.model_id,
        "running": st.metrics.running.load(Relaxed),
        "queued": st.metrics.queued.load(Relaxed),
    }))
}

pub(crate) async fn metrics(st: State) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        st.metrics.render(),
    )
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::status(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "no such endpoint",
    )
    .with_code("not_found")
}

pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::status(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        "method not allowed on this endpoint",
    )
}
