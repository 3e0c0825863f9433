//! Scripted turns: what a fake model answers to one call. The scripted model and the wire-level
//! servers both play them.

use std::time::Duration;

use agentloop::{Error, StopReason, StreamEvent, Usage};
use serde_json::Value;

use crate::server::Fault;

/// One piece of a scripted answer.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnItem {
    /// Answer text (streamed in several deltas).
    Text(String),
    /// Reasoning text with an optional signature.
    Thinking {
        /// The reasoning.
        text: String,
        /// Its signature.
        signature: Option<String>,
    },
    /// A tool call; `arguments` is the raw JSON text (streamed in several fragments), so tests
    /// can also send invalid JSON.
    ToolCall {
        /// Call id; `None` gives `call_<turn>_<i>`.
        id: Option<String>,
        /// Tool name.
        name: String,
        /// Raw argument text.
        arguments: String,
    },
}

/// How many stream deltas each item of a turn is cut into, by the scripted model and the wire
/// servers alike. Each count is an upper bound: [`split_pieces`] gives fewer pieces when the
/// text is short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pieces {
    /// Deltas per text item (default 3).
    pub text: usize,
    /// Deltas per reasoning item (default 2).
    pub thinking: usize,
    /// Fragments per tool call's arguments (default 4).
    pub arguments: usize,
}

impl Default for Pieces {
    fn default() -> Self {
        Self {
            text: 3,
            thinking: 2,
            arguments: 4,
        }
    }
}

/// What the model answers to one call.
#[derive(Debug, Clone)]
pub struct Turn {
    /// The answer, in order.
    pub items: Vec<TurnItem>,
    /// Stop reason; `None` derives it (tool_use when there are tool calls, else end_turn).
    pub stop_reason: Option<StopReason>,
    /// Reported usage.
    pub usage: Usage,
    /// Wait this long before answering.
    pub delay: Option<Duration>,
    /// Wait this long between streamed events.
    pub chunk_delay: Option<Duration>,
    /// Fail instead of answering (how the mock servers play each error: see
    /// [`crate::server`]).
    pub error: Option<Error>,
    /// Fail after this many streamed events (a stream cut mid-way); the mock servers count SSE
    /// events.
    pub fail_after_events: Option<(usize, Error)>,
    /// Wire-level faults, played by the mock servers only (the scripted model ignores them).
    pub faults: Vec<Fault>,
    /// How the items are cut into stream deltas.
    pub pieces: Pieces,
}

impl Default for Turn {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            stop_reason: None,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            },
            delay: None,
            chunk_delay: None,
            error: None,
            fail_after_events: None,
            faults: Vec::new(),
            pieces: Pieces::default(),
        }
    }
}

