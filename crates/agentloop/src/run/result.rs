//! What a run returns, and the events a streamed run emits.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::approval::{PausedRun, PendingApproval};
use super::outcome::ToolOutcome;
use crate::cost::Cost;
use crate::error::{Error, Result};
use crate::message::{Message, Response, StopReason, ToolResult, Usage};
use crate::stream::StreamEvent;
use crate::tool::ToolCall;

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStopReason {
    /// The model gave its answer.
    EndTurn,
    /// The model still asked for tools after [`super::Limits::max_tool_iterations`] rounds of
    /// them; those last calls were answered as not run. (`max_turns` in runs saved before the
    /// rename.)
    #[serde(alias = "max_turns")]
    MaxToolIterations,
    /// The tool-call limit was reached (calls past it were answered as not run).
    MaxToolCalls,
    /// The model's answer was cut off by its per-response token limit.
    MaxTokens,
    /// The run's total token budget was used up.
    TokenBudget,
    /// The next model call would have taken the run over its cost budget
    /// ([`super::RunOptions::max_cost`]).
    CostBudget,
    /// The run (or one step) took longer than allowed.
    Timeout,
    /// A `stop_when` condition fired; holds its name.
    Custom(String),
    /// The run was cancelled (its token, [`super::RunStream::cancel`], or a conversation's
    /// interrupt). (`interrupted` in runs saved before the rename.)
    #[serde(alias = "interrupted")]
    Cancelled,
    /// The model repeated the same invalid tool call (or typed answer); holds the tool's (or
    /// output's) name.
    RepeatedInvalidCall(String),
    /// A typed run's answers kept breaking the output's schema or validator until the retries
    /// ran out; [`RunResult::error`] holds [`Error::InvalidOutput`].
    InvalidOutput,
    /// A model call failed; [`RunResult::error`] holds the error.
    Error,
    /// Manual tool mode: the model asked for tools, which the caller must answer before the
    /// conversation goes on. The history ends with those tool uses.
    AwaitingToolResults,
    /// Tool calls need a person's approval: [`RunResult::pending_approvals`] lists them and
    /// [`RunResult::paused`] holds the run to resume with decisions
    /// ([`crate::Agent::resume`]). The history ends with the step's tool uses.
    AwaitingApproval,
}

impl RunStopReason {
    /// The snake_case name (`custom` and `repeated_invalid_call` without their payload).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::EndTurn => "end_turn",
            Self::MaxToolIterations => "max_tool_iterations",
            Self::MaxToolCalls => "max_tool_calls",
            Self::MaxTokens => "max_tokens",
            Self::TokenBudget => "token_budget",
            Self::CostBudget => "cost_budget",
            Self::Timeout => "timeout",
            Self::Custom(_) => "custom",
            Self::Cancelled => "cancelled",
            Self::RepeatedInvalidCall(_) => "repeated_invalid_call",
            Self::InvalidOutput => "invalid_output",
            Self::Error => "error",
            Self::AwaitingToolResults => "awaiting_tool_results",
            Self::AwaitingApproval => "awaiting_approval",
        }
    }
}

impl std::fmt::Display for RunStopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Custom(name) => write!(f, "custom ({name})"),
            Self::RepeatedInvalidCall(tool) => {
                write!(f, "repeated_invalid_call (tool `{tool}`)")
            }
            other => f.write_str(other.as_str()),
        }
    }
}

/// One model call and the tools it asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// 0-based position in the run.
    pub index: usize,
    /// The model's response.
    pub response: Response,
    /// The tool calls of the response, in order.
    pub tool_calls: Vec<ToolCall>,
    /// How each call ended, in call order.
    pub outcomes: Vec<ToolOutcome>,
    /// The results sent back, in call order.
    pub tool_results: Vec<ToolResult>,
    /// Wall time of the model call plus tools.
    pub duration: Duration,
    /// What the model call cost, when the price table knows the provider and model (see
    /// [`crate::cost`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
}

/// The result of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    /// The last model response (empty if the first call failed).
    pub response: Response,
    /// Every step, in order.
    pub steps: Vec<Step>,
    /// How many tool calls were answered.
    pub tool_calls: u32,
    /// How many model calls were made.
    pub turns: u32,
    /// Summed usage of all model calls.
    pub usage: Usage,
    /// What the model calls cost: the sum of the steps' costs, or `None` when a step had no
    /// price (an unknown model is not free).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// Why the run stopped.
    pub stop_reason: RunStopReason,
    /// The whole history, valid to send again.
    pub messages: Vec<Message>,
    /// The error, when `stop_reason` is `Error` (the model call's) or `Timeout` (an
    /// [`Error::Timeout`] naming the run's or the step's timeout).
    #[serde(skip)]
    pub error: Option<Error>,
    /// The calls waiting for a person's decision, in call order, when `stop_reason` is
    /// `AwaitingApproval`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_approvals: Vec<PendingApproval>,
    /// The run to resume, when `stop_reason` is `AwaitingApproval` (serialize it on its own:
    /// [`PausedRun::to_json`]).
    #[serde(skip)]
    pub paused: Option<Box<PausedRun>>,
    /// A typed run's checked answer (see [`crate::output`]); `None` for other runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
}

impl RunResult {
    /// The final answer's text.
    pub fn text(&self) -> String {
        self.response.text()
    }

