//! The run loop: call the model, run the tools it asks for, feed the results back, and stop at
//! the answer or a limit.
//!
//! [`Machine`] decides and holds the state (pure, serializable); a driver performs the actions.
//! [`run`] and [`run_stream`] share that driver, so blocking and streamed runs behave the same.
//! Most code uses [`crate::Agent`] instead of these functions.
//!
//! Cancellation belongs to a run: every run has its own token, a child of
//! [`RunOptions::cancel`] when that is set. [`RunStream::cancel`] (or a
//! [`RunStream::cancel_handle`] moved to another task) stops a streamed run, the token passed
//! in its options a blocking one; either ends it promptly with [`RunStopReason::Cancelled`]
//! and a valid history, and no other run of the same agent or options notices.
//!
//! ```
//! # use agentloop::{Agent, run::RunStopReason};
//! # use agentloop_testkit::{ScriptedModel, Turn};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let agent = Agent::builder(ScriptedModel::new([Turn::text("Hello!")])).build();
//! let token = tokio_util::sync::CancellationToken::new();
//! let run = agent.with_options(|o| o.cancel = Some(token.clone())).run("Hi");
//! token.cancel(); // from any task
//! assert_eq!(run.await?.stop_reason, RunStopReason::Cancelled);
//! # Ok::<(), agentloop::Error>(()) }).unwrap();
//! ```
//!
//! # Events
//!
//! One vocabulary, extended layer by layer: a model call streams [`StreamEvent`]s; a streamed
//! run ([`RunEvent`]) passes them on as they are, as [`RunEvent::Model`], and adds only what a
//! run has; the server (`agentloop-server`) records the run's events and projects its two wire
//! protocols from them. In the library a name means one thing: `tool_call_start` is the model
//! beginning a call, `tool_call_ready` the call complete. (`/v1/chat` keeps its version-1 name
//! `tool_call_start` for the complete call, which is all it shows of a call before its result.)
//!
//! | layer | emits |
//! | --- | --- |
//! | model call ([`StreamEvent`], [`crate::Provider::stream`]) | `message_start`, `text_delta`, `thinking_delta`, `thinking_signature`, `redacted_thinking`, `tool_call_start` / `tool_call_delta` / `tool_call_end` (the model writing a call's arguments), `native_block`, `usage`, `message_stop` |
//! | run ([`RunEvent`], [`run_stream`], [`crate::Agent::run_stream`]) | `run_start`; per step `step_start`, the model call's events, `tool_call_ready` for every call of the response, `approval_requested` for every call that waits for a person, `tool_call_result` for every call answered, `step_finish`; `error` when a model call fails; `run_finish` |
//! | typed run ([`crate::Agent::run_output_stream`], [`crate::output`]) | the run's events, with `partial_output` (the answer parsed so far) after each piece of the answer that changes it, and `output` (the checked value) just before `run_finish` |
//! | server, `/v1/chat` | `message_start`; the run's `text_delta`, `thinking_delta`; `tool_call_start` (the run's `tool_call_ready`) and `tool_call_result`; `message_end`, `error` |
//! | server, AI SDK UI stream | `start`; `start-step` / `finish-step`; text and reasoning parts from the deltas; `tool-input-start` / `tool-input-delta` (the model's `tool_call_start` / `tool_call_delta`), `tool-input-available` (ready), `tool-output-available` / `tool-output-error`; `error`, `finish` |
//!
//! Every tool call gets the same sequence: the model's `tool_call_start` and `tool_call_delta`s,
//! then `tool_call_ready` with the parsed input (the raw text as a JSON string when it was not
//! valid JSON), then `tool_call_result`. That holds for calls refused by a hook, calls with
//! invalid arguments, and calls answered without running (past
//! [`Limits::max_tool_calls`], after [`Limits::max_tool_iterations`], or stopped by a
//! [`StopCondition`] checked before the tools). In manual tool mode the calls are ready and the
//! caller answers them. A call that needs approval gets `approval_requested` after the ready
//! events; the run's `run_finish` then says `awaiting_approval`, and its result comes in the
//! resumed run's stream, before that step's `step_finish`. A call the model was still writing
//! when the run was cancelled or timed out ends with the step: it is not in the history, and
//! gets neither.
//!
//! ```no_run
//! # async fn demo(agent: agentloop::Agent) {
//! use agentloop::RunEvent;
//! use futures::StreamExt;
//! let mut events = agent.run_stream("Weather in Paris?");
//! while let Some(event) = events.next().await {
//!     if let Some(text) = event.text_delta() {
//!         print!("{text}");
//!     } else if let RunEvent::ToolCallReady { call } = &event {
//!         println!("\n→ {}({})", call.name, call.input);
//!     }
//! }
//! # }
//! ```
//!
//! # Approval
//!
//! A tool can need a person's approval: always ([`crate::Tool::with_approval_required`],
//! `needs_approval: true` in a descriptor file) or by a policy, a function of the call and the
//! run ([`crate::Tool::with_approval_policy`], or [`RunOptions::approval_policy()`] for every tool;
//! the stricter answer wins). A policy answers [`Approval::Allow`], [`Approval::Require`] with
//! a reason, or [`Approval::Deny`] with a message the model sees, asking nobody (a guardrail).
//!
//! When a response holds calls that need approval, the others run (or, with
//! [`RunOptions::hold_for_approval()`], wait too) and the run stops with
//! [`RunStopReason::AwaitingApproval`]: [`RunResult::pending_approvals`] lists the calls (id,
//! tool, input, reason) and [`RunResult::paused`] is a [`PausedRun`], the run's [`Machine`]
//! with a format version, to keep as JSON anywhere. [`crate::Agent::resume`] (or
//! [`crate::Agent::resume_stream`]) goes on from it, in this process or another with the same
//! agent definition, given a [`Decision`] per call id: approve, approve with an edited input
//! (checked against the tool's schema first; the history then holds the edit), deny with a
//! message, or always approve the tool for the rest of the run. Calls left undecided keep the
//! run paused. [`crate::conversation::Conversation::decide`] does the same for a conversation,
//! where "always" lasts for the conversation.
//!
//! A tool that asks a person for input while it runs ([`crate::ToolError::InputRequired`]: an
//! MCP server's elicitation) pauses the run the same way: its pending call carries the
//! question ([`PendingApproval::input_request`]: message and the schema of the answer), the
//! decision is [`Decision::accept`] (content checked against that schema), [`Decision::decline`]
//! or [`Decision::cancel`], and the call runs again with the answer
//! ([`crate::ToolContext::input_reply`]). A run nobody can answer
//! ([`RunOptions::non_interactive`]) does not pause: the model gets an error result saying
//! what was asked.
//!
//! ```
//! # use agentloop::{Agent, Tool, run::{Decision, PausedRun, RunStopReason}};
//! # use agentloop_testkit::{ScriptedModel, Turn};
//! # #[derive(serde::Deserialize, schemars::JsonSchema)] struct Deploy { env: String }
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let model = ScriptedModel::new([
//!     Turn::tool_call("deploy", serde_json::json!({"env": "prod"})).with_ids(["call_1"]),
//!     Turn::text("Deployed to staging."),
//! ]);
//! let deploy = Tool::function("deploy", "Deploy", |d: Deploy| async move {
//!     Ok::<_, String>(format!("deployed to {}", d.env))
//! });
//! let agent = Agent::builder(model).tool(deploy.with_approval_required(true)).build();
//! let result = agent.run("Deploy it").await?;
//! assert_eq!(result.stop_reason, RunStopReason::AwaitingApproval);
//! let saved = result.paused.unwrap().to_json()?; // store it anywhere
//!
//! let paused = PausedRun::from_json(&saved)?;
//! let edit = Decision::edited(serde_json::json!({"env": "staging"}));
//! let result = agent.resume(&paused, [("call_1", edit)]).await?;
//! assert_eq!(result.text(), "Deployed to staging.");
//! # Ok::<(), agentloop::Error>(()) }).unwrap();
//! ```

mod approval;
mod armed;
mod driver;
mod events;
mod hooks;
mod input;
mod machine;
mod model_call;
mod options;
mod outcome;
#[cfg(feature = "postgres")]
mod postgres;
mod result;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::{FutureExt, Stream};
use tokio_util::sync::CancellationToken;

pub use approval::{
    Approval, ApprovalContext, ApprovalPolicy, Decision, InputAction, InputReply, InputRequest,
    PAUSED_RUN_VERSION, PausedRun, PendingApproval,
};
pub use hooks::{Hooks, PromptDecision, StepRequest, StopInfo, ToolDecision, WithHistory};
pub use input::RunInput;
pub use machine::{Action, Machine};
pub use options::{Limits, RunOptions, StopCondition, StopMoment, ToolUpdates};
pub use outcome::ToolOutcome;
#[cfg(feature = "postgres")]
pub use postgres::{Heartbeat, PostgresStore};
pub use result::{RunEvent, RunResult, RunStopReason, Step};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use store::{Checkpoint, MemoryStore, RunStatus, RunStore, RunSummary};

#[cfg(doc)]
use crate::stream::StreamEvent;

use crate::error::{Error, Result};
use crate::message::Request;
use crate::output::{OutputSpec, OutputStrategy};
use crate::provider::Provider;
use crate::tool::{Tool, ToolDefinition};
use driver::Driver;
pub(crate) use driver::ToolSet;
use events::{Delivery, Outbox};
use model_call::StreamedCall;

/// A new run's machine: `request` with the tools' definitions it does not list yet. The prompt
/// hooks run later, inside the run (see [`Driver::drive_new`]), so that a run's future is one
/// driver future rather than a future holding the request and then the driver.
fn new_machine(mut request: Request, tools: &ToolSet, options: &RunOptions) -> Machine {
    for definition in tools.definitions() {
        let listed = request.tools.iter().any(|t| {
            t.function_name().is_some() && t.function_name() == definition.function_name()
        });
        // A function tool named like a client-side native tool answers its calls; the native
        // definition is the one sent.
        let native = definition
            .function_name()
            .is_some_and(|name| ToolDefinition::native_claims(&request.tools, name));
        if !listed && !native {
            request.tools.push(definition);
        }
    }
    let mut machine = Machine::new(request, options.limits.clone());
    for tool in &options.approved_tools {
        machine.approve_tool(tool.clone());
    }
    machine
}

/// Run to the end and return the result. Fails only when the prompt hook blocks; model errors,
/// limits and cancellation end the run with the matching [`RunStopReason`].
pub fn run(
    provider: Arc<dyn Provider>,
    request: Request,
    tools: Vec<Tool>,
    options: RunOptions,
) -> impl Future<Output = Result<RunResult>> + Send + 'static {
    run_set(provider, request, ToolSet::new(tools), Arc::new(options))
}

/// [`run`] with tools gathered once and options shared by many runs.
pub(crate) fn run_set(
    provider: Arc<dyn Provider>,
    request: Request,
    tools: ToolSet,
    options: Arc<RunOptions>,
) -> impl Future<Output = Result<RunResult>> + Send + 'static {
    let machine = new_machine(request, &tools, &options);
    Driver::new(provider, tools, options, None).drive_new(machine)
}

