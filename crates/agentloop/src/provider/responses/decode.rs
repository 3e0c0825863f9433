//! `POST /responses` with `stream: true`: semantic SSE events → normalized [`StreamEvent`]s.
//!
//! Event shapes follow OpenAI's API reference ("Streaming events" of the Responses API,
//! platform.openai.com/docs/api-reference/responses-streaming, and the streaming guide at
//! developers.openai.com/docs/guides/streaming-responses). Every event is one JSON object with
//! a `type`; the stream ends with `response.completed`, `response.incomplete` or
//! `response.failed` (there is no `[DONE]`, though compatible servers may send one).
//!
//! Quirks handled here, each seen in a recording (`shared/conformance/streams-batch2/
//! openai-responses`):
//! - Items are tracked by `output_index`, never by `item_id`: GitHub Copilot's endpoint sends
//!   a new item id on every event of one item.
//! - A reasoning item's summary (or, on OpenRouter, its raw `reasoning_text`) streams as
//!   reasoning text; when the item is done, the whole item as OpenAI sent it (id,
//!   `encrypted_content`, summary) becomes the reasoning block's signature
//!   ([`StreamEvent::ThinkingSignature`]), which the request builder sends back as it came.
//! - Function-call arguments come as deltas, or only in `.done` / the finished item (older
//!   servers): whichever comes first is used, never both.
//! - Built-in tool items (web and file search, code interpreter, MCP listings and approval
//!   requests, tool search, compaction, ...) are kept whole as native blocks when done.
//! - A message's citations (`annotations` on its `output_text`) follow its text as a native
//!   note `{annotations, content_index, item_id}` (no `type`: never sent back as an item).
//! - `response.refusal.delta` is answer text with a [`StopReason::Refusal`] at the end.
//! - `response.incomplete` maps `max_output_tokens` to [`StopReason::MaxTokens`] (a call cut
//!   off mid-arguments keeps its raw text); an `error` event or `response.failed` is an
//!   error, typed by its code (`rate_limit_exceeded` a rate limit, `server_error` an HTTP
//!   500: both retried when no content came yet).
//! - A resumed background stream has no `response.created`; any event carrying the response
//!   object starts the message.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::PROVIDER_NAME;
use crate::error::{Error, Result};
use crate::message::{StopReason, Usage};
use crate::provider::http::{SseDecoder, excerpt};
use crate::sse::SseEvent;
use crate::stream::StreamEvent;

mod fast;

/// The Responses stream decoder (one per response).
#[derive(Debug, Default)]
pub struct ResponsesDecoder {
    started: bool,
    calls: Vec<Call>,
    refused: bool,
    /// The reasoning summary part being streamed, to separate parts with a blank line.
    summary_part: Option<(u64, u64)>,
    ended: bool,
}

/// A function call being streamed.
#[derive(Debug)]
struct Call {
    output_index: u64,
    index: usize,
    has_arguments: bool,
    closed: bool,
}

impl ResponsesDecoder {
    /// A decoder for one response.
    pub fn new() -> Self {
        Self::default()
    }

    /// Take in one whole event object (a stream event's data).
    pub fn event_value(&mut self, event: &Value, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        self.data(&event.to_string(), out)
    }

