//! The Bedrock wire: `POST /model/<modelId>/converse-stream` (AWS event-stream frames) and
//! `/model/<modelId>/converse` (one JSON body), with `{"message": ...}` errors named by the
//! `x-amzn-ErrorType` header, and exceptions mid-stream as `:message-type: exception` frames.
//!
//! Shapes follow the Bedrock API reference ("ConverseStreamOutput", "ContentBlockDeltaEvent",
//! "ReasoningContentBlockDelta", "MessageStopEvent", "ConverseStreamMetadataEvent",
//! "Converse" for the whole answer and its errors) and the recordings in
//! conformance/streams-batch2/bedrock/ (no `contentBlockStart` for text and reasoning, the
//! signature in a delta of its own, `metadata` after `messageStop`).

use agentloop::provider::bedrock::eventstream;
use agentloop::{StopReason, Usage};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::render::{Shape, json_bytes};
use super::wire_error::{ErrorKind, WireError};
use crate::turn::{Turn, TurnItem, split_pieces};

fn frame(kind: &str, payload: &Value) -> Bytes {
    Bytes::from(eventstream::event(kind, &json_bytes(payload)))
}

fn stop_reason(stop: &StopReason) -> String {
    match stop {
        StopReason::EndTurn => "end_turn".into(),
        StopReason::ToolUse => "tool_use".into(),
        StopReason::MaxTokens => "max_tokens".into(),
        StopReason::StopSequence => "stop_sequence".into(),
        StopReason::Refusal => "content_filtered".into(),
        StopReason::Other(other) => other.clone(),
    }
}

fn usage(usage: &Usage) -> Value {
    let mut out = Map::new();
    out.insert("inputTokens".into(), usage.input_tokens.into());
    out.insert("outputTokens".into(), usage.output_tokens.into());
    out.insert(
        "totalTokens".into(),
        (usage.input_tokens + usage.output_tokens).into(),
    );
    if usage.cache_read_tokens > 0 {
        out.insert(
            "cacheReadInputTokens".into(),
            usage.cache_read_tokens.into(),
        );
    }
    if usage.cache_write_tokens > 0 {
        out.insert(
            "cacheWriteInputTokens".into(),
            usage.cache_write_tokens.into(),
        );
    }
    Value::Object(out)
}

/// `input` as Converse sends it whole: an object (invalid JSON, scripted on purpose, as text).
fn input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(Map::new());
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

/// The frames of a streamed answer: text and reasoning in pieces with no start event, each
/// call with a start, its input in fragments and a stop, then `messageStop` and `metadata`.
pub(super) fn stream(turn: &Turn, _shape: &Shape<'_>) -> Vec<Bytes> {
    let calls = turn.resolved_calls(_shape.turn_index);
    let mut calls = calls.iter();
    let mut frames = vec![frame("messageStart", &json!({"role": "assistant"}))];
    let mut index = 0;
    for item in &turn.items {
        let delta = |index: usize, delta: Value| {
            frame(
                "contentBlockDelta",
                &json!({"contentBlockIndex": index, "delta": delta}),
            )
        };
        match item {
            TurnItem::Text(text) => {
                for piece in split_pieces(text, turn.pieces.text) {
                    frames.push(delta(index, json!({"text": piece})));
                }
            }
            TurnItem::Thinking { text, signature } => {
                for piece in split_pieces(text, turn.pieces.thinking) {
                    frames.push(delta(index, json!({"reasoningContent": {"text": piece}})));
                }
                if let Some(signature) = signature {
                    frames.push(delta(
                        index,
                        json!({"reasoningContent": {"signature": signature}}),
                    ));
                }
            }
            TurnItem::ToolCall { .. } => {
                let Some((id, name, arguments)) = calls.next() else {
                    continue;
                };
                frames.push(frame(
                    "contentBlockStart",
                    &json!({"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": id, "name": name}}}),
                ));
                for piece in split_pieces(arguments, turn.pieces.arguments) {
                    frames.push(delta(index, json!({"toolUse": {"input": piece}})));
                }
            }
        }
        frames.push(frame(
            "contentBlockStop",
            &json!({"contentBlockIndex": index}),
        ));
        index += 1;
    }
    frames.push(frame(
        "messageStop",
        &json!({"stopReason": stop_reason(&turn.effective_stop_reason())}),
    ));
    frames.push(frame(
        "metadata",
        &json!({"usage": usage(&turn.usage), "metrics": {"latencyMs": 0}}),
    ));
    frames
}