/// A new durable run (see [`store`]): refused when the store has a run of that id already.
pub(crate) fn durable_set(
    provider: Arc<dyn Provider>,
    request: Request,
    tools: ToolSet,
    options: Arc<RunOptions>,
    store: Arc<dyn RunStore>,
    run_id: String,
) -> impl Future<Output = Result<RunResult>> + Send + 'static {
    let machine = new_machine(request, &tools, &options);
    durable_new(
        Driver::new(provider, tools, options, None),
        machine,
        store,
        run_id,
    )
}

/// [`durable_set`], streamed.
pub(crate) fn durable_stream_set(
    provider: Arc<dyn Provider>,
    request: Request,
    tools: ToolSet,
    options: Arc<RunOptions>,
    store: Arc<dyn RunStore>,
    run_id: String,
) -> RunStream {
    let machine = new_machine(request, &tools, &options);
    let events = Outbox::default();
    let driver = Driver::new(provider, tools, options, Some(events.clone()));
    let cancel = driver.cancel_token().clone();
    streaming(durable_new(driver, machine, store, run_id), events, cancel)
}

/// `driver` running `machine` as new durable run `run_id`.
async fn durable_new(
    driver: Driver,
    machine: Machine,
    store: Arc<dyn RunStore>,
    run_id: String,
) -> Result<RunResult> {
    if let Some(found) = store.load(&run_id).await? {
        return Err(Error::StaleCheckpoint {
            run_id,
            expected: 0,
            found: found.version,
        });
    }
    let durable = store::Durable::new(store, run_id.into(), 0);
    driver.durable(durable).drive_new(machine).await
}

