//! Run options: limits, timeouts, concurrency, stop conditions, hooks, cancellation.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::approval::{Approval, ApprovalContext, ApprovalPolicy};
use super::hooks::Hooks;
use super::machine::Machine;
use crate::context::ContextPolicy;
use crate::cost::Prices;
use crate::telemetry::Telemetry;

/// The limits the state machine enforces (serializable with it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Rounds of tools a run may go through (default 10). After that many the model is called
    /// once more for its answer; if it still asks for tools, those calls are answered as not
    /// run and the run stops with [`super::RunStopReason::MaxToolIterations`]. So a run makes
    /// at most this many + 1 model calls. (Saved runs from before the rename name it
    /// `max_turns`.)
    #[serde(alias = "max_turns")]
    pub max_tool_iterations: u32,
    /// Maximum tool calls answered; calls past it are answered as not run and the run stops.
    pub max_tool_calls: Option<u32>,
    /// Maximum tokens over the run, counted as the provider bills them: input (cached tokens
    /// included) plus output (reasoning included), summed over its model calls. The run
    /// stops after the step that reaches it, and before a model call whose request, by its
    /// estimate ([`crate::context::estimate`]), would take the run past it.
    pub max_total_tokens: Option<u64>,
    /// How many invalid-argument errors one tool may get before its calls are answered with a
    /// final error (default 2).
    pub invalid_argument_retries: u32,
    /// Stop when the model asks for tools instead of running them, leaving the calls for the
    /// caller to answer (the conversation's manual mode).
    #[serde(default)]
    pub manual_tools: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_tool_iterations: 10,
            max_tool_calls: None,
            max_total_tokens: None,
            invalid_argument_retries: 2,
            manual_tools: false,
        }
    }
}

/// When a [`StopCondition`] is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StopMoment {
    /// After each model response, before its tool calls run. When the condition fires, the
    /// response's calls are not run: each gets an error result saying the run stopped, so the
    /// history stays valid. The response is the step's last [`Machine::steps`] entry.
    BeforeTools,
    /// After each complete step, once its tools ran and their results are in the history (the
    /// default).
    #[default]
    AfterStep,
}

/// A named predicate over the run's state; any that returns true stops the run with
/// [`super::RunStopReason::Custom`] carrying its name. It is checked after every complete step
/// unless made to act earlier, after the response and before its tools, with
/// [`StopCondition::before_tools`] (see [`StopMoment`]). Limits with a stop reason of their
/// own are [`Limits`] fields instead: steps ([`Limits::max_tool_iterations`]), tool calls and
/// tokens.
///
/// ```
/// use agentloop::run::{StopCondition, StopMoment};
/// // A `finish` tool ends the run as soon as the model calls it; the other calls of that
/// // response are answered as not run.
/// let finish = StopCondition::tool_called("finish").before_tools();
/// assert_eq!(finish.moment(), StopMoment::BeforeTools);
/// assert_eq!(StopCondition::tool_called("report").moment(), StopMoment::AfterStep);
/// ```
#[derive(Clone)]
pub struct StopCondition {
    name: String,
    moment: StopMoment,
    predicate: Arc<dyn Fn(&Machine) -> bool + Send + Sync>,
}

impl std::fmt::Debug for StopCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StopCondition")
            .field(&self.name)
            .field(&self.moment)
            .finish()
    }
}

impl StopCondition {
    /// A custom condition over the run's state.
    pub fn new(
        name: impl Into<String>,
        predicate: impl Fn(&Machine) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            moment: StopMoment::AfterStep,
            predicate: Arc::new(predicate),
        }
    }

    /// Check the condition after each response, before its tools run.
    pub fn before_tools(mut self) -> Self {
        self.moment = StopMoment::BeforeTools;
        self
    }

    /// Check the condition after each complete step (the default).
    pub fn after_step(mut self) -> Self {
        self.moment = StopMoment::AfterStep;
        self
    }

    /// When the condition is checked.
    pub fn moment(&self) -> StopMoment {
        self.moment
    }

    /// Stop once a step called the tool `name` (with [`Self::before_tools`], before that call
    /// and the others of its response run).
    pub fn tool_called(name: impl Into<String>) -> Self {
        let name = name.into();
        Self::new(format!("tool_called({name})"), move |m| {
            m.steps()
                .last()
                .is_some_and(|s| s.tool_calls.iter().any(|c| c.name == name))
        })
    }

    /// The condition's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn check(&self, machine: &Machine) -> bool {
        (self.predicate)(machine)
    }
}

