//! The web page: static files compiled into the binary.

use axum::http::header;
use axum::response::{Html, IntoResponse};

pub(crate) async fn index() -> Html<&'static str> {
    Html(include_str!("../../static/index.html"))
}

pub(crate) async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../../static/app.js"),
    )
}

pub(crate) async fn stylesheet() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../static/app.css"),
    )
}