/// Decisions applied to a paused machine before it goes on (see [`crate::Agent::decide_run`]).
pub(crate) type Decide = Box<dyn FnOnce(Machine) -> Result<Machine> + Send>;

/// A durable run continued from its last checkpoint (see [`store`]), with `decide` applied
/// first (and saved) when given.
pub(crate) fn resume_durable_set(
    provider: Arc<dyn Provider>,
    tools: ToolSet,
    options: Arc<RunOptions>,
    store: Arc<dyn RunStore>,
    run_id: String,
    decide: Option<Decide>,
) -> impl Future<Output = Result<RunResult>> + Send + 'static {
    resume_durable(
        Driver::new(provider, tools, options, None),
        store,
        run_id,
        decide,
    )
}

/// [`resume_durable_set`], streamed.
pub(crate) fn resume_durable_stream_set(
    provider: Arc<dyn Provider>,
    tools: ToolSet,
    options: Arc<RunOptions>,
    store: Arc<dyn RunStore>,
    run_id: String,
    decide: Option<Decide>,
) -> RunStream {
    let events = Outbox::default();
    let driver = Driver::new(provider, tools, options, Some(events.clone()));
    let cancel = driver.cancel_token().clone();
    streaming(
        resume_durable(driver, store, run_id, decide),
        events,
        cancel,
    )
}

