//! The run's state machine: it holds the state and decides the next action, and does no I/O.
//!
//! Drivers ask [`Machine::next_action`] what to do, do it, and report back with
//! [`Machine::on_response`], [`Machine::on_tool_outcomes`], [`Machine::on_error`] or
//! [`Machine::interrupt`]. The state serializes between steps, so a run can be saved and
//! resumed.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::options::Limits;
use super::outcome::{ToolOutcome, invalid_arguments_text};
use super::result::{RunResult, RunStopReason, Step};
use crate::cost::Cost;
use crate::error::Error;
use crate::message::{
    ContentBlock, Message, Request, Response, Role, StopReason, ToolResult, Usage,
};
use crate::tool::ToolCall;

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
    /// answered without running.
    ToolsPending {
        run: Vec<ToolCall>,
        skipped: Vec<ToolCall>,
    },
    /// Tools are running.
    AwaitingTools {
        run: Vec<ToolCall>,
        skipped: Vec<ToolCall>,
    },
    /// The run is over.
    Done { reason: RunStopReason },
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
    /// Invalid-argument errors per tool.
    invalid_counts: BTreeMap<String, u32>,
    /// The invalid calls (name, input) of the previous step, to detect verbatim repeats.
    last_invalid: Vec<(String, Value)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<Error>,
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
            invalid_counts: BTreeMap::new(),
            last_invalid: Vec::new(),
            error: None,
        }
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
            Phase::ToolsPending { run, skipped } => {
                // Moved, not cloned: the phase that held them is replaced just below.
                let (run, skipped) = (std::mem::take(run), std::mem::take(skipped));
                let action = Action::RunTools(run.clone());
                self.phase = Phase::AwaitingTools { run, skipped };
                action
            }
            Phase::AwaitingTools { run, .. } => Action::RunTools(run.clone()),
            Phase::Done { reason } => Action::Stop(reason.clone()),
        }
    }

    /// The request for the next model call: the base request with the history.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The new user message a run starts with, for the prompt hooks: the last message, when it
    /// is the user's and answers no tool call.
    pub(crate) fn prompt_mut(&mut self) -> Option<&mut Message> {
        self.request.messages.last_mut().filter(|last| {
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
            .is_some_and(|max| self.usage.total_tokens() >= max);
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
        self.phase = Phase::ToolsPending { run, skipped };
    }

    /// Report the outcomes of the tools returned by [`Action::RunTools`], in the same order.
    /// Missing outcomes are recorded as cancelled, so the history stays valid.
    pub fn on_tool_outcomes(&mut self, outcomes: Vec<ToolOutcome>, duration: Duration) {
        let Some((run, skipped)) = self.take_pending_tools() else {
            return;
        };
        self.tool_calls += run.len() as u32;
        self.tool_iterations += 1;
        let mut outcomes = outcomes.into_iter();
        let pairs = run
            .into_iter()
            .map(|call| {
                let outcome = outcomes.next().unwrap_or_else(|| ToolOutcome::Cancelled {
                    reason: "the tool reported no outcome".into(),
                });
                (call, outcome)
            })
            .collect();
        let repeated = self.record_tool_step(pairs, skipped, duration);
        self.phase = match (repeated, self.stop_after_tools.take()) {
            (Some(tool), _) => Phase::Done {
                reason: RunStopReason::RepeatedInvalidCall(tool),
            },
            (None, Some(reason)) => Phase::Done { reason },
            (None, None) => Phase::Ready,
        };
    }

    fn take_pending_tools(&mut self) -> Option<(Vec<ToolCall>, Vec<ToolCall>)> {
        match std::mem::replace(&mut self.phase, Phase::Ready) {
            Phase::AwaitingTools { run, skipped } | Phase::ToolsPending { run, skipped } => {
                Some((run, skipped))
            }
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
            let limit_reason = format!(
                "the run's limit of {} tool calls was reached",
                self.limits.max_tool_calls.unwrap_or_default()
            );
            pairs.extend(skipped.into_iter().map(|call| {
                let outcome = ToolOutcome::Cancelled {
                    reason: limit_reason.clone(),
                };
                (call, outcome)
            }));
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
        if let Some(step) = self.steps.last_mut() {
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
        if let Some((run, skipped)) = self.take_pending_tools() {
            let why = match &reason {
                RunStopReason::Timeout => "the run timed out".to_owned(),
                RunStopReason::Cancelled => "the run was cancelled".to_owned(),
                RunStopReason::Custom(name) => {
                    format!("the run stopped (stop condition `{name}`)")
                }
                other => format!("the run stopped ({other})"),
            };
            let pairs = run
                .into_iter()
                .map(|call| {
                    let outcome = ToolOutcome::Cancelled {
                        reason: why.clone(),
                    };
                    (call, outcome)
                })
                .collect();
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

    /// Record what the last step's model call cost (the driver prices it).
    pub(crate) fn price_last_step(&mut self, cost: Option<Cost>) {
        if let Some(step) = self.steps.last_mut() {
            step.cost = cost;
        }
    }

    /// What the run's model calls cost so far: `None` when one of them had no price.
    pub fn cost(&self) -> Option<Cost> {
        total_cost(&self.steps)
    }

    /// Whether the run is over.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done { .. })
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
        let stop_reason = match self.phase {
            Phase::Done { reason } => reason,
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
        }
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
