//! The Anthropic Messages wire: `event:`-named SSE streams, `message` bodies and
//! `{"type": "error", "error": {...}}` errors.
//!
//! Shapes follow the Messages streaming reference (platform.claude.com/docs/build-with-claude/
//! streaming: message_start, content_block_start/delta/stop, message_delta, message_stop, ping,
//! error) and the recordings in conformance/streams/anthropic/: text-with-ping.sse (a `ping` right
//! after the first content_block_start, `output_tokens: 1` in message_start), text-then-tool-use.sse
//! (tool_use starts with `input: {}` and an empty first `partial_json`),
//! thinking-signature-padded.sse (thinking starts with empty `thinking` and `signature`, then
//! thinking_delta pieces and one signature_delta) and error-overloaded-midstream.ASSEMBLED.sse
//! (`event: error` with `overloaded_error`). Error statuses and types: the Messages API errors
//! page (400 invalid_request_error ... 429 rate_limit_error, 500 api_error, 529 overloaded_error).

use agentloop::Usage;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use super::render::{Shape, json_bytes, sse_frame};
use super::wire_error::{ErrorKind, WireError};
use crate::turn::{Turn, TurnItem, split_pieces};

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event<'a> {
    MessageStart {
        message: MessageOut<'a>,
    },
    ContentBlockStart {
        index: usize,
        content_block: Block<'a>,
    },
    Ping,
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta<'a>,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: StopDelta<'a>,
        usage: OutputUsage,
    },
    MessageStop,
}

impl Event<'_> {
    fn name(&self) -> &'static str {
        match self {
            Self::MessageStart { .. } => "message_start",
            Self::ContentBlockStart { .. } => "content_block_start",
            Self::Ping => "ping",
            Self::ContentBlockDelta { .. } => "content_block_delta",
            Self::ContentBlockStop { .. } => "content_block_stop",
            Self::MessageDelta { .. } => "message_delta",
            Self::MessageStop => "message_stop",
        }
    }
}

#[derive(Serialize)]
struct MessageOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<Block<'a>>,
    stop_reason: Option<&'a str>,
    stop_sequence: Option<()>,
    usage: UsageOut,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Thinking {
        thinking: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        signature: Option<&'a str>,
    },
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta<'a> {
    #[serde(rename = "text_delta")]
    Text { text: &'a str },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: &'a str },
    #[serde(rename = "signature_delta")]
    Signature { signature: &'a str },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: &'a str },
}

#[derive(Serialize)]
struct StopDelta<'a> {
    stop_reason: &'a str,
    stop_sequence: Option<()>,
}

#[derive(Serialize)]
struct UsageOut {
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
    output_tokens: u64,
}

impl UsageOut {
    fn new(usage: &Usage, output_tokens: u64) -> Self {
        Self {
            input_tokens: usage.input_tokens,
            cache_creation_input_tokens: usage.cache_write_tokens,
            cache_read_input_tokens: usage.cache_read_tokens,
            output_tokens,
        }
    }
}

#[derive(Serialize)]
struct OutputUsage {
    output_tokens: u64,
}

fn message_id(shape: &Shape<'_>) -> String {
    format!("msg_mock_{}", shape.turn_index)
}

fn frame(event: &Event<'_>) -> Bytes {
    sse_frame(Some(event.name()), event)
}

fn delta_frame(index: usize, delta: BlockDelta<'_>) -> Bytes {
    frame(&Event::ContentBlockDelta { index, delta })
}

