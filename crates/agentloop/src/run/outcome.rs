//! Tool outcomes: the closed set of ways a tool call can end, each mapped to one tool result.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::message::{ToolResult, ToolResultContent};
use crate::tool::Violation;

/// How one tool call ended. Every call the model makes ends in exactly one outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ToolOutcome {
    /// The handler returned a result.
    Completed {
        /// What it returned.
        content: ToolResultContent,
        /// The structured value behind the content, when the tool gave one (an MCP tool's
        /// `structuredContent`); the model sees only `content`. Boxed to keep outcomes small.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        structured: Option<Box<serde_json::Value>>,
    },
    /// The handler returned an error (or panicked).
    Failed {
        /// The error message the model sees.
        message: String,
    },
    /// The handler ran past its timeout.
    TimedOut {
        /// The timeout that fired.
        after: Duration,
    },
    /// A hook refused the call.
    Denied {
        /// The hook's reason.
        reason: String,
    },
    /// The call was not run to the end: the run was cancelled, timed out, or hit a limit.
    Cancelled {
        /// Why.
        reason: String,
    },
    /// The tool was running when the process running a durable run died, and it is not
    /// marked idempotent, so it is not run again (see [`crate::run::RunStore`]).
    Interrupted {
        /// Why.
        reason: String,
    },
    /// The arguments did not fit the tool's schema.
    InvalidArguments {
        /// Each violation with its JSON pointer.
        violations: Vec<Violation>,
    },
    /// No tool with that name is available.
    UnknownTool {
        /// The names that are available, to help the model recover.
        available: Vec<String>,
    },
    /// The tool asks a person for input before it can finish: the run pauses with the call
    /// pending ([`super::PendingApproval::input_request`]), or, when it cannot pause
    /// ([`super::RunOptions::non_interactive`]), the model gets an error instead.
    InputRequired {
        /// What it asks.
        request: Box<super::InputRequest>,
    },
}

impl ToolOutcome {
    /// A short snake_case name of the outcome.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Completed { .. } => "completed",
            Self::Failed { .. } => "failed",
            Self::TimedOut { .. } => "timed_out",
            Self::Denied { .. } => "denied",
            Self::Cancelled { .. } => "cancelled",
            Self::Interrupted { .. } => "interrupted",
            Self::InvalidArguments { .. } => "invalid_arguments",
            Self::UnknownTool { .. } => "unknown_tool",
            Self::InputRequired { .. } => "input_required",
        }
    }

    /// Whether the model sees this as an error.
    pub fn is_error(&self) -> bool {
        !matches!(self, Self::Completed { .. })
    }

    /// The tool result the model sees for call `id` of tool `name`.
    pub fn to_result(&self, id: &str, name: &str) -> ToolResult {
        match self {
            Self::Completed { content, .. } => ToolResult {
                tool_use_id: id.to_owned(),
                content: content.clone(),
                is_error: false,
            },
            Self::Failed { message } => ToolResult::error(id, format!("Error: {message}")),
            Self::TimedOut { after } => ToolResult::error(
                id,
                format!(
                    "Error: tool `{name}` timed out after {:.1}s",
                    after.as_secs_f64()
                ),
            ),
            Self::Denied { reason } => ToolResult::error(
                id,
                format!("Error: the call to `{name}` was denied: {reason}"),
            ),
            Self::Cancelled { reason } => ToolResult::error(
                id,
                format!("Error: the call to `{name}` was not run: {reason}"),
            ),
            Self::Interrupted { reason } => ToolResult::error(
                id,
                format!("Error: the call to `{name}` was interrupted: {reason}"),
            ),
            Self::InvalidArguments { violations } => {
                ToolResult::error(id, invalid_arguments_text(name, violations))
            }
            Self::UnknownTool { available } => ToolResult::error(
                id,
                if available.is_empty() {
                    format!("Error: there is no tool named `{name}`; no tools are available")
                } else {
                    format!(
                        "Error: there is no tool named `{name}`; available tools: {}",
                        available.join(", ")
                    )
                },
            ),
            Self::InputRequired { request } => ToolResult::error(
                id,
                format!(
                    "Error: `{name}` asks a person for input (\"{}\"), and no answer was given",
                    request.message
                ),
            ),
        }
    }
}

pub(crate) fn invalid_arguments_text(name: &str, violations: &[Violation]) -> String {
    let mut text = format!("Error: invalid arguments for tool `{name}`:");
    for v in violations {
        text.push_str("\n- ");
        text.push_str(&v.to_string());
    }
    text
}
