//! The Gemini wire: `POST /v1beta/models/<model>:streamGenerateContent?alt=sse` (whole
//! `GenerateContentResponse` chunks as `data:` events) and `:generateContent` (one body), with
//! `{"error": {"code", "message", "status"}}` errors.
//!
//! Shapes follow the Gemini API reference ("Generating content": `candidates[].content.parts`,
//! `finishReason`, `usageMetadata`; "Function calling": `functionCall` with `id`, `name` and
//! `args` whole in one part; "Thinking": `thought: true` parts and `thoughtSignature`) and the
//! recordings in conformance/streams-batch2/gemini/ (`data: {...}\r\n\r\n` framing, the
//! thought signature on the first part after the thought summary,
//! `responseId` and `modelVersion` on every chunk, the finish reason and final usage on the
//! last chunk with an empty text part). Error statuses: Google's `google.rpc.Code` names
//! (`INVALID_ARGUMENT`, `RESOURCE_EXHAUSTED`, `UNAVAILABLE`, ...).

use agentloop::{StopReason, Usage};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::render::{Shape, json_bytes};
use super::wire_error::{ErrorKind, WireError};
use crate::turn::{Turn, TurnItem, split_pieces};

fn response_id(shape: &Shape<'_>) -> String {
    format!("mock-response-{}", shape.turn_index)
}

/// One SSE frame in Google's framing.
fn frame(data: &Value) -> Bytes {
    let json = json_bytes(data);
    let mut frame = Vec::with_capacity(json.len() + 10);
    frame.extend_from_slice(b"data: ");
    frame.extend_from_slice(&json);
    frame.extend_from_slice(b"\r\n\r\n");
    Bytes::from(frame)
}

/// A chunk holding `parts`, with the finish reason and usage when given.
fn chunk(
    shape: &Shape<'_>,
    parts: Vec<Value>,
    finish: Option<&str>,
    usage: Option<&Usage>,
) -> Value {
    let mut candidate = Map::new();
    // Key order as the Gemini API writes it (see the recordings).
    let mut content = Map::new();
    content.insert("parts".into(), Value::Array(parts));
    content.insert("role".into(), "model".into());
    candidate.insert("content".into(), Value::Object(content));
    if let Some(finish) = finish {
        candidate.insert("finishReason".into(), finish.into());
    }
    candidate.insert("index".into(), 0.into());
    let mut out = Map::new();
    out.insert("candidates".into(), json!([candidate]));
    if let Some(usage) = usage {
        out.insert("usageMetadata".into(), usage_metadata(usage));
    }
    out.insert("modelVersion".into(), shape.model.into());
    out.insert("responseId".into(), response_id(shape).into());
    Value::Object(out)
}

fn usage_metadata(usage: &Usage) -> Value {
    let mut out = Map::new();
    out.insert("promptTokenCount".into(), usage.input_tokens.into());
    out.insert("candidatesTokenCount".into(), usage.output_tokens.into());
    if usage.cache_read_tokens > 0 {
        out.insert(
            "cachedContentTokenCount".into(),
            usage.cache_read_tokens.into(),
        );
    }
    out.insert(
        "totalTokenCount".into(),
        (usage.input_tokens + usage.output_tokens).into(),
    );
    Value::Object(out)
}

/// Gemini's name for a stop reason: STOP covers tool use and stop sequences.
fn finish_reason(stop: &StopReason) -> String {
    match stop {
        StopReason::EndTurn | StopReason::ToolUse | StopReason::StopSequence => "STOP".into(),
        StopReason::MaxTokens => "MAX_TOKENS".into(),
        StopReason::Refusal => "SAFETY".into(),
        StopReason::Other(other) => other.to_ascii_uppercase(),
    }
}

