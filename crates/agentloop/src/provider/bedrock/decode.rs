//! `ConverseStream` event-stream frames → normalized [`StreamEvent`]s.
//!
//! Each frame's `:event-type` names a `ConverseStreamOutput` member (Bedrock API reference,
//! "ConverseStreamOutput", "ContentBlockDeltaEvent", "ReasoningContentBlockDelta",
//! "MessageStopEvent", "ConverseStreamMetadataEvent"): `messageStart`, `contentBlockStart`,
//! `contentBlockDelta`, `contentBlockStop`, `messageStop`, `metadata`. An exception mid-stream
//! is a frame with `:message-type: exception` and `:exception-type` (`throttlingException`,
//! `modelStreamErrorException`, ...), typed like the HTTP errors of the same name.
//!
//! Quirks handled here, each seen in a recording (`shared/conformance/streams-batch2/bedrock`):
//! - Text and reasoning blocks usually come with no `contentBlockStart`: a block is known by
//!   its first delta. A lone empty `text` delta makes no block.
//! - A reasoning block streams `reasoningContent.text`, then its `signature` in a delta of its
//!   own; redacted reasoning is one `redactedContent` (base64) delta.
//! - Server-side tools (`toolUse` with `type: "server_tool_use"`, and their `toolResult`,
//!   e.g. Nova's code interpreter) are kept whole as native blocks, in the shape the request
//!   builder sends back; only client tool uses become tool calls.
//! - Every payload may carry a random-length `"p"` padding field, which is ignored.
//! - `metadata` (usage) comes after `messageStop`, so the stop is sent after the usage.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::PROVIDER_NAME;
use super::eventstream::{self, Frame};
use crate::error::{Error, Result};
use crate::message::{StopReason, Usage};
use crate::provider::http::{BodyDecoder, excerpt};
use crate::provider::scan;
use crate::stream::StreamEvent;

mod fast;

/// A `contentBlockDelta` event frame's headers as Bedrock writes them (`:event-type`,
/// `:content-type`, `:message-type`, each a string).
const DELTA_HEADERS: &[u8] = b"\x0b:event-type\x07\x00\x11contentBlockDelta\
\x0d:content-type\x07\x00\x10application/json\
\x0d:message-type\x07\x00\x05event";

/// The `ConverseStream` decoder (one per response): frames in, events out.
#[derive(Debug, Default)]
pub struct BedrockDecoder {
    /// The part of a frame that arrived without its end.
    held: Vec<u8>,
    started: bool,
    calls: usize,
    blocks: Vec<(u64, Block)>,
    stop: Option<StopReason>,
    stopped: bool,
}

#[derive(Debug)]
enum Block {
    Text,
    Reasoning,
    Call(usize),
    /// A server tool's use or result, sent whole at its `contentBlockStop`.
    Native {
        key: &'static str,
        value: Map<String, Value>,
        input: String,
        content: Vec<Value>,
    },
}

#[derive(Debug, PartialEq, Deserialize)]
struct DeltaEvent<'a> {
    #[serde(rename = "contentBlockIndex", default)]
    index: u64,
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
}

#[derive(Debug, Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(rename = "toolUse", borrow, default)]
    tool_use: Option<ToolUseDelta<'a>>,
    #[serde(rename = "reasoningContent", borrow, default)]
    reasoning: Option<ReasoningDelta<'a>>,
    #[serde(rename = "toolResult", borrow, default)]
    tool_result: Option<&'a RawValue>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct ToolUseDelta<'a> {
    #[serde(borrow, default)]
    input: Option<Cow<'a, str>>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct ReasoningDelta<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    signature: Option<Cow<'a, str>>,
    #[serde(rename = "redactedContent", borrow, default)]
    redacted: Option<Cow<'a, str>>,
}

/// A raw tool result compares by its text (what [`fast::read`] is checked against serde with).
impl PartialEq for Delta<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
            && self.tool_use == other.tool_use
            && self.reasoning == other.reasoning
            && self.tool_result.map(RawValue::get) == other.tool_result.map(RawValue::get)
    }
}

impl BedrockDecoder {
    /// A decoder for one response.
    pub fn new() -> Self {
        Self::default()
    }