/// `driver` continuing durable run `run_id` from its last checkpoint.
async fn resume_durable(
    driver: Driver,
    store: Arc<dyn RunStore>,
    run_id: String,
    decide: Option<Decide>,
) -> Result<RunResult> {
    let Some(checkpoint) = store.load(&run_id).await? else {
        return Err(Error::RunNotFound { run_id });
    };
    let loaded = Loaded {
        store,
        run_id,
        checkpoint,
    };
    resume_checkpoint(driver, loaded, decide).await
}

/// `driver` continuing a durable run from its last checkpoint.
async fn resume_checkpoint(
    driver: Driver,
    Loaded {
        store,
        run_id,
        checkpoint,
    }: Loaded,
    decide: Option<Decide>,
) -> Result<RunResult> {
    let mut machine = checkpoint.machine()?;
    machine.recover(|name| driver.tool_is_idempotent(name));
    let durable = store::Durable::new(store, run_id.into(), checkpoint.version);
    if let Some(decide) = decide {
        machine = decide(machine)?;
        // Decisions that leave calls pending stop the run at once: they must be kept.
        durable.save(&mut machine).await;
    }
    Ok(driver
        .resuming(&mut machine)
        .durable(durable)
        .drive(machine)
        .await)
}

/// Continue a saved machine (see [`Machine`]) to the end.
pub fn run_machine(
    provider: Arc<dyn Provider>,
    machine: Machine,
    tools: Vec<Tool>,
    options: RunOptions,
) -> impl Future<Output = RunResult> + Send + 'static {
    Driver::new(provider, ToolSet::new(tools), Arc::new(options), None).drive(machine)
}

/// Run and stream [`RunEvent`]s. The stream ends after `run_finish` (or after an `error` event
/// when the prompt hook blocks). Dropping it cancels the run, tools included.
pub fn run_stream(
    provider: Arc<dyn Provider>,
    request: Request,
    tools: Vec<Tool>,
    options: RunOptions,
) -> RunStream {
    stream_set(provider, request, ToolSet::new(tools), Arc::new(options))
}

/// [`run_stream`] with tools gathered once and options shared by many runs.
pub(crate) fn stream_set(
    provider: Arc<dyn Provider>,
    request: Request,
    tools: ToolSet,
    options: Arc<RunOptions>,
) -> RunStream {
    let machine = new_machine(request, &tools, &options);
    let events = Outbox::default();
    let driver = Driver::new(provider, tools, options, Some(events.clone()));
    stream_driver(driver, machine, events)
}

/// A typed run's driver and machine: the request set up for the output's strategy (the
/// provider's unless the output names one), the final-answer tool added when that is the
/// strategy, and the machine expecting the answer. Also the final-answer tool's name, if any.
fn typed_run(
    provider: Arc<dyn Provider>,
    mut request: Request,
    tools: ToolSet,
    options: Arc<RunOptions>,
    mut output: OutputSpec,
    events: Option<Outbox>,
) -> (Driver, Machine, Option<String>) {
    let strategy = output.resolve(provider.output_strategy_for(&request));
    let tools = match output.prepare(&mut request) {
        Some(answer) => ToolSet::new(tools.as_slice().iter().cloned().chain([answer])),
        None => tools,
    };
    let mut machine = new_machine(request, &tools, &options);
    let by_tool = strategy == OutputStrategy::Tool;
    machine.expect_output(&output.name, by_tool, output.saved());
    let tool = by_tool.then(|| output.name.clone());
    let driver = Driver::new(provider, tools, options, events).with_output(Arc::new(output));
    (driver, machine, tool)
}

