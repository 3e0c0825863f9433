//! The driver: performs the machine's actions (model calls, tools) and reports back. One
//! driver serves blocking and streamed runs; a streamed run also gets the driver's events and
//! reads its model calls' events itself (see `events`).

use std::collections::HashMap;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, stream};
use rust_decimal::Decimal;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::approval::{Approval, ApprovalContext, InputReply};
use super::events::Outbox;
use super::hooks::{StepRequest, StopInfo, ToolDecision, WithHistory};
use super::machine::{Action, Gate, Machine};
use super::model_call::{CallEnd, StreamedCall};
use super::options::{RunOptions, StopMoment};
use super::outcome::ToolOutcome;
use super::result::{RunEvent, RunResult, RunStopReason};
use super::store::Durable;
use crate::context::{self, Calibrated, Family, OnSummaryFailure, Strategy, Summarizer};
use crate::cost::{Cost, Prices};
use crate::error::{Error, TimeoutKind};
use crate::message::{Message, Request, Response};
use crate::output::OutputSpec;
use crate::provider::Provider;
use crate::provider::http::deadline::later;
use crate::telemetry::{self, RunTrace};
use crate::tool::{Tool, ToolCall, ToolContext, ToolDefinition, ToolError, ToolOutput, Violation};

/// The tools of a run, by name. Shared: an agent builds it once, and its runs clone a pointer.
#[derive(Clone, Default)]
pub(crate) struct ToolSet(Arc<Tools>);

#[derive(Default)]
struct Tools {
    /// In the order given; a tool given again under the same name replaces the earlier one.
    list: Vec<Tool>,
    by_name: HashMap<String, usize>,
}

impl ToolSet {
    pub(crate) fn new(tools: impl IntoIterator<Item = Tool>) -> Self {
        let mut set = Tools::default();
        for tool in tools {
            match set.by_name.get(tool.name()) {
                Some(&at) => {
                    if let Some(slot) = set.list.get_mut(at) {
                        *slot = tool;
                    }
                }
                None => {
                    set.by_name.insert(tool.name().to_owned(), set.list.len());
                    set.list.push(tool);
                }
            }
        }
        Self(Arc::new(set))
    }

    /// The tools, in order.
    pub(crate) fn as_slice(&self) -> &[Tool] {
        &self.0.list
    }

    /// The tool named `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Tool> {
        self.0.by_name.get(name).and_then(|&at| self.0.list.get(at))
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.0.list.iter().map(|t| t.name().to_owned()).collect()
    }

    /// The function definitions to send. A native tool's handler has none: the request's
    /// native tool is its definition.
    pub(crate) fn definitions(&self) -> impl Iterator<Item = ToolDefinition> + '_ {
        self.0
            .list
            .iter()
            .filter(|tool| !tool.is_native())
            .map(ToolDefinition::from)
    }
}

pub(crate) struct Driver {
    provider: Arc<dyn Provider>,
    tools: ToolSet,
    /// Shared: an agent's runs all start from its options, and a pointer is all the run's
    /// future holds of them.
    options: Arc<RunOptions>,
    /// This run's own token: a child of the options' token, if they have one, so cancelling
    /// the run stops no other run of the same options.
    cancel: CancellationToken,
    /// Where a streamed run's events go; `None` for a blocking run.
    events: Option<Outbox>,
    /// What only some runs need, boxed so that every run's future stays small.
    extras: Option<Box<Extras>>,
}

/// The parts of a driver only resumed, typed and durable runs have.
#[derive(Default)]
struct Extras {
    /// Calls whose results were reported before the run paused for approval: a resumed run
    /// does not report them again.
    reported: Vec<String>,
    /// A typed run's output and the strategy it uses: checks answers given as text.
    output: Option<Arc<OutputSpec>>,
    /// A durable run's store: checkpoints are written only when it is set.
    durable: Option<Durable>,
    /// A run with a context policy: its estimator, corrected by each call's reported usage.
    context: Option<std::sync::Mutex<ContextState>>,
    /// The run's span, when a subscriber wants it (see [`crate::telemetry`]).
    trace: Option<RunTrace>,
}

/// The estimator of a run with a context policy, and the estimate of the request last sent.
struct ContextState {
    estimator: Calibrated,
    /// The uncorrected estimate of the last request sent (0: none yet).
    sent: u64,
}

/// Why a model call did not give a response.
enum ModelFailure {
    Stopped(RunStopReason, Option<Response>),
    Failed(Error),
}

/// Cancellation and deadlines, raced against every await of the run.
struct StopSignal<'a> {
    cancel: &'a CancellationToken,
    deadline: Option<Deadline>,
}

/// When a run or step must end, and which timeout that is (for the error it ends with).
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    kind: TimeoutKind,
    after: Duration,
}

impl Deadline {
    fn new(kind: TimeoutKind, started: Instant, after: Option<Duration>) -> Option<Self> {
        after.map(|after| Self {
            at: later(started, after),
            kind,
            after,
        })
    }

    fn earliest(a: Option<Self>, b: Option<Self>) -> Option<Self> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if b.at < a.at { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

impl StopSignal<'_> {
    /// [`Self::wait`] owning what it needs, for a model call that the run's stream reads.
    fn owned(&self) -> BoxFuture<'static, RunStopReason> {
        let cancel = self.cancel.clone();
        let deadline = self.deadline;
        Box::pin(async move {
            StopSignal {
                cancel: &cancel,
                deadline,
            }
            .wait()
            .await
        })
    }