    /// `Ok(self)` when the model finished its answer; otherwise an error naming why not (the
    /// model error itself when a call failed).
    pub fn finished(self) -> Result<Self> {
        match (&self.stop_reason, &self.error) {
            (RunStopReason::EndTurn, _) => Ok(self),
            (_, Some(error)) => Err(error.clone()),
            (reason, None) => Err(Error::Incomplete {
                reason: reason.to_string(),
            }),
        }
    }
}

/// What a streamed run reports: the model calls' own [`StreamEvent`]s, as they came, inside
/// the run-level events that only a run has. In order: `run_start`; per step `step_start`, the
/// model call's events ([`RunEvent::Model`]: `message_start`, `text_delta`s, `tool_call_start`
/// / `tool_call_delta` / `tool_call_end` per call, `usage`, `message_stop`, ...), then
/// `tool_call_ready` for every call of the response, `tool_call_result` for every call answered,
/// `step_finish`; finally `run_finish` (or `error` followed by `run_finish` when a model call
/// failed). The table of which layer emits what is in the [`run`](super) module's doc.
///
/// Serialized, a run event is one JSON object whose `type` names it: a model call's event keeps
/// its own `type` (`{"type": "text_delta", "text": "..."}`), so the names never mean two things.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    /// The run began.
    RunStart,
    /// A model call is about to be made.
    StepStart {
        /// The step's index.
        step: usize,
    },
    /// Every call of the step's response, complete with its parsed input, once the model call
    /// ended: the calls that will run and those answered without running (past the tool-call
    /// or iteration limit, stopped by a stop condition). In manual tool mode these are the
    /// calls the caller must answer.
    ToolCallReady {
        /// The call as the model made it (`input` is the raw text as a JSON string when it was
        /// not valid JSON).
        call: ToolCall,
    },
    /// A tool call was answered: run, refused by a hook, invalid, or not run at all.
    ToolCallResult {
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
        /// How it ended.
        outcome: ToolOutcome,
        /// What the model sees. Boxed, like `run_finish`'s result, so that every event stays
        /// small enough to move without a call to `memcpy`.
        result: Box<ToolResult>,
    },
    /// A call of the step needs a person's approval before it runs (one event per call, after
    /// the step's `tool_call_ready` events). The run then stops with
    /// [`RunStopReason::AwaitingApproval`] once the calls that need none have run.
    ///
    /// Serialized flat: `{"type": "approval_requested", "id", "tool", "input", "reason"}`.
    /// Boxed to keep every run event small.
    ApprovalRequested(Box<PendingApproval>),
    /// A step ended (its tools included).
    StepFinish {
        /// The step's index.
        step: usize,
        /// Why the model stopped in this step.
        stop_reason: StopReason,
        /// This step's usage.
        usage: Usage,
        /// The step's whole response (content, tool calls, usage, provider details). Boxed to
        /// keep every run event small.
        response: Box<Response>,
    },
    /// A typed run's answer as parsed so far, while it streams (see
    /// [`crate::output::partial_json`]); only from [`crate::Agent::run_output_stream`].
    PartialOutput {
        /// The partial value. Boxed to keep every run event small.
        value: Box<serde_json::Value>,
    },
    /// A typed run's checked answer, just before `run_finish`.
    Output {
        /// The value, checked against the output's schema and validator.
        value: Box<serde_json::Value>,
    },
    /// A model call failed; the run finishes right after.
    Error {
        /// What went wrong.
        error: Error,
    },
    /// The run ended.
    RunFinish {
        /// The result.
        result: Box<RunResult>,
    },
    /// An event of the step's model call, as the provider's stream gave it (serialized as the
    /// event itself, under its own `type`).
    #[serde(untagged)]
    Model(StreamEvent),
}

// Small enough that moving an event is inline loads and stores, not a call to `memcpy`: an
// event moves several times between the driver and the caller.
const _: () = assert!(std::mem::size_of::<RunEvent>() <= 128);

impl RunEvent {
    /// The event's snake_case name: its `type` when serialized (a model call's event keeps
    /// its own, see [`StreamEvent::kind`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RunStart => "run_start",
            Self::StepStart { .. } => "step_start",
            Self::ToolCallReady { .. } => "tool_call_ready",
            Self::ToolCallResult { .. } => "tool_call_result",
            Self::ApprovalRequested(_) => "approval_requested",
            Self::StepFinish { .. } => "step_finish",
            Self::PartialOutput { .. } => "partial_output",
            Self::Output { .. } => "output",
            Self::Error { .. } => "error",
            Self::RunFinish { .. } => "run_finish",
            Self::Model(event) => event.kind(),
        }
    }

    /// The model call's event, when this is one.
    pub fn as_model(&self) -> Option<&StreamEvent> {
        match self {
            Self::Model(event) => Some(event),
            _ => None,
        }
    }

    /// The piece of answer text, when this is a `text_delta`.
    pub fn text_delta(&self) -> Option<&str> {
        match self {
            Self::Model(StreamEvent::TextDelta { text }) => Some(text),
            _ => None,
        }
    }

    /// The piece of reasoning text, when this is a `thinking_delta`.
    pub fn thinking_delta(&self) -> Option<&str> {
        match self {
            Self::Model(StreamEvent::ThinkingDelta { text }) => Some(text),
            _ => None,
        }
    }
}
