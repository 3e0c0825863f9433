//! Messages API SSE events → normalized [`StreamEvent`]s.
//!
//! Event flow (docs, "Streaming Messages"): `message_start`, then per content block a
//! `content_block_start`, deltas and a `content_block_stop`, then `message_delta` (stop reason,
//! cumulative usage) and `message_stop`; `ping`s anywhere, `error` events mid-stream, and new
//! event types to be ignored. Deltas written the API's way, nearly every event, are read by
//! `fast` in one pass; every other event is deserialized into lenient borrowed structs, which
//! copy only the text they hand on.
//!
//! Blocks of kinds the decoder does not take apart (server tool calls and results, `compaction`,
//! ...) come out whole as native blocks, their streamed input or `compaction_delta` content
//! filled in. A `message_start` may already hold the whole message (content, stop reason): it
//! is decoded as if its blocks had streamed. What a canonical block has no field for, a client
//! call's programmatic `caller` and the code execution `container`, follows as annotations
//! (see [`super::response`]) that the request puts back where Anthropic wants them.

mod fast;

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::PROVIDER_NAME;
use super::response::{self, WireUsage};
use crate::error::{Error, Result};
use crate::message::{StopReason, Usage};
use crate::provider::http::{SseDecoder, excerpt};
use crate::sse::SseEvent;
use crate::stream::StreamEvent;

/// The delta kinds the decoder streams, by the field that carries their value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeltaField {
    Text,
    PartialJson,
    Thinking,
    Signature,
    /// `compaction_delta`: the summary of a `compaction` block.
    Compaction,
}

impl DeltaField {
    /// The kind that `type` names, if the decoder streams it.
    fn from_kind(kind: &str) -> Option<Self> {
        match kind {
            "text_delta" => Some(DeltaField::Text),
            "input_json_delta" => Some(DeltaField::PartialJson),
            "thinking_delta" => Some(DeltaField::Thinking),
            "signature_delta" => Some(DeltaField::Signature),
            "compaction_delta" => Some(DeltaField::Compaction),
            _ => None,
        }
    }

    /// The delta's `type`.
    #[cfg(any(test, debug_assertions, fuzzing))]
    fn kind(self) -> &'static str {
        match self {
            DeltaField::Text => "text_delta",
            DeltaField::PartialJson => "input_json_delta",
            DeltaField::Thinking => "thinking_delta",
            DeltaField::Signature => "signature_delta",
            DeltaField::Compaction => "compaction_delta",
        }
    }
}

/// Event names the API sends. Data under an unknown name that is not JSON is skipped; under
/// one of these it is an error.
const KNOWN_EVENTS: [&str; 8] = [
    "",
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
];

#[derive(Debug, Default, PartialEq, Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: Option<u64>,
    // Boxed: rare, and a smaller event struct is cheaper to build for every delta.
    #[serde(default, borrow)]
    message: Option<Box<StartMessage<'a>>>,
    #[serde(default)]
    content_block: Option<Box<StartBlock<'a>>>,
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default)]
    usage: Option<Box<WireUsage>>,
    #[serde(default, borrow)]
    error: Option<Box<WireError<'a>>>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct StartMessage<'a> {
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// Blocks the message already holds (a continuation that streams no block events).
    #[serde(default)]
    content: Vec<Value>,
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    stop_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    container: Option<Value>,
}

/// `content_block_start`'s block: the members the decoder uses of the kinds it takes apart, or
/// the whole block of any other kind (kept verbatim as a native block).
#[derive(Debug, PartialEq)]
enum StartBlock<'a> {
    Text {
        text: Option<Cow<'a, str>>,
    },
    Thinking {
        thinking: Option<Cow<'a, str>>,
        signature: Option<Cow<'a, str>>,
    },
    RedactedThinking {
        data: Option<Cow<'a, str>>,
    },
    ToolUse {
        id: Option<Cow<'a, str>>,
        name: Option<Cow<'a, str>>,
        input: Option<Value>,
        caller: Option<Value>,
    },
    Other(Value),
}