    async fn wait(&self) -> RunStopReason {
        let timeout = async {
            match self.deadline {
                Some(deadline) => tokio::time::sleep_until(deadline.at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => RunStopReason::Cancelled,
            _ = timeout => RunStopReason::Timeout,
        }
    }

    /// End `machine` for `reason`; a timeout keeps the typed error that names it, which
    /// [`RunResult::finished`] returns.
    fn halt(&self, machine: &mut Machine, reason: RunStopReason, partial: Option<Response>) {
        match (&reason, self.deadline) {
            (RunStopReason::Timeout, Some(deadline)) => machine.time_out(
                Error::Timeout {
                    kind: deadline.kind,
                    after: deadline.after,
                },
                partial,
            ),
            _ => machine.interrupt(reason, partial),
        }
    }
}

impl Driver {
    pub(crate) fn new(
        provider: Arc<dyn Provider>,
        tools: ToolSet,
        options: Arc<RunOptions>,
        events: Option<Outbox>,
    ) -> Self {
        let cancel = options
            .cancel
            .as_ref()
            .map_or_else(CancellationToken::new, CancellationToken::child_token);
        let extras = options.context.as_ref().map(|_| {
            Box::new(Extras {
                context: Some(std::sync::Mutex::new(ContextState {
                    estimator: Calibrated::new(Family::of(provider.name())),
                    sent: 0,
                })),
                ..Extras::default()
            })
        });
        Self {
            provider,
            tools,
            options,
            cancel,
            events,
            extras,
        }
    }

    /// A driver that checkpoints the run in a store (see [`super::store`]).
    pub(crate) fn durable(mut self, durable: Durable) -> Self {
        self.extras.get_or_insert_default().durable = Some(durable);
        self
    }

    /// Whether the run's tool `name` may run again after a crash cut it off.
    pub(crate) fn tool_is_idempotent(&self, name: &str) -> bool {
        self.tools.get(name).is_some_and(Tool::is_idempotent)
    }

    /// The durable run's store, if the run has one.
    fn store(&self) -> Option<&Durable> {
        self.extras.as_ref().and_then(|e| e.durable.as_ref())
    }

    /// Save a durable run's checkpoint; nothing without a store. Boxed: the save's future
    /// would otherwise add its room to every run's future.
    async fn checkpoint(&self, machine: &mut Machine) {
        if let Some(durable) = self.store() {
            Box::pin(durable.save(machine)).await;
        }
    }

    /// A driver resuming `machine` after a pause for approval: the results reported before
    /// the pause are not reported again.
    ///
    /// A typed run checks its answers again: with the output the driver was given, else with
    /// the schema and strategy the machine kept (see [`Machine::expect_output`]); the
    /// final-answer tool is added back. A kept schema that no longer compiles ends the run
    /// with the error.
    pub(crate) fn resuming(mut self, machine: &mut Machine) -> Self {
        self.extras.get_or_insert_default().reported = machine.reported_ids();
        let has_output = self.extras.as_ref().is_some_and(|e| e.output.is_some());
        if !has_output && let Some((name, _, Some(saved))) = machine.expected_output() {
            match OutputSpec::restore(name, saved) {
                Ok(output) => self = self.with_output(Arc::new(output)),
                Err(error) => machine.on_error(error),
            }
        }
        let answer_tool = self
            .extras
            .as_ref()
            .and_then(|e| e.output.as_ref())
            .and_then(|output| output.answer_tool());
        if let Some(tool) = answer_tool
            && !self
                .tools
                .as_slice()
                .iter()
                .any(|t| t.name() == tool.name())
        {
            self.tools = ToolSet::new(self.tools.as_slice().iter().cloned().chain([tool]));
        }
        self
    }

    /// Check the run's text answers against `output` (see [`Machine::on_answer`]).
    pub(crate) fn with_output(mut self, output: Arc<OutputSpec>) -> Self {
        self.extras.get_or_insert_default().output = Some(output);
        self
    }

    /// Whether `id`'s result was reported before the run paused (see [`Self::resuming`]).
    fn reported(&self, id: &str) -> bool {
        self.extras
            .as_ref()
            .is_some_and(|e| e.reported.iter().any(|r| r == id))
    }

    /// Check a typed run's text answer; whether there was one (the machine then either took
    /// it or asked the model again).
    fn check_answer(&self, machine: &mut Machine) -> bool {
        let Some(output) = self.extras.as_ref().and_then(|e| e.output.as_ref()) else {
            return false;
        };
        let Some(text) = machine.pending_answer() else {
            return false;
        };
        machine.on_answer(output.check_text(&text));
        true
    }

    /// The token that cancels this run.
    pub(crate) fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Open the run's trace (see [`crate::telemetry`]), kept in the extras when it is wanted:
    /// the run's future does not grow, and the spans of its model calls and tools name it as
    /// their parent.
    fn trace(&mut self, machine: &Machine) {
        let trace = RunTrace::start(
            &self.options.telemetry,
            self.provider.name(),
            &machine.request().model,
            self.store().map(|d| &*d.run_id),
        );
        if let Some(trace) = trace {
            self.extras.get_or_insert_default().trace = Some(trace);
        }
    }

    /// The run's trace, when it has one.
    fn run_trace(&self) -> Option<&RunTrace> {
        self.extras.as_ref().and_then(|e| e.trace.as_ref())
    }

    /// Record how the run ended on its trace.
    fn trace_end(&self, ended: Result<&RunResult, &Error>) {
        if let Some(trace) = self.run_trace() {
            trace.ended(self.provider.name(), ended);
        }
    }

    fn emit(&self, event: impl FnOnce() -> RunEvent) {
        if let Some(events) = &self.events {
            events.send(event());
        }
    }

    /// A saved machine's run to its end, owning the driver and the machine. Not an `async fn`:
    /// an async fn keeps both its arguments and the locals they move into in the future, so
    /// `self` and `machine` would be held twice for the run's life.
    pub(crate) fn drive(
        mut self,
        mut machine: Machine,
    ) -> impl Future<Output = RunResult> + Send + 'static {
        self.trace(&machine);
        async move {
            self.steps(&mut machine).await;
            let result = self.stopped(machine.into_result()).await;
            self.trace_end(Ok(&result));
            result
        }
    }

    /// [`Self::drive`] for a new run: its prompt hooks first, which may block it.
    pub(crate) fn drive_new(
        mut self,
        mut machine: Machine,
    ) -> impl Future<Output = Result<RunResult, Error>> + Send + 'static {
        self.trace(&machine);
        async move {
            if let Err(error) = self.prompt(&mut machine).await {
                self.trace_end(Err(&error));
                return Err(error);
            }
            self.checkpoint(&mut machine).await;
            self.steps(&mut machine).await;
            let result = self.stopped(machine.into_result()).await;
            self.trace_end(Ok(&result));
            Ok(result)
        }
    }