/// The SSE events of a streamed answer, one frame each.
pub(super) fn stream(turn: &Turn, shape: &Shape<'_>) -> Vec<Bytes> {
    let id = message_id(shape);
    let mut frames = vec![frame(&Event::MessageStart {
        message: MessageOut {
            id: &id,
            kind: "message",
            role: "assistant",
            model: shape.model,
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            // The real API reports 1 output token at the start and the total at the end.
            usage: UsageOut::new(&turn.usage, turn.usage.output_tokens.min(1)),
        },
    })];
    let calls = turn.resolved_calls(shape.turn_index);
    let mut calls = calls.iter();
    for (index, item) in turn.items.iter().enumerate() {
        let call = match item {
            TurnItem::ToolCall { .. } => calls.next(),
            _ => None,
        };
        let content_block = match (item, call) {
            (TurnItem::Text(_), _) => Block::Text { text: "" },
            (TurnItem::Thinking { .. }, _) => Block::Thinking {
                thinking: "",
                signature: Some(""),
            },
            (TurnItem::ToolCall { .. }, Some((id, name, _))) => Block::ToolUse {
                id,
                name,
                input: Value::Object(Default::default()),
            },
            (TurnItem::ToolCall { .. }, None) => continue,
        };
        frames.push(frame(&Event::ContentBlockStart {
            index,
            content_block,
        }));
        if index == 0 {
            frames.push(frame(&Event::Ping));
        }
        match (item, call) {
            (TurnItem::Text(text), _) => {
                for piece in split_pieces(text, turn.pieces.text) {
                    frames.push(delta_frame(index, BlockDelta::Text { text: &piece }));
                }
            }
            (TurnItem::Thinking { text, signature }, _) => {
                for piece in split_pieces(text, turn.pieces.thinking) {
                    frames.push(delta_frame(
                        index,
                        BlockDelta::Thinking { thinking: &piece },
                    ));
                }
                if let Some(signature) = signature {
                    frames.push(delta_frame(index, BlockDelta::Signature { signature }));
                }
            }
            (TurnItem::ToolCall { .. }, Some((_, _, arguments))) => {
                frames.push(delta_frame(
                    index,
                    BlockDelta::InputJson { partial_json: "" },
                ));
                for piece in split_pieces(arguments, turn.pieces.arguments) {
                    frames.push(delta_frame(
                        index,
                        BlockDelta::InputJson {
                            partial_json: &piece,
                        },
                    ));
                }
            }
            (TurnItem::ToolCall { .. }, None) => {}
        }
        frames.push(frame(&Event::ContentBlockStop { index }));
    }
    if turn.items.is_empty() {
        frames.push(frame(&Event::Ping));
    }
    let stop = turn.effective_stop_reason();
    frames.push(frame(&Event::MessageDelta {
        delta: StopDelta {
            stop_reason: stop.as_str(),
            stop_sequence: None,
        },
        usage: OutputUsage {
            output_tokens: turn.usage.output_tokens,
        },
    }));
    frames.push(frame(&Event::MessageStop));
    frames
}

/// The tool input of a non-streamed answer: the arguments as JSON, `{}` when empty, and the raw
/// text as a JSON string when it is not JSON (a body must stay parseable).
fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

/// The `message` body of a non-streamed answer.
pub(super) fn body(turn: &Turn, shape: &Shape<'_>) -> Bytes {
    let id = message_id(shape);
    let calls = turn.resolved_calls(shape.turn_index);
    let mut calls = calls.iter();
    let content = turn
        .items
        .iter()
        .filter_map(|item| match item {
            TurnItem::Text(text) => Some(Block::Text { text }),
            TurnItem::Thinking { text, signature } => Some(Block::Thinking {
                thinking: text,
                signature: signature.as_deref(),
            }),
            TurnItem::ToolCall { .. } => calls.next().map(|(id, name, arguments)| Block::ToolUse {
                id,
                name,
                input: tool_input(arguments),
            }),
        })
        .collect();
    let stop = turn.effective_stop_reason();
    json_bytes(&MessageOut {
        id: &id,
        kind: "message",
        role: "assistant",
        model: shape.model,
        content,
        stop_reason: Some(stop.as_str()),
        stop_sequence: None,
        usage: UsageOut::new(&turn.usage, turn.usage.output_tokens),
    })
}

#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: &'a str,
}

fn error_envelope(error: &WireError) -> ErrorEnvelope<'_> {
    let kind = match &error.kind {
        ErrorKind::InvalidRequest => "invalid_request_error",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::Permission => "permission_error",
        ErrorKind::NotFound => "not_found_error",
        ErrorKind::RateLimit => "rate_limit_error",
        ErrorKind::Internal => "api_error",
        ErrorKind::Overloaded => "overloaded_error",
        ErrorKind::Timeout => "timeout_error",
        ErrorKind::Named(name) => name,
    };
    ErrorEnvelope {
        kind: "error",
        error: ErrorObject {
            kind,
            message: &error.message,
        },
    }
}

/// The status Anthropic answers an error with.
pub(super) fn status(error: &WireError) -> u16 {
    error.status.unwrap_or(match error.kind {
        ErrorKind::InvalidRequest | ErrorKind::Named(_) => 400,
        ErrorKind::Authentication => 401,
        ErrorKind::Permission => 403,
        ErrorKind::NotFound => 404,
        ErrorKind::RateLimit => 429,
        ErrorKind::Internal => 500,
        ErrorKind::Timeout => 504,
        ErrorKind::Overloaded => 529,
    })
}

/// The error body of a failed call.
pub(super) fn error_body(error: &WireError) -> Bytes {
    json_bytes(&error_envelope(error))
}

/// An `event: error` inside a 200 stream.
pub(super) fn error_frame(error: &WireError) -> Bytes {
    sse_frame(Some("error"), &error_envelope(error))
}

/// A delta cut off in the middle of its JSON.
pub(super) fn malformed_frame() -> Bytes {
    Bytes::from_static(
        b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_del\n\n",
    )
}
