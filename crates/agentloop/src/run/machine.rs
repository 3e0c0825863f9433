//! The run's state machine: it holds the state and decides the next action, and does no I/O.
//!
//! Drivers ask [`Machine::next_action`] what to do, do it, and report back with
//! [`Machine::on_response`], [`Machine::on_tool_outcomes`], [`Machine::on_error`] or
//! [`Machine::interrupt`]. The state serializes between steps, so a run can be saved and
//! resumed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::approval::{Decision, InputAction, InputReply, PausedRun, PendingApproval};
use super::options::Limits;
use super::outcome::{ToolOutcome, invalid_arguments_text};
use super::result::{RunResult, RunStopReason, Step};
use crate::cost::Cost;
use crate::error::Error;
use crate::message::{
    ContentBlock, Message, Request, Response, Role, StopReason, ToolResult, Usage,
};
use crate::output::SavedOutput;
use crate::tool::{ToolCall, Violation};

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Call the model with [`Machine::request`].
    CallModel,
    /// Run these tool calls and report their outcomes in the same order.
    RunTools(Vec<ToolCall>),
    /// The run is over.
    Stop(RunStopReason),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
enum Phase {
    /// The next action is a model call.
    Ready,
    /// A model call is in flight.
    AwaitingModel,
    /// The last response asked for tools; `skipped` calls (past the tool-call limit) are
    /// answered without running; `held` keeps the step's approval state.
    ToolsPending {
        run: Vec<ToolCall>,
        skipped: Vec<ToolCall>,
        #[serde(default, skip_serializing_if = "HeldBox::is_empty")]
        held: HeldBox,
    },
    /// Tools are running.
    AwaitingTools {
        run: Vec<ToolCall>,
        skipped: Vec<ToolCall>,
        #[serde(default, skip_serializing_if = "HeldBox::is_empty")]
        held: HeldBox,
    },
    /// Calls of the last response wait for a person's decision; the run stopped with
    /// [`RunStopReason::AwaitingApproval`].
    AwaitingApproval {
        held: HeldBox,
        skipped: Vec<ToolCall>,
    },
    /// The run is over.
    Done { reason: RunStopReason },
}

/// A step's calls while approval is involved: answered ones wait for the rest, so that the
/// step's results go back together, in call order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Held {
    /// Calls answered already: run before the pause, or denied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    settled: Vec<(ToolCall, ToolOutcome)>,
    /// Calls approved, to run once no call waits for a decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    approved: Vec<ToolCall>,
    /// Calls waiting for a decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pending: Vec<PendingApproval>,
    /// How many of `settled` (the first ones) had their results reported when the run paused.
    #[serde(default, skip_serializing_if = "is_zero")]
    reported: usize,
    /// The run paused in this step: its calls' ready events were reported before the pause.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    paused: bool,
    /// Answers to what calls asked for when they ran, by call id: given to them when they run
    /// again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    replies: Vec<(String, InputReply)>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Held {
    fn is_empty(&self) -> bool {
        self.settled.is_empty()
            && self.approved.is_empty()
            && self.pending.is_empty()
            && !self.paused
            && self.replies.is_empty()
    }
}

/// [`Held`], allocated only for a step that involves approval: every run holds a phase, and
/// most steps never need one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
struct HeldBox(Option<Box<Held>>);

/// What an unallocated [`HeldBox`] reads as.
static NOTHING_HELD: Held = Held {
    settled: Vec::new(),
    approved: Vec::new(),
    pending: Vec::new(),
    reported: 0,
    paused: false,
    replies: Vec::new(),
};

impl HeldBox {
    fn is_empty(&self) -> bool {
        self.0.as_deref().is_none_or(Held::is_empty)
    }

    fn into_inner(self) -> Held {
        self.0.map(|held| *held).unwrap_or_default()
    }
}

impl From<Held> for HeldBox {
    fn from(held: Held) -> Self {
        Self(Some(Box::new(held)))
    }
}

impl std::ops::Deref for HeldBox {
    type Target = Held;

    fn deref(&self) -> &Held {
        self.0.as_deref().unwrap_or(&NOTHING_HELD)
    }
}

impl std::ops::DerefMut for HeldBox {
    fn deref_mut(&mut self) -> &mut Held {
        self.0.get_or_insert_with(Box::default)
    }
}

/// What the approval policies answered for one call to be run (see [`Machine::gate`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Gate {
    Allow,
    Ask(String),
    Deny(String),
}

/// The state of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    /// The next request: model, system, tools, sampling, and the history as `messages`. Kept
    /// whole so a model call borrows it instead of cloning history and tool schemas.
    request: Request,
    limits: Limits,
    turns: u32,
    /// Rounds of tools run so far (the iteration limit counts these).
    #[serde(default)]
    tool_iterations: u32,
    tool_calls: u32,
    usage: Usage,
    steps: Vec<Step>,
    phase: Phase,
    /// Stop after the pending tools are answered.
    stop_after_tools: Option<RunStopReason>,
    /// Why the pending skipped calls are not run, when it is not the tool-call limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    skip_reason: Option<String>,
    /// Invalid-argument errors per tool.
    invalid_counts: BTreeMap<String, u32>,
    /// The invalid calls (name, input) of the previous step, to detect verbatim repeats.
    last_invalid: Vec<(String, Value)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<Error>,
    /// Tools a person approved for the rest of the run ([`Decision::AlwaysApprove`]).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    approved_tools: BTreeSet<String>,
    /// The typed answer this run must end with, if any (see [`crate::output`]). Boxed: every
    /// run holds its machine, and most have no typed answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<Box<Expected>>,
    /// The provider reports cached input tokens apart from `input_tokens` (Anthropic,
    /// Bedrock): the token budget adds them, as the provider bills them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    cache_apart: bool,
    /// A message before the last may have changed (a context strategy edited the history)
    /// since a durable run last encoded it: its encodings kept for checkpoints are stale (see
    /// [`Self::take_history_edited`]). Not saved.
    #[serde(skip)]
    history_edited: bool,
    /// The last message or the last step may have changed since a durable run last encoded
    /// them (see [`Self::take_history_edited`]). Not saved.
    #[serde(skip)]
    tail_edited: bool,
}