impl StartBlock<'_> {
    /// The block as the decoder sees it: a member that is not a string counts as absent.
    fn from_value(block: Value) -> Self {
        let text = |key: &str| {
            block
                .get(key)
                .and_then(Value::as_str)
                .map(|text| Cow::Owned(text.to_owned()))
        };
        match block.get("type").and_then(Value::as_str) {
            Some("text") => StartBlock::Text { text: text("text") },
            Some("thinking") => StartBlock::Thinking {
                thinking: text("thinking"),
                signature: text("signature"),
            },
            Some("redacted_thinking") => StartBlock::RedactedThinking { data: text("data") },
            Some("tool_use") => StartBlock::ToolUse {
                id: text("id"),
                name: text("name"),
                input: block.get("input").cloned(),
                caller: block.get("caller").cloned(),
            },
            _ => StartBlock::Other(block),
        }
    }
}

/// Read through a [`Value`]: there is one per content block, so it need not be fast.
impl<'de> Deserialize<'de> for StartBlock<'_> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(StartBlock::from_value)
    }
}

/// One shape for both `content_block_delta.delta` and `message_delta.delta`.
#[derive(Debug, Default, PartialEq, Deserialize)]
struct WireDelta<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "opt_cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    signature: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    stop_reason: Option<Cow<'a, str>>,
    /// `message_delta`'s code execution container. Boxed: rare, and deltas are the hot path.
    #[serde(default)]
    container: Option<Box<Value>>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct WireError<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "opt_cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    message: Option<Cow<'a, str>>,
}

/// `Option<Cow<str>>` that borrows when the JSON string has no escapes (serde's own impl for
/// `Option<Cow>` always copies).
fn opt_cow<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    #[derive(Deserialize)]
    struct Borrowed<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Borrowed<'de>>::deserialize(deserializer)?.map(|b| b.0))
}

/// What is known about one content block, by its Anthropic index.
enum BlockState {
    /// Text, thinking, or a block already finished.
    Plain,
    /// A client tool call: its position among this response's calls, whether argument
    /// deltas came, the input of the start event (used only when no deltas come), and the
    /// annotation carrying a programmatic caller.
    Tool {
        position: usize,
        streamed: bool,
        initial: Option<String>,
        caller: Option<Box<Value>>,
    },
    /// A server-side block, kept verbatim; `input` collects its `input_json_delta`s and
    /// `content` its `compaction_delta`s.
    Native {
        value: Value,
        input: String,
        content: String,
    },
}

struct Block {
    index: u64,
    state: BlockState,
}

/// Decodes an Anthropic Messages stream. Public so that recorded streams can be replayed
/// through it (tests, benchmarks); [`super::Anthropic`] uses it for every streamed call.
#[derive(Default)]
pub struct AnthropicDecoder {
    started: bool,
    finished: bool,
    stop_reason: Option<StopReason>,
    usage: Usage,
    reported: Usage,
    blocks: Vec<Block>,
    tool_calls: usize,
    /// The code execution container the message ran in, put out at its end.
    container: Option<Value>,
}

impl std::fmt::Debug for AnthropicDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicDecoder")
            .field("started", &self.started)
            .field("finished", &self.finished)
            .field("stop_reason", &self.stop_reason)
            .field("usage", &self.usage)
            .field("blocks", &self.blocks.len())
            .field("tool_calls", &self.tool_calls)
            .finish()
    }
}

