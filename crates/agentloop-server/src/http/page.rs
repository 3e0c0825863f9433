//! The web page: static files compiled into the binary, sent with headers that keep it from
//! being framed, from running injected inline code, and from leaking its URL to other sites.

use axum::http::{HeaderName, header};
use axum::response::IntoResponse;

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
