//! `POST /v1/chat` and its reconnect and cancel endpoints.

use std::convert::Infallible;
use std::sync::Arc;

use agentloop::Message;
use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;

use super::{ApiError, CONVERSATION_HEADER, MESSAGE_HEADER, check_conversation_id};
use crate::chat::{self, ChatStart, new_id};
use crate::events::{Frame, PROTOCOL_HEADER, PROTOCOL_VERSION};
use crate::runs::RunLog;
use crate::state::AppState;
use crate::store::title_from;

/// The body of `POST /v1/chat`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    #[serde(default)]
    conversation_id: Option<String>,
    message: String,
}

pub(crate) async fn post_chat(
    State(state): State<AppState>,
    body: Result<Json<ChatRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(request) = body?;
    if request.message.trim().is_empty() {
        return Err(ApiError::bad_request("the message is empty"));
    }
    let start = match request.conversation_id {
        Some(id) => {
            check_conversation_id(&id)?;
            let stored = state
                .conversation(&id)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("no conversation has the id `{id}`")))?;
            let mut history = stored.messages;
            let stored = history.len();
            history.push(Message::user(request.message));
            ChatStart {
                conversation_id: id,
                create: None,
                history,
                stored,
            }
        }
        None => ChatStart {
            conversation_id: new_id("conv"),
            create: Some(title_from(&request.message)),
            history: vec![Message::user(request.message)],
            stored: 0,
        },
    };
    let run = chat::start(&state, start).await?;
    Ok(event_stream(&state, run, 0))
}

/// `GET /v1/chat/{message_id}/events`: the events after `Last-Event-ID` (all without it).
pub(crate) async fn get_events(
    State(state): State<AppState>,
    Path(message_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let run = state.inner.runs.get(&message_id).ok_or_else(|| {
        ApiError::not_found(format!(
            "no answer `{message_id}` is running or recently finished"
        ))
    })?;
    let from = match headers.get("last-event-id") {
        None => 0,
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map(|id| id + 1)
            .ok_or_else(|| {
                ApiError::bad_request("Last-Event-ID must be the id of an event of this stream")
            })?,
    };
    Ok(event_stream(&state, run, from))
}

/// `POST /v1/chat/{message_id}/cancel`: stop the answer; what it produced so far is kept.
pub(crate) async fn cancel(
    State(state): State<AppState>,
    Path(message_id): Path<String>,
) -> Result<Response, ApiError> {
    let run = state.inner.runs.get(&message_id).ok_or_else(|| {
        ApiError::not_found(format!(
            "no answer `{message_id}` is running or recently finished"
        ))
    })?;
    if run.is_finished() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("the answer `{message_id}` has finished already"),
        ));
    }
    run.cancel.cancel();
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "message_id": message_id, "cancelled": true })),
    )
        .into_response())
}

/// The protocol's SSE response following `run` from frame `from` on. Event ids are frame
/// indexes: increasing, not contiguous (frames the protocol does not show are skipped).
fn event_stream(state: &AppState, run: Arc<RunLog>, from: usize) -> Response {
    let headers = stream_headers(&run);
    let events = run.follow(from).filter_map(|(index, frame)| async move {
        match &*frame {
            Frame::Chat(event) => Some(Ok::<_, Infallible>(
                Event::default()
                    .event(event.name())
                    .id(index.to_string())
                    .data(event.data().to_string()),
            )),
            _ => None,
        }
    });
    let keep_alive = KeepAlive::new()
        .interval(state.config().keep_alive)
        .text("keep-alive");
    (headers, Sse::new(events).keep_alive(keep_alive)).into_response()
}

/// Headers of every chat stream: protocol version, ids, no caching or proxy buffering.
pub(crate) fn stream_headers(run: &RunLog) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        HeaderName::from_static(PROTOCOL_HEADER),
        HeaderValue::from(PROTOCOL_VERSION),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tell reverse proxies (nginx) not to buffer the stream.
    headers.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    for (name, value) in [
        (CONVERSATION_HEADER, &run.conversation_id),
        (MESSAGE_HEADER, &run.message_id),
    ] {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    headers
}
