//! The HTTP surface: routes, errors, authentication, limits.

mod auth;
pub(crate) mod chat;
mod conversations;
mod page;
pub(crate) mod ui_stream;

use axum::Json;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::chat::StartError;
use crate::error::ServerError;
use crate::events::PROTOCOL_HEADER;
use crate::state::AppState;

/// Response header with the conversation id of a chat stream.
pub const CONVERSATION_HEADER: &str = "x-agentloop-conversation-id";
/// Response header with the message id of a chat stream (the key for reconnecting).
pub const MESSAGE_HEADER: &str = "x-agentloop-message-id";

/// The server's routes, ready to serve or to nest in a larger app.
///
/// `/` serves the web page; everything under `/v1` is the API (bearer-token protected when a
/// token is configured). See the crate documentation for the endpoints and the event protocol.
pub fn router(state: AppState) -> Router {
    let config = state.config();
    let api = Router::new()
        .route("/v1/chat", post(chat::post_chat))
        .route("/v1/chat/{message_id}/events", get(chat::get_events))
        .route("/v1/chat/{message_id}/cancel", post(chat::cancel))
        .route("/v1/chat/{message_id}/approvals", post(chat::approvals))
        .route("/v1/chat/ui-stream", post(ui_stream::post_ui_stream))
        .route(
            "/v1/chat/ui-stream/{chat_id}/stream",
            get(ui_stream::resume),
        )
        .route("/v1/conversations", get(conversations::list))
        .route(
            "/v1/conversations/{id}",
            get(conversations::get)
                .patch(conversations::rename)
                .delete(conversations::delete),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::check_origin,
        ));
    let mut app = Router::new()
        .route("/", get(page::index))
        .route("/c/{id}", get(page::index))
        .route("/assets/app.js", get(page::script))
        .route("/assets/app.css", get(page::stylesheet))
        .route("/assets/vendor/{file}", get(page::vendor))
        .merge(api)
        .layer(DefaultBodyLimit::max(config.max_body_bytes));
    // Outside the token check, so that preflight requests (which carry no token) get their
    // answer.
    if let Some(cors) = cors_layer(&config.cors_origins) {
        app = app.layer(cors);
    }
    app.layer(middleware::from_fn_with_state(
        state.clone(),
        auth::check_host,
    ))
    .layer(middleware::map_response(no_sniffing))
    .with_state(state)
}

/// Browsers must take every answer for the type it says it is (a JSON error is no script).
async fn no_sniffing(mut response: Response) -> Response {
    response
        .headers_mut()
        .entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(HeaderValue::from_static("nosniff"));
    response
}

fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                // Browsers send origins without a trailing slash, host in lowercase.
                .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
                .filter_map(|o| match HeaderValue::from_str(&o) {
                    Ok(v) => Some(v),
                    Err(_) => {
                        tracing::warn!("ignoring the CORS origin `{o}`: not a valid header value");
                        None
                    }
                }),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
            .allow_headers([
                header::CONTENT_TYPE,
                header::AUTHORIZATION,
                HeaderName::from_static("last-event-id"),
            ])
            .expose_headers([
                HeaderName::from_static(PROTOCOL_HEADER),
                HeaderName::from_static(CONVERSATION_HEADER),
                HeaderName::from_static(MESSAGE_HEADER),
                HeaderName::from_static(ui_stream::UI_STREAM_HEADER),
            ]),
    )
}

/// An error answer: `{"error": {"message": "..."}}` with a status.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({ "error": { "message": self.message } })),
        )
            .into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        Self::new(rejection.status(), rejection.body_text())
    }
}

impl From<ServerError> for ApiError {
    fn from(error: ServerError) -> Self {
        // The details (paths, SQLite messages) are for the operator, not for web users.
        tracing::error!("{error}");
        let message = match error {
            ServerError::Database { .. } => {
                "a database operation failed; the server log has the details"
            }
            _ => "the server failed to answer; the server log has the details",
        };
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl From<StartError> for ApiError {
    fn from(error: StartError) -> Self {
        match error {
            StartError::Busy(message_id) => Self::new(
                StatusCode::CONFLICT,
                format!(
                    "the conversation is still answering (message `{message_id}`); wait for it, or cancel it with POST /v1/chat/{message_id}/cancel"
                ),
            ),
            StartError::InvalidHistory(message) => Self::bad_request(message),
            StartError::Store(error) => error.into(),
        }
    }
}

/// A client-chosen conversation id must be short and plain (it goes into headers and URLs).
pub(crate) fn check_conversation_id(id: &str) -> Result<(), ApiError> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':');
    if id.is_empty() || id.len() > 128 || !id.chars().all(plain) {
        return Err(ApiError::bad_request(
            "a conversation id is 1 to 128 characters of A-Z, a-z, 0-9, `_`, `-`, `.` and `:`",
        ));
    }
    Ok(())
}