    /// Apply the prompt hooks to the run's new user message.
    async fn prompt(&self, machine: &mut Machine) -> Result<(), Error> {
        let hooks = &self.options.hooks;
        if hooks.on_prompt.is_empty() {
            return Ok(());
        }
        if machine.prompt_mut().is_none() {
            return Ok(());
        }
        let messages = machine.messages();
        let history: Arc<[Message]> = messages[..messages.len().saturating_sub(1)].into();
        if let Some(prompt) = machine.prompt_mut() {
            *prompt = hooks
                .prompt(prompt.clone(), history)
                .await
                .map_err(|reason| Error::HookBlocked {
                    hook: "prompt".into(),
                    reason,
                })?;
        }
        Ok(())
    }

    /// Tell the stop hooks, and hand the result on.
    async fn stopped(&self, result: RunResult) -> RunResult {
        for hook in &self.options.hooks.on_stop {
            hook(StopInfo {
                reason: result.stop_reason.clone(),
                turns: result.turns,
                tool_calls: result.tool_calls,
                usage: result.usage,
                messages: result.messages.clone(),
            })
            .await;
        }
        // A streamed run hands the result over in `run_finish` (see `run_stream`), so it is
        // moved there rather than cloned.
        result
    }

    /// Take the run's tools anew when its tool source says they changed.
    async fn refresh_tools(&mut self, machine: &mut Machine) {
        let Some(source) = &self.options.tool_updates else {
            return;
        };
        match source.changed().await {
            Ok(Some(tools)) => {
                let old = self.tools.names();
                self.tools = ToolSet::new(tools);
                machine.replace_tools(&old, self.tools.definitions());
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(target: "agentloop::run", "the run's tools could not be refreshed, so they stay as they were: {error}");
            }
        }
    }

    /// Model calls and tool steps until the machine stops.
    async fn steps(&mut self, machine: &mut Machine) {
        let run_deadline = Deadline::new(TimeoutKind::Run, Instant::now(), self.options.timeout);
        machine.count_cache_apart(crate::cost::counts_cache_apart(self.provider.name()));
        self.emit(|| RunEvent::RunStart);
        loop {
            match machine.next_action() {
                Action::Stop(_) => break,
                Action::CallModel if self.over_token_budget(machine) => {
                    machine.stop_before_call(RunStopReason::TokenBudget);
                }
                Action::CallModel => {
                    self.refresh_tools(machine).await;
                    let step = machine.steps().len();
                    self.emit(|| RunEvent::StepStart { step });
                    let started = Instant::now();
                    let step_deadline =
                        Deadline::new(TimeoutKind::Step, started, self.options.step_timeout);
                    let stop = StopSignal {
                        cancel: &self.cancel,
                        deadline: Deadline::earliest(run_deadline, step_deadline),
                    };
                    let mut answer_checked = false;
                    // The outcome is taken apart in the statement that awaits it, and the
                    // response ends in this block: a local still in scope, even moved from,
                    // keeps its room in the future across every later await (the tools').
                    {
                        let response = match self.call_step(machine, step, &stop).await {
                            Ok(response) => Some(response),
                            Err(ModelFailure::Stopped(reason, partial)) => {
                                stop.halt(machine, reason, partial);
                                None
                            }
                            Err(ModelFailure::Failed(error)) => {
                                self.emit(|| RunEvent::Error {
                                    error: error.clone(),
                                });
                                machine.on_error(error);
                                None
                            }
                        };
                        if let Some(response) = &response
                            && !self.options.hooks.after_response.is_empty()
                        {
                            let history: Arc<[Message]> = machine.messages().into();
                            for hook in &self.options.hooks.after_response {
                                hook(WithHistory::new(response.clone(), history.clone())).await;
                            }
                        }
                        if let Some(response) = response {
                            self.calibrate(&response);
                            let cost = self.price(machine, &response);
                            machine.on_response(response, started.elapsed());
                            machine.price_last_step(cost);
                            self.calls_ready(machine, step);
                            answer_checked = self.check_answer(machine);
                            if !machine.is_done() && !answer_checked {
                                self.check_stop(machine, StopMoment::BeforeTools);
                            }
                            if !machine.is_done() && !answer_checked {
                                self.gate(machine, step);
                            }
                            if machine.is_done() || answer_checked {
                                self.step_finished(machine, step);
                            }
                        }
                    }
                    // A failed or stopped call finished the machine; a response either did or
                    // left tool calls to run; a rejected answer goes back to the model, unless
                    // a stop condition says otherwise. A response with calls to run is saved
                    // with their start, in one write: nothing happens between the two.
                    if answer_checked || machine.is_done() {
                        self.checkpoint(machine).await;
                        if !machine.is_done() {
                            self.check_stop(machine, StopMoment::AfterStep);
                        }
                    } else {
                        self.run_tool_step(machine, step, &stop).await;
                    }
                }
                Action::RunTools(_) => {
                    // Only reached when resuming a machine saved between response and tools.
                    let step = machine.steps().len().saturating_sub(1);
                    let stop = StopSignal {
                        cancel: &self.cancel,
                        deadline: run_deadline,
                    };
                    if !machine.resumes_step() {
                        self.calls_ready(machine, step);
                    }
                    self.run_tool_step(machine, step, &stop).await;
                }
            }
        }
    }

