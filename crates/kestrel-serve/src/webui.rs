//! The chat page at `/`: HTML, CSS and JavaScript written for kestrel (`webui/`, no third-party
//! code), compiled into the binary so the page works with no network but this server. The page
//! talks to `/v1/models` and `/v1/chat/completions` like any client (with the API key its
//! settings hold), so it needs no endpoint of its own. `ServeOptions::webui = false` (`kestrel
//! serve --no-webui`) leaves these routes out.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX: &str = include_str!("../webui/index.html");
const APP: &str = include_str!("../webui/app.js");
const MARKDOWN: &str = include_str!("../webui/markdown.js");
const STYLE: &str = include_str!("../webui/style.css");

/// Only this server's own scripts, styles and API: the model's text can never load or run
/// anything (the page escapes it too), and nothing is fetched from elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // The page changes with the binary; revalidating costs a request per asset.
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_SECURITY_POLICY, CSP),
        ],
        body,
    )
        .into_response()
}

/// The page's routes.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/webui/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP) }),
        )
        .route(
            "/webui/markdown.js",
            get(|| async { asset("text/javascript; charset=utf-8", MARKDOWN) }),
        )
        .route(
            "/webui/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every asset the page names is one this module serves (or inline data), and the scripts
    /// and styles fetch nothing but this server's API.
    #[test]
    fn the_page_names_only_its_own_assets() {
        let served = ["/webui/app.js", "/webui/markdown.js", "/webui/style.css"];
        for attr in ["src=\"", "href=\""] {
            for part in INDEX.split(attr).skip(1) {
                let url = part.split('"').next().unwrap_or_default();
                assert!(
                    served.contains(&url) || url.starts_with("data:"),
                    "index.html names {url}, which is not served here"
                );
            }
        }
        assert!(!STYLE.contains("url(") && !STYLE.contains("@import"));
        for part in APP.split("fetch(").skip(1) {
            assert!(part.starts_with("\"/v1/"), "app.js fetches {}", &part[..20]);
        }
        assert!(!MARKDOWN.contains("fetch(") && !MARKDOWN.contains("import"));
    }
}