/// [`run_set`] for a typed run (see [`crate::output`]).
pub(crate) fn run_output_set(
    provider: Arc<dyn Provider>,
    request: Request,
    tools: ToolSet,
    options: Arc<RunOptions>,
    output: OutputSpec,
) -> impl Future<Output = Result<RunResult>> + Send + 'static {
    let (driver, machine, _) = typed_run(provider, request, tools, options, output, None);
    driver.drive_new(machine)
}

/// [`stream_set`] for a typed run; also the final-answer tool's name, if the answer comes as
/// a call to it.
pub(crate) fn stream_output_set(
    provider: Arc<dyn Provider>,
    request: Request,
    tools: ToolSet,
    options: Arc<RunOptions>,
    output: OutputSpec,
) -> (RunStream, Option<String>) {
    let events = Outbox::default();
    let (driver, machine, tool) = typed_run(
        provider,
        request,
        tools,
        options,
        output,
        Some(events.clone()),
    );
    (stream_driver(driver, machine, events), tool)
}

/// [`durable_set`] for a typed run (see [`crate::output`]).
pub(crate) fn durable_output_set(
    provider: Arc<dyn Provider>,
    request: Request,
    tools: ToolSet,
    options: Arc<RunOptions>,
    output: OutputSpec,
    store: Arc<dyn RunStore>,
    run_id: String,
) -> impl Future<Output = Result<RunResult>> + Send + 'static {
    let (driver, machine, _) = typed_run(provider, request, tools, options, output, None);
    durable_new(driver, machine, store, run_id)
}

/// [`durable_stream_set`] for a typed run; also the final-answer tool's name, as
/// [`stream_output_set`] gives it.
pub(crate) fn durable_output_stream_set(
    provider: Arc<dyn Provider>,
    request: Request,
    tools: ToolSet,
    options: Arc<RunOptions>,
    output: OutputSpec,
    store: Arc<dyn RunStore>,
    run_id: String,
) -> (RunStream, Option<String>) {
    let events = Outbox::default();
    let (driver, machine, tool) = typed_run(
        provider,
        request,
        tools,
        options,
        output,
        Some(events.clone()),
    );
    let cancel = driver.cancel_token().clone();
    let run = durable_new(driver, machine, store, run_id);
    (streaming(run, events, cancel), tool)
}

/// A durable run's last checkpoint, read from its store.
pub(crate) struct Loaded {
    pub(crate) store: Arc<dyn RunStore>,
    pub(crate) run_id: String,
    pub(crate) checkpoint: Checkpoint,
}

/// A typed durable run continued from its last checkpoint, with `decide` applied first (and
/// saved) when given, checking its answers with `output` (the kept schema and strategy with
/// the caller's validator).
pub(crate) fn resume_durable_output_set(
    provider: Arc<dyn Provider>,
    tools: ToolSet,
    options: Arc<RunOptions>,
    output: OutputSpec,
    loaded: Loaded,
    decide: Option<Decide>,
) -> impl Future<Output = Result<RunResult>> + Send + 'static {
    let driver = Driver::new(provider, tools, options, None).with_output(Arc::new(output));
    resume_checkpoint(driver, loaded, decide)
}

/// [`resume_durable_output_set`], streamed.
pub(crate) fn resume_durable_output_stream_set(
    provider: Arc<dyn Provider>,
    tools: ToolSet,
    options: Arc<RunOptions>,
    output: OutputSpec,
    loaded: Loaded,
    decide: Option<Decide>,
) -> RunStream {
    let events = Outbox::default();
    let driver =
        Driver::new(provider, tools, options, Some(events.clone())).with_output(Arc::new(output));
    let cancel = driver.cancel_token().clone();
    streaming(resume_checkpoint(driver, loaded, decide), events, cancel)
}

fn stream_driver(driver: Driver, machine: Machine, events: Outbox) -> RunStream {
    let cancel = driver.cancel_token().clone();
    streaming(driver.drive_new(machine), events, cancel)
}