    /// Take in one frame.
    pub fn frame(&mut self, frame: &Frame<'_>, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        // Nearly every frame is a delta event with Bedrock's headers in Bedrock's order: one
        // comparison tells, instead of a walk through the headers per lookup.
        if frame.headers() == DELTA_HEADERS {
            return self.content_block_delta(frame.payload, out);
        }
        match frame.header(":message-type").unwrap_or("event") {
            "event" => {}
            "exception" => {
                let kind = frame.header(":exception-type").unwrap_or("exception");
                return Err(exception(kind, frame.payload));
            }
            "error" => {
                return Err(Error::Stream {
                    provider: PROVIDER_NAME.to_owned(),
                    error_type: frame.header(":error-code").map(str::to_owned),
                    message: frame
                        .header(":error-message")
                        .map_or_else(|| excerpt(frame.payload), str::to_owned),
                });
            }
            // Other message types (none are documented for Converse) carry nothing for us.
            _ => return Ok(()),
        }
        let Some(kind) = frame.header(":event-type") else {
            return Ok(());
        };
        self.event(kind, frame.payload, out)
    }

    /// Take in one event: its `:event-type` and JSON payload (also what a decoded recording
    /// holds per line).
    pub fn event(
        &mut self,
        kind: &str,
        payload: &[u8],
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<()> {
        match kind {
            "contentBlockDelta" => self.content_block_delta(payload, out)?,
            "messageStart" => self.start(out),
            "contentBlockStart" => {
                let value = parse_value(kind, payload)?;
                self.start(out);
                self.block_start(&value, out);
            }
            "contentBlockStop" => {
                let value = parse_value(kind, payload)?;
                let index = value
                    .get("contentBlockIndex")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                self.block_stop(index, out);
            }
            "messageStop" => {
                let value = parse_value(kind, payload)?;
                self.start(out);
                self.close_all(out);
                let reason = value
                    .get("stopReason")
                    .and_then(Value::as_str)
                    .unwrap_or("end_turn");
                let (stop, keep) = stop_reason(reason);
                if keep {
                    let mut native = Map::new();
                    native.insert("stopReason".into(), reason.into());
                    if let Some(fields) = value
                        .get("additionalModelResponseFields")
                        .filter(|v| !v.is_null())
                    {
                        native.insert("additionalModelResponseFields".into(), fields.clone());
                    }
                    out.push_back(StreamEvent::NativeBlock {
                        provider: PROVIDER_NAME.to_owned(),
                        value: Value::Object(native),
                    });
                }
                self.stop = Some(stop);
            }
            "metadata" => {
                let value = parse_value(kind, payload)?;
                if let Some(usage) = value.get("usage") {
                    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
                    out.push_back(StreamEvent::Usage {
                        usage: Usage {
                            input_tokens: count("inputTokens"),
                            output_tokens: count("outputTokens"),
                            cache_read_tokens: count("cacheReadInputTokens"),
                            cache_write_tokens: count("cacheWriteInputTokens"),
                            reasoning_tokens: 0,
                        },
                    });
                }
                self.finish_stop(out);
            }
            // The decoded form of an exception frame (as SDKs log them).
            exception_kind if exception_kind.ends_with("Exception") => {
                return Err(exception(exception_kind, payload));
            }
            // Events this version does not know (new ones appear) are skipped.
            _ => {}
        }
        Ok(())
    }

    /// A `contentBlockDelta` payload: a text delta in Bedrock's layout straight from its
    /// bytes, any other delta through the key-by-key reader, then serde.
    fn content_block_delta(
        &mut self,
        payload: &[u8],
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<()> {
        let fast = match fast::read_text_layout(payload) {
            Some(event) => {
                scan::check_slice(payload, &event);
                Some(event)
            }
            // serde_json reads bytes as UTF-8 text too, and rejects what is not.
            None => std::str::from_utf8(payload)
                .ok()
                .and_then(|data| scan::checked(data, fast::read(data))),
        };
        let event = match fast {
            Some(event) => event,
            None => serde_json::from_slice::<DeltaEvent<'_>>(payload)
                .map_err(|e| Error::parse("Bedrock contentBlockDelta event", e))?,
        };
        self.start(out);
        if let Some(delta) = event.delta {
            self.delta(event.index, delta, out)?;
        }
        Ok(())
    }

    fn start(&mut self, out: &mut VecDeque<StreamEvent>) {
        if !self.started {
            self.started = true;
            // Converse has no response id; the model is the one in the URL.
            out.push_back(StreamEvent::MessageStart {
                id: String::new(),
                model: String::new(),
            });
        }
    }

    fn finish_stop(&mut self, out: &mut VecDeque<StreamEvent>) {
        if let Some(stop) = self.stop.take() {
            self.stopped = true;
            out.push_back(StreamEvent::MessageStop { stop_reason: stop });
        }
    }

    fn block(&self, index: u64) -> Option<&Block> {
        self.blocks
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| b)
    }

    fn block_mut(&mut self, index: u64) -> Option<&mut Block> {
        self.blocks
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| b)
    }

