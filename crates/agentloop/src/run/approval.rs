//! Human approval: which tool calls need it (policies), the paused run that waits for it, and
//! the decisions that resume it.
//!
//! A tool that asks a person for input while it runs (an MCP server's elicitation) pauses the
//! run the same way: its call is pending with an [`InputRequest`] and is answered with
//! [`Decision::accept`], [`Decision::decline`] or [`Decision::cancel`]; the call then runs
//! again with the answer ([`crate::ToolContext::input_reply`]).

use std::any::Any;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::machine::Machine;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::tool::ToolCall;

/// What an approval policy answers for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    /// Run the call without asking.
    Allow,
    /// Ask a person first; the reason is shown to them (and listed in
    /// [`super::RunResult::pending_approvals`]).
    Require(String),
    /// Do not run the call and ask nobody (a guardrail): the model gets an error result with
    /// this message.
    Deny(String),
}

impl Approval {
    /// The stricter of two answers: deny over require over allow (the first of equals).
    pub(crate) fn stricter(self, other: Approval) -> Approval {
        fn rank(a: &Approval) -> u8 {
            match a {
                Approval::Allow => 0,
                Approval::Require(_) => 1,
                Approval::Deny(_) => 2,
            }
        }
        if rank(&other) > rank(&self) {
            other
        } else {
            self
        }
    }
}

/// What a policy sees: the call (name and parsed input; [`ToolCall::parse`] reads it into the
/// tool's type) and the run so far.
#[derive(Clone, Copy)]
pub struct ApprovalContext<'a> {
    /// The call as the model made it.
    pub call: &'a ToolCall,
    /// The history so far, ending with the assistant message that holds the call.
    pub messages: &'a [Message],
    /// The step the call belongs to (0-based).
    pub step: usize,
    pub(crate) state: Option<&'a Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for ApprovalContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalContext")
            .field("call", &self.call)
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

impl ApprovalContext<'_> {
    /// The shared state of the run ([`super::RunOptions::state()`]), if it has type `S`.
    pub fn state<S: Send + Sync + 'static>(&self) -> Option<&S> {
        self.state.and_then(|s| s.downcast_ref::<S>())
    }
}

/// Decides whether a tool call may run, needs a person's approval, or is refused: on a tool
/// ([`crate::Tool::with_approval_policy`], or [`crate::Tool::with_approval_required`] for "always") or for
/// every tool of a run ([`super::RunOptions::approval_policy()`]). When both answer, the stricter
/// answer wins.
///
/// ```
/// use agentloop::run::{Approval, ApprovalPolicy};
/// #[derive(serde::Deserialize)]
/// struct Pay { amount: u64 }
/// let policy = ApprovalPolicy::new(|ctx| match ctx.call.parse::<Pay>() {
///     Ok(pay) if pay.amount > 100 => Approval::Require(format!("{} is over 100", pay.amount)),
///     _ => Approval::Allow,
/// });
/// # let _ = policy;
/// ```
#[derive(Clone)]
pub struct ApprovalPolicy(Arc<dyn Fn(&ApprovalContext<'_>) -> Approval + Send + Sync>);

impl std::fmt::Debug for ApprovalPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApprovalPolicy(..)")
    }
}

impl ApprovalPolicy {
    /// A policy from a function of the call and the run.
    pub fn new(policy: impl Fn(&ApprovalContext<'_>) -> Approval + Send + Sync + 'static) -> Self {
        Self(Arc::new(policy))
    }

    /// Every call needs approval, for `reason`.
    pub fn always(reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Self::new(move |_| Approval::Require(reason.clone()))
    }

    /// The policy's answer for one call.
    pub fn check(&self, context: &ApprovalContext<'_>) -> Approval {
        (self.0)(context)
    }
}

/// A tool call waiting for a person's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The call id (decisions name calls by it).
    pub id: String,
    /// The tool's name.
    pub tool: String,
    /// The arguments as the model sent them.
    pub input: Value,
    /// Why approval is needed (the policy's reason, or the tool's question when it asks for
    /// input).
    pub reason: String,
    /// The tool ran and asks a person for input: the call waits for an answer
    /// ([`Decision::accept`], [`Decision::decline`] or [`Decision::cancel`]), not an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_request: Option<InputRequest>,
}

impl PendingApproval {
    pub(crate) fn new(call: ToolCall, reason: String) -> Self {
        Self {
            id: call.id,
            tool: call.name,
            input: call.input,
            reason,
            input_request: None,
        }
    }

    /// A call whose tool asks for input.
    pub(crate) fn asking(call: ToolCall, request: InputRequest) -> Self {
        Self {
            id: call.id,
            tool: call.name,
            input: call.input,
            reason: request.message.clone(),
            input_request: Some(request),
        }
    }

    /// The call it waits to run.
    pub fn call(&self) -> ToolCall {
        ToolCall {
            id: self.id.clone(),
            name: self.tool.clone(),
            input: self.input.clone(),
        }
    }
}

