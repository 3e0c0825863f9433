//! The benchmark server: every turn's replies are rendered once at start and served by
//! position in the conversation, with no recording and no rendering per request.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::State;
use axum::http::{Method, Uri};
use axum::response::Response;
use bytes::Bytes;
use serde::Deserialize;

use super::Wire;
use super::fault::WriteMode;
use super::render::{Shape, error_reply, render};
use super::reply::Reply;
use super::wire_error::{ErrorKind, WireError};
use crate::turn::Turn;

/// The replies of one turn, for each shape a request can ask for.
struct Variants {
    json: Arc<Reply>,
    stream: Arc<Reply>,
    /// OpenAI with `stream_options.include_usage` (the same as `stream` on Anthropic).
    stream_with_usage: Arc<Reply>,
}

pub(crate) struct Prerendered {
    wire: Wire,
    turns: Vec<Variants>,
    no_turns: Arc<Reply>,
    pub(crate) calls: AtomicUsize,
}

impl Prerendered {
    pub(crate) fn new(wire: Wire, turns: &[Turn], mode: WriteMode, model: &str) -> Self {
        let turns = turns
            .iter()
            .enumerate()
            .map(|(turn_index, turn)| {
                let shape = |stream, include_usage| Shape {
                    wire,
                    stream,
                    include_usage,
                    model,
                    turn_index,
                };
                let stream = Arc::new(render(turn, &shape(true, false), None, mode));
                Variants {
                    json: Arc::new(render(turn, &shape(false, false), None, mode)),
                    stream_with_usage: match wire {
                        Wire::OpenAi => Arc::new(render(turn, &shape(true, true), None, mode)),
                        Wire::Anthropic | Wire::Gemini | Wire::Bedrock | Wire::Responses => {
                            Arc::clone(&stream)
                        }
                    },
                    stream,
                }
            })
            .collect();
        let no_turns = WireError::new(
            ErrorKind::Internal,
            "agentloop-testkit pre-rendered server: it was started without turns",
        );
        Self {
            wire,
            turns,
            no_turns: Arc::new(error_reply(wire, &no_turns)),
            calls: AtomicUsize::new(0),
        }
    }

    fn pick(&self, path: &str, body: &[u8]) -> Arc<Reply> {
        let probe: Probe = match serde_json::from_slice(body) {
            Ok(probe) => probe,
            Err(e) => {
                let error = WireError::new(
                    ErrorKind::InvalidRequest,
                    format!("mock server: the request body is not valid JSON: {e}"),
                );
                return Arc::new(error_reply(self.wire, &error));
            }
        };
        if self.turns.is_empty() {
            return Arc::clone(&self.no_turns);
        }
        let answered = probe
            .messages
            .iter()
            .chain(&probe.contents)
            .chain(&probe.input)
            .filter(|m| matches!(m.role, Role::Assistant))
            .count();
        let stream = match self.wire {
            Wire::Gemini => super::gemini::call_of(path).1,
            Wire::Bedrock => super::bedrock::call_of(path).1,
            Wire::OpenAi | Wire::Anthropic | Wire::Responses => probe.stream.unwrap_or(false),
        };
        let variants = &self.turns[answered % self.turns.len()];
        let include_usage = probe
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        Arc::clone(match (stream, include_usage) {
            (false, _) => &variants.json,
            (true, false) => &variants.stream,
            (true, true) => &variants.stream_with_usage,
        })
    }
}

/// The little of a request the pre-rendered server reads; everything else is skipped unparsed.
#[derive(Deserialize)]
struct Probe {
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    messages: Vec<MessageRole>,
    /// Gemini's history, where the model's turns have the role `model`.
    #[serde(default)]
    contents: Vec<MessageRole>,
    /// The Responses API's history: assistant messages have the role `assistant` (a turn of
    /// only function calls has none, so such a turn is not counted).
    #[serde(default)]
    input: Vec<MessageRole>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct MessageRole {
    #[serde(default)]
    role: Role,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "lowercase")]
enum Role {
    #[serde(alias = "model")]
    Assistant,
    #[default]
    #[serde(other)]
    Other,
}

/// `POST` on the wire's endpoint.
pub(crate) async fn call(
    State(server): State<Arc<Prerendered>>,
    uri: Uri,
    body: Bytes,
) -> Response {
    server.calls.fetch_add(1, Ordering::Relaxed);
    server.pick(uri.path(), &body).respond().await
}

/// Anything else: 404 in the wire's error shape.
pub(crate) async fn not_found(
    State(server): State<Arc<Prerendered>>,
    method: Method,
    uri: Uri,
) -> Response {
    let message = super::not_found_message(server.wire, &method, uri.path());
    let error = WireError::new(ErrorKind::NotFound, message);
    Arc::new(error_reply(server.wire, &error)).respond().await
}
