//! Helpers shared by the Bedrock test files: feed event-stream bytes through the decoder the
//! way the HTTP transport does, and summarize what they assemble to.
#![allow(dead_code)]

use std::collections::VecDeque;

use agentloop::provider::bedrock::BedrockDecoder;
use agentloop::provider::bedrock::eventstream;
use agentloop::provider::http::BodyDecoder;
use agentloop::{Accumulator, ContentBlock, Error, StreamEvent};
use serde_json::{Value, json};

/// Feed `chunks` like the transport: each chunk until it is used up, one event at a time;
/// nothing after a decoder error; the end of the body only when no error came.
pub fn assemble<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<StreamEvent>, Option<Error>) {
    let mut decoder = BedrockDecoder::new();
    let mut out = VecDeque::new();
    let mut events = Vec::new();
    for chunk in chunks {
        let mut rest = chunk;
        while !rest.is_empty() {
            match decoder.feed_until(rest, &mut out) {
                Ok(read) => {
                    assert!(read > 0 || !out.is_empty(), "no progress");
                    rest = &rest[read..];
                    events.extend(out.drain(..));
                }
                Err(e) => {
                    events.extend(out.drain(..));
                    return (events, Some(e));
                }
            }
        }
    }
    let result = decoder.finish(&mut out);
    events.extend(out.drain(..));
    (events, result.err())
}

/// An event frame with `payload` as JSON.
pub fn event(kind: &str, payload: Value) -> Vec<u8> {
    eventstream::event(kind, payload.to_string().as_bytes())
}

/// Frames concatenated.
pub fn body(frames: &[Vec<u8>]) -> Vec<u8> {
    frames.concat()
}

/// The assembled result in `tests/conformance/README.md`'s format with Bedrock's extras:
/// `cache_read_tokens` and `cache_write_tokens` in usage, and `blocks`, the kinds of the
/// content blocks in order (`thinking`, `signed_thinking`, `redacted_thinking`, `text`,
/// `tool_use`, `native:<key>`).
pub fn summary(events: &[StreamEvent], error: Option<&Error>) -> Value {
    let mut acc = Accumulator::new();
    for event in events {
        acc.push(event);
    }
    let stopped = acc.is_stopped();
    let response = acc.finish();
    let tool_calls: Vec<Value> = response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some(match input {
                Value::String(_) => {
                    json!({"id": id, "name": name, "input": null, "input_error": "invalid JSON"})
                }
                _ => json!({"id": id, "name": name, "input": input}),
            }),
            _ => None,
        })
        .collect();
    let thinking: String = response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Thinking { thinking, .. } => Some(thinking.as_str()),
            _ => None,
        })
        .collect();
    let blocks: Vec<String> = response
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Thinking {
                signature: Some(_), ..
            } => "signed_thinking".to_owned(),
            ContentBlock::Thinking { .. } => "thinking".to_owned(),
            ContentBlock::RedactedThinking { .. } => "redacted_thinking".to_owned(),
            ContentBlock::Text { .. } => "text".to_owned(),
            ContentBlock::ToolUse { .. } => "tool_use".to_owned(),
            ContentBlock::Native { value, .. } => format!(
                "native:{}",
                value
                    .as_object()
                    .and_then(|o| o.keys().next())
                    .map(String::as_str)
                    .unwrap_or("?")
            ),
            other => format!("{other:?}"),
        })
        .collect();
    let stop_reason = if error.is_some() && !stopped {
        Value::Null
    } else {
        json!(response.stop_reason.as_str())
    };
    let mut summary = json!({
        "text": response.text(),
        "tool_calls": tool_calls,
        "stop_reason": stop_reason,
        "usage": {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
            "cache_read_tokens": response.usage.cache_read_tokens,
            "cache_write_tokens": response.usage.cache_write_tokens,
        },
        "blocks": blocks,
    });
    if !thinking.is_empty() {
        summary["thinking"] = json!(thinking);
    }
    if let Some(error) = error {
        summary["error"] = json!({"kind": error.kind(), "message": error.to_string()});
    }
    summary
}