/// How a run behaves. `Default` gives: 10 tool iterations, tools in parallel (up to 8 at once), 30 s per
/// tool, no other limits.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Limits enforced by the state machine.
    pub limits: Limits,
    /// Whole-run timeout.
    pub timeout: Option<Duration>,
    /// Timeout for one step (model call plus its tools).
    pub step_timeout: Option<Duration>,
    /// Default timeout for one tool call (a tool's own timeout wins).
    pub tool_timeout: Duration,
    /// At most this many of a turn's tool calls run at once (results stay in call order);
    /// 1 runs them one after another, and 0 counts as 1.
    pub max_concurrency: usize,
    /// Stop conditions, each checked at its [`StopMoment`].
    pub stop_when: Vec<StopCondition>,
    /// Hooks.
    pub hooks: Hooks,
    /// A token that cancels every run started with these options, from any task (none by
    /// default). Each run gets its own child of it, so a run's own handle
    /// ([`super::RunStream::cancel_handle`]) stops that run only. Set it per run (with
    /// [`crate::Agent::with_options`]) to cancel a blocking run; set on an agent, cancelling it
    /// stops every run of the agent, later ones included.
    pub cancel: Option<CancellationToken>,
    /// Shared state handed to tool handlers through [`crate::ToolContext::state`].
    pub state: Option<Arc<dyn Any + Send + Sync>>,
    /// The price table steps are priced with; the built-in one when `None` (see
    /// [`crate::cost`]).
    pub prices: Option<Arc<Prices>>,
    /// A cost budget in USD: the run stops with [`super::RunStopReason::CostBudget`] before a
    /// model call when what it spent plus that call's projected input would exceed it. A run
    /// whose model has no price is not stopped by it.
    pub max_cost: Option<Decimal>,
    /// A policy for every tool's calls, next to each tool's own
    /// ([`crate::Tool::with_approval_policy`]); the stricter answer wins.
    pub approval_policy: Option<ApprovalPolicy>,
    /// When some calls of a step need approval, hold the step's other calls until every
    /// decision is made, instead of running them before the run pauses (the default).
    pub hold_for_approval: bool,
    /// Tools whose calls are approved without asking from the start of the run (a conversation
    /// passes its sticky decisions here); a guardrail's denial still applies.
    pub approved_tools: Vec<String>,
    /// Nobody can answer a tool's request for input in this run (a batch job, a scheduled
    /// run): such a request is refused, and the model gets an error result saying what was
    /// asked, instead of the run pausing ([`super::ToolOutcome::InputRequired`]).
    pub non_interactive: bool,
    /// Where the run's tools may change between steps (a registry whose MCP servers announce
    /// tool list changes): asked before every model call, and a new list replaces the run's
    /// tools and their definitions in the next request.
    pub tool_updates: Option<Arc<dyn ToolUpdates>>,
    /// Keep each request within the model's context window (none by default: requests are
    /// sent as they are). See [`crate::context`].
    pub context: Option<Arc<ContextPolicy>>,
    /// What the run's spans record: the agent's name, and whether message contents go in
    /// them (see [`crate::telemetry`]).
    pub telemetry: Telemetry,
}

