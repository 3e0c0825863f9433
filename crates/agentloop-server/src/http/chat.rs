//! `POST /v1/chat` and its reconnect and cancel endpoints.

use std::convert::Infallible;
use std::sync::Arc;

use agentloop::Message;
use agentloop::run::Decision;
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
use crate::chat::{self, ChatStart, ResumeError, new_id};
use crate::events::{PROTOCOL_HEADER, PROTOCOL_VERSION};
use crate::runs::{After, RunLog};
use crate::state::AppState;
use crate::store::title_from;

/// The body of `POST /v1/chat`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    #[serde(default)]
    conversation_id: Option<String>,
    message: String,
    /// Answer with JSON following this JSON Schema: the checked value comes as an `output`
    /// event before `message_end`.
    #[serde(default)]
    output_schema: Option<serde_json::Value>,
}

pub(crate) async fn post_chat(
    State(state): State<AppState>,
    body: Result<Json<ChatRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(request) = body?;
    if request.message.trim().is_empty() {
        return Err(ApiError::bad_request("the message is empty"));
    }
    if let Some(schema) = &request.output_schema
        && !schema.is_object()
    {
        return Err(ApiError::bad_request(
            "output_schema must be a JSON Schema object",
        ));
    }
    let output_schema = request.output_schema;
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
                output_schema,
            }
        }
        None => ChatStart {
            conversation_id: new_id("conv"),
            create: Some(title_from(&request.message)),
            history: vec![Message::user(request.message)],
            stored: 0,
            output_schema,
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
    let run = chat::find(&state, &message_id).await?.ok_or_else(|| {
        ApiError::not_found(format!(
            "no answer `{message_id}` is running or recently finished"
        ))
    })?;
    let from = match headers.get("last-event-id") {
        None => 0,
        Some(value) => {
            let next =
                resume_after(value.as_bytes()).map_err(|e| ApiError::bad_request(e.to_string()))?;
            // Ids only name frames already recorded, so one past the log is none this stream
            // ever sent; but a copy of an answer another server runs may lag behind it by a
            // write or two.
            if run.is_remote() && !run.is_finished() {
                let mut changes = run.watch();
                let caught_up = async {
                    while matches!(run.after(next - 1), Err(After::Past))
                        && !run.is_finished()
                        && changes.changed().await
                    {}
                };
                let _ = tokio::time::timeout(REMOTE_LAG, caught_up).await;
            }
            match run.after(next - 1) {
                Ok(from) => from,
                // Sent by the server running the answer but not stored (yet): it may have
                // died before writing it. The stored log is what any server goes on from.
                // (A copy that ended because another server took the answer over and cut
                // its log says the same: the client reconnects from the last stored event.)
                Err(After::Past) if run.is_remote() => {
                    let last_kept = run.end_id().saturating_sub(1);
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        format!(
                            "event {} is not in the stored log of this answer, which runs on \
                             another server (that server may have stopped before storing it); \
                             drop the events after {last_kept} and reconnect with \
                             Last-Event-ID {last_kept}",
                            next - 1
                        ),
                    ));
                }
                Err(After::Past) => {
                    return Err(ApiError::bad_request(format!(
                        "Last-Event-ID {} is past the last event of this answer",
                        next - 1
                    )));
                }
                Err(After::Lost { last_kept }) => {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        format!(
                            "event {} was lost when the server restarted: the answer went on \
                             from its last checkpoint, whose last event is {last_kept}; drop \
                             the events after {last_kept} and reconnect with Last-Event-ID \
                             {last_kept}",
                            next - 1
                        ),
                    ));
                }
            }
        }
    };
    Ok(event_stream(&state, run, from))
}

/// How long a reconnect to a server that follows an answer another server runs waits for an
/// id it has not read yet from the database.
const REMOTE_LAG: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a `Last-Event-ID` header cannot be resumed from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidLastEventId {
    /// Not a plain decimal number.
    #[error("Last-Event-ID must be the id of an event of this stream")]
    NotANumber,
    /// A number larger than any event id can be.
    #[error("Last-Event-ID {0} is larger than any event id")]
    TooLarge(String),
}

/// Where a reconnect resumes, given the `Last-Event-ID` header's bytes: the position of the
/// first event after that id. Event ids are plain decimal numbers (surrounding whitespace is
/// ignored); anything else, and ids too large to be followed by an event, are errors rather
/// than a wrap-around that would replay the whole answer.
pub fn resume_after(last_event_id: &[u8]) -> Result<usize, InvalidLastEventId> {
    let digits = last_event_id.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(InvalidLastEventId::NotANumber);
    }
    let text = std::str::from_utf8(digits).map_err(|_| InvalidLastEventId::NotANumber)?;
    text.parse::<usize>()
        .ok()
        .and_then(|id| id.checked_add(1))
        .ok_or_else(|| {
            let quoted = match text.get(..40) {
                Some(start) if text.len() > 40 => format!("{start}…"),
                _ => text.to_owned(),
            };
            InvalidLastEventId::TooLarge(quoted)
        })
}