    /// Ask the approval policies about the calls about to run, and report the calls that wait
    /// for a decision.
    fn gate(&self, machine: &mut Machine, step: usize) {
        let calls = machine.calls_to_run();
        let run_policy = self.options.approval_policy.as_ref();
        let tool_policies = calls.iter().any(|call| {
            self.tools
                .get(&call.name)
                .is_some_and(|tool| tool.approval().is_some())
        });
        if run_policy.is_none() && !tool_policies {
            return;
        }
        let gates = calls
            .iter()
            .map(|call| {
                // A call that cannot run (an unknown tool, arguments that do not fit) is
                // answered without running: there is nothing to approve.
                let Some(tool) = self.tools.get(&call.name) else {
                    return Gate::Allow;
                };
                let fits = match &call.input {
                    Value::Null => tool.validate(&Value::Object(Default::default())).is_ok(),
                    input @ Value::Object(_) => tool.validate(input).is_ok(),
                    _ => false,
                };
                if !fits {
                    return Gate::Allow;
                }
                let context = ApprovalContext {
                    call,
                    messages: machine.messages(),
                    step,
                    state: self.options.state.as_ref(),
                };
                let answer = [tool.approval(), run_policy]
                    .into_iter()
                    .flatten()
                    .map(|policy| policy.check(&context))
                    .fold(Approval::Allow, Approval::stricter);
                match answer {
                    Approval::Allow => Gate::Allow,
                    Approval::Require(reason) => Gate::Ask(reason),
                    Approval::Deny(message) => Gate::Deny(message),
                }
            })
            .collect();
        machine.gate(gates, self.options.hold_for_approval);
        if let Some(events) = &self.events {
            for pending in machine.pending_approvals() {
                events.send(RunEvent::ApprovalRequested(Box::new(pending.clone())));
            }
        }
    }

    /// Run the pending tools of `step`, record their outcomes, and check stop conditions.
    async fn run_tool_step(&self, machine: &mut Machine, step: usize, stop: &StopSignal<'_>) {
        let Action::RunTools(calls) = machine.next_action() else {
            // No calls to run after all (they wait for approval): the response is saved alone.
            self.checkpoint(machine).await;
            return;
        };
        // The calls have started, as far as a crash is concerned (see `store`); the response
        // that made them is in the same checkpoint.
        self.checkpoint(machine).await;
        if machine.is_done() {
            // The save failed: the run stopped with the error before any tool ran.
            self.step_finished(machine, step);
            return;
        }
        let shared = self.step_shared(machine);
        let tools_started = Instant::now();
        if let Some(durable) = self.store() {
            let recorded =
                Box::pin(self.run_tools_recorded(machine, calls, shared.as_ref(), durable));
            let stopped = tokio::select! {
                biased;
                reason = stop.wait() => Some(reason),
                () = recorded => None,
            };
            match stopped {
                Some(reason) => stop.halt(machine, reason, None),
                None => machine.on_tool_outcomes(Vec::new(), tools_started.elapsed()),
            }
            self.step_finished(machine, step);
            if !machine.is_done() {
                self.check_stop(machine, StopMoment::AfterStep);
            }
            if !machine.is_done() {
                self.check_budget(machine);
            }
            self.checkpoint(machine).await;
            return;
        }
        let outcomes = tokio::select! {
            biased;
            reason = stop.wait() => {
                stop.halt(machine, reason, None);
                None
            }
            outcomes = self.run_tools(calls, shared.as_ref()) => Some(outcomes),
        };
        if let Some(outcomes) = outcomes {
            machine.on_tool_outcomes(outcomes, tools_started.elapsed());
        }
        self.step_finished(machine, step);
        if !machine.is_done() {
            self.check_stop(machine, StopMoment::AfterStep);
        }
        if !machine.is_done() {
            self.check_budget(machine);
        }
    }

    /// What the step's calls share, when they share anything: the history, copied only for
    /// the tool hooks, and the answers to what calls asked for before. One pointer in the
    /// run's future.
    fn step_shared(&self, machine: &Machine) -> Option<Arc<StepShared>> {
        let hooks = &self.options.hooks;
        let replies = machine.input_replies();
        if hooks.before_tool.is_empty() && hooks.after_tool.is_empty() && replies.is_empty() {
            return None;
        }
        let history = (!hooks.before_tool.is_empty() || !hooks.after_tool.is_empty())
            .then(|| machine.messages().into());
        Some(Arc::new(StepShared {
            history,
            replies: replies
                .iter()
                .map(|(id, reply)| (id.clone(), Arc::new(reply.clone())))
                .collect(),
        }))
    }