/// A typed answer due: under which name, whether as a call to the tool of that name, and the
/// checked value once given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Expected {
    name: String,
    tool: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<Value>,
    /// The output's schema and strategy, for a resumed run to check answers again. Runs saved
    /// before it was kept have none and resume untyped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spec: Option<SavedOutput>,
}

impl Machine {
    /// A run of `base` (model, system, tools, sampling; its messages are the history to start
    /// from, ending with the new prompt).
    pub fn new(base: Request, limits: Limits) -> Self {
        Self {
            request: base,
            limits,
            turns: 0,
            tool_iterations: 0,
            tool_calls: 0,
            usage: Usage::default(),
            steps: Vec::new(),
            phase: Phase::Ready,
            stop_after_tools: None,
            skip_reason: None,
            invalid_counts: BTreeMap::new(),
            last_invalid: Vec::new(),
            error: None,
            approved_tools: BTreeSet::new(),
            output: None,
            cache_apart: false,
            history_edited: false,
            tail_edited: false,
        }
    }

    /// Make the run end with a typed answer named `name`: the text of the answer (checked
    /// with [`Self::on_answer`]) or, when `tool`, a call to the tool `name` that completed.
    pub(crate) fn expect_output(&mut self, name: &str, tool: bool, spec: SavedOutput) {
        self.output = Some(Box::new(Expected {
            name: name.to_owned(),
            tool,
            value: None,
            spec: Some(spec),
        }));
    }

    /// A typed run's output: its name, whether it comes as a tool call, and what the run kept
    /// of it to resume with (see [`Self::expect_output`]).
    pub(crate) fn expected_output(&self) -> Option<(&str, bool, Option<&SavedOutput>)> {
        self.output
            .as_deref()
            .map(|e| (e.name.as_str(), e.tool, e.spec.as_ref()))
    }

    /// The text of a typed run's answer, waiting for [`Self::on_answer`].
    pub(crate) fn pending_answer(&self) -> Option<String> {
        if self.output.as_ref().is_none_or(|e| e.value.is_some())
            || self.phase
                != (Phase::Done {
                    reason: RunStopReason::EndTurn,
                })
        {
            return None;
        }
        self.steps.last().map(|step| step.response.text())
    }

    /// Report the check of the answer [`Self::pending_answer`] gave: the value, or what the
    /// model gave and what is wrong with it. A rejected answer goes back to the model with the
    /// violations, and counts against the same retry budget and repeat detection as invalid
    /// tool arguments; the run goes on, unless those are used up.
    pub(crate) fn on_answer(&mut self, verdict: Result<Value, (Value, Vec<Violation>)>) {
        let Some(expected) = self.output.as_mut() else {
            return;
        };
        let (given, violations) = match verdict {
            Ok(value) => {
                expected.value = Some(value);
                return;
            }
            Err(rejected) => rejected,
        };
        let expected = Expected::clone(expected);
        let key = (expected.name.clone(), given);
        let repeated = self.last_invalid.contains(&key);
        self.last_invalid = vec![key];
        let count = self
            .invalid_counts
            .entry(expected.name.clone())
            .or_default();
        *count += 1;
        let count = *count;
        let retries = self.limits.invalid_argument_retries;
        let mut text = format!("Error: your answer is not a valid `{}`:", expected.name);
        for violation in &violations {
            text.push_str("\n- ");
            text.push_str(&violation.to_string());
        }
        text.push_str(&format!(
            "\nFix it and answer again (retry {count} of {retries})."
        ));
        self.request.messages.push(Message::user(text));
        self.phase = if repeated {
            self.error = Some(Error::InvalidOutput {
                name: expected.name.clone(),
                violations,
            });
            Phase::Done {
                reason: RunStopReason::RepeatedInvalidCall(expected.name),
            }
        } else if count > retries {
            self.error = Some(Error::InvalidOutput {
                name: expected.name,
                violations,
            });
            Phase::Done {
                reason: RunStopReason::InvalidOutput,
            }
        } else if self
            .limits
            .max_total_tokens
            .is_some_and(|max| self.billed_tokens() >= max)
        {
            Phase::Done {
                reason: RunStopReason::TokenBudget,
            }
        } else {
            Phase::Ready
        };
    }

    /// When the call the model repeated is the final-answer call, the run's error says what
    /// was wrong with it, as for a text answer.
    fn repeated_output_call(&mut self, tool: &str) {
        if !self
            .output
            .as_ref()
            .is_some_and(|e| e.tool && e.name == tool)
        {
            return;
        }
        let Some(step) = self.steps.last() else {
            return;
        };
        let violations = step
            .tool_calls
            .iter()
            .zip(&step.outcomes)
            .find_map(|(call, outcome)| match outcome {
                ToolOutcome::InvalidArguments { violations } if call.name == tool => {
                    Some(violations.clone())
                }
                _ => None,
            })
            .unwrap_or_default();
        self.error = Some(Error::InvalidOutput {
            name: tool.to_owned(),
            violations,
        });
    }

