//! Helpers shared by the OpenAI Responses test files: replay SSE bytes through the parser and the
//! decoder the way the HTTP transport does, and summarize what they assemble to.
#![allow(dead_code)]

use std::collections::VecDeque;

use agentloop::provider::http::SseDecoder;
use agentloop::provider::responses::ResponsesDecoder;
use agentloop::sse::SseParser;
use agentloop::{Accumulator, ContentBlock, Error, StreamEvent};
use serde_json::{Value, json};

/// Feed `chunks` like the transport: events after a decoder error are not decoded, and the
/// end of the body is signalled only when no error came.
pub fn assemble<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<StreamEvent>, Option<Error>) {
    let mut parser = SseParser::new();
    let mut decoder = ResponsesDecoder::new();
    let mut out = VecDeque::new();
    let mut failure = None;
    for chunk in chunks {
        parser.feed(chunk, |event| {
            if failure.is_none()
                && let Err(e) = decoder.event(&event, &mut out)
            {
                failure = Some(e);
            }
        });
        if failure.is_some() {
            return (out.into(), failure);
        }
    }
    parser.finish(|event| {
        if failure.is_none()
            && let Err(e) = decoder.event(&event, &mut out)
        {
            failure = Some(e);
        }
    });
    if failure.is_none()
        && let Err(e) = decoder.end(&mut out)
    {
        failure = Some(e);
    }
    (out.into(), failure)
}

/// Decode `sse` whole and in 1-byte chunks; both must give the same result, which is returned.
pub fn decode(sse: &str) -> (Vec<StreamEvent>, Option<Error>) {
    let whole = assemble([sse.as_bytes()]);
    let bytewise = assemble(sse.as_bytes().chunks(1));
    assert_eq!(whole.0, bytewise.0, "1-byte chunks changed the events");
    assert_eq!(
        whole.1.as_ref().map(ToString::to_string),
        bytewise.1.as_ref().map(ToString::to_string),
        "1-byte chunks changed the error"
    );
    whole
}

/// One SSE event in OpenAI's framing (`event:` equal to the data's `type`).
pub fn event(data: &str) -> String {
    let kind = serde_json::from_str::<Value>(data)
        .ok()
        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default();
    format!("event: {kind}\ndata: {data}\n\n")
}

/// The assembled result in `tests/conformance/README.md`'s format, plus the extras:
/// `cache_read_tokens` and `cache_write_tokens` in usage, and `blocks`, the kinds of the
/// content blocks in order (`thinking`, `signed_thinking` for a reasoning block carrying its
/// item, `text`, `tool_use`, `native:<item type>`).
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
            ContentBlock::Text { .. } => "text".to_owned(),
            ContentBlock::ToolUse { .. } => "tool_use".to_owned(),
            // The decoder's annotations (citations) have no `type`: named by their first key.
            ContentBlock::Native { value, .. } => format!(
                "native:{}",
                value
                    .get("type")
                    .and_then(Value::as_str)
                    .or_else(|| value.as_object()?.keys().next().map(String::as_str))
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
        let (kind, message) = match error {
            Error::Stream {
                error_type,
                message,
                ..
            } => (error_type.clone().unwrap_or_default(), message.clone()),
            Error::InvalidRequest {
                error_type,
                message,
                ..
            } => (error_type.clone().unwrap_or_default(), message.clone()),
            other => (other.kind().to_owned(), other.to_string()),
        };
        summary["error"] = json!({"type": kind, "message": message});
    }
    summary
}