    /// What `response` cost, from the run's price table.
    fn price(&self, machine: &Machine, response: &Response) -> Option<Cost> {
        self.prices().cost(
            self.provider.name(),
            answered_by(machine, response),
            &response.usage,
        )
    }

    /// The run's price table: its own, or the built-in one.
    fn prices(&self) -> Arc<Prices> {
        self.options.prices.clone().unwrap_or_else(Prices::builtin)
    }

    /// Stop before the next model call when what the run spent plus that call's projected
    /// input would pass [`RunOptions::max_cost`]. The projection is the last call's input and
    /// output plus the tool results since (four characters a token), at the input rate: the
    /// next request holds all of them.
    fn check_budget(&self, machine: &mut Machine) {
        let (Some(budget), Some(spent), Some(last)) = (
            self.options.max_cost,
            machine.cost(),
            machine.steps().last(),
        ) else {
            return;
        };
        let prices = self.prices();
        let Some(found) = prices.find(self.provider.name(), answered_by(machine, &last.response))
        else {
            return;
        };
        let usage = last.response.usage;
        let results: usize = last
            .tool_results
            .iter()
            .map(|r| r.content.to_text().len())
            .sum();
        let next_input = usage.input_tokens
            + usage.cache_read_tokens
            + usage.cache_write_tokens
            + usage.output_tokens
            + (results as u64).div_ceil(4);
        let projected = found.sheet.input.at(next_input) * Decimal::from(next_input)
            / Decimal::from(1_000_000u32);
        if spent.total + projected > budget {
            machine.stop(RunStopReason::CostBudget);
        }
    }

    /// Stop the run when a stop condition checked at `moment` fires. Before the tools, their
    /// calls are answered as not run (see [`Machine::interrupt`]); after the step, the run
    /// stops before its next model call.
    fn check_stop(&self, machine: &mut Machine, moment: StopMoment) {
        let Some(condition) = self
            .options
            .stop_when
            .iter()
            .find(|c| c.moment() == moment && c.check(machine))
        else {
            return;
        };
        let reason = RunStopReason::Custom(condition.name().to_owned());
        match moment {
            StopMoment::BeforeTools => machine.interrupt(reason, None),
            StopMoment::AfterStep => machine.stop(reason),
        }
    }

    /// `tool_call_ready` for every call of `step`'s response, whether it will run or be
    /// answered without running (past a limit, or stopped), so that every call gets the same
    /// events: the model's `tool_call_start`/`tool_call_delta`s, then ready, then its result.
    fn calls_ready(&self, machine: &Machine, step: usize) {
        if self.events.is_none() {
            return;
        }
        let Some(last) = machine.steps().get(step) else {
            return;
        };
        for call in &last.tool_calls {
            self.emit(|| RunEvent::ToolCallReady { call: call.clone() });
        }
    }

    /// The events that end `step`: a result per call it answered, then `step_finish` with its
    /// response.
    fn step_finished(&self, machine: &Machine, step: usize) {
        if self.events.is_none() {
            return;
        }
        if machine.is_paused() {
            // The step goes on after the decisions: only the calls answered so far end here.
            for (call, outcome) in machine
                .settled()
                .iter()
                .filter(|(call, _)| !self.reported(&call.id))
            {
                self.emit(|| RunEvent::ToolCallResult {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    outcome: outcome.clone(),
                    result: Box::new(outcome.to_result(&call.id, &call.name)),
                });
            }
            // Calls that asked for input while they ran: approvals were announced before.
            for pending in machine
                .pending_approvals()
                .iter()
                .filter(|p| p.input_request.is_some())
            {
                self.emit(|| RunEvent::ApprovalRequested(Box::new(pending.clone())));
            }
            return;
        }
        let Some(last) = machine.steps().get(step) else {
            return;
        };
        for ((call, outcome), result) in last
            .tool_calls
            .iter()
            .zip(&last.outcomes)
            .zip(&last.tool_results)
            .filter(|((call, _), _)| !self.reported(&call.id))
        {
            self.emit(|| RunEvent::ToolCallResult {
                id: call.id.clone(),
                name: call.name.clone(),
                outcome: outcome.clone(),
                result: Box::new(result.clone()),
            });
        }
        self.emit(|| RunEvent::StepFinish {
            step,
            stop_reason: last.response.stop_reason.clone(),
            usage: last.response.usage,
            response: Box::new(last.response.clone()),
        });
    }

    /// The step's model call, with the request the prepare-step hooks returned when there are
    /// any (they get a copy: the machine's request stays the run's own).
    async fn call_step(
        &self,
        machine: &mut Machine,
        step: usize,
        stop: &StopSignal<'_>,
    ) -> Result<Response, ModelFailure> {
        if self.options.context.is_some() {
            // Boxed: only runs with a policy pay for the summary call's room in the future.
            let fitted = tokio::select! {
                biased;
                reason = stop.wait() => return Err(ModelFailure::Stopped(reason, None)),
                fitted = Box::pin(self.fit(machine)) => fitted,
            };
            fitted.map_err(ModelFailure::Failed)?;
        }
        if self.options.hooks.prepare_step.is_empty() {
            return self.call_model(machine.request(), stop).await;
        }
        let prepared = self.prepare(machine, step).await;
        self.call_model(&prepared, stop).await
    }

    /// Whether the next model call's input, by the estimate, would take the run past its
    /// token budget ([`super::Limits::max_total_tokens`]).
    fn over_token_budget(&self, machine: &Machine) -> bool {
        let Some(max) = machine.limits().max_total_tokens else {
            return false;
        };
        let next = match self.context_state() {
            Some(state) => state.estimator.tokens(machine.request()),
            None => context::estimate(machine.request(), Family::of(self.provider.name())),
        };
        machine.billed_tokens() + next > max
    }