impl Turn {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            items: vec![TurnItem::Text(text.into())],
            ..Self::default()
        }
    }

    /// One tool call with JSON arguments.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::tool_calls([(name.into(), arguments)])
    }

    /// Several tool calls in one turn.
    pub fn tool_calls<N: Into<String>>(calls: impl IntoIterator<Item = (N, Value)>) -> Self {
        Self {
            items: calls
                .into_iter()
                .map(|(name, args)| TurnItem::ToolCall {
                    id: None,
                    name: name.into(),
                    arguments: args.to_string(),
                })
                .collect(),
            ..Self::default()
        }
    }

    /// One tool call whose argument text is sent verbatim (may be invalid JSON).
    pub fn tool_call_raw(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            items: vec![TurnItem::ToolCall {
                id: None,
                name: name.into(),
                arguments: arguments.into(),
            }],
            ..Self::default()
        }
    }

    /// A failed call.
    pub fn error(error: Error) -> Self {
        Self {
            error: Some(error),
            ..Self::default()
        }
    }

    /// A turn that is only a wire fault, e.g. `Turn::fault(Fault::Overloaded)`: a rejection
    /// answers this call with an error status (a retry then gets the next turn).
    pub fn fault(fault: Fault) -> Self {
        Self::default().with_fault(fault)
    }

    /// Add text after what is there.
    pub fn then_text(mut self, text: impl Into<String>) -> Self {
        self.items.push(TurnItem::Text(text.into()));
        self
    }

    /// Add a tool call after what is there.
    pub fn then_tool_call(mut self, name: impl Into<String>, arguments: Value) -> Self {
        self.items.push(TurnItem::ToolCall {
            id: None,
            name: name.into(),
            arguments: arguments.to_string(),
        });
        self
    }

    /// Put reasoning first.
    pub fn with_thinking(mut self, text: impl Into<String>, signature: Option<&str>) -> Self {
        self.items.insert(
            0,
            TurnItem::Thinking {
                text: text.into(),
                signature: signature.map(str::to_owned),
            },
        );
        self
    }

    /// Give the tool calls these ids, in order.
    pub fn with_ids<S: Into<String>>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        let mut ids = ids.into_iter();
        for item in &mut self.items {
            if let TurnItem::ToolCall { id, .. } = item {
                *id = ids.next().map(Into::into);
            }
        }
        self
    }

    /// Report this usage.
    pub fn with_usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage = Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        };
        self
    }

    /// Report these prompt-cache reads and writes along with the usage.
    pub fn with_cache_usage(mut self, read_tokens: u64, write_tokens: u64) -> Self {
        self.usage.cache_read_tokens = read_tokens;
        self.usage.cache_write_tokens = write_tokens;
        self
    }

    /// Report this stop reason.
    pub fn with_stop_reason(mut self, stop_reason: StopReason) -> Self {
        self.stop_reason = Some(stop_reason);
        self
    }

    /// Stream each text item in up to `n` deltas (default 3).
    pub fn with_text_pieces(mut self, n: usize) -> Self {
        self.pieces.text = n;
        self
    }

    /// Stream each tool call's arguments in up to `n` fragments (default 4).
    pub fn with_argument_pieces(mut self, n: usize) -> Self {
        self.pieces.arguments = n;
        self
    }

    /// Wait before answering.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Wait between streamed events.
    pub fn with_chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = Some(delay);
        self
    }

    /// Deliver this turn with a wire fault (mock servers only; see [`Fault`]).
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.faults.push(fault);
        self
    }

    /// Cut the stream with `error` after `events` events.
    pub fn fail_after(mut self, events: usize, error: Error) -> Self {
        self.fail_after_events = Some((events, error));
        self
    }

    /// The stop reason this turn reports.
    pub fn effective_stop_reason(&self) -> StopReason {
        self.stop_reason.clone().unwrap_or_else(|| {
            if self.has_tool_calls() {
                StopReason::ToolUse
            } else {
                StopReason::EndTurn
            }
        })
    }

    /// Whether the turn calls tools.
    pub fn has_tool_calls(&self) -> bool {
        self.items
            .iter()
            .any(|i| matches!(i, TurnItem::ToolCall { .. }))
    }

    /// The tool calls with resolved ids `(id, name, arguments)`, for wire servers.
    pub fn resolved_calls(&self, turn_index: usize) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for item in &self.items {
            if let TurnItem::ToolCall {
                id,
                name,
                arguments,
            } = item
            {
                let i = out.len();
                let id = id
                    .clone()
                    .unwrap_or_else(|| format!("call_{turn_index}_{i}"));
                out.push((id, name.clone(), arguments.clone()));
            }
        }
        out
    }

    /// The normalized events this turn streams as: text in several deltas, arguments in
    /// several fragments, then usage and stop.
    pub fn events(&self, turn_index: usize) -> Vec<StreamEvent> {
        let mut events = vec![StreamEvent::MessageStart {
            id: format!("msg_{turn_index}"),
            model: "scripted".into(),
        }];
        let mut call_index = 0;
        for item in &self.items {
            match item {
                TurnItem::Text(text) => {
                    for piece in split_pieces(text, self.pieces.text) {
                        events.push(StreamEvent::TextDelta { text: piece });
                    }
                }
                TurnItem::Thinking { text, signature } => {
                    for piece in split_pieces(text, self.pieces.thinking) {
                        events.push(StreamEvent::ThinkingDelta { text: piece });
                    }
                    if let Some(signature) = signature {
                        events.push(StreamEvent::ThinkingSignature {
                            signature: signature.clone(),
                        });
                    }
                }
                TurnItem::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    let index = call_index;
                    call_index += 1;
                    events.push(StreamEvent::ToolCallStart {
                        index,
                        id: id
                            .clone()
                            .unwrap_or_else(|| format!("call_{turn_index}_{index}")),
                        name: name.clone(),
                    });
                    for piece in split_pieces(arguments, self.pieces.arguments) {
                        events.push(StreamEvent::ToolCallDelta {
                            index,
                            arguments: piece,
                        });
                    }
                    events.push(StreamEvent::ToolCallEnd { index });
                }
            }
        }
        events.push(StreamEvent::Usage { usage: self.usage });
        events.push(StreamEvent::MessageStop {
            stop_reason: self.effective_stop_reason(),
        });
        events
    }
}

/// Split text into up to `n` pieces at char boundaries (empty text gives no pieces).
pub fn split_pieces(text: &str, n: usize) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n.max(1));
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(events: &[StreamEvent]) -> (usize, usize) {
        let text = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::TextDelta { .. }))
            .count();
        let arguments = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::ToolCallDelta { .. }))
            .count();
        (text, arguments)
    }

    #[test]
    fn pieces_default_to_three_text_deltas_and_four_argument_fragments() {
        let turn =
            Turn::text("abcdefghijkl").then_tool_call("f", serde_json::json!({"city": "Paris"}));
        assert_eq!(counts(&turn.events(0)), (3, 4));
    }

    #[test]
    fn pieces_can_be_set_per_turn() {
        let turn = Turn::text("abcdefghijkl")
            .with_text_pieces(6)
            .then_tool_call("f", serde_json::json!({"city": "Paris"}))
            .with_argument_pieces(8);
        let events = turn.events(0);
        assert_eq!(counts(&events), (6, 8));
        let arguments: String = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallDelta { arguments, .. } => Some(arguments.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(arguments, r#"{"city":"Paris"}"#);
    }
}