impl AnthropicDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    fn on_message_start(
        &mut self,
        message: Option<Box<StartMessage<'_>>>,
        out: &mut VecDeque<StreamEvent>,
    ) {
        // A repeated message_start (seen in the wild) must not reset anything.
        if self.started {
            return;
        }
        self.started = true;
        let Some(message) = message else {
            out.push_back(StreamEvent::MessageStart {
                id: String::new(),
                model: String::new(),
            });
            return;
        };
        let StartMessage {
            id,
            model,
            usage,
            content,
            stop_reason,
            container,
        } = *message;
        out.push_back(StreamEvent::MessageStart {
            id: id.map(Cow::into_owned).unwrap_or_default(),
            model: model.map(Cow::into_owned).unwrap_or_default(),
        });
        if let Some(usage) = usage {
            usage.apply_to(&mut self.usage);
        }
        self.report_usage(out);
        // Normally empty; when not, the blocks are whole and no block events follow for them.
        for (index, block) in (0u64..).zip(content) {
            let block = Box::new(StartBlock::from_value(block));
            self.on_block_start(Some(index), Some(block), out);
            self.on_block_stop(Some(index), out);
        }
        if let Some(reason) = stop_reason.filter(|r| !r.is_empty()) {
            self.stop_reason = Some(StopReason::from_name(&reason));
        }
        self.note_container(container);
    }

    fn note_container(&mut self, container: Option<Value>) {
        if let Some(container) = container.filter(|c| !c.is_null()) {
            self.container = Some(container);
        }
    }

    fn on_block_start(
        &mut self,
        index: Option<u64>,
        block: Option<Box<StartBlock<'_>>>,
        out: &mut VecDeque<StreamEvent>,
    ) {
        let index = index.unwrap_or_else(|| self.blocks.last().map_or(0, |b| b.index + 1));
        if self.block(index).is_some() {
            return; // A repeated start for a block we know: keep the first.
        }
        let Some(block) = block else { return };
        let text = |text: Option<Cow<'_, str>>| text.filter(|t| !t.is_empty()).map(Cow::into_owned);
        let state = match *block {
            StartBlock::Text { text: start } => {
                if let Some(text) = text(start) {
                    out.push_back(StreamEvent::TextDelta { text });
                }
                BlockState::Plain
            }
            StartBlock::Thinking {
                thinking,
                signature,
            } => {
                if let Some(text) = text(thinking) {
                    out.push_back(StreamEvent::ThinkingDelta { text });
                }
                if let Some(signature) = text(signature) {
                    out.push_back(StreamEvent::ThinkingSignature { signature });
                }
                BlockState::Plain
            }
            StartBlock::RedactedThinking { data } => {
                // The whole block comes in its start event.
                if let Some(data) = text(data) {
                    out.push_back(StreamEvent::RedactedThinking { data });
                }
                BlockState::Plain
            }
            StartBlock::ToolUse {
                id,
                name,
                input,
                caller,
            } => {
                let position = self.tool_calls;
                self.tool_calls += 1;
                let id = text(id).unwrap_or_default();
                let caller = caller
                    .and_then(|caller| response::caller_note(&id, caller))
                    .map(Box::new);
                out.push_back(StreamEvent::ToolCallStart {
                    index: position,
                    id,
                    name: text(name).unwrap_or_default(),
                });
                let initial = input.filter(has_content).map(|input| input.to_string());
                BlockState::Tool {
                    position,
                    streamed: false,
                    initial,
                    caller,
                }
            }
            // server_tool_use, web_search_tool_result, mcp_tool_use, mcp_tool_result and
            // whatever comes next: Anthropic's to interpret, ours to send back unchanged.
            StartBlock::Other(value) => BlockState::Native {
                value,
                input: String::new(),
                content: String::new(),
            },
        };
        self.blocks.push(Block { index, state });
    }

    fn on_block_delta(
        &mut self,
        index: Option<u64>,
        delta: Option<WireDelta<'_>>,
        out: &mut VecDeque<StreamEvent>,
    ) {
        let Some(delta) = delta else { return };
        // citations_delta: citations are not part of the canonical model. Unknown delta types
        // are new features we do not know yet.
        let Some(field) = delta.kind.as_deref().and_then(DeltaField::from_kind) else {
            return;
        };
        let value = match field {
            DeltaField::Text => delta.text,
            DeltaField::PartialJson => delta.partial_json,
            DeltaField::Thinking => delta.thinking,
            DeltaField::Signature => delta.signature,
            DeltaField::Compaction => delta.content,
        };
        self.on_delta(index, field, value, out);
    }

    /// One delta's value, whether the event was read whole or as a [`fast::Delta`].
    fn on_delta(
        &mut self,
        index: Option<u64>,
        field: DeltaField,
        value: Option<Cow<'_, str>>,
        out: &mut VecDeque<StreamEvent>,
    ) {
        let Some(value) = value.filter(|v| !v.is_empty()) else {
            return;
        };
        match field {
            DeltaField::Text => out.push_back(StreamEvent::TextDelta {
                text: value.into_owned(),
            }),
            DeltaField::Thinking => out.push_back(StreamEvent::ThinkingDelta {
                text: value.into_owned(),
            }),
            DeltaField::Signature => out.push_back(StreamEvent::ThinkingSignature {
                signature: value.into_owned(),
            }),
            DeltaField::Compaction => {
                let index = index.or_else(|| self.blocks.last().map(|b| b.index));
                if let Some(BlockState::Native { content, .. }) =
                    index.and_then(|i| self.block(i)).map(|b| &mut b.state)
                {
                    content.push_str(&value);
                }
            }
            DeltaField::PartialJson => {
                let index = index.or_else(|| self.blocks.last().map(|b| b.index));
                match index.and_then(|i| self.block(i)).map(|b| &mut b.state) {
                    Some(BlockState::Tool {
                        position, streamed, ..
                    }) => {
                        *streamed = true;
                        out.push_back(StreamEvent::ToolCallDelta {
                            index: *position,
                            arguments: value.into_owned(),
                        });
                    }
                    Some(BlockState::Native { input, .. }) => input.push_str(&value),
                    // Arguments for no known call: without an id and name they are useless.
                    _ => {}
                }
            }
        }
    }

    fn on_block_stop(&mut self, index: Option<u64>, out: &mut VecDeque<StreamEvent>) {
        let index = index.or_else(|| self.blocks.last().map(|b| b.index));
        if let Some(block) = index.and_then(|i| self.block(i)) {
            let state = std::mem::replace(&mut block.state, BlockState::Plain);
            finish_block(state, out);
        }
    }

    /// Blocks whose stop never came (a response cut at max_tokens, a paused turn).
    fn finish_open_blocks(&mut self, out: &mut VecDeque<StreamEvent>) {
        for block in &mut self.blocks {
            let state = std::mem::replace(&mut block.state, BlockState::Plain);
            finish_block(state, out);
        }
    }

    fn on_message_delta(
        &mut self,
        delta: Option<WireDelta<'_>>,
        usage: Option<Box<WireUsage>>,
        out: &mut VecDeque<StreamEvent>,
    ) {
        if let Some(delta) = delta {
            if let Some(reason) = delta.stop_reason.filter(|r| !r.is_empty()) {
                self.stop_reason = Some(StopReason::from_name(&reason));
            }
            self.note_container(delta.container.map(|c| *c));
        }
        if let Some(usage) = usage {
            // Cumulative counts: a present value replaces the earlier one.
            usage.apply_to(&mut self.usage);
        }
        self.report_usage(out);
    }

    fn on_message_stop(&mut self, out: &mut VecDeque<StreamEvent>) {
        self.finish_open_blocks(out);
        if let Some(container) = self.container.take() {
            out.push_back(StreamEvent::NativeBlock {
                provider: PROVIDER_NAME.to_owned(),
                value: response::container_note(container),
            });
        }
        self.finished = true;
        let stop_reason = self.stop_reason.clone().unwrap_or(if self.tool_calls > 0 {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        });
        out.push_back(StreamEvent::MessageStop { stop_reason });
    }

    fn report_usage(&mut self, out: &mut VecDeque<StreamEvent>) {
        if self.usage != self.reported {
            self.reported = self.usage;
            out.push_back(StreamEvent::Usage { usage: self.usage });
        }
    }

    /// One whole event, named `name` on its `event:` line; `data` is its text, for errors.
    fn dispatch(
        &mut self,
        name: &str,
        wire: WireEvent<'_>,
        data: &str,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<()> {
        if name == "error" || wire.kind == "error" {
            return Err(stream_error(wire.error, data));
        }
        match wire.kind.as_ref() {
            "message_start" => self.on_message_start(wire.message, out),
            "content_block_start" => self.on_block_start(wire.index, wire.content_block, out),
            "content_block_delta" => self.on_block_delta(wire.index, wire.delta, out),
            "content_block_stop" => self.on_block_stop(wire.index, out),
            "message_delta" => self.on_message_delta(wire.delta, wire.usage, out),
            "message_stop" => self.on_message_stop(out),
            // ping, and event types added after this was written.
            _ => {}
        }
        Ok(())
    }

    fn block(&mut self, index: u64) -> Option<&mut Block> {
        // The block being streamed is almost always the last one.
        self.blocks.iter_mut().rev().find(|b| b.index == index)
    }
}

