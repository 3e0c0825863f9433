//! Normalized stream events, shared by every provider, and the one accumulator that turns them
//! into a [`Response`].

use serde::Serialize;
use serde_json::Value;

use crate::error::Result;
use crate::message::{ContentBlock, Response, StopReason, Usage};

/// One event of a model's streamed answer, the same for every provider.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// The response began.
    MessageStart {
        /// The provider's response id.
        id: String,
        /// The model answering.
        model: String,
    },
    /// A piece of answer text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// A piece of reasoning text.
    ThinkingDelta {
        /// The text.
        text: String,
    },
    /// The signature of the reasoning block being streamed.
    ThinkingSignature {
        /// The signature.
        signature: String,
    },
    /// A whole redacted (encrypted) reasoning block.
    RedactedThinking {
        /// Opaque data.
        data: String,
    },
    /// A tool call began. `index` identifies it among this response's calls.
    ToolCallStart {
        /// Position among this response's tool calls (0-based).
        index: usize,
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
    },
    /// A fragment of a tool call's JSON arguments.
    ToolCallDelta {
        /// Which call.
        index: usize,
        /// The fragment.
        arguments: String,
    },
    /// A tool call's arguments are complete.
    ToolCallEnd {
        /// Which call.
        index: usize,
    },
    /// A complete provider-native block (server tool use and results), kept verbatim.
    NativeBlock {
        /// The provider that produced it.
        provider: String,
        /// The block.
        value: Value,
    },
    /// Token usage so far (the latest report replaces earlier ones).
    Usage {
        /// The counts.
        usage: Usage,
    },
    /// The response is complete.
    MessageStop {
        /// Why the model stopped.
        stop_reason: StopReason,
    },
}

impl StreamEvent {
    /// The event's snake_case name: its `type` when serialized.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MessageStart { .. } => "message_start",
            Self::TextDelta { .. } => "text_delta",
            Self::ThinkingDelta { .. } => "thinking_delta",
            Self::ThinkingSignature { .. } => "thinking_signature",
            Self::RedactedThinking { .. } => "redacted_thinking",
            Self::ToolCallStart { .. } => "tool_call_start",
            Self::ToolCallDelta { .. } => "tool_call_delta",
            Self::ToolCallEnd { .. } => "tool_call_end",
            Self::NativeBlock { .. } => "native_block",
            Self::Usage { .. } => "usage",
            Self::MessageStop { .. } => "message_stop",
        }
    }
}

/// Bytes a text block being assembled starts with room for.
const TEXT_BLOCK_START: usize = 256;

/// Bytes a tool call's arguments being assembled start with room for.
const ARGUMENTS_START: usize = 128;

/// Builds a [`Response`] from stream events. Arguments are appended to one buffer per call and
/// parsed once, at the end.
#[derive(Debug, Default)]
pub struct Accumulator {
    id: String,
    model: String,
    content: Vec<ContentBlock>,
    /// (content position, arguments buffer) per tool call index.
    calls: Vec<Option<PendingCall>>,
    usage: Usage,
    stop_reason: Option<StopReason>,
    started: bool,
    open_text: Option<usize>,
    open_thinking: Option<usize>,
}

#[derive(Debug)]
struct PendingCall {
    position: usize,
    arguments: String,
}