    /// After a tool step of a run whose answer is a tool call: end it when the call completed,
    /// or when its retries ran out.
    fn output_call_finished(&mut self) -> Option<Phase> {
        let expected = self.output.as_mut().filter(|e| e.tool)?;
        let step = self.steps.last()?;
        let mut last_violations = None;
        for (call, outcome) in step.tool_calls.iter().zip(&step.outcomes) {
            if call.name != expected.name {
                continue;
            }
            match outcome {
                ToolOutcome::Completed { .. } => {
                    expected.value = Some(call.input.clone());
                    return Some(Phase::Done {
                        reason: RunStopReason::EndTurn,
                    });
                }
                ToolOutcome::InvalidArguments { violations } => {
                    last_violations = Some(violations.clone());
                }
                _ => {}
            }
        }
        let violations = last_violations?;
        let name = expected.name.clone();
        let used = self.invalid_counts.get(&name).copied().unwrap_or(0);
        (used > self.limits.invalid_argument_retries).then(|| {
            self.error = Some(Error::InvalidOutput { name, violations });
            Phase::Done {
                reason: RunStopReason::InvalidOutput,
            }
        })
    }

    /// The next action. Calling it again before reporting back returns the same action.
    pub fn next_action(&mut self) -> Action {
        match &mut self.phase {
            Phase::Ready => {
                // N rounds of tools, then one call for the answer: never more than N + 1 calls
                // (reached only by a machine restored with a lower limit).
                if self.turns > self.limits.max_tool_iterations {
                    self.phase = Phase::Done {
                        reason: RunStopReason::MaxToolIterations,
                    };
                    return Action::Stop(RunStopReason::MaxToolIterations);
                }
                self.phase = Phase::AwaitingModel;
                Action::CallModel
            }
            Phase::AwaitingModel => Action::CallModel,
            Phase::ToolsPending { run, skipped, held } => {
                // Moved, not cloned: the phase that held them is replaced just below.
                let (run, skipped, held) = (
                    std::mem::take(run),
                    std::mem::take(skipped),
                    std::mem::take(held),
                );
                let action = Action::RunTools(run.clone());
                self.phase = Phase::AwaitingTools { run, skipped, held };
                action
            }
            Phase::AwaitingTools { run, .. } => Action::RunTools(run.clone()),
            Phase::AwaitingApproval { .. } => Action::Stop(RunStopReason::AwaitingApproval),
            Phase::Done { reason } => Action::Stop(reason.clone()),
        }
    }

    /// The request for the next model call: the base request with the history.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// Replace the definitions of the tools named `old` by `new` (the run's tools changed
    /// between steps); definitions the base request had of its own stay.
    pub(crate) fn replace_tools(
        &mut self,
        old: &[String],
        new: impl IntoIterator<Item = crate::tool::ToolDefinition>,
    ) {
        self.request.tools.retain(|t| {
            t.function_name()
                .is_none_or(|n| !old.iter().any(|o| o == n))
        });
        for definition in new {
            let listed = self.request.tools.iter().any(|t| {
                t.function_name().is_some() && t.function_name() == definition.function_name()
            });
            if !listed {
                self.request.tools.push(definition);
            }
        }
    }

    /// The history, for the context policy's strategies (which keep it valid). Everything
    /// else only appends messages or changes the last one, which durable runs' checkpoints
    /// rely on (see [`Self::take_history_edited`]).
    pub(crate) fn messages_mut(&mut self) -> &mut Vec<Message> {
        self.history_edited = true;
        &mut self.request.messages
    }

    /// Whether a message before the last may have changed since the last call (until then the
    /// history only had messages appended, and steps likewise), and whether the last message
    /// or the last step may have: every change to them goes through [`Self::last_message_mut`]
    /// and [`Self::last_step_mut`].
    pub(crate) fn take_history_edited(&mut self) -> (bool, bool) {
        (
            std::mem::take(&mut self.history_edited),
            std::mem::take(&mut self.tail_edited),
        )
    }

    /// The last message, to change it (see [`Self::take_history_edited`]).
    fn last_message_mut(&mut self) -> Option<&mut Message> {
        self.tail_edited = true;
        self.request.messages.last_mut()
    }

    /// The last step, to change it (see [`Self::take_history_edited`]).
    fn last_step_mut(&mut self) -> Option<&mut Step> {
        self.tail_edited = true;
        self.steps.last_mut()
    }

    /// The history and the steps, taken out (for a checkpoint that encodes them apart); put
    /// them back with [`Self::restore_history`].
    pub(crate) fn take_history(&mut self) -> (Vec<Message>, Vec<Step>) {
        (
            std::mem::take(&mut self.request.messages),
            std::mem::take(&mut self.steps),
        )
    }

    /// Put back what [`Self::take_history`] took.
    pub(crate) fn restore_history(&mut self, messages: Vec<Message>, steps: Vec<Step>) {
        self.request.messages = messages;
        self.steps = steps;
    }

    /// The limits the run enforces.
    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Count cached input tokens in the token budget (see the field).
    pub(crate) fn count_cache_apart(&mut self, apart: bool) {
        self.cache_apart = apart;
    }

    /// The tokens the run was billed so far: input (cached tokens included) and output
    /// (reasoning included), what [`Limits::max_total_tokens`] counts.
    pub fn billed_tokens(&self) -> u64 {
        let cached = if self.cache_apart {
            self.usage.cache_read_tokens + self.usage.cache_write_tokens
        } else {
            0
        };
        self.usage.total_tokens() + cached
    }

    /// Count usage of a call made for the run outside its steps (a summary's).
    pub(crate) fn add_usage(&mut self, usage: Usage) {
        self.usage += usage;
    }