impl SseDecoder for AnthropicDecoder {
    fn event(&mut self, event: &SseEvent<'_>, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        let data = event.data.as_ref();
        if event.event != "error"
            && let Some(delta) = fast::compact_delta(data)
        {
            #[cfg(any(debug_assertions, fuzzing))]
            crate::provider::scan::check_against_serde(data, &delta.clone().into_event());
            self.on_delta(Some(delta.index), delta.field, Some(delta.value), out);
            return Ok(());
        }
        let parsed = serde_json::from_str(data);
        match parsed {
            Ok(wire) => self.dispatch(event.event, wire, data, out),
            Err(_) if event.event == "error" => Err(stream_error(None, data)),
            Err(e) if KNOWN_EVENTS.contains(&event.event) && !is_noise(data) => Err(Error::parse(
                format!("Anthropic stream event `{}`", event.event),
                format_args!("{e} in {}", excerpt(data.as_bytes())),
            )),
            Err(_) => Ok(()),
        }
    }

    fn end(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        if self.stop_reason.is_some() {
            // The stop reason came; only the closing event is missing.
            self.on_message_stop(out);
            return Ok(());
        }
        Err(Error::IncompleteStream {
            message: "the Anthropic stream ended before the message was complete (no stop reason, no message_stop); the answer may be cut short, so send the request again".to_owned(),
        })
    }
}