/// `POST /v1/chat/{message_id}/cancel`: stop the answer; what it produced so far is kept.
pub(crate) async fn cancel(
    State(state): State<AppState>,
    Path(message_id): Path<String>,
) -> Result<Response, ApiError> {
    let run = chat::find(&state, &message_id).await?.ok_or_else(|| {
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
    // Run by another server sharing the database: that server is asked to stop it.
    if run.is_remote() && !state.inner.store.request_cancel(message_id.clone()).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("the answer `{message_id}` has finished already"),
        ));
    }
    if run.is_remote() {
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({ "message_id": message_id, "cancelled": true })),
        )
            .into_response());
    }
    if let Some(paused) = run.take_paused() {
        chat::end_paused(&state, run, paused).await;
    } else {
        run.cancel.cancel();
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "message_id": message_id, "cancelled": true })),
    )
        .into_response())
}

/// The body of `POST /v1/chat/{message_id}/approvals`: a decision for every call the answer
/// waits on.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsRequest {
    decisions: Vec<DecisionItem>,
}

/// One call's decision: `{"id": "call_1", "decision": "approve"}`, `"approve_edited"` with an
/// `input`, `"deny"` with a `message` for the model, or `"always_approve"`.
#[derive(Debug, Deserialize)]
pub struct DecisionItem {
    id: String,
    #[serde(flatten)]
    decision: Decision,
}

/// `POST /v1/chat/{message_id}/approvals`: decide the calls an answer waits on; the answer
/// goes on in its event stream (`GET /v1/chat/{message_id}/events` after a disconnect).
pub(crate) async fn approvals(
    State(state): State<AppState>,
    Path(message_id): Path<String>,
    body: Result<Json<ApprovalsRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(request) = body?;
    let run = chat::find(&state, &message_id).await?.ok_or_else(|| {
        ApiError::not_found(format!(
            "no answer `{message_id}` is running or recently finished"
        ))
    })?;
    let decisions = request
        .decisions
        .into_iter()
        .map(|item| (item.id, item.decision))
        .collect();
    chat::resume(&state, run, decisions)
        .await
        .map_err(|e| resume_error(&message_id, e))?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "message_id": message_id, "resumed": true })),
    )
        .into_response())
}

/// The answer to a refused resume of answer `message_id`.
pub(super) fn resume_error(message_id: &str, error: ResumeError) -> ApiError {
    match error {
        ResumeError::NotPaused => ApiError::new(
            StatusCode::CONFLICT,
            format!("the answer `{message_id}` is not waiting for approval"),
        ),
        ResumeError::Invalid(message) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message),
        ResumeError::Store(e) => e.into(),
    }
}

/// The protocol's SSE response following `run` from frame `from` on. Event ids increase, not
/// contiguously (frames the protocol does not show are skipped, and an answer resumed after a
/// restart skips ahead).
fn event_stream(state: &AppState, run: Arc<RunLog>, from: usize) -> Response {
    let headers = stream_headers(&run);
    let events = run.follow(from).filter_map(|(id, frame)| async move {
        let event = frame.chat_event()?;
        Some(Ok::<_, Infallible>(
            Event::default()
                .event(event.name())
                .id(id.to_string())
                .data(event.data().to_string()),
        ))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_event_ids_resume_after_themselves_without_overflow() {
        assert_eq!(resume_after(b"0"), Ok(1));
        assert_eq!(resume_after(b" 41 "), Ok(42));
        assert_eq!(resume_after(b"007"), Ok(8));
        let max = usize::MAX.to_string();
        assert!(matches!(
            resume_after(max.as_bytes()),
            Err(InvalidLastEventId::TooLarge(_))
        ));
        assert_eq!(
            resume_after((usize::MAX - 1).to_string().as_bytes()),
            Ok(usize::MAX)
        );
        for bad in [
            &b""[..],
            b" ",
            b"-1",
            b"+1",
            b"1e3",
            b"0x10",
            b"1 2",
            b"\xff",
            "\u{0663}".as_bytes(),
        ] {
            assert_eq!(
                resume_after(bad),
                Err(InvalidLastEventId::NotANumber),
                "{bad:?}"
            );
        }
        assert!(matches!(
            resume_after(&[b'9'; 1000]),
            Err(InvalidLastEventId::TooLarge(_))
        ));
    }
}