    /// The new user message a run starts with, for the prompt hooks: the last message, when it
    /// is the user's and answers no tool call.
    pub(crate) fn prompt_mut(&mut self) -> Option<&mut Message> {
        self.last_message_mut().filter(|last| {
            last.role == Role::User
                && !last
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::ToolResult(_)))
        })
    }

    /// Report the model's response.
    pub fn on_response(&mut self, response: Response, duration: Duration) {
        if !matches!(self.phase, Phase::AwaitingModel | Phase::Ready) {
            return;
        }
        self.turns += 1;
        self.usage += response.usage;
        let calls = response.tool_uses();
        if !response.content.is_empty() {
            self.request.messages.push(response.to_message());
        }
        let model_stop = response.stop_reason.clone();
        self.steps.push(Step {
            index: self.steps.len(),
            response,
            tool_calls: calls.clone(),
            outcomes: Vec::new(),
            tool_results: Vec::new(),
            duration,
            cost: None,
        });

        let budget_spent = self
            .limits
            .max_total_tokens
            .is_some_and(|max| self.billed_tokens() >= max);
        if calls.is_empty() {
            let reason = if model_stop == StopReason::MaxTokens {
                RunStopReason::MaxTokens
            } else {
                RunStopReason::EndTurn
            };
            self.phase = Phase::Done { reason };
            return;
        }

        if self.limits.manual_tools {
            self.phase = Phase::Done {
                reason: RunStopReason::AwaitingToolResults,
            };
            return;
        }
        if self.tool_iterations >= self.limits.max_tool_iterations {
            // The answer was due: the calls get results saying why they did not run, so the
            // history stays valid and a later send can go on from it.
            let why = format!(
                "the run's limit of {} tool iterations was reached",
                self.limits.max_tool_iterations
            );
            // A typed answer by tool is the answer that was due: its call runs, the others
            // are answered as not run, all in the one step.
            let answer = self
                .output
                .as_ref()
                .filter(|e| e.tool)
                .map(|e| e.name.clone());
            if let Some(answer) = answer
                && calls.iter().any(|c| c.name == answer)
            {
                let (run, skipped) = calls.into_iter().partition(|c| c.name == answer);
                self.skip_reason = Some(why);
                self.stop_after_tools = Some(RunStopReason::MaxToolIterations);
                self.phase = Phase::ToolsPending {
                    run,
                    skipped,
                    held: HeldBox::default(),
                };
                return;
            }
            self.answer_unrun(calls, &why);
            self.phase = Phase::Done {
                reason: RunStopReason::MaxToolIterations,
            };
            return;
        }
        let allowed = match self.limits.max_tool_calls {
            Some(max) => max.saturating_sub(self.tool_calls) as usize,
            None => usize::MAX,
        };
        let (run, skipped) = if calls.len() > allowed {
            let mut run = calls;
            let skipped = run.split_off(allowed);
            (run, skipped)
        } else {
            (calls, Vec::new())
        };
        self.stop_after_tools = if !skipped.is_empty() {
            Some(RunStopReason::MaxToolCalls)
        } else if budget_spent {
            Some(RunStopReason::TokenBudget)
        } else {
            None
        };
        self.phase = Phase::ToolsPending {
            run,
            skipped,
            held: HeldBox::default(),
        };
    }

    /// The calls about to run (after a response, before [`Self::next_action`] runs them).
    pub(crate) fn calls_to_run(&self) -> &[ToolCall] {
        match &self.phase {
            Phase::ToolsPending { run, held, .. } if held.is_empty() => run,
            _ => &[],
        }
    }

    /// Apply the approval policies' answers for [`Self::calls_to_run`], one per call in order:
    /// denied calls are answered, calls that need approval are held for a decision (unless
    /// their tool was approved for the run), and allowed calls run now or, with `wait`, after
    /// the decisions.
    pub(crate) fn gate(&mut self, gates: Vec<Gate>, wait: bool) {
        let Phase::ToolsPending { run, held, .. } = &mut self.phase else {
            return;
        };
        let gates: Vec<Gate> = run
            .iter()
            .zip(gates)
            .map(|(call, gate)| match gate {
                Gate::Ask(_) if self.approved_tools.contains(&call.name) => Gate::Allow,
                other => other,
            })
            .collect();
        if gates.iter().all(|g| *g == Gate::Allow) {
            return;
        }
        let asks = gates.iter().any(|g| matches!(g, Gate::Ask(_)));
        let mut now = Vec::new();
        for (call, gate) in std::mem::take(run).into_iter().zip(gates) {
            match gate {
                Gate::Allow if wait && asks => held.approved.push(call),
                Gate::Allow => now.push(call),
                Gate::Ask(reason) => held.pending.push(PendingApproval::new(call, reason)),
                Gate::Deny(message) => {
                    self.tool_calls += 1;
                    held.settled
                        .push((call, ToolOutcome::Denied { reason: message }));
                }
            }
        }
        *run = now;
    }

    /// The calls waiting for a decision (when the run stopped with
    /// [`RunStopReason::AwaitingApproval`], or is about to).
    pub fn pending_approvals(&self) -> &[PendingApproval] {
        match &self.phase {
            Phase::AwaitingApproval { held, .. }
            | Phase::ToolsPending { held, .. }
            | Phase::AwaitingTools { held, .. } => &held.pending,
            _ => &[],
        }
    }

    /// The calls of the step answered so far while approval is involved: run before the
    /// pause, or denied.
    pub(crate) fn settled(&self) -> &[(ToolCall, ToolOutcome)] {
        match &self.phase {
            Phase::AwaitingApproval { held, .. }
            | Phase::ToolsPending { held, .. }
            | Phase::AwaitingTools { held, .. } => &held.settled,
            _ => &[],
        }
    }

    /// The ids of the calls whose results were reported when the run paused.
    pub(crate) fn reported_ids(&self) -> Vec<String> {
        let settled = self.settled();
        let reported = match &self.phase {
            Phase::AwaitingApproval { held, .. }
            | Phase::ToolsPending { held, .. }
            | Phase::AwaitingTools { held, .. } => held.reported,
            _ => 0,
        };
        settled
            .iter()
            .take(reported)
            .map(|(call, _)| call.id.clone())
            .collect()
    }

    /// Approve calls of `tool` from now on without asking (a sticky decision, kept with the
    /// run).
    pub fn approve_tool(&mut self, tool: impl Into<String>) {
        self.approved_tools.insert(tool.into());
    }

    /// The tools approved for the rest of the run.
    pub fn approved_tools(&self) -> impl Iterator<Item = &str> {
        self.approved_tools.iter().map(String::as_str)
    }

    /// Apply a person's decisions to the calls waiting for approval, by call id. An edited
    /// input replaces the model's in the history (check it against the tool's schema first).
    /// Undecided calls stay pending; once none is left, the run goes on with
    /// [`Self::next_action`].
    pub fn decide(&mut self, decisions: Vec<(String, Decision)>) -> Result<(), Error> {
        let Phase::AwaitingApproval { held, .. } = &self.phase else {
            let call_id = decisions
                .first()
                .map(|(id, _)| id.clone())
                .unwrap_or_default();
            return Err(Error::InvalidDecision {
                call_id,
                message: "the run is not waiting for approval".into(),
            });
        };
        for (id, _) in &decisions {
            if !held.pending.iter().any(|p| p.id == *id) {
                let pending: Vec<&str> = held.pending.iter().map(|p| p.id.as_str()).collect();
                return Err(Error::InvalidDecision {
                    call_id: id.clone(),
                    message: format!(
                        "no call waits for approval under that id (pending: {pending:?})"
                    ),
                });
            }
        }
        for (id, decision) in &decisions {
            let Some(pending) = held.pending.iter().find(|p| p.id == *id) else {
                continue;
            };
            check_kind(pending, decision)?;
        }
        let sticky: Vec<String> = decisions
            .iter()
            .filter(|(_, d)| *d == Decision::AlwaysApprove)
            .filter_map(|(id, _)| held.pending.iter().find(|p| p.id == *id))
            .map(|p| p.tool.clone())
            .collect();
        let Phase::AwaitingApproval { held, .. } = &mut self.phase else {
            return Ok(());
        };
        let mut decisions: BTreeMap<String, Decision> = decisions.into_iter().collect();
        let mut edits = Vec::new();
        for pending in std::mem::take(&mut held.pending) {
            let decision = match decisions.remove(&pending.id) {
                Some(decision) => decision,
                None if sticky.contains(&pending.tool) && pending.input_request.is_none() => {
                    Decision::Approve
                }
                None => {
                    held.pending.push(pending);
                    continue;
                }
            };
            let mut call = pending.call();
            match decision {
                Decision::Approve | Decision::AlwaysApprove => held.approved.push(call),
                Decision::ApproveEdited { input } => {
                    call.input = input;
                    edits.push(call.clone());
                    held.approved.push(call);
                }
                Decision::Deny { message } => {
                    self.tool_calls += 1;
                    held.settled
                        .push((call, ToolOutcome::Denied { reason: message }));
                }
                Decision::Answer { action, content } => {
                    if let Some(request) = pending.input_request {
                        held.replies.push((
                            call.id.clone(),
                            InputReply {
                                request,
                                action,
                                content,
                            },
                        ));
                    }
                    held.approved.push(call);
                }
            }
        }
        self.approved_tools.extend(sticky);
        for edit in edits {
            self.edit_call(&edit);
        }
        if let Phase::AwaitingApproval { held, skipped } = &mut self.phase
            && held.pending.is_empty()
        {
            let mut held = std::mem::take(held).into_inner();
            let run = std::mem::take(&mut held.approved);
            self.phase = Phase::ToolsPending {
                run,
                skipped: std::mem::take(skipped),
                held: held.into(),
            };
        }
        Ok(())
    }

    /// Put an edited call's input in the history and the step, where the model's was.
    fn edit_call(&mut self, edited: &ToolCall) {
        if let Some(message) = self.last_message_mut() {
            for block in &mut message.content {
                if let ContentBlock::ToolUse { id, input, .. } = block
                    && *id == edited.id
                {
                    *input = edited.input.clone();
                }
            }
        }
        if let Some(step) = self.last_step_mut() {
            for call in &mut step.tool_calls {
                if call.id == edited.id {
                    call.input = edited.input.clone();
                }
            }
        }
    }

    /// Report the outcomes of the tools returned by [`Action::RunTools`], in the same order.
    /// Missing outcomes are recorded as cancelled, so the history stays valid.
    pub fn on_tool_outcomes(&mut self, outcomes: Vec<ToolOutcome>, duration: Duration) {
        if !matches!(
            self.phase,
            Phase::ToolsPending { .. } | Phase::AwaitingTools { .. }
        ) {
            return;
        }
        let Some((run, skipped, held)) = self.take_pending_tools() else {
            return;
        };
        let mut outcomes = outcomes.into_iter();
        let pairs = run.into_iter().map(|call| {
            let outcome = outcomes.next().unwrap_or_else(|| ToolOutcome::Cancelled {
                reason: "the tool reported no outcome".into(),
            });
            (call, outcome)
        });
        // Calls that ask for input wait for an answer, as calls wait for approval.
        let (asking, pairs): (Vec<_>, Vec<_>) =
            pairs.partition(|(_, outcome)| matches!(outcome, ToolOutcome::InputRequired { .. }));
        self.tool_calls += pairs.len() as u32;
        let held = if asking.is_empty() {
            held
        } else {
            let mut held = held.into_inner();
            for (call, outcome) in asking {
                if let ToolOutcome::InputRequired { request } = outcome {
                    held.pending.push(PendingApproval::asking(call, *request));
                }
            }
            held.into()
        };
        let pairs = if held.is_empty() {
            pairs
        } else {
            let mut held = held.into_inner();
            let ran: BTreeSet<&str> = pairs.iter().map(|(call, _)| call.id.as_str()).collect();
            held.replies.retain(|(id, _)| !ran.contains(id.as_str()));
            held.settled.extend(pairs);
            if !held.pending.is_empty() {
                held.reported = held.settled.len();
                held.paused = true;
                if let Some(step) = self.last_step_mut() {
                    step.duration += duration;
                }
                self.phase = Phase::AwaitingApproval {
                    held: held.into(),
                    skipped,
                };
                return;
            }
            self.in_call_order(held.settled)
        };
        self.tool_iterations += 1;
        let repeated = self.record_tool_step(pairs, skipped, duration);
        let output = self.output_call_finished();
        let stop_after_tools = self.stop_after_tools.take();
        self.phase = if self.output.as_ref().is_some_and(|e| e.value.is_some()) {
            // The typed answer came: nothing else the step did matters.
            Phase::Done {
                reason: RunStopReason::EndTurn,
            }
        } else if let Some(tool) = repeated {
            self.repeated_output_call(&tool);
            Phase::Done {
                reason: RunStopReason::RepeatedInvalidCall(tool),
            }
        } else if let Some(done) = output {
            done
        } else if let Some(reason) = stop_after_tools {
            Phase::Done { reason }
        } else {
            Phase::Ready
        };
    }

    /// Record the outcome of one of the running calls ([`Action::RunTools`]) as it ends, before
    /// the others: a durable run checkpoints it, so that a crash does not run it again. The
    /// step closes with [`Self::on_tool_outcomes`] for the calls not recorded this way.
    pub(crate) fn record_outcome(&mut self, id: &str, outcome: ToolOutcome) {
        let Phase::AwaitingTools { run, held, .. } = &mut self.phase else {
            return;
        };
        let Some(at) = run.iter().position(|call| call.id == id) else {
            return;
        };
        let call = run.remove(at);
        let held = held.0.get_or_insert_with(Box::default);
        held.replies.retain(|(reply, _)| *reply != call.id);
        if let ToolOutcome::InputRequired { request } = outcome {
            held.pending.push(PendingApproval::asking(call, *request));
            return;
        }
        self.tool_calls += 1;
        held.settled.push((call, outcome));
    }

    /// The answers the running calls get to what they asked for (by call id).
    pub(crate) fn input_replies(&self) -> &[(String, InputReply)] {
        match &self.phase {
            Phase::ToolsPending { held, .. } | Phase::AwaitingTools { held, .. } => &held.replies,
            _ => &[],
        }
    }

    /// After a crash: the calls that had started and whose outcome was not recorded are run
    /// again when `idempotent` says so of their tool, and answered as interrupted otherwise.
    pub(crate) fn recover(&mut self, idempotent: impl Fn(&str) -> bool) {
        let Phase::AwaitingTools { run, held, .. } = &mut self.phase else {
            return;
        };
        let (again, interrupted): (Vec<ToolCall>, Vec<ToolCall>) = std::mem::take(run)
            .into_iter()
            .partition(|call| idempotent(&call.name));
        *run = again;
        for call in interrupted {
            self.tool_calls += 1;
            let outcome = ToolOutcome::Interrupted {
                reason: "it was running when the process running the run stopped, and it is \
                         not marked idempotent, so it was not run again; it may or may not \
                         have taken effect"
                    .to_owned(),
            };
            held.settled.push((call, outcome));
        }
    }

    /// `pairs` in the order the model made the calls (answers held for approval come back
    /// out of order).
    fn in_call_order(
        &self,
        mut pairs: Vec<(ToolCall, ToolOutcome)>,
    ) -> Vec<(ToolCall, ToolOutcome)> {
        if let Some(step) = self.steps.last() {
            let at = |id: &str| step.tool_calls.iter().position(|c| c.id == id);
            pairs.sort_by_key(|(call, _)| at(&call.id));
        }
        pairs
    }

    fn take_pending_tools(&mut self) -> Option<(Vec<ToolCall>, Vec<ToolCall>, HeldBox)> {
        match std::mem::replace(&mut self.phase, Phase::Ready) {
            Phase::AwaitingTools { run, skipped, held }
            | Phase::ToolsPending { run, skipped, held } => Some((run, skipped, held)),
            Phase::AwaitingApproval { held, skipped } => Some((Vec::new(), skipped, held)),
            other => {
                self.phase = other;
                None
            }
        }
    }

    /// Turn outcomes into results (one user message, call order), record them in the last
    /// step, and return the tool whose invalid call the model repeated verbatim, if any.
    fn record_tool_step(
        &mut self,
        mut pairs: Vec<(ToolCall, ToolOutcome)>,
        skipped: Vec<ToolCall>,
        duration: Duration,
    ) -> Option<String> {
        if !skipped.is_empty() {
            let limit_reason = self.skip_reason.take().unwrap_or_else(|| {
                format!(
                    "the run's limit of {} tool calls was reached",
                    self.limits.max_tool_calls.unwrap_or_default()
                )
            });
            pairs.extend(skipped.into_iter().map(|call| {
                let outcome = ToolOutcome::Cancelled {
                    reason: limit_reason.clone(),
                };
                (call, outcome)
            }));
            // In the response's order, which the step's calls, outcomes and events share:
            // skipped calls need not be the last ones.
            if let Some(step) = self.steps.last() {
                let position = |id: &str| step.tool_calls.iter().position(|c| c.id == id);
                pairs.sort_by_key(|(call, _)| position(&call.id).unwrap_or(usize::MAX));
            }
        }

        let mut repeated = None;
        let mut invalid_now = Vec::new();
        let mut results = Vec::with_capacity(pairs.len());
        for (call, outcome) in &pairs {
            let result = match outcome {
                ToolOutcome::InvalidArguments { violations } => {
                    let key = (call.name.clone(), call.input.clone());
                    if self.last_invalid.contains(&key) {
                        repeated.get_or_insert_with(|| call.name.clone());
                    }
                    invalid_now.push(key);
                    let count = self.invalid_counts.entry(call.name.clone()).or_default();
                    *count += 1;
                    let retries = self.limits.invalid_argument_retries;
                    let advice = if *count > retries {
                        format!(
                            "No retries left for `{}`: do not call it again in this run.",
                            call.name
                        )
                    } else {
                        format!(
                            "Fix the arguments and call the tool again (retry {count} of {retries})."
                        )
                    };
                    let text = invalid_arguments_text(&call.name, violations);
                    ToolResult::error(&call.id, format!("{text}\n{advice}"))
                }
                other => other.to_result(&call.id, &call.name),
            };
            results.push(result);
        }
        self.last_invalid = invalid_now;

        if !results.is_empty() {
            let blocks = results.iter().cloned().map(ContentBlock::ToolResult);
            self.request
                .messages
                .push(Message::new(Role::User, blocks.collect()));
        }
        if let Some(step) = self.last_step_mut() {
            step.outcomes = pairs.into_iter().map(|(_, o)| o).collect();
            step.tool_results = results;
            step.duration += duration;
        }
        repeated
    }

    /// Answer `calls` as not run, for `why`, and record them in the last step.
    fn answer_unrun(&mut self, calls: Vec<ToolCall>, why: &str) {
        let pairs = calls
            .into_iter()
            .map(|call| {
                let outcome = ToolOutcome::Cancelled {
                    reason: why.to_owned(),
                };
                (call, outcome)
            })
            .collect();
        self.record_tool_step(pairs, Vec::new(), Duration::ZERO);
    }

    /// Report that the model call failed: the run stops with [`RunStopReason::Error`].
    pub fn on_error(&mut self, error: Error) {
        self.error = Some(error);
        self.finish(RunStopReason::Error);
    }

    /// Whether a failed model call ended the run ([`Self::on_error`]).
    pub(crate) fn failed_call(&self) -> bool {
        self.error.is_some()
            && matches!(
                self.phase,
                Phase::Done {
                    reason: RunStopReason::Error
                }
            )
    }

    /// The run as it stood before the model call that failed ([`Self::failed_call`]): ready
    /// to issue it again. The failure changed nothing else: the call had no pending tools.
    pub(crate) fn before_failed_call(&self) -> Machine {
        let mut before = self.clone();
        before.error = None;
        before.phase = Phase::Ready;
        before
    }

    /// Stop the run now (cancellation, timeout, a stop condition). Tool calls still pending get
    /// cancelled results, so the history stays valid. `partial` is a response cut off
    /// mid-stream: its text is kept, the rest dropped.
    pub fn interrupt(&mut self, reason: RunStopReason, partial: Option<Response>) {
        if let Some(partial) = partial
            && matches!(self.phase, Phase::AwaitingModel | Phase::Ready)
        {
            let text: Vec<ContentBlock> = partial
                .content
                .into_iter()
                .filter(|b| matches!(b, ContentBlock::Text { text } if !text.is_empty()))
                .collect();
            if !text.is_empty() {
                self.request
                    .messages
                    .push(Message::new(Role::Assistant, text));
            }
        }
        self.finish(reason);
    }

    /// Stop the run because a timeout fired: as [`Self::interrupt`] with
    /// [`RunStopReason::Timeout`], keeping `error` (an [`Error::Timeout`] naming which one) as
    /// the run's error.
    pub fn time_out(&mut self, error: Error, partial: Option<Response>) {
        self.error = Some(error);
        self.interrupt(RunStopReason::Timeout, partial);
    }

    fn finish(&mut self, reason: RunStopReason) {
        if let Some((mut run, skipped, held)) = self.take_pending_tools() {
            let held = held.into_inner();
            // Calls approved or waiting for approval are answered as not run, too.
            run.extend(held.approved);
            run.extend(held.pending.into_iter().map(|p| p.call()));
            let why = match &reason {
                RunStopReason::Timeout => "the run timed out".to_owned(),
                RunStopReason::Cancelled => "the run was cancelled".to_owned(),
                RunStopReason::Custom(name) => {
                    format!("the run stopped (stop condition `{name}`)")
                }
                other => format!("the run stopped ({other})"),
            };
            let mut pairs = held.settled;
            pairs.extend(run.into_iter().map(|call| {
                let outcome = ToolOutcome::Cancelled {
                    reason: why.clone(),
                };
                (call, outcome)
            }));
            let pairs = self.in_call_order(pairs);
            self.record_tool_step(pairs, skipped, Duration::ZERO);
        }
        self.stop_after_tools = None;
        self.phase = Phase::Done { reason };
    }

    /// Stop after the current step because a stop condition fired (call between steps).
    pub fn stop(&mut self, reason: RunStopReason) {
        if matches!(self.phase, Phase::Ready) {
            self.phase = Phase::Done { reason };
        }
    }

    /// End the run before the model call [`Self::next_action`] asked for (a budget the call
    /// would pass).
    pub(crate) fn stop_before_call(&mut self, reason: RunStopReason) {
        if matches!(self.phase, Phase::Ready | Phase::AwaitingModel) {
            self.phase = Phase::Done { reason };
        }
    }

    /// Record what the last step's model call cost (the driver prices it).
    pub(crate) fn price_last_step(&mut self, cost: Option<Cost>) {
        if let Some(step) = self.last_step_mut() {
            step.cost = cost;
        }
    }

    /// What the run's model calls cost so far: `None` when one of them had no price.
    pub fn cost(&self) -> Option<Cost> {
        total_cost(&self.steps)
    }

    /// Whether the run is over, or stopped to wait for approval.
    pub fn is_done(&self) -> bool {
        matches!(
            self.phase,
            Phase::Done { .. } | Phase::AwaitingApproval { .. }
        )
    }

    /// Whether the run stopped to wait for approval.
    pub fn is_paused(&self) -> bool {
        matches!(self.phase, Phase::AwaitingApproval { .. })
    }

    /// Whether the step's tools go on after a pause for approval (their ready events were
    /// reported before it).
    pub(crate) fn resumes_step(&self) -> bool {
        matches!(&self.phase, Phase::ToolsPending { held, .. } | Phase::AwaitingTools { held, .. } if held.paused)
    }

    /// The history so far.
    pub fn messages(&self) -> &[Message] {
        &self.request.messages
    }

    /// Steps so far.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Summed usage so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Model calls so far.
    pub fn turns(&self) -> u32 {
        self.turns
    }

    /// Rounds of tools run so far (what [`Limits::max_tool_iterations`] limits).
    pub fn tool_iterations(&self) -> u32 {
        self.tool_iterations
    }

    /// Tool calls answered so far (cancelled and skipped calls are not counted).
    pub fn tool_calls(&self) -> u32 {
        self.tool_calls
    }

    /// The run's result (call when done; before that the stop reason is `cancelled`).
    pub fn into_result(self) -> RunResult {
        let (pending_approvals, paused) = match &self.phase {
            Phase::AwaitingApproval { held, .. } => (
                held.pending.clone(),
                Some(Box::new(PausedRun::new(self.clone()))),
            ),
            _ => (Vec::new(), None),
        };
        let stop_reason = match self.phase {
            Phase::Done { reason } => reason,
            Phase::AwaitingApproval { .. } => RunStopReason::AwaitingApproval,
            _ => RunStopReason::Cancelled,
        };
        let response = self
            .steps
            .last()
            .map(|s| s.response.clone())
            .unwrap_or_default();
        RunResult {
            response,
            cost: total_cost(&self.steps),
            steps: self.steps,
            tool_calls: self.tool_calls,
            turns: self.turns,
            usage: self.usage,
            stop_reason,
            messages: self.request.messages,
            error: self.error,
            pending_approvals,
            paused,
            output: self.output.and_then(|e| e.value),
        }
    }
}

