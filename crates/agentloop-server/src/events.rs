//! The chat event protocol (version [`PROTOCOL_VERSION`]) and the frames a running chat records.

use agentloop::{ToolResultContent, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version of the `/v1/chat` event protocol, sent in the [`PROTOCOL_HEADER`] response header.
pub const PROTOCOL_VERSION: u32 = 1;

/// The response header naming the protocol version.
pub const PROTOCOL_HEADER: &str = "x-agentloop-protocol";

/// One event of `POST /v1/chat`, sent as `event: <name>` with `data: <json fields>`. The names
/// and fields are those of the library's [`agentloop::RunEvent`]s, in snake_case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", content = "data", rename_all = "snake_case")]
pub enum ChatEvent {
    /// First event of every chat message.
    MessageStart {
        /// The conversation (new or continued).
        conversation_id: String,
        /// This answer's id: the key for reconnecting and cancelling.
        message_id: String,
    },
    /// A piece of answer text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// A piece of the model's reasoning, for models that stream it.
    ThinkingDelta {
        /// The text.
        text: String,
    },
    /// The model called a tool and it is about to run.
    ToolCallStart {
        /// The call id.
        id: String,
        /// The tool's name.
        name: String,
        /// The parsed arguments (the raw text as a JSON string when they were not valid JSON).
        arguments: Value,
    },
    /// A tool call ended.
    ToolCallResult {
        /// The call id.
        id: String,
        /// What the model sees: a string, or content blocks.
        content: ToolResultContent,
        /// Whether the model sees it as an error.
        is_error: bool,
    },
    /// The answer ended. Always sent; an `error` event may follow it.
    MessageEnd {
        /// Why the run stopped (`end_turn`, `max_tool_iterations`, `interrupted`, `error`, ...).
        stop_reason: String,
        /// Tokens used by all model calls of this answer.
        usage: Usage,
    },
    /// The answer did not complete: a limit, a model error, a refused prompt. Last event.
    Error {
        /// What happened, for people.
        message: String,
    },
}

impl ChatEvent {
    /// The SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::MessageStart { .. } => "message_start",
            Self::TextDelta { .. } => "text_delta",
            Self::ThinkingDelta { .. } => "thinking_delta",
            Self::ToolCallStart { .. } => "tool_call_start",
            Self::ToolCallResult { .. } => "tool_call_result",
            Self::MessageEnd { .. } => "message_end",
            Self::Error { .. } => "error",
        }
    }

    /// The SSE data: the event's fields as a JSON object.
    pub fn data(&self) -> Value {
        match serde_json::to_value(self) {
            Ok(Value::Object(mut map)) => map.remove("data").unwrap_or(Value::Null),
            _ => Value::Null,
        }
    }

    /// Rebuild an event from its SSE name and data (for Rust clients of the server).
    pub fn from_sse(name: &str, data: &str) -> Result<Self, serde_json::Error> {
        let data: Value = serde_json::from_str(data)?;
        serde_json::from_value(serde_json::json!({ "event": name, "data": data }))
    }
}

/// What a running chat records: the protocol's events plus the step structure and argument
/// streaming that only the AI SDK stream shows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Frame {
    Chat(ChatEvent),
    StepStart,
    StepFinish,
    ToolInputStart { id: String, name: String },
    ToolInputDelta { id: String, delta: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_into_name_and_data_and_back() {
        let event = ChatEvent::ToolCallResult {
            id: "call_1".into(),
            content: ToolResultContent::Text("18 °C".into()),
            is_error: false,
        };
        assert_eq!(event.name(), "tool_call_result");
        let data = event.data();
        assert_eq!(
            data,
            serde_json::json!({"id": "call_1", "content": "18 °C", "is_error": false})
        );
        let back = ChatEvent::from_sse(event.name(), &data.to_string()).unwrap();
        assert_eq!(back, event);
    }
}