    fn block_start(&mut self, value: &Value, out: &mut VecDeque<StreamEvent>) {
        let index = value
            .get("contentBlockIndex")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let Some(start) = value.get("start").and_then(Value::as_object) else {
            return;
        };
        if let Some(tool) = start.get("toolUse").and_then(Value::as_object) {
            let text = |key: &str| tool.get(key).and_then(Value::as_str).unwrap_or_default();
            if text("type") == "server_tool_use" {
                self.blocks.push((
                    index,
                    Block::Native {
                        key: "toolUse",
                        value: tool.clone(),
                        input: String::new(),
                        content: Vec::new(),
                    },
                ));
                return;
            }
            let call = self.calls;
            self.calls += 1;
            out.push_back(StreamEvent::ToolCallStart {
                index: call,
                id: text("toolUseId").to_owned(),
                name: text("name").to_owned(),
            });
            self.blocks.push((index, Block::Call(call)));
        } else if let Some(result) = start.get("toolResult").and_then(Value::as_object) {
            self.blocks.push((
                index,
                Block::Native {
                    key: "toolResult",
                    value: result.clone(),
                    input: String::new(),
                    content: Vec::new(),
                },
            ));
        }
    }

    fn delta(
        &mut self,
        index: u64,
        delta: Delta<'_>,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<()> {
        if let Some(text) = delta.text {
            if !text.is_empty() {
                self.known(index, Block::Text);
                out.push_back(StreamEvent::TextDelta {
                    text: text.into_owned(),
                });
            }
        } else if let Some(reasoning) = delta.reasoning {
            self.known(index, Block::Reasoning);
            if let Some(text) = reasoning.text.filter(|t| !t.is_empty()) {
                out.push_back(StreamEvent::ThinkingDelta {
                    text: text.into_owned(),
                });
            }
            if let Some(signature) = reasoning.signature {
                out.push_back(StreamEvent::ThinkingSignature {
                    signature: signature.into_owned(),
                });
            }
            if let Some(data) = reasoning.redacted {
                out.push_back(StreamEvent::RedactedThinking {
                    data: data.into_owned(),
                });
            }
        } else if let Some(tool) = delta.tool_use {
            let input = tool.input.unwrap_or_default();
            match self.block_mut(index) {
                Some(Block::Call(call)) if !input.is_empty() => {
                    out.push_back(StreamEvent::ToolCallDelta {
                        index: *call,
                        arguments: input.into_owned(),
                    });
                }
                Some(Block::Native { input: held, .. }) => held.push_str(&input),
                // Input for a tool use that never started has no name to go with: dropped.
                _ => {}
            }
        } else if let Some(result) = delta.tool_result
            && let Some(Block::Native { content, .. }) = self.block_mut(index)
        {
            let items: Value = serde_json::from_str(result.get())
                .map_err(|e| Error::parse("Bedrock toolResult delta", e))?;
            match items {
                Value::Array(items) => content.extend(items),
                other => content.push(other),
            }
        }
        Ok(())
    }

    /// Note that block `index` exists (text and reasoning blocks have no start event).
    fn known(&mut self, index: u64, kind: Block) {
        if self.block(index).is_none() {
            self.blocks.push((index, kind));
        }
    }

    fn block_stop(&mut self, index: u64, out: &mut VecDeque<StreamEvent>) {
        let Some(at) = self.blocks.iter().position(|(i, _)| *i == index) else {
            return;
        };
        let (_, block) = self.blocks.remove(at);
        close(block, out);
    }

    fn close_all(&mut self, out: &mut VecDeque<StreamEvent>) {
        for (_, block) in std::mem::take(&mut self.blocks) {
            close(block, out);
        }
    }

    /// The body ended.
    pub fn end(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        if !self.held.is_empty() {
            return Err(Error::IncompleteStream {
                message: format!(
                    "the Bedrock stream ended inside an event-stream frame ({} bytes of it came); send the request again",
                    self.held.len()
                ),
            });
        }
        self.finish_stop(out);
        if !self.stopped {
            self.close_all(out);
            return Err(Error::IncompleteStream {
                message: "the Bedrock stream ended before messageStop; the answer may be cut short, so send the request again".to_owned(),
            });
        }
        Ok(())
    }

    fn frame_bytes(&mut self, bytes: &[u8], out: &mut VecDeque<StreamEvent>) -> Result<()> {
        match eventstream::parse(bytes) {
            Ok(Some((frame, _))) => self.frame(&frame, out),
            Ok(None) => Ok(()),
            Err(e) => Err(frame_error(e)),
        }
    }
}