impl Accumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether any content has arrived (after which a failed call must not be retried).
    pub fn has_content(&self) -> bool {
        !self.content.is_empty()
    }

    /// Whether the provider said the message is complete.
    pub fn is_stopped(&self) -> bool {
        self.stop_reason.is_some()
    }

    /// Take in one event.
    pub fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::MessageStart { id, model } => {
                // A repeated message_start must not reset what was assembled.
                if !self.started {
                    self.id.clone_from(id);
                    self.model.clone_from(model);
                    self.started = true;
                }
            }
            StreamEvent::TextDelta { text } => self.push_text(text),
            StreamEvent::ThinkingDelta { text } => self.push_thinking(text, None),
            StreamEvent::ThinkingSignature { signature } => self.push_thinking("", Some(signature)),
            StreamEvent::RedactedThinking { data } => {
                self.close_open();
                self.content.push(ContentBlock::RedactedThinking {
                    data: data.clone(),
                    provider: None,
                });
            }
            StreamEvent::ToolCallStart { index, id, name } => self.start_call(*index, id, name),
            StreamEvent::ToolCallDelta { index, arguments } => {
                if self.call_slot(*index).is_none() {
                    self.start_call(*index, "", "");
                }
                if let Some(call) = self.call_slot(*index) {
                    if call.arguments.capacity() == 0 {
                        // Arguments come in many small fragments: room from the first skips
                        // the first four or so doublings of the buffer.
                        call.arguments.reserve(arguments.len().max(ARGUMENTS_START));
                    }
                    call.arguments.push_str(arguments);
                }
            }
            StreamEvent::ToolCallEnd { .. } => {}
            StreamEvent::NativeBlock { provider, value } => {
                self.close_open();
                self.content.push(ContentBlock::Native {
                    provider: provider.clone(),
                    value: value.clone(),
                });
            }
            StreamEvent::Usage { usage } => self.usage = *usage,
            StreamEvent::MessageStop { stop_reason } => {
                self.stop_reason = Some(stop_reason.clone())
            }
        }
    }

    fn close_open(&mut self) {
        self.open_text = None;
        self.open_thinking = None;
    }

    fn push_text(&mut self, text: &str) {
        if let Some(ContentBlock::Text { text: open }) =
            self.open_text.and_then(|i| self.content.get_mut(i))
        {
            open.push_str(text);
            return;
        }
        self.close_open();
        self.open_text = Some(self.content.len());
        // Deltas are a few bytes and answers hundreds: starting with room skips the first
        // five or so doublings of the block (a reallocation and a copy each).
        let mut open = String::with_capacity(text.len().max(TEXT_BLOCK_START));
        open.push_str(text);
        self.content.push(ContentBlock::Text { text: open });
    }

    fn push_thinking(&mut self, text: &str, signature: Option<&String>) {
        if let Some(ContentBlock::Thinking {
            thinking,
            signature: sig,
            ..
        }) = self.open_thinking.and_then(|i| self.content.get_mut(i))
            // A signature closes a reasoning block (Anthropic sends it last): new reasoning
            // text after it is a new block, or two signed blocks would merge into one.
            && (sig.is_none() || text.is_empty())
        {
            thinking.push_str(text);
            if let Some(s) = signature {
                sig.get_or_insert_with(String::new).push_str(s);
            }
            return;
        }
        self.close_open();
        self.open_thinking = Some(self.content.len());
        self.content.push(ContentBlock::Thinking {
            thinking: text.to_owned(),
            signature: signature.cloned(),
            provider: None,
        });
    }

    fn call_slot(&mut self, index: usize) -> Option<&mut PendingCall> {
        self.calls.get_mut(index).and_then(Option::as_mut)
    }

    fn start_call(&mut self, index: usize, id: &str, name: &str) {
        self.close_open();
        if let Some(existing) = self.call_slot(index) {
            // A repeated start (some servers resend id/name): fill only what is missing.
            let position = existing.position;
            if let Some(ContentBlock::ToolUse {
                id: old_id,
                name: old_name,
                ..
            }) = self.content.get_mut(position)
            {
                if old_id.is_empty() && !id.is_empty() {
                    id.clone_into(old_id);
                }
                if old_name.is_empty() && !name.is_empty() {
                    name.clone_into(old_name);
                }
            }
            return;
        }
        if self.calls.len() <= index {
            self.calls.resize_with(index + 1, || None);
        }
        self.calls[index] = Some(PendingCall {
            position: self.content.len(),
            arguments: String::new(),
        });
        self.content.push(ContentBlock::ToolUse {
            id: id.to_owned(),
            name: name.to_owned(),
            input: Value::Null,
        });
    }

    /// Tag reasoning blocks with the provider that made them (adapters call this).
    pub(crate) fn set_provider(&mut self, provider: &str) {
        for block in &mut self.content {
            match block {
                ContentBlock::Thinking { provider: p, .. }
                | ContentBlock::RedactedThinking { provider: p, .. }
                    if p.is_none() =>
                {
                    *p = Some(provider.to_owned());
                }
                _ => {}
            }
        }
    }

    /// Finish: parse each call's arguments once. Invalid JSON is kept as the raw text (a JSON
    /// string), so the run loop can answer it with an "invalid arguments" result.
    pub fn finish(mut self) -> Response {
        for call in self.calls.into_iter().flatten() {
            let input = parse_arguments(&call.arguments);
            if let Some(ContentBlock::ToolUse { input: slot, .. }) =
                self.content.get_mut(call.position)
            {
                *slot = input;
            }
        }
        let has_calls = self
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse { .. }));
        let stop_reason = self.stop_reason.unwrap_or(if has_calls {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        });
        Response {
            id: self.id,
            model: self.model,
            content: self.content,
            stop_reason,
            usage: self.usage,
        }
    }
}

/// Tool-call arguments: empty means `{}`; invalid JSON is kept as a string.
pub fn parse_arguments(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

/// Collect a whole stream into a response.
pub async fn collect<S>(mut stream: S) -> Result<Response>
where
    S: futures::Stream<Item = Result<StreamEvent>> + Unpin,
{
    use futures::StreamExt;
    let mut acc = Accumulator::new();
    while let Some(event) = stream.next().await {
        acc.push(&event?);
    }
    Ok(acc.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thinking(text: &str) -> StreamEvent {
        StreamEvent::ThinkingDelta { text: text.into() }
    }

    fn signature(sig: &str) -> StreamEvent {
        StreamEvent::ThinkingSignature {
            signature: sig.into(),
        }
    }

    #[test]
    fn a_signature_closes_the_reasoning_block() {
        let mut acc = Accumulator::new();
        for event in [
            thinking("first "),
            thinking("block"),
            signature("sig"),
            signature("-1"),
            thinking("second"),
            signature("sig-2"),
        ] {
            acc.push(&event);
        }
        let response = acc.finish();
        assert_eq!(
            response.content,
            vec![
                ContentBlock::Thinking {
                    thinking: "first block".into(),
                    signature: Some("sig-1".into()),
                    provider: None,
                },
                ContentBlock::Thinking {
                    thinking: "second".into(),
                    signature: Some("sig-2".into()),
                    provider: None,
                },
            ]
        );
    }
}