/// A stream over a driver's run, whose events go to `events`.
fn streaming(
    run: impl Future<Output = Result<RunResult>> + Send + 'static,
    events: Outbox,
    cancel: CancellationToken,
) -> RunStream {
    let outbox = events.clone();
    // `map`, not an `async` block awaiting the run: that would hold the run's future twice,
    // once as the block's capture and once as what it awaits.
    let driver = run.map(move |ended| {
        outbox.send(match ended {
            // The result is moved into `run_finish`, not cloned.
            Ok(result) => RunEvent::RunFinish {
                result: Box::new(result),
            },
            Err(error) => RunEvent::Error { error },
        });
    });
    RunStream {
        events,
        call: None,
        driver: Some(driver.boxed()),
        cancel,
    }
}

/// Drive a machine whose pending approvals were decided (see [`Machine::decide`]) on; a typed
/// run checks its answers with `output`, else with what the machine kept of its output.
pub(crate) fn resume_set(
    provider: Arc<dyn Provider>,
    mut machine: Machine,
    tools: ToolSet,
    options: Arc<RunOptions>,
    output: Option<OutputSpec>,
) -> impl Future<Output = RunResult> + Send + 'static {
    let mut driver = Driver::new(provider, tools, options, None);
    if let Some(output) = output {
        driver = driver.with_output(Arc::new(output));
    }
    driver.resuming(&mut machine).drive(machine)
}

/// [`resume_set`], streamed.
pub(crate) fn resume_stream_set(
    provider: Arc<dyn Provider>,
    mut machine: Machine,
    tools: ToolSet,
    options: Arc<RunOptions>,
    output: Option<OutputSpec>,
) -> RunStream {
    let events = Outbox::default();
    let mut driver = Driver::new(provider, tools, options, Some(events.clone()));
    if let Some(output) = output {
        driver = driver.with_output(Arc::new(output));
    }
    let driver = driver.resuming(&mut machine);
    let cancel = driver.cancel_token().clone();
    streaming(driver.drive(machine).map(Ok), events, cancel)
}

/// A streamed run. Polling it drives the run; no task is spawned for the loop itself.
pub struct RunStream {
    /// What the driver hands over: its events and model calls.
    events: Outbox,
    /// The model call being read; the driver waits for it meanwhile.
    call: Option<Box<StreamedCall>>,
    /// The run; `None` once it ended.
    driver: Option<BoxFuture<'static, ()>>,
    /// This run's own token.
    cancel: CancellationToken,
}

impl std::fmt::Debug for RunStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunStream")
            .field("running", &self.driver.is_some())
            .finish()
    }
}

impl RunStream {
    /// Stop this run: it ends promptly with `run_finish` and [`RunStopReason::Cancelled`],
    /// keeping only complete content, and a valid history. Other runs are not touched.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// A handle that stops this run, and only this one, from any task (see [`Self::cancel`]).
    pub fn cancel_handle(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Drain the stream and return the final result (`None` if the prompt hook blocked).
    pub async fn into_result(mut self) -> Result<RunResult> {
        use futures::StreamExt;
        let mut blocked = None;
        while let Some(event) = self.next().await {
            match event {
                RunEvent::RunFinish { result } => return Ok(*result),
                RunEvent::Error { error } => blocked = Some(error),
                _ => {}
            }
        }
        Err(blocked.unwrap_or(Error::Cancelled))
    }
}

impl Stream for RunStream {
    type Item = RunEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RunEvent>> {
        let this = &mut *self;
        loop {
            if this.call.is_none() {
                match this.events.deliver() {
                    Delivery::Event(event) => return Poll::Ready(Some(event)),
                    Delivery::Call(call) => this.call = Some(call),
                    Delivery::Nothing => {}
                }
            }
            if let Some(call) = this.call.as_mut() {
                match call.poll_event(cx) {
                    Poll::Ready(Some(event)) => return Poll::Ready(Some(event)),
                    Poll::Pending => return Poll::Pending,
                    // The driver, waiting for the call, is polled next to finish it.
                    Poll::Ready(None) => {
                        if let Some(call) = this.call.take() {
                            this.events.end_call(call);
                        }
                    }
                }
            }
            let Some(driver) = this.driver.as_mut() else {
                return Poll::Ready(None);
            };
            match driver.as_mut().poll(cx) {
                Poll::Ready(()) => this.driver = None,
                // Hand out what it left before pausing; with nothing left, it woke `cx` or
                // will.
                Poll::Pending if this.events.has_mail() => {}
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