fn close(block: Block, out: &mut VecDeque<StreamEvent>) {
    match block {
        Block::Call(index) => out.push_back(StreamEvent::ToolCallEnd { index }),
        Block::Native {
            key,
            mut value,
            input,
            content,
        } => {
            if key == "toolUse" {
                let input = if input.is_empty() {
                    Value::Object(Map::new())
                } else {
                    serde_json::from_str(&input).unwrap_or(Value::String(input))
                };
                value.insert("input".into(), input);
            } else {
                value.insert("content".into(), Value::Array(content));
            }
            let mut block = Map::new();
            block.insert(key.to_owned(), Value::Object(value));
            out.push_back(StreamEvent::NativeBlock {
                provider: PROVIDER_NAME.to_owned(),
                value: Value::Object(block),
            });
        }
        Block::Text | Block::Reasoning => {}
    }
}

fn parse_value(kind: &str, payload: &[u8]) -> Result<Value> {
    serde_json::from_slice(payload).map_err(|e| Error::parse(format!("Bedrock {kind} event"), e))
}

fn frame_error(error: eventstream::FrameError) -> Error {
    Error::Stream {
        provider: PROVIDER_NAME.to_owned(),
        error_type: Some("invalid_frame".to_owned()),
        message: format!("{error}; the response body is damaged, so send the request again"),
    }
}

/// Our stop reason for Bedrock's, and whether the raw reason is kept in a native block (the
/// guardrail and content-filter stops, which become refusals, and anything new).
fn stop_reason(reason: &str) -> (StopReason, bool) {
    match reason {
        "end_turn" => (StopReason::EndTurn, false),
        "tool_use" => (StopReason::ToolUse, false),
        "max_tokens" => (StopReason::MaxTokens, false),
        "stop_sequence" => (StopReason::StopSequence, false),
        "guardrail_intervened" | "content_filtered" => (StopReason::Refusal, true),
        other => (StopReason::Other(other.to_owned()), true),
    }
}

/// A mid-stream exception, typed like the HTTP error of the same name (Bedrock API
/// reference, "ConverseStream" → "Errors").
pub(crate) fn exception(kind: &str, payload: &[u8]) -> Error {
    let message = serde_json::from_slice::<Value>(payload)
        .ok()
        .and_then(|v| {
            v.get("message")
                .or_else(|| v.get("Message"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| excerpt(payload));
    let provider = PROVIDER_NAME.to_owned();
    let error_type = Some(kind.to_owned());
    match kind
        .trim_end_matches("Exception")
        .to_ascii_lowercase()
        .as_str()
    {
        "throttling" => Error::RateLimited {
            provider,
            retry_after: None,
            message,
        },
        "serviceunavailable" => Error::Overloaded { provider, message },
        // "A streaming error occurred. Retry your request." (HTTP 424): retryable, see
        // `Error::is_retryable`.
        "modelstreamerror" => Error::Api {
            provider,
            status: 424,
            error_type,
            message,
        },
        "modeltimeout" => Error::Api {
            provider,
            status: 408,
            error_type,
            message,
        },
        "internalserver" => Error::Api {
            provider,
            status: 500,
            error_type,
            message,
        },
        "validation" => Error::InvalidRequest {
            provider,
            status: 400,
            error_type,
            message,
        },
        _ => Error::Stream {
            provider,
            error_type,
            message,
        },
    }
}

impl BodyDecoder for BedrockDecoder {
    fn feed_until(&mut self, chunk: &[u8], out: &mut VecDeque<StreamEvent>) -> Result<usize> {
        let mut pos = 0;
        if !self.held.is_empty() {
            // Complete the held frame from the front of the chunk.
            let need = loop {
                match eventstream::frame_len(&self.held).map_err(frame_error)? {
                    Some(len) => break len,
                    None => {
                        let take = (12 - self.held.len()).min(chunk.len() - pos);
                        self.held.extend_from_slice(&chunk[pos..pos + take]);
                        pos += take;
                        if self.held.len() < 12 {
                            return Ok(pos);
                        }
                    }
                }
            };
            let take = (need - self.held.len()).min(chunk.len() - pos);
            self.held.extend_from_slice(&chunk[pos..pos + take]);
            pos += take;
            if self.held.len() < need {
                return Ok(pos);
            }
            let held = std::mem::take(&mut self.held);
            let result = self.frame_bytes(&held, out);
            // Keep the buffer for the next split frame.
            self.held = held;
            self.held.clear();
            result?;
            if !out.is_empty() {
                return Ok(pos);
            }
        }
        while pos < chunk.len() {
            match eventstream::parse(&chunk[pos..]).map_err(frame_error)? {
                Some((frame, len)) => {
                    pos += len;
                    self.frame(&frame, out)?;
                    if !out.is_empty() {
                        return Ok(pos);
                    }
                }
                None => {
                    self.held.extend_from_slice(&chunk[pos..]);
                    return Ok(chunk.len());
                }
            }
        }
        Ok(pos)
    }

    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        self.end(out)
    }
}
