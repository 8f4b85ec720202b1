//! Middleware: the optional API key (`Authorization: Bearer KEY`, compared in constant time),
//! per-endpoint request counting for `/metrics`, and CORS when origins are configured.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::api::AppState;
use crate::error::ApiError;
use crate::ServeError;

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Refuse a request without the server's key (when it has one).
pub(crate) async fn require_key(
    State(st): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(key) = &st.opts.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if !given.is_some_and(|g| same(g.as_bytes(), key.as_bytes())) {
            return ApiError::status(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "a valid API key is required (Authorization: Bearer KEY)",
            )
            .with_code("invalid_api_key")
            .into_response();
        }
    }
    next.run(req).await
}

/// Count every answered request by route and status.
pub(crate) async fn count_requests(
    State(st): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "other".into());
    let resp = next.run(req).await;
    st.metrics.count_request(&path, resp.status().as_u16());
    resp
}

/// A CORS layer for `origins` (`*` for any).
pub(crate) fn cors(origins: &[String]) -> Result<CorsLayer, ServeError> {
    let layer = CorsLayer::new()
        .allow_methods([axum::http::Method::GET, axum::http::Method::POST])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE]);
    if origins.iter().any(|o| o == "*") {
        return Ok(layer.allow_origin(AllowOrigin::any()));
    }
    let list = origins
        .iter()
        .map(|o| {
            HeaderValue::from_str(o).map_err(|_| ServeError::InvalidOption {
                name: "cors",
                reason: format!("{o:?} is not a valid origin"),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(layer.allow_origin(list))
}