    /// One event's data text.
    fn data(&mut self, data: &str, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        if let Some(wire) = fast::read(data) {
            #[cfg(any(debug_assertions, fuzzing))]
            crate::provider::scan::check_against_serde(data, &wire);
            return self.wire(&wire, out);
        }
        match serde_json::from_str::<WireEvent<'_>>(data) {
            Ok(wire) => self.wire(&wire, out),
            Err(typed) => {
                let value: Value = serde_json::from_str(data).map_err(|_| {
                    Error::parse(
                        "OpenAI Responses stream event",
                        format!("{typed}; the event began: {}", excerpt(data.as_bytes())),
                    )
                })?;
                // An event of an unexpected shape (a delta that is not a string, ...) is
                // skipped unless it reports an error.
                match value.get("type").and_then(Value::as_str) {
                    Some("error") => Err(stream_error(value.get("error").unwrap_or(&value))),
                    _ => Ok(()),
                }
            }
        }
    }

    /// A whole (non-streamed) response object, as `POST /responses` without `stream`
    /// answers it.
    pub fn response(&mut self, response: &Value, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        if let Some(error) = response.get("error").filter(|e| !e.is_null())
            && response.get("status").and_then(Value::as_str) != Some("completed")
        {
            return Err(stream_error(error));
        }
        self.start(Some(response), out);
        for (position, item) in response
            .get("output")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let output_index = position as u64;
            match item.get("type").and_then(Value::as_str) {
                Some("message") => {
                    for part in item
                        .get("content")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        let kind = part.get("type").and_then(Value::as_str);
                        let text = match kind {
                            Some("output_text") => part.get("text"),
                            Some("refusal") => {
                                self.refused = true;
                                part.get("refusal")
                            }
                            _ => None,
                        };
                        if let Some(text) = text.and_then(Value::as_str).filter(|t| !t.is_empty()) {
                            out.push_back(StreamEvent::TextDelta {
                                text: text.to_owned(),
                            });
                        }
                    }
                }
                Some("reasoning") => {
                    let text = reasoning_text(item);
                    if !text.is_empty() {
                        out.push_back(StreamEvent::ThinkingDelta { text });
                    }
                    self.item_done(output_index, item, out);
                }
                Some("function_call") => {
                    self.item_added(output_index, item, out);
                    self.item_done(output_index, item, out);
                }
                _ => self.item_done(output_index, item, out),
            }
        }
        self.finish(response, out)
    }

    fn wire(&mut self, event: &WireEvent<'_>, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        if self.ended {
            return Ok(());
        }
        let output_index = event.output_index.unwrap_or(0);
        match event.kind.as_ref() {
            "response.output_text.delta" => {
                self.start(None, out);
                if let Some(text) = event.delta.as_deref().filter(|t| !t.is_empty()) {
                    out.push_back(StreamEvent::TextDelta {
                        text: text.to_owned(),
                    });
                }
            }
            "response.refusal.delta" => {
                self.start(None, out);
                self.refused = true;
                if let Some(text) = event.delta.as_deref().filter(|t| !t.is_empty()) {
                    out.push_back(StreamEvent::TextDelta {
                        text: text.to_owned(),
                    });
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.start(None, out);
                let part = (output_index, event.summary_index.unwrap_or(0));
                if let Some((index, summary)) = self.summary_part
                    && index == part.0
                    && summary != part.1
                {
                    // Summary parts are separate paragraphs.
                    out.push_back(StreamEvent::ThinkingDelta {
                        text: "\n\n".to_owned(),
                    });
                }
                self.summary_part = Some(part);
                if let Some(text) = event.delta.as_deref().filter(|t| !t.is_empty()) {
                    out.push_back(StreamEvent::ThinkingDelta {
                        text: text.to_owned(),
                    });
                }
            }
            "response.function_call_arguments.delta" => {
                self.start(None, out);
                if let Some(call) = self.call(output_index)
                    && let Some(delta) = event.delta.as_deref().filter(|d| !d.is_empty())
                {
                    call.has_arguments = true;
                    let index = call.index;
                    out.push_back(StreamEvent::ToolCallDelta {
                        index,
                        arguments: delta.to_owned(),
                    });
                }
            }
            "response.function_call_arguments.done" => {
                if let Some(call) = self.call(output_index)
                    && !call.has_arguments
                    && let Some(arguments) = event.arguments.as_deref().filter(|a| !a.is_empty())
                {
                    call.has_arguments = true;
                    let index = call.index;
                    out.push_back(StreamEvent::ToolCallDelta {
                        index,
                        arguments: arguments.to_owned(),
                    });
                }
            }
            "response.output_item.added" => {
                self.start(None, out);
                if let Some(item) = event.item.and_then(raw_value) {
                    self.item_added(output_index, &item, out);
                }
            }
            "response.output_item.done" => {
                self.start(None, out);
                if let Some(item) = event.item.and_then(raw_value) {
                    self.item_done(output_index, &item, out);
                }
            }
            // Only the first event's response object is read: the others repeat it.
            "response.created" | "response.in_progress" | "response.queued" if !self.started => {
                let response = event.response.and_then(raw_value);
                self.start(response.as_ref(), out);
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let response = event.response.and_then(raw_value).unwrap_or(Value::Null);
                self.start(Some(&response), out);
                if event.kind == "response.failed" {
                    let error = response.get("error").filter(|e| !e.is_null());
                    return Err(match error {
                        Some(error) => stream_error(error),
                        None => Error::Stream {
                            provider: PROVIDER_NAME.to_owned(),
                            error_type: Some("response.failed".to_owned()),
                            message: "the response failed without saying why".to_owned(),
                        },
                    });
                }
                self.finish(&response, out)?;
            }
            "error" => {
                // The reference puts `code`/`message` on the event; some servers nest them in
                // an `error` object.
                let error = match event.error.and_then(raw_value) {
                    Some(error) => error,
                    None => {
                        let mut error = serde_json::Map::new();
                        if let Some(code) = &event.code {
                            error.insert("code".into(), code.as_ref().into());
                        }
                        if let Some(message) = &event.message {
                            error.insert("message".into(), message.as_ref().into());
                        }
                        Value::Object(error)
                    }
                };
                return Err(stream_error(&error));
            }
            // Progress of built-in tools, content parts, annotations, `.done` texts: what
            // they carry comes again whole in the finished item.
            _ => {}
        }
        Ok(())
    }

    fn start(&mut self, response: Option<&Value>, out: &mut VecDeque<StreamEvent>) {
        if self.started {
            return;
        }
        // Wait for an event that carries the response object, unless content comes first.
        let text = |key: &str| {
            response
                .and_then(|r| r.get(key))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        self.started = true;
        out.push_back(StreamEvent::MessageStart {
            id: text("id"),
            model: text("model"),
        });
    }

    fn call(&mut self, output_index: u64) -> Option<&mut Call> {
        self.calls
            .iter_mut()
            .rev()
            .find(|c| c.output_index == output_index && !c.closed)
    }

    fn item_added(&mut self, output_index: u64, item: &Value, out: &mut VecDeque<StreamEvent>) {
        if item.get("type").and_then(Value::as_str) != Some("function_call") {
            return;
        }
        // Output indexes are unique within a response: an item seen again is not a new call.
        if self.calls.iter().any(|c| c.output_index == output_index) {
            return;
        }
        let text = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or_default();
        let id = match text("call_id") {
            "" => text("id"),
            id => id,
        };
        let index = self.calls.len();
        out.push_back(StreamEvent::ToolCallStart {
            index,
            id: id.to_owned(),
            name: text("name").to_owned(),
        });
        let mut call = Call {
            output_index,
            index,
            has_arguments: false,
            closed: false,
        };
        if let Some(arguments) = item
            .get("arguments")
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
        {
            call.has_arguments = true;
            out.push_back(StreamEvent::ToolCallDelta {
                index,
                arguments: arguments.to_owned(),
            });
        }
        self.calls.push(call);
    }

    fn item_done(&mut self, output_index: u64, item: &Value, out: &mut VecDeque<StreamEvent>) {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                self.item_added(output_index, item, out);
                // A call already closed (a repeated `.done`) is not closed twice.
                let Some(call) = self.call(output_index) else {
                    return;
                };
                let index = call.index;
                if !call.has_arguments
                    && let Some(arguments) = item
                        .get("arguments")
                        .and_then(Value::as_str)
                        .filter(|a| !a.is_empty())
                {
                    out.push_back(StreamEvent::ToolCallDelta {
                        index,
                        arguments: arguments.to_owned(),
                    });
                }
                call.has_arguments = true;
                call.closed = true;
                out.push_back(StreamEvent::ToolCallEnd { index });
            }
            // Its text streamed already; its citations are kept after it.
            Some("message") => citations(item, out),
            Some("reasoning") => {
                self.summary_part = None;
                out.push_back(StreamEvent::ThinkingSignature {
                    signature: item.to_string(),
                });
            }
            Some(_) => out.push_back(StreamEvent::NativeBlock {
                provider: PROVIDER_NAME.to_owned(),
                value: item.clone(),
            }),
            None => {}
        }
    }

    /// The terminal event (`response.completed` or `response.incomplete`): usage and why it
    /// stopped.
    fn finish(&mut self, response: &Value, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        for call in self.calls.iter_mut().filter(|c| !c.closed) {
            call.closed = true;
            out.push_back(StreamEvent::ToolCallEnd { index: call.index });
        }
        if let Some(usage) = response.get("usage").and_then(usage) {
            out.push_back(StreamEvent::Usage { usage });
        }
        let incomplete = response.get("status").and_then(Value::as_str) == Some("incomplete");
        let stop_reason = if incomplete {
            let reason = response
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
                .unwrap_or("incomplete");
            match reason {
                "max_output_tokens" => StopReason::MaxTokens,
                "content_filter" => StopReason::Refusal,
                other => StopReason::Other(other.to_owned()),
            }
        } else if self.refused {
            StopReason::Refusal
        } else if self.calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        };
        self.ended = true;
        out.push_back(StreamEvent::MessageStop { stop_reason });
        Ok(())
    }
}