fn finish_block(state: BlockState, out: &mut VecDeque<StreamEvent>) {
    match state {
        BlockState::Plain => {}
        BlockState::Tool {
            position,
            streamed,
            initial,
            caller,
        } => {
            if let (false, Some(arguments)) = (streamed, initial) {
                out.push_back(StreamEvent::ToolCallDelta {
                    index: position,
                    arguments,
                });
            }
            out.push_back(StreamEvent::ToolCallEnd { index: position });
            if let Some(note) = caller {
                out.push_back(StreamEvent::NativeBlock {
                    provider: PROVIDER_NAME.to_owned(),
                    value: *note,
                });
            }
        }
        BlockState::Native {
            mut value,
            input,
            content,
        } => {
            // A compaction block starts with `content: null`; its summary streams in deltas.
            if let (false, Value::Object(map)) = (content.is_empty(), &mut value) {
                map.insert("content".to_owned(), Value::String(content));
            }
            // Streamed input replaces the start's placeholder `{}`. Input that does not parse
            // (a cut stream) leaves the placeholder: the block must stay sendable.
            if let (false, Value::Object(map)) = (input.is_empty(), &mut value)
                && let Ok(parsed) = serde_json::from_str::<Value>(&input)
            {
                map.insert("input".to_owned(), parsed);
            }
            out.push_back(StreamEvent::NativeBlock {
                provider: PROVIDER_NAME.to_owned(),
                value,
            });
        }
    }
}

/// A start input worth keeping: anything but `null` and `{}`.
fn has_content(input: &Value) -> bool {
    match input {
        Value::Null => false,
        Value::Object(map) => !map.is_empty(),
        _ => true,
    }
}

/// Data that is not an event: blank, or an OpenAI-style terminator some proxies add.
fn is_noise(data: &str) -> bool {
    let data = data.trim();
    data.is_empty() || data == "[DONE]"
}

fn stream_error(error: Option<Box<WireError<'_>>>, data: &str) -> Error {
    let (error_type, message) = match error {
        Some(e) => {
            let WireError { kind, message } = *e;
            (kind.map(Cow::into_owned), message.map(Cow::into_owned))
        }
        None => (None, None),
    };
    let message = message.unwrap_or_else(|| excerpt(data.as_bytes()));
    let provider = PROVIDER_NAME.to_owned();
    // The in-stream twin of HTTP 529 (docs, "Streaming Messages" → "Error events").
    if error_type.as_deref() == Some("overloaded_error") {
        return Error::Overloaded { provider, message };
    }
    Error::Stream {
        provider,
        error_type,
        message,
    }
}
