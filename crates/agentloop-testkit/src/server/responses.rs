//! The OpenAI Responses wire: `POST /v1/responses` with `"stream": true` (semantic SSE events,
//! `event:` equal to the data's `type`) or without (one response object), with OpenAI's
//! `{"error": {...}}` error bodies.
//!
//! Shapes follow OpenAI's API reference ("Create a model response" and "Streaming events" of
//! the Responses API) and the recordings in conformance/streams-batch2/openai-responses/
//! (`response.created`, then per output item `response.output_item.added`, its deltas
//! (`output_text`, `reasoning_summary_text`, `function_call_arguments`) and
//! `response.output_item.done`, then `response.completed` or `response.incomplete` with the
//! usage; `sequence_number` on every event, no `[DONE]`). A mid-stream error is an `error`
//! event with `code` and `message`.

use agentloop::{StopReason, Usage};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::render::{CREATED, Shape, json_bytes, sse_frame};
use super::wire_error::{ErrorKind, WireError};
use crate::turn::{Turn, TurnItem, split_pieces};

fn response_id(shape: &Shape<'_>) -> String {
    format!("resp_mock_{}", shape.turn_index)
}

fn item_id(prefix: &str, shape: &Shape<'_>, output_index: usize) -> String {
    format!("{prefix}_mock_{}_{output_index}", shape.turn_index)
}

/// Events of one answer, numbered as they are added.
struct Events {
    frames: Vec<Bytes>,
}

impl Events {
    fn push(&mut self, mut event: Value) {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if let Value::Object(map) = &mut event {
            map.insert("sequence_number".into(), self.frames.len().into());
        }
        self.frames.push(sse_frame(Some(&kind), &event));
    }
}

fn usage(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    })
}

/// The response object: `in_progress` with no output, or finished with `output` and usage.
fn response(turn: &Turn, shape: &Shape<'_>, output: Option<Vec<Value>>) -> Value {
    let mut out = Map::new();
    out.insert("id".into(), response_id(shape).into());
    out.insert("object".into(), "response".into());
    out.insert("created_at".into(), CREATED.into());
    let finished = output.is_some();
    let stop = turn.effective_stop_reason();
    let status = match (&stop, finished) {
        (_, false) => "in_progress",
        (StopReason::MaxTokens | StopReason::Other(_), true) => "incomplete",
        (_, true) => "completed",
    };
    out.insert("status".into(), status.into());
    out.insert("error".into(), Value::Null);
    let incomplete = match (&stop, finished) {
        (StopReason::MaxTokens, true) => json!({"reason": "max_output_tokens"}),
        (StopReason::Other(reason), true) => json!({ "reason": reason }),
        _ => Value::Null,
    };
    out.insert("incomplete_details".into(), incomplete);
    out.insert("model".into(), shape.model.into());
    out.insert("output".into(), Value::Array(output.unwrap_or_default()));
    out.insert(
        "usage".into(),
        if finished {
            usage(&turn.usage)
        } else {
            Value::Null
        },
    );
    Value::Object(out)
}

/// The finished output items of `turn`, in order.
fn items(turn: &Turn, shape: &Shape<'_>) -> Vec<Value> {
    let calls = turn.resolved_calls(shape.turn_index);
    let mut calls = calls.iter();
    let refusal = turn.effective_stop_reason() == StopReason::Refusal;
    let mut out = Vec::new();
    for item in &turn.items {
        let index = out.len();
        match item {
            TurnItem::Text(text) => {
                let part = if refusal {
                    json!({"type": "refusal", "refusal": text})
                } else {
                    json!({"type": "output_text", "text": text, "annotations": []})
                };
                out.push(json!({
                    "id": item_id("msg", shape, index),
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [part],
                }));
            }
            TurnItem::Thinking { text, signature } => {
                let mut item = Map::new();
                item.insert("id".into(), item_id("rs", shape, index).into());
                item.insert("type".into(), "reasoning".into());
                if let Some(signature) = signature {
                    item.insert("encrypted_content".into(), signature.clone().into());
                }
                item.insert(
                    "summary".into(),
                    json!([{"type": "summary_text", "text": text}]),
                );
                out.push(Value::Object(item));
            }
            TurnItem::ToolCall { .. } => {
                if let Some((id, name, arguments)) = calls.next() {
                    out.push(json!({
                        "id": item_id("fc", shape, index),
                        "type": "function_call",
                        "status": "completed",
                        "arguments": arguments,
                        "call_id": id,
                        "name": name,
                    }));
                }
            }
        }
    }
    out
}