/// `args` as Gemini sends them: an object. Invalid JSON (scripted on purpose) goes out as the
/// raw text, which the client keeps as invalid arguments.
fn args(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(Map::new());
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

fn call_part(id: &str, name: &str, arguments: &str) -> Value {
    json!({"functionCall": {"id": id, "name": name, "args": args(arguments)}})
}

fn thought_part(text: &str) -> Value {
    json!({"text": text, "thought": true})
}

/// `part` with `signature` (taken) on it. Gemini signs the first function call of a turn
/// that has calls, else the first answer text after the thought summary, else an empty text
/// part at the end; never the thought parts themselves (the recordings, and the "Thought
/// signatures" guide).
fn signed(mut part: Value, signature: &mut Option<&str>) -> Value {
    if let Some(signature) = signature.take() {
        part["thoughtSignature"] = signature.into();
    }
    part
}

/// Where the reasoning's signature goes: on calls when the turn has any.
fn signs_text(turn: &Turn) -> bool {
    !turn.has_tool_calls()
}

/// The SSE events of a streamed answer: text and reasoning in pieces, each call whole in its
/// own chunk, then the finish chunk with the usage.
pub(super) fn stream(turn: &Turn, shape: &Shape<'_>) -> Vec<Bytes> {
    let calls = turn.resolved_calls(shape.turn_index);
    let mut calls = calls.iter();
    let mut frames = Vec::new();
    let mut pending: Option<&str> = None;
    let mut push = |part: Value| frames.push(frame(&chunk(shape, vec![part], None, None)));
    for item in &turn.items {
        match item {
            TurnItem::Text(text) => {
                for piece in split_pieces(text, turn.pieces.text) {
                    let part = json!({ "text": piece });
                    push(if signs_text(turn) {
                        signed(part, &mut pending)
                    } else {
                        part
                    });
                }
            }
            TurnItem::Thinking { text, signature } => {
                for piece in split_pieces(text, turn.pieces.thinking) {
                    push(thought_part(&piece));
                }
                pending = signature.as_deref();
            }
            TurnItem::ToolCall { .. } => {
                if let Some((id, name, arguments)) = calls.next() {
                    push(signed(call_part(id, name, arguments), &mut pending));
                }
            }
        }
    }
    let finish = finish_reason(&turn.effective_stop_reason());
    let last = signed(json!({"text": ""}), &mut pending);
    frames.push(frame(&chunk(
        shape,
        vec![last],
        Some(&finish),
        Some(&turn.usage),
    )));
    frames
}

/// The `GenerateContentResponse` of a non-streamed answer.
pub(super) fn body(turn: &Turn, shape: &Shape<'_>) -> Bytes {
    let calls = turn.resolved_calls(shape.turn_index);
    let mut calls = calls.iter();
    let mut pending: Option<&str> = None;
    let mut parts = Vec::new();
    for item in &turn.items {
        match item {
            TurnItem::Text(text) if signs_text(turn) => {
                parts.push(signed(json!({ "text": text }), &mut pending));
            }
            TurnItem::Text(text) => parts.push(json!({ "text": text })),
            TurnItem::Thinking { text, signature } => {
                parts.push(thought_part(text));
                pending = signature.as_deref();
            }
            TurnItem::ToolCall { .. } => {
                if let Some((id, name, arguments)) = calls.next() {
                    parts.push(signed(call_part(id, name, arguments), &mut pending));
                }
            }
        }
    }
    if pending.is_some() {
        parts.push(signed(json!({"text": ""}), &mut pending));
    }
    let finish = finish_reason(&turn.effective_stop_reason());
    json_bytes(&chunk(shape, parts, Some(&finish), Some(&turn.usage)))
}

/// The status Gemini answers an error with, and its `google.rpc.Code` name.
fn code(error: &WireError) -> (u16, &str) {
    let (status, name) = match &error.kind {
        ErrorKind::InvalidRequest => (400, "INVALID_ARGUMENT"),
        ErrorKind::Authentication => (401, "UNAUTHENTICATED"),
        ErrorKind::Permission => (403, "PERMISSION_DENIED"),
        ErrorKind::NotFound => (404, "NOT_FOUND"),
        ErrorKind::RateLimit => (429, "RESOURCE_EXHAUSTED"),
        ErrorKind::Internal => (500, "INTERNAL"),
        ErrorKind::Overloaded => (503, "UNAVAILABLE"),
        ErrorKind::Timeout => (504, "DEADLINE_EXCEEDED"),
        ErrorKind::Named(name) => (400, name.as_str()),
    };
    (error.status.unwrap_or(status), name)
}

/// The status Gemini answers an error with.
pub(super) fn status(error: &WireError) -> u16 {
    code(error).0
}

fn envelope(error: &WireError) -> Value {
    let (status, name) = code(error);
    json!({"error": {"code": status, "message": error.message, "status": name}})
}

/// The error body of a failed call.
pub(super) fn error_body(error: &WireError) -> Bytes {
    json_bytes(&envelope(error))
}

/// An error inside a 200 stream (Gemini sends the same envelope as a `data:` event).
pub(super) fn error_frame(error: &WireError) -> Bytes {
    frame(&envelope(error))
}

/// A chunk cut off in the middle of its JSON.
pub(super) fn malformed_frame() -> Bytes {
    Bytes::from_static(b"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"tru\r\n\r\n")
}

/// The model and whether the answer streams, from the request path
/// (`/v1beta/models/<model>:<method>`).
pub(crate) fn call_of(path: &str) -> (Option<&str>, bool) {
    let last = path.rsplit('/').next().unwrap_or(path);
    match last.split_once(':') {
        Some((model, method)) => (
            Some(model).filter(|m| !m.is_empty()),
            method == "streamGenerateContent",
        ),
        None => (None, false),
    }
}