    /// The run's context estimator, when it has a policy.
    fn context_state(&self) -> Option<std::sync::MutexGuard<'_, ContextState>> {
        let state = self.extras.as_ref()?.context.as_ref()?;
        Some(state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Learn from the input tokens the provider reported for the request last sent.
    fn calibrate(&self, response: &Response) {
        let reported = crate::cost::billed_input(self.provider.name(), &response.usage);
        if let Some(mut state) = self.context_state() {
            let sent = state.sent;
            state.estimator.learn(sent, reported);
        }
    }

    /// Apply the context policy's strategies until the next request fits the window (see
    /// [`crate::context`]); an error when it still does not.
    async fn fit(&self, machine: &mut Machine) -> Result<(), Error> {
        let Some(policy) = self.options.context.as_deref() else {
            return Ok(());
        };
        let Some(estimator) = self.context_state().map(|s| s.estimator) else {
            return Ok(());
        };
        let window = policy.window.or_else(|| {
            self.prices()
                .find(self.provider.name(), &machine.request().model)
                .and_then(|found| found.context_window)
        });
        if let Some(window) = window {
            let budget = context::budget(policy, window, machine.request());
            let mut tokens = estimator.tokens(machine.request());
            for strategy in &policy.strategies {
                match strategy {
                    Strategy::ClearToolResults { keep_last } => {
                        while tokens > budget
                            && context::clear_one_result(machine.messages_mut(), *keep_last)
                        {
                            tokens = estimator.tokens(machine.request());
                        }
                    }
                    Strategy::TrimTurns => {
                        while tokens > budget && context::trim_one(policy, machine.messages_mut()) {
                            tokens = estimator.tokens(machine.request());
                        }
                    }
                    Strategy::Summarize(summarizer) if tokens > budget => {
                        if !self.summarize(machine, policy, summarizer).await? {
                            while tokens > budget
                                && context::trim_one(policy, machine.messages_mut())
                            {
                                tokens = estimator.tokens(machine.request());
                            }
                        }
                        tokens = estimator.tokens(machine.request());
                    }
                    Strategy::Summarize(_) => {}
                }
            }
            if tokens > budget {
                return Err(context::too_large(tokens, budget, window));
            }
        }
        if let Some(mut state) = self.context_state() {
            state.sent = context::estimate(machine.request(), state.estimator.family);
        }
        Ok(())
    }

    /// Replace older messages with a model's summary of them. `Ok(false)` when the summary
    /// call failed and the summarizer falls back to trimming.
    async fn summarize(
        &self,
        machine: &mut Machine,
        policy: &context::ContextPolicy,
        summarizer: &Summarizer,
    ) -> Result<bool, Error> {
        let Some(span) = context::summary_span(policy, machine.messages(), summarizer.keep_last)
        else {
            return Ok(true);
        };
        let request = context::summary_request(
            summarizer,
            &machine.request().model,
            machine.messages().get(span.0..span.1).unwrap_or_default(),
        );
        let provider = summarizer
            .provider
            .clone()
            .unwrap_or_else(|| self.provider.clone());
        match provider.complete(&request).await {
            Ok(response) => {
                machine.add_usage(response.usage);
                context::replace_with_summary(machine.messages_mut(), span, &response.text())?;
                Ok(true)
            }
            Err(error) => match summarizer.on_failure {
                OnSummaryFailure::Fail => Err(error),
                OnSummaryFailure::Trim => {
                    tracing::warn!("the summary call failed, trimming turns instead: {error}");
                    Ok(false)
                }
            },
        }
    }

    /// Apply the prepare-step hooks. Not an `async fn`, which would hold the request twice
    /// (see [`Self::drive`]).
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn doubles the future's arguments"
    )]
    fn prepare<'a>(
        &'a self,
        machine: &'a Machine,
        step: usize,
    ) -> impl Future<Output = Request> + 'a {
        async move {
            let mut request = machine.request().clone();
            for hook in &self.options.hooks.prepare_step {
                request = hook(StepRequest {
                    step,
                    tool_calls: machine.tool_calls(),
                    usage: machine.usage(),
                    request,
                })
                .await;
            }
            request
        }
    }

    /// The model call's span, when a subscriber wants it.
    fn chat_trace(&self, request: &Request) -> Option<telemetry::CallTrace> {
        telemetry::CallTrace::chat(
            self.run_trace(),
            &self.options.telemetry,
            self.provider.name(),
            request,
            self.events.is_some(),
        )
    }

    /// The provider's whole answer to `request`, in its `chat` span when traced.
    fn traced_complete(&self, request: &Request) -> BoxFuture<'static, Result<Response, Error>> {
        let call = self.provider.complete(request);
        match self.chat_trace(request) {
            None => call,
            Some(trace) => trace.complete(call),
        }
    }

    /// The model call. With a subscriber that wants its `chat` span, the provider's future
    /// (or the streamed call) carries the span: the run's own future does not grow.
    async fn call_model(
        &self,
        request: &Request,
        stop: &StopSignal<'_>,
    ) -> Result<Response, ModelFailure> {
        let Some(events) = &self.events else {
            let call = self.traced_complete(request);
            return tokio::select! {
                biased;
                reason = stop.wait() => Err(ModelFailure::Stopped(reason, None)),
                response = call => response.map_err(ModelFailure::Failed),
            };
        };

        // The run's stream reads the call itself (see `model_call`), the run's stop included,
        // and polls the driver again once the call ended: nothing else can wake it meanwhile.
        events.start_call(StreamedCall::new(
            self.provider.stream(request),
            stop.owned(),
            self.chat_trace(request),
        ));
        let call = std::future::poll_fn(|_| match events.take_ended_call() {
            Some(call) => Poll::Ready(call),
            None => Poll::Pending,
        })
        .await;
        match call.finish(self.provider.name()) {
            (response, CallEnd::Stopped(reason)) => {
                Err(ModelFailure::Stopped(reason, Some(response)))
            }
            (_, CallEnd::Failed(error)) => Err(ModelFailure::Failed(error)),
            (response, CallEnd::Finished) => Ok(response),
        }
    }

    async fn run_tools(
        &self,
        mut calls: Vec<ToolCall>,
        shared: Option<&Arc<StepShared>>,
    ) -> Vec<ToolOutcome> {
        // A call that runs alone gains nothing from a task of its own: its first poll happens
        // on the run's task. Calls that may run side by side each get a task from the start,
        // so CPU-bound tools still spread over the runtime's threads.
        //
        // The usual step asks for one call: it is awaited as it is, without an ordered stream
        // of futures around it (code that would otherwise run, and be fetched, every step).
        if calls.len() == 1 {
            // `let … else`, not `if let`: its `Option` ends with the statement rather than
            // being held, next to the call it gave, while the tool runs.
            let Some(call) = calls.pop() else {
                return Vec::new();
            };
            return vec![self.run_one(call, true, shared).await];
        }
        let concurrency = self.options.max_concurrency.max(1);
        let first_poll_inline = concurrency == 1;
        stream::iter(calls)
            .map(|call| self.run_one(call, first_poll_inline, shared))
            .buffered(concurrency)
            .collect()
            .await
    }

    /// [`Self::run_tools`] for a durable run: each outcome is recorded in the machine and
    /// checkpointed as it ends, so a crash does not run it again; the last one is left to the
    /// step's closing checkpoint, which the caller writes next.
    async fn run_tools_recorded(
        &self,
        machine: &mut Machine,
        calls: Vec<ToolCall>,
        shared: Option<&Arc<StepShared>>,
        durable: &Durable,
    ) {
        let concurrency = self.options.max_concurrency.max(1);
        let first_poll_inline = concurrency == 1;
        let mut unrecorded = calls.len();
        let mut running = stream::iter(calls)
            .map(|call| {
                let id = call.id.clone();
                self.run_one(call, first_poll_inline, shared)
                    .map(move |outcome| (id, outcome))
            })
            .buffer_unordered(concurrency);
        while let Some((id, outcome)) = running.next().await {
            machine.record_outcome(&id, outcome);
            unrecorded = unrecorded.saturating_sub(1);
            if unrecorded == 0 {
                // The last outcome is saved with the step's close, which follows at once.
                return;
            }
            durable.save(machine).await;
            if durable.failed() {
                return;
            }
        }
    }

    /// Run one call, then its after-tool hooks. Not an `async fn`, which would hold the call
    /// twice.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn doubles the future's arguments"
    )]
    fn run_one<'a>(
        &'a self,
        mut call: ToolCall,
        first_poll_inline: bool,
        shared: Option<&'a Arc<StepShared>>,
    ) -> impl Future<Output = ToolOutcome> + Send + 'a {
        async move {
            // After-tool hooks see the call as the model made it; without them the input can
            // move into the handler instead of being copied.
            let input = if self.options.hooks.after_tool.is_empty() {
                std::mem::take(&mut call.input)
            } else {
                call.input.clone()
            };
            let mut outcome =
                self.refuse_input(self.execute(&call, input, first_poll_inline, shared).await);
            for hook in &self.options.hooks.after_tool {
                let history = shared.and_then(|s| s.history.clone());
                let seen = WithHistory::new(call.clone(), history.unwrap_or_default());
                outcome = hook((seen, outcome)).await;
            }
            outcome
        }
    }

    /// A run that cannot pause answers a tool's request for input with an error result.
    fn refuse_input(&self, outcome: ToolOutcome) -> ToolOutcome {
        match outcome {
            ToolOutcome::InputRequired { request } if self.options.non_interactive => {
                ToolOutcome::Failed {
                    message: format!(
                        "the tool asks a person for input (\"{}\"), but nobody can answer in \
                         this run (it is not interactive); go on without it",
                        request.message
                    ),
                }
            }
            other => other,
        }
    }

    /// The handler's context for `call`: with the answer to what it asked before, if any.
    fn context(
        &self,
        call: &ToolCall,
        cancel: CancellationToken,
        shared: Option<&Arc<StepShared>>,
    ) -> ToolContext {
        let reply = shared.and_then(|s| {
            s.replies
                .iter()
                .find(|(id, _)| *id == call.id)
                .map(|(_, reply)| reply.clone())
        });
        ToolContext::new(
            call.id.clone(),
            call.name.clone(),
            cancel,
            self.options.state.clone(),
        )
        .with_run_id(self.store().map(|d| d.run_id.clone()))
        .with_input_reply(reply)
    }

    /// Run `call` with `input` (its arguments, owned by the handler once it runs).
    async fn execute(
        &self,
        call: &ToolCall,
        mut input: Value,
        first_poll_inline: bool,
        shared: Option<&Arc<StepShared>>,
    ) -> ToolOutcome {
        for hook in &self.options.hooks.before_tool {
            let mut seen = call.clone();
            seen.input = input.clone();
            let history = shared.and_then(|s| s.history.clone());
            let seen = WithHistory::new(seen, history.unwrap_or_default());
            match hook(seen).await {
                ToolDecision::Continue => {}
                ToolDecision::ModifyInput(new_input) => input = new_input,
                ToolDecision::Block(reason) => return ToolOutcome::Denied { reason },
            }
        }
        let Some(tool) = self.tools.get(&call.name) else {
            return ToolOutcome::UnknownTool {
                available: self.tools.names(),
            };
        };
        match &input {
            Value::Object(_) => {}
            Value::Null => input = Value::Object(Default::default()),
            Value::String(raw) => {
                return ToolOutcome::InvalidArguments {
                    violations: vec![Violation {
                        path: String::new(),
                        message: format!("the arguments are not valid JSON: {raw}"),
                    }],
                };
            }
            other => {
                return ToolOutcome::InvalidArguments {
                    violations: vec![Violation {
                        path: String::new(),
                        message: format!("the arguments must be a JSON object, got {other}"),
                    }],
                };
            }
        }
        if tool.definition().strict {
            crate::tool::schema::drop_absent_nulls(&tool.definition().input_schema, &mut input);
        }
        if let Err(violations) = tool.validate(&input) {
            return ToolOutcome::InvalidArguments { violations };
        }
        let Some(handler) = tool.handler() else {
            return ToolOutcome::Failed {
                message: format!(
                    "tool `{}` has no handler; register one for it to be callable",
                    call.name
                ),
            };
        };
        let timeout = tool.timeout().unwrap_or(self.options.tool_timeout);
        let cancel = self.cancel.child_token();
        let ctx = self.context(call, cancel.clone(), shared);
        let started = Instant::now();
        let mut call_future = self.tool_future(call, handler, ctx, input);
        let first_poll = if first_poll_inline {
            poll_once_catching(&mut call_future).await
        } else {
            FirstPoll::Pending
        };
        let outcome = match first_poll {
            // Most tools finish without waiting: no task, no timer, no wake-up of the runtime.
            FirstPoll::Ready(result) => returned(result),
            FirstPoll::Panicked(panic) => panicked(&*panic),
            // The tool waits on something: it continues on a task of its own, where the
            // timeout can stop it and a panic stays contained.
            FirstPoll::Pending => {
                let task = AbortOnDrop(tokio::spawn(call_future));
                match tokio::time::timeout_at(later(started, timeout), task).await {
                    Err(_) => ToolOutcome::TimedOut { after: timeout },
                    Ok(Err(join)) => match join.try_into_panic() {
                        Ok(panic) => panicked(&*panic),
                        Err(_) => ToolOutcome::Failed {
                            message: "the tool was aborted".to_owned(),
                        },
                    },
                    Ok(Ok(result)) => returned(result),
                }
            }
        };
        cancel.cancel();
        outcome
    }
}