/// The `Converse` answer of a non-streamed call.
pub(super) fn body(turn: &Turn, shape: &Shape<'_>) -> Bytes {
    let calls = turn.resolved_calls(shape.turn_index);
    let mut calls = calls.iter();
    let mut content = Vec::new();
    for item in &turn.items {
        match item {
            TurnItem::Text(text) => content.push(json!({"text": text})),
            TurnItem::Thinking { text, signature } => {
                let mut reasoning = Map::new();
                reasoning.insert("text".into(), text.clone().into());
                if let Some(signature) = signature {
                    reasoning.insert("signature".into(), signature.clone().into());
                }
                content.push(json!({"reasoningContent": {"reasoningText": reasoning}}));
            }
            TurnItem::ToolCall { .. } => {
                if let Some((id, name, arguments)) = calls.next() {
                    content.push(json!({"toolUse": {"toolUseId": id, "name": name, "input": input(arguments)}}));
                }
            }
        }
    }
    json_bytes(&json!({
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason(&turn.effective_stop_reason()),
        "usage": usage(&turn.usage),
        "metrics": {"latencyMs": 0},
    }))
}

/// The status and exception name Bedrock answers an error with ("Converse" → "Errors").
fn code(error: &WireError) -> (u16, &str) {
    let (status, name) = match &error.kind {
        ErrorKind::InvalidRequest => (400, "ValidationException"),
        ErrorKind::Authentication => (403, "UnrecognizedClientException"),
        ErrorKind::Permission => (403, "AccessDeniedException"),
        ErrorKind::NotFound => (404, "ResourceNotFoundException"),
        ErrorKind::RateLimit => (429, "ThrottlingException"),
        ErrorKind::Internal => (500, "InternalServerException"),
        ErrorKind::Overloaded => (503, "ServiceUnavailableException"),
        ErrorKind::Timeout => (408, "ModelTimeoutException"),
        ErrorKind::Named(name) => (400, name.as_str()),
    };
    (error.status.unwrap_or(status), name)
}

/// The status Bedrock answers an error with.
pub(super) fn status(error: &WireError) -> u16 {
    code(error).0
}

/// The `x-amzn-ErrorType` header naming the error.
pub(super) fn error_type(error: &WireError) -> String {
    format!(
        "{}:http://internal.amazon.com/coral/com.amazon.bedrock/",
        code(error).1
    )
}

/// The error body of a failed call.
pub(super) fn error_body(error: &WireError) -> Bytes {
    json_bytes(&json!({"message": error.message}))
}

/// An exception frame inside a 200 stream (`throttlingException`, ...: the exception's name
/// with a lower-case first letter, as the event-stream members are named).
pub(super) fn error_frame(error: &WireError) -> Bytes {
    let name = code(error).1;
    let mut member = name[..1].to_ascii_lowercase();
    member.push_str(&name[1..]);
    Bytes::from(eventstream::exception(
        &member,
        &json_bytes(&json!({"message": error.message})),
    ))
}

/// A frame whose JSON is cut off (its CRCs are right: the damage is in the payload).
pub(super) fn malformed_frame() -> Bytes {
    Bytes::from(eventstream::event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":0,"delta":{"text":"tru"#,
    ))
}

/// The model and whether the answer streams, from the request path
/// (`/model/<modelId>/converse-stream`).
pub(crate) fn call_of(path: &str) -> (Option<String>, bool) {
    let mut parts = path.trim_start_matches('/').splitn(3, '/');
    let (_, model, method) = (parts.next(), parts.next(), parts.next());
    let model = model.filter(|m| !m.is_empty()).map(percent_decode);
    (model, method == Some("converse-stream"))
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = text
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