/// Whether `decision` is the kind of answer `pending` waits for: an answer to a request for
/// input (content that fits its schema when accepted), an approval decision otherwise.
fn check_kind(pending: &PendingApproval, decision: &Decision) -> Result<(), Error> {
    let invalid = |message: String| Error::InvalidDecision {
        call_id: pending.id.clone(),
        message,
    };
    match (&pending.input_request, decision) {
        (None, Decision::Answer { .. }) => Err(invalid(
            "the call waits for approval, not for input: approve, edit or deny it".into(),
        )),
        (Some(_), Decision::Answer { action, content }) => {
            if *action != InputAction::Accept {
                return Ok(());
            }
            let Some(content) = content else {
                return Err(invalid(
                    "accepting a request for input needs the input: use Decision::accept(content)"
                        .into(),
                ));
            };
            check_content(pending, content).map_err(invalid)
        }
        (Some(request), _) => Err(invalid(format!(
            "the call asks for input (\"{}\"): answer it with Decision::accept, decline or cancel",
            request.message
        ))),
        (None, _) => Ok(()),
    }
}

#[cfg(feature = "validation")]
fn check_content(pending: &PendingApproval, content: &Value) -> Result<(), String> {
    let Some(request) = &pending.input_request else {
        return Ok(());
    };
    let validator = crate::tool::schema::compile(&request.schema)
        .map_err(|e| format!("the requested schema cannot be checked: {e}"))?;
    crate::tool::schema::violations(&validator, content).map_err(|found| {
        let each: Vec<String> = found.iter().map(ToString::to_string).collect();
        format!(
            "the input does not fit the requested schema: {}",
            each.join("; ")
        )
    })
}

#[cfg(not(feature = "validation"))]
fn check_content(_pending: &PendingApproval, content: &Value) -> Result<(), String> {
    if content.is_object() {
        Ok(())
    } else {
        Err(format!("the input must be a JSON object, got {content}"))
    }
}

/// The sum of the steps' costs; `None` when a step had no price (or there was no step).
fn total_cost(steps: &[Step]) -> Option<Cost> {
    steps
        .iter()
        .map(|s| s.cost)
        .try_fold(None, |sum: Option<Cost>, cost| {
            Some(Some(sum.unwrap_or_default() + cost?))
        })
        .flatten()
}
