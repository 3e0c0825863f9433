//! The chat event protocol (version [`PROTOCOL_VERSION`]) and the frames a running chat records.

use agentloop::run::RunStopReason;
use agentloop::{RunEvent, StreamEvent, ToolResultContent, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version of the `/v1/chat` event protocol, sent in the [`PROTOCOL_HEADER`] response header.
pub const PROTOCOL_VERSION: u32 = 1;

/// The response header naming the protocol version.
pub const PROTOCOL_HEADER: &str = "x-agentloop-protocol";

/// One event of `POST /v1/chat`, sent as `event: <name>` with `data: <json fields>`: a
/// projection of the library's [`agentloop::RunEvent`]s (the table of which layer emits what is
/// in [`agentloop::run`]'s doc). `tool_call_start` is the run's `tool_call_ready`: the call is
/// complete.
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
    /// A complete tool call (the run's `tool_call_ready`): about to run, or to be answered
    /// without running (refused by a hook, past a limit). Every call gets one, then its result.
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
    /// A complete call (after its `tool_call_start`) needs the user's approval before it
    /// runs: one per call. Once every call of the step that needs none has run, the answer
    /// waits, its stream open, until decisions are posted to
    /// `POST /v1/chat/{message_id}/approvals`; it then goes on with the calls' results.
    ApprovalRequested {
        /// The call id (decisions name calls by it).
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments as the model sent them.
        arguments: Value,
        /// Why approval is needed.
        reason: String,
    },
    /// The checked answer of a chat sent with an `output_schema`, before `message_end`.
    Output {
        /// The value, as the schema has it.
        value: Value,
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
            Self::ApprovalRequested { .. } => "approval_requested",
            Self::Output { .. } => "output",
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

/// What a running chat records: the library's [`RunEvent`]s as they came, between the answer's
/// start and end that only the server knows (its ids, and why it ended as the web user is
/// told). Both wire protocols are projections of these frames: [`Frame::chat_event`] for
/// `/v1/chat`, and the UI stream's translator.
#[derive(Debug)]
pub(crate) enum Frame {
    /// The answer began (`message_start`).
    Start {
        conversation_id: String,
        message_id: String,
    },
    /// An event of the run.
    Run(RunEvent),
    /// The answer ended (`message_end`); always recorded.
    End {
        stop_reason: RunStopReason,
        usage: Usage,
    },
    /// The answer did not complete (`error`), for people.
    Failed { message: String },
    /// The answer waits for approval decisions (after its `approval_requested` events). Not an
    /// event of `/v1/chat`, whose stream stays open; a UI stream response ends here.
    Paused,
    /// A `/v1/chat` event recorded before a restart, at its old position (the answer waited
    /// for approval then).
    Replayed(ChatEvent),
    /// A position whose frame showed nothing in `/v1/chat` before a restart.
    Hidden,
}

impl Frame {
    /// The `/v1/chat` event this frame shows as, if any: the run's text and reasoning deltas,
    /// each call once complete (`tool_call_start`, the run's `tool_call_ready`) and its result.
    pub(crate) fn chat_event(&self) -> Option<ChatEvent> {
        Some(match self {
            Self::Start {
                conversation_id,
                message_id,
            } => ChatEvent::MessageStart {
                conversation_id: conversation_id.clone(),
                message_id: message_id.clone(),
            },
            Self::Run(RunEvent::Model(StreamEvent::TextDelta { text })) => {
                ChatEvent::TextDelta { text: text.clone() }
            }
            Self::Run(RunEvent::Model(StreamEvent::ThinkingDelta { text })) => {
                ChatEvent::ThinkingDelta { text: text.clone() }
            }
            Self::Run(RunEvent::ToolCallReady { call }) => ChatEvent::ToolCallStart {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.input.clone(),
            },
            Self::Run(RunEvent::ToolCallResult { id, result, .. }) => ChatEvent::ToolCallResult {
                id: id.clone(),
                content: result.content.clone(),
                is_error: result.is_error,
            },
            Self::Run(RunEvent::ApprovalRequested(pending)) => ChatEvent::ApprovalRequested {
                id: pending.id.clone(),
                name: pending.tool.clone(),
                arguments: pending.input.clone(),
                reason: pending.reason.clone(),
            },
            Self::Run(RunEvent::Output { value }) => ChatEvent::Output {
                value: (**value).clone(),
            },
            Self::Run(_) => return None,
            Self::End { stop_reason, usage } => ChatEvent::MessageEnd {
                stop_reason: stop_reason_name(stop_reason).to_owned(),
                usage: *usage,
            },
            Self::Failed { message } => ChatEvent::Error {
                message: message.clone(),
            },
            Self::Replayed(event) => event.clone(),
            Self::Paused | Self::Hidden => return None,
        })
    }
}

/// How `message_end` (and the stored answer) names why a run stopped.
pub(crate) fn stop_reason_name(reason: &RunStopReason) -> &str {
    match reason {
        // Version 1 of the protocol named a cancelled reply `interrupted`.
        RunStopReason::Cancelled => "interrupted",
        other => other.as_str(),
    }
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
