//! The web page: static files compiled into the binary, sent with headers that keep it from
//! being framed, from running injected inline code, and from leaking its URL to other sites.

use axum::extract::Path;
use axum::http::{HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// What the page may load: only its own files (it has no inline script or style), and no
/// site may frame it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; frame-ancestors 'none'";

fn page_file(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    let headers: [(HeaderName, &'static str); 4] = [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ];
    (headers, body)
}

/// The page, at `/` and at each chat's own URL `/c/{id}` (the script reads the id from it).
pub(crate) async fn index() -> impl IntoResponse {
    page_file(
        "text/html; charset=utf-8",
        include_str!("../../static/index.html"),
    )
}

pub(crate) async fn script() -> impl IntoResponse {
    page_file(
        "text/javascript; charset=utf-8",
        include_str!("../../static/app.js"),
    )
}

pub(crate) async fn stylesheet() -> impl IntoResponse {
    page_file(
        "text/css; charset=utf-8",
        include_str!("../../static/app.css"),
    )
}

/// The libraries the page renders with, vendored (versions and licenses beside them in
/// `static/vendor/`, refreshed by `scripts/vendor-page.sh`) so the page works offline.
const VENDOR: &[(&str, &str)] = &[
    ("marked.js", include_str!("../../static/vendor/marked.js")),
    ("purify.js", include_str!("../../static/vendor/purify.js")),
    (
        "highlight.js",
        include_str!("../../static/vendor/highlight.js"),
    ),
];

pub(crate) async fn vendor(Path(file): Path<String>) -> Response {
    match VENDOR.iter().find(|(name, _)| *name == file) {
        Some((_, body)) => page_file("text/javascript; charset=utf-8", body).into_response(),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}