impl SseDecoder for ResponsesDecoder {
    fn event(&mut self, event: &SseEvent<'_>, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        let data = event.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(());
        }
        self.data(data, out)
    }

    fn end(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        if self.ended {
            return Ok(());
        }
        let _ = out;
        Err(Error::IncompleteStream {
            message: "the OpenAI Responses stream ended before response.completed or response.incomplete; the answer may be cut short, so send the request again".to_owned(),
        })
    }
}

/// The reasoning text of a whole reasoning item: its summary parts (a blank line apart), or
/// its raw `reasoning_text` content where a server sends that instead.
fn reasoning_text(item: &Value) -> String {
    let texts = |key: &str| -> Vec<&str> {
        item.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .filter(|t| !t.is_empty())
            .collect()
    };
    let summary = texts("summary");
    if summary.is_empty() {
        texts("content").join("\n\n")
    } else {
        summary.join("\n\n")
    }
}

fn raw_value(raw: &RawValue) -> Option<Value> {
    serde_json::from_str(raw.get()).ok()
}

/// `usage`: `input_tokens` includes the cached ones (`input_tokens_details.cached_tokens`) and
/// `output_tokens` the reasoning ones, as with Chat Completions.
fn usage(usage: &Value) -> Option<Usage> {
    let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
    let input = count("/input_tokens");
    let output = count("/output_tokens");
    if input.is_none() && output.is_none() {
        return None;
    }
    Some(Usage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        cache_read_tokens: count("/input_tokens_details/cached_tokens").unwrap_or(0),
        cache_write_tokens: count("/input_tokens_details/cache_write_tokens").unwrap_or(0),
        reasoning_tokens: count("/output_tokens_details/reasoning_tokens").unwrap_or(0),
    })
}