/// What every call of a tool step shares: the history for the tool hooks, and the answers
/// calls get to what they asked for before.
struct StepShared {
    history: Option<Arc<[Message]>>,
    replies: Vec<(String, Arc<InputReply>)>,
}

type ToolFuture = futures::future::BoxFuture<'static, Result<ToolOutput, ToolError>>;

impl Driver {
    /// The handler's future for `call`, in its `execute_tool` span when a subscriber wants it.
    /// Not inlined into `execute`: a trace local there would take room in every run's future.
    fn tool_future(
        &self,
        call: &ToolCall,
        handler: &Arc<dyn crate::tool::ToolHandler>,
        ctx: ToolContext,
        input: Value,
    ) -> ToolFuture {
        match telemetry::CallTrace::tool(self.run_trace(), &self.options.telemetry, call, &input) {
            None => handler.call(ctx, input),
            Some(trace) => trace.run_tool(|| handler.call(ctx, input)),
        }
    }
}

/// What a tool's first poll gave.
enum FirstPoll {
    Ready(Result<ToolOutput, ToolError>),
    Panicked(Box<dyn std::any::Any + Send>),
    Pending,
}

/// Polls a tool once on the calling task, catching a panic as a spawned task would.
async fn poll_once_catching(call: &mut ToolFuture) -> FirstPoll {
    std::future::poll_fn(|cx| {
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call.as_mut().poll(cx)));
        std::task::Poll::Ready(match polled {
            Ok(std::task::Poll::Ready(result)) => FirstPoll::Ready(result),
            Ok(std::task::Poll::Pending) => FirstPoll::Pending,
            Err(panic) => FirstPoll::Panicked(panic),
        })
    })
    .await
}

fn returned(result: Result<ToolOutput, ToolError>) -> ToolOutcome {
    match result {
        Ok(output) => {
            let (content, structured) = output.into_parts();
            ToolOutcome::Completed {
                content,
                structured,
            }
        }
        Err(ToolError::Failed(message)) => ToolOutcome::Failed { message },
        Err(ToolError::InputRequired(request)) => ToolOutcome::InputRequired { request },
        Err(ToolError::InvalidArguments(violations)) => {
            ToolOutcome::InvalidArguments { violations }
        }
    }
}

fn panicked(panic: &(dyn std::any::Any + Send)) -> ToolOutcome {
    ToolOutcome::Failed {
        message: format!("the tool panicked: {}", panic_message(panic)),
    }
}

/// A spawned task that is aborted when dropped (a cancelled run must not leave tools running).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> std::future::Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}

/// The model a response came from: the one it names, else the one the run asked for. Steps are
/// priced by it.
fn answered_by<'a>(machine: &'a Machine, response: &'a Response) -> &'a str {
    if response.model.is_empty() {
        &machine.request().model
    } else {
        &response.model
    }
}