/// The SSE events of a streamed answer.
pub(super) fn stream(turn: &Turn, shape: &Shape<'_>) -> Vec<Bytes> {
    let mut events = Events { frames: Vec::new() };
    events.push(json!({"type": "response.created", "response": response(turn, shape, None)}));
    events.push(json!({"type": "response.in_progress", "response": response(turn, shape, None)}));
    let done = items(turn, shape);
    for (index, (item, done_item)) in turn.items.iter().zip(&done).enumerate() {
        let id = done_item["id"].clone();
        match item {
            TurnItem::Text(text) => {
                let refusal = done_item["content"][0]["type"] == "refusal";
                let (empty_part, delta, finished) = if refusal {
                    (
                        json!({"type": "refusal", "refusal": ""}),
                        "response.refusal.delta",
                        json!({"type": "response.refusal.done", "item_id": id, "output_index": index, "content_index": 0, "refusal": text}),
                    )
                } else {
                    (
                        json!({"type": "output_text", "text": "", "annotations": []}),
                        "response.output_text.delta",
                        json!({"type": "response.output_text.done", "item_id": id, "output_index": index, "content_index": 0, "text": text}),
                    )
                };
                events.push(json!({"type": "response.output_item.added", "output_index": index, "item": {"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}}));
                events.push(json!({"type": "response.content_part.added", "item_id": id, "output_index": index, "content_index": 0, "part": empty_part}));
                for piece in split_pieces(text, turn.pieces.text) {
                    events.push(json!({"type": delta, "item_id": id, "output_index": index, "content_index": 0, "delta": piece}));
                }
                events.push(finished);
                events.push(json!({"type": "response.content_part.done", "item_id": id, "output_index": index, "content_index": 0, "part": done_item["content"][0]}));
            }
            TurnItem::Thinking { text, .. } => {
                events.push(json!({"type": "response.output_item.added", "output_index": index, "item": {"id": id, "type": "reasoning", "summary": []}}));
                events.push(json!({"type": "response.reasoning_summary_part.added", "item_id": id, "output_index": index, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}));
                for piece in split_pieces(text, turn.pieces.thinking) {
                    events.push(json!({"type": "response.reasoning_summary_text.delta", "item_id": id, "output_index": index, "summary_index": 0, "delta": piece}));
                }
                events.push(json!({"type": "response.reasoning_summary_text.done", "item_id": id, "output_index": index, "summary_index": 0, "text": text}));
                events.push(json!({"type": "response.reasoning_summary_part.done", "item_id": id, "output_index": index, "summary_index": 0, "part": {"type": "summary_text", "text": text}}));
            }
            TurnItem::ToolCall { .. } => {
                let arguments = done_item["arguments"].as_str().unwrap_or_default();
                let mut added = done_item.clone();
                added["status"] = "in_progress".into();
                added["arguments"] = "".into();
                events.push(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                for piece in split_pieces(arguments, turn.pieces.arguments) {
                    events.push(json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": index, "delta": piece}));
                }
                events.push(json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": index, "arguments": arguments}));
            }
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": index, "item": done_item}),
        );
    }
    let finished = response(turn, shape, Some(done));
    let kind = if finished["status"] == "incomplete" {
        "response.incomplete"
    } else {
        "response.completed"
    };
    events.push(json!({"type": kind, "response": finished}));
    events.frames
}

/// The response object of a non-streamed answer.
pub(super) fn body(turn: &Turn, shape: &Shape<'_>) -> Bytes {
    json_bytes(&response(turn, shape, Some(items(turn, shape))))
}

/// The `code` of an error event: the reference's `ResponseError` codes.
fn code(error: &WireError) -> &str {
    match &error.kind {
        ErrorKind::RateLimit => "rate_limit_exceeded",
        ErrorKind::Named(name) => name.as_str(),
        ErrorKind::InvalidRequest | ErrorKind::Permission | ErrorKind::NotFound => {
            "invalid_request_error"
        }
        ErrorKind::Authentication => "invalid_api_key",
        ErrorKind::Internal | ErrorKind::Overloaded | ErrorKind::Timeout => "server_error",
    }
}

/// An error inside a 200 stream: an `error` event.
pub(super) fn error_frame(error: &WireError) -> Bytes {
    sse_frame(
        Some("error"),
        &json!({"type": "error", "code": code(error), "message": error.message, "param": null}),
    )
}

/// An event cut off in the middle of its JSON.
pub(super) fn malformed_frame() -> Bytes {
    Bytes::from_static(
        b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"tru\n\n",
    )
}