/// A message item's `annotations` (url, file and container file citations on its
/// `output_text` parts), one note per annotated part: `{annotations, content_index, item_id}`.
/// Notes have no `type`: they are not items, and the request never sends them.
fn citations(item: &Value, out: &mut VecDeque<StreamEvent>) {
    let Some(parts) = item.get("content").and_then(Value::as_array) else {
        return;
    };
    for (index, part) in parts.iter().enumerate() {
        let Some(annotations) = part
            .get("annotations")
            .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
        else {
            continue;
        };
        let mut note = serde_json::Map::new();
        note.insert("annotations".into(), annotations.clone());
        note.insert("content_index".into(), index.into());
        if let Some(id) = item.get("id") {
            note.insert("item_id".into(), id.clone());
        }
        out.push_back(StreamEvent::NativeBlock {
            provider: PROVIDER_NAME.to_owned(),
            value: Value::Object(note),
        });
    }
}

/// An `error` event's or a failed response's `{code, message}` (or `{type, ...}`) as a typed
/// error: a rate limit (`rate_limit_exceeded`, one of the reference's `ResponseError` codes)
/// keeps its retryable kind, and `server_error` (the server failed, not the request) is the
/// HTTP 500 it stands for, retried before any content like one.
pub(super) fn stream_error(error: &Value) -> Error {
    let text = |key: &str| error.get(key).and_then(Value::as_str);
    let message = text("message")
        .map(str::to_owned)
        .unwrap_or_else(|| error.to_string());
    let error_type = text("code").or_else(|| text("type")).map(str::to_owned);
    match error_type.as_deref() {
        Some("rate_limit_exceeded") => Error::RateLimited {
            provider: PROVIDER_NAME.to_owned(),
            retry_after: None,
            message,
        },
        Some("server_error") => Error::Api {
            provider: PROVIDER_NAME.to_owned(),
            status: 500,
            error_type,
            message,
        },
        _ => Error::Stream {
            provider: PROVIDER_NAME.to_owned(),
            error_type,
            message,
        },
    }
}