/// A person's decision on one pending call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Run the call as the model made it.
    Approve,
    /// Run the call with this input instead. It is checked against the tool's schema before
    /// anything runs (a mismatch is an error to the caller); the history then holds the edited
    /// call, so the model sees what ran.
    ApproveEdited {
        /// The input to run the call with.
        input: Value,
    },
    /// Do not run the call; the model gets an error result with this message.
    Deny {
        /// What the model is told.
        message: String,
    },
    /// Run the call, and every later call of the same tool in this run (in a
    /// [`crate::conversation::Conversation`], in the whole conversation) without asking.
    /// Other calls of the tool pending now are approved with it, unless decided otherwise.
    AlwaysApprove,
    /// Answer a call whose tool asks for input ([`PendingApproval::input_request`]); the call
    /// runs again with the answer. Accepted content is checked against the request's schema
    /// before anything runs (a mismatch is an error to the caller).
    Answer {
        /// Accept (with `content`), decline or cancel.
        action: InputAction,
        /// The person's input, when accepting.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<Value>,
    },
}

impl Decision {
    /// Approve with an edited input.
    pub fn edited(input: Value) -> Self {
        Self::ApproveEdited { input }
    }

    /// Deny with a message for the model.
    pub fn deny(message: impl Into<String>) -> Self {
        Self::Deny {
            message: message.into(),
        }
    }

    /// Answer a request for input with this content (it must fit the request's schema).
    pub fn accept(content: Value) -> Self {
        Self::Answer {
            action: InputAction::Accept,
            content: Some(content),
        }
    }

    /// Decline a request for input: the tool goes on without it.
    pub fn decline() -> Self {
        Self::Answer {
            action: InputAction::Decline,
            content: None,
        }
    }

    /// Cancel a request for input: the person dismissed it without choosing.
    pub fn cancel() -> Self {
        Self::Answer {
            action: InputAction::Cancel,
            content: None,
        }
    }
}

/// A tool's request for input from a person, made while it ran: an MCP server's form
/// elicitation (`elicitation/create` in the handshake revisions up to 2025-11-25, an
/// `input_required` result of `tools/call` in 2026-07-28).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRequest {
    /// What the tool asks, for the person.
    pub message: String,
    /// The JSON Schema accepted content must fit (for MCP, an object of primitive fields).
    pub schema: Value,
    /// What the tool needs to go on with the answer; the application keeps it with the run.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub resume: Value,
}

/// How a person answers an [`InputRequest`] (MCP's elicitation actions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputAction {
    /// They gave the input.
    Accept,
    /// They chose not to give it.
    Decline,
    /// They dismissed the request.
    Cancel,
}

/// An answered [`InputRequest`], handed to the tool when its call runs again
/// ([`crate::ToolContext::input_reply`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputReply {
    /// What was asked.
    pub request: InputRequest,
    /// The answer.
    pub action: InputAction,
    /// The input, when accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
}

/// The format version [`PausedRun`] writes; other versions are refused.
pub const PAUSED_RUN_VERSION: u32 = 1;

/// A run stopped for approval ([`super::RunStopReason::AwaitingApproval`]): the run's state
/// machine, as a value to keep anywhere (it serializes to JSON with a format `version`) and
/// resume later, in this process or another, with [`crate::Agent::resume`] and the same agent
/// definition.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "SavedRun")]
pub struct PausedRun {
    version: u32,
    machine: Machine,
}

/// A saved run as read, before its version is checked.
#[derive(Deserialize)]
struct SavedRun {
    version: u32,
    machine: Machine,
}

impl TryFrom<SavedRun> for PausedRun {
    type Error = Error;

    fn try_from(saved: SavedRun) -> Result<Self> {
        check_version(saved.version)?;
        Ok(Self {
            version: saved.version,
            machine: saved.machine,
        })
    }
}

fn check_version(found: u32) -> Result<()> {
    if found == PAUSED_RUN_VERSION {
        return Ok(());
    }
    Err(Error::UnsupportedVersion {
        what: "paused run".into(),
        found,
        supported: PAUSED_RUN_VERSION,
    })
}

impl PausedRun {
    pub(crate) fn new(machine: Machine) -> Self {
        Self {
            version: PAUSED_RUN_VERSION,
            machine,
        }
    }

    /// Whether the run is a typed run ([`crate::Agent::run_output`]): its output's schema and
    /// strategy are kept, and [`crate::Agent::resume`] or [`crate::Agent::resume_output`]
    /// continues it as one.
    pub fn is_typed(&self) -> bool {
        self.machine
            .expected_output()
            .is_some_and(|(_, _, saved)| saved.is_some())
    }

    /// The calls waiting for a decision, in call order.
    pub fn pending(&self) -> &[PendingApproval] {
        self.machine.pending_approvals()
    }

    /// The run's state machine.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The format version (always [`PAUSED_RUN_VERSION`] once read).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The run as JSON.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|e| Error::parse("paused run", e))
    }

    /// Read a run saved with [`Self::to_json`]. A run saved in another format version is
    /// refused with [`Error::UnsupportedVersion`] rather than misread.
    pub fn from_json(json: &str) -> Result<Self> {
        #[derive(Deserialize)]
        struct Version {
            version: Option<u32>,
        }
        let version: Version =
            serde_json::from_str(json).map_err(|e| Error::parse("paused run", e))?;
        let Some(found) = version.version else {
            return Err(Error::parse(
                "paused run",
                "missing field `version`: this is not a run saved by PausedRun::to_json",
            ));
        };
        check_version(found)?;
        serde_json::from_str(json).map_err(|e| Error::parse("paused run", e))
    }
}