/// Tools that can change while a run goes on: asked before each model call of a run that has
/// it ([`RunOptions::tool_updates`]). `Mutex<Registry>` is one: it refreshes the MCP servers
/// that sent `notifications/tools/list_changed`.
pub trait ToolUpdates: Send + Sync {
    /// The tools now, when they changed since the last time; `None` when they did not. An
    /// error keeps the run's tools as they were (it is logged).
    fn changed(&self) -> BoxFuture<'_, crate::error::Result<Option<Vec<crate::Tool>>>>;
}

impl std::fmt::Debug for dyn ToolUpdates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ToolUpdates(..)")
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            timeout: None,
            step_timeout: None,
            tool_timeout: Duration::from_secs(30),
            max_concurrency: 8,
            stop_when: Vec::new(),
            hooks: Hooks::default(),
            cancel: None,
            state: None,
            prices: None,
            max_cost: None,
            approval_policy: None,
            hold_for_approval: false,
            approved_tools: Vec::new(),
            non_interactive: false,
            tool_updates: None,
            context: None,
            telemetry: Telemetry::default(),
        }
    }
}

impl RunOptions {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rounds of tools per run before the model must answer (see
    /// [`Limits::max_tool_iterations`]).
    pub fn max_tool_iterations(mut self, n: u32) -> Self {
        self.limits.max_tool_iterations = n;
        self
    }

    /// Maximum tool calls.
    pub fn max_tool_calls(mut self, n: u32) -> Self {
        self.limits.max_tool_calls = Some(n);
        self
    }

    /// Maximum total tokens.
    pub fn max_total_tokens(mut self, n: u64) -> Self {
        self.limits.max_total_tokens = Some(n);
        self
    }

    /// Invalid-argument retries per tool.
    pub fn invalid_argument_retries(mut self, n: u32) -> Self {
        self.limits.invalid_argument_retries = n;
        self
    }

    /// Whole-run timeout.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// Per-step timeout.
    pub fn step_timeout(mut self, d: Duration) -> Self {
        self.step_timeout = Some(d);
        self
    }

    /// Default per-tool timeout.
    pub fn tool_timeout(mut self, d: Duration) -> Self {
        self.tool_timeout = d;
        self
    }

    /// At most `n` tool calls at once (default 8); 1 runs them one after another.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n.max(1);
        self
    }

    /// Add a stop condition.
    pub fn stop_when(mut self, condition: StopCondition) -> Self {
        self.stop_when.push(condition);
        self
    }

    /// Set the hooks.
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// Cancel the runs started with these options with `token` (see [`Self::cancel`]).
    pub fn cancel_token(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Price steps with `prices` instead of the built-in table.
    pub fn prices(mut self, prices: Prices) -> Self {
        self.prices = Some(Arc::new(prices));
        self
    }

    /// Stop before a model call that would take the run's cost over `usd`.
    pub fn max_cost(mut self, usd: Decimal) -> Self {
        self.max_cost = Some(usd);
        self
    }

    /// Keep requests within the model's context window with `policy` (see [`crate::context`]).
    pub fn context(mut self, policy: ContextPolicy) -> Self {
        self.context = Some(Arc::new(policy));
        self
    }

    /// Shared state for tool handlers.
    pub fn state<S: Any + Send + Sync>(mut self, state: S) -> Self {
        self.state = Some(Arc::new(state));
        self
    }

    /// Decide for every tool's calls whether they run, need approval, or are refused (see
    /// [`ApprovalPolicy`]).
    pub fn approval_policy(
        mut self,
        policy: impl Fn(&ApprovalContext<'_>) -> Approval + Send + Sync + 'static,
    ) -> Self {
        self.approval_policy = Some(ApprovalPolicy::new(policy));
        self
    }

    /// Hold a step's calls that need no approval until the others are decided (the field of
    /// the same name).
    pub fn hold_for_approval(mut self, hold: bool) -> Self {
        self.hold_for_approval = hold;
        self
    }

    /// Refuse tools' requests for input instead of pausing for them (the field of the same
    /// name).
    pub fn non_interactive(mut self, yes: bool) -> Self {
        self.non_interactive = yes;
        self
    }
}