/// The members of a stream event the decoder reads; items and response objects stay raw until
/// used (they are rare next to the deltas).
#[derive(Debug, Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(default)]
    summary_index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    item: Option<&'a RawValue>,
    #[serde(default, borrow)]
    response: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
    #[serde(default, borrow)]
    code: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
}

/// Raw members compare by their text (what [`fast::read`] is checked against serde with).
impl PartialEq for WireEvent<'_> {
    fn eq(&self, other: &Self) -> bool {
        fn raw(r: Option<&RawValue>) -> Option<&str> {
            r.map(RawValue::get)
        }
        self.kind == other.kind
            && self.output_index == other.output_index
            && self.summary_index == other.summary_index
            && self.delta == other.delta
            && self.arguments == other.arguments
            && raw(self.item) == raw(other.item)
            && raw(self.response) == raw(other.response)
            && raw(self.error) == raw(other.error)
            && self.code == other.code
            && self.message == other.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode(events: &[Value]) -> Vec<StreamEvent> {
        let mut decoder = ResponsesDecoder::new();
        let mut out = VecDeque::new();
        for event in events {
            decoder.event_value(event, &mut out).unwrap();
        }
        decoder.end(&mut out).unwrap();
        out.into()
    }

    /// `output_tokens_details.reasoning_tokens` is kept apart (they are within `output_tokens`,
    /// platform.openai.com/docs/api-reference/responses/object, `usage`).
    #[test]
    fn reasoning_tokens_are_kept_apart() {
        let usage = usage(
            &json!({"input_tokens": 50, "input_tokens_details": {"cached_tokens": 10},
            "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 256}, "total_tokens": 350}),
        );
        assert_eq!(
            usage,
            Some(Usage {
                input_tokens: 50,
                output_tokens: 300,
                cache_read_tokens: 10,
                cache_write_tokens: 0,
                reasoning_tokens: 256,
            })
        );
    }

    #[test]
    fn a_repeated_item_done_is_not_a_second_call() {
        let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}"});
        let events = decode(&[
            json!({"type": "response.output_item.done", "output_index": 0, "item": call}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": call}),
            json!({"type": "response.completed", "response": {"id": "r", "status": "completed"}}),
        ]);
        let starts = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::ToolCallStart { .. }))
            .count();
        let ends = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::ToolCallEnd { .. }))
            .count();
        assert_eq!((starts, ends), (1, 1), "{events:?}");
    }

    #[test]
    fn error_codes_keep_their_retryable_kinds() {
        let server = stream_error(&json!({"code": "server_error", "message": "try again"}));
        assert!(
            matches!(&server, Error::Api { status: 500, error_type: Some(t), .. } if t == "server_error")
        );
        assert!(server.is_retryable());
        let limited = stream_error(&json!({"code": "rate_limit_exceeded", "message": "slow"}));
        assert!(matches!(limited, Error::RateLimited { .. }), "{limited:?}");
        let quota = stream_error(&json!({"type": "insufficient_quota", "message": "pay"}));
        assert!(
            matches!(&quota, Error::Stream { error_type: Some(t), .. } if t == "insufficient_quota")
        );
        assert!(!quota.is_retryable());
    }

    #[test]
    fn a_failed_response_with_a_server_error_is_retryable() {
        // `response.failed` carries the `ResponseError` in `response.error`.
        let mut decoder = ResponsesDecoder::new();
        let mut out = VecDeque::new();
        let created =
            json!({"type": "response.created", "response": {"id": "r", "status": "in_progress"}});
        decoder.event_value(&created, &mut out).unwrap();
        let failed = json!({"type": "response.failed", "response": {"id": "r", "status": "failed",
            "error": {"code": "server_error", "message": "The server had an error."}}});
        let error = decoder.event_value(&failed, &mut out).unwrap_err();
        assert!(
            matches!(&error, Error::Api { status: 500, message, .. } if message == "The server had an error."),
            "{error:?}"
        );
        assert!(error.is_retryable());
    }
}
