//! The front door: an [`Agent`] is built once (model, system prompt, tools, limits, hooks) and
//! run many times, concurrently.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::message::{Message, Request};
use crate::output::{Output, OutputStream, Typed};
use crate::provider::Provider;
use crate::run::{
    self, Approval, ApprovalContext, Decision, Hooks, Machine, PausedRun, RunInput, RunOptions,
    RunResult, RunStore, RunStream, StopCondition, ToolSet,
};
use crate::tool::{NativeTool, Tool, ToolChoice, ToolDefinition, ToolHandler};

/// A configured agent. Cheap to clone; runs share nothing but the configuration.
///
/// ```
/// # use agentloop::{Agent, Tool};
/// # use agentloop_testkit::{ScriptedModel, Turn};
/// # #[derive(serde::Deserialize, schemars::JsonSchema)] struct GetWeather { city: String }
/// # tokio_test_block_on(async {
/// let model = ScriptedModel::new([
///     Turn::tool_call("get_weather", serde_json::json!({"city": "Paris"})),
///     Turn::text("It is 18 °C in Paris."),
/// ]);
/// let agent = Agent::builder(model)
///     .system("You are a weather assistant.")
///     .tool(Tool::function("get_weather", "Current weather", |w: GetWeather| async move {
///         Ok::<_, std::io::Error>(format!("18 °C in {}", w.city))
///     }))
///     .build();
/// let result = agent.run("Weather in Paris?").await?;
/// assert_eq!(result.text(), "It is 18 °C in Paris.");
/// # Ok::<(), agentloop::Error>(()) });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f) }
/// ```
#[derive(Clone)]
pub struct Agent {
    provider: Arc<dyn Provider>,
    base: Request,
    /// Gathered once: every run shares them.
    tools: ToolSet,
    /// Shared by every run that does not bring its own.
    options: Arc<RunOptions>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("provider", &self.provider.name())
            .field("model", &self.base.model)
            .field("tools", &self.tools.as_slice().len())
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Start building an agent on `provider`.
    pub fn builder(provider: impl Provider) -> AgentBuilder {
        AgentBuilder::new(Arc::new(provider))
    }

    /// Start building an agent from a `provider/model` string (`openai/gpt-4o`,
    /// `anthropic/claude-sonnet-4-5`, `ollama/qwen2.5`, ...), with keys and base URLs from the
    /// usual environment variables. See [`crate::provider::route`].
    pub fn from_model(spec: &str) -> Result<AgentBuilder> {
        let (provider, model) = crate::provider::route::from_model(
            spec,
            crate::provider::route::RouteOptions::default(),
        )?;
        Ok(AgentBuilder::new(provider).model(model))
    }

    /// Start building an agent on a shared provider.
    pub fn builder_shared(provider: Arc<dyn Provider>) -> AgentBuilder {
        AgentBuilder::new(provider)
    }

    /// The run options every run starts from (see [`Self::with_options`]).
    pub fn options(&self) -> RunOptions {
        RunOptions::clone(&self.options)
    }

    /// The agent's tools.
    pub fn tools(&self) -> &[Tool] {
        self.tools.as_slice()
    }

    /// The tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }

    /// The run options every run starts from, without a copy.
    pub(crate) fn run_options(&self) -> &RunOptions {
        &self.options
    }

    /// Talk to `provider` as `model` (a conversation's model switch).
    pub(crate) fn set_model(&mut self, provider: Arc<dyn Provider>, model: String) {
        self.provider = provider;
        self.base.model = model;
    }

    /// The provider.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// The request every run starts from (model, system, sampling, native tools).
    pub fn base_request(&self) -> &Request {
        &self.base
    }

    fn request(&self, messages: Vec<Message>) -> Request {
        let mut request = self.base.clone();
        request.messages = messages;
        request
    }

    /// Run to the end from a prompt or a whole history ([`RunInput`]). The future owns what it
    /// needs, so it can be spawned. For options of this run only (a cancel token, a limit), run
    /// a copy made with [`Self::with_options`].
    ///
    /// Not an `async fn`: each layer of those would keep its own copy of the run's state in the
    /// future (see `run::driver::Driver::drive`).
    pub fn run(
        &self,
        input: impl Into<RunInput>,
    ) -> impl Future<Output = Result<RunResult>> + Send + 'static {
        self.run_shared(input.into().into_messages(), Arc::clone(&self.options))
    }

    /// Run from a prompt or a whole history, streaming [`crate::RunEvent`]s.
    /// [`RunStream::cancel`] stops this run only.
    pub fn run_stream(&self, input: impl Into<RunInput>) -> RunStream {
        self.stream_shared(input.into().into_messages(), Arc::clone(&self.options))
    }

    /// Run to the end and return the answer as a `T` (see [`crate::output`]): the run may
    /// call tools first; its answer is checked against `T`'s schema and sent back with the
    /// problems until it passes or the retries run out ([`Error::InvalidOutput`]). The
    /// strategy is the provider's for the request ([`Provider::output_strategy_for`]); to
    /// choose one, or add a validator, use [`Self::run_output_with`]. A run that pauses for
    /// approval ends in [`Error::AwaitingApproval`], which holds the paused run to decide and
    /// resume with [`Self::resume_output`].
    ///
    /// [`Error::InvalidOutput`]: crate::Error::InvalidOutput
    /// [`Error::AwaitingApproval`]: crate::Error::AwaitingApproval
    pub fn run_output<T>(
        &self,
        input: impl Into<RunInput>,
    ) -> impl Future<Output = Result<Typed<T>>> + Send + 'static
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        self.run_output_with(input, Output::<T>::new())
    }

    /// [`Self::run_output`] with an [`Output`] saying how: name, strategy, validator.
    pub fn run_output_with<T>(
        &self,
        input: impl Into<RunInput>,
        output: Output<T>,
    ) -> impl Future<Output = Result<Typed<T>>> + Send + 'static
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        let run = output.spec().map(|spec| {
            run::run_output_set(
                self.provider.clone(),
                self.request(input.into().into_messages()),
                self.tools.clone(),
                Arc::clone(&self.options),
                spec,
            )
        });
        async move { crate::output::typed(run?.await?) }
    }

    /// [`Self::run_output`], streamed: the run's events with `partial_output` while the
    /// answer streams and `output` before `run_finish` (see [`OutputStream`]).
    pub fn run_output_stream<T>(&self, input: impl Into<RunInput>) -> OutputStream<T>
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        self.run_output_stream_with(input, Output::<T>::new())
    }

    /// [`Self::run_output_stream`] with an [`Output`] saying how.
    pub fn run_output_stream_with<T>(
        &self,
        input: impl Into<RunInput>,
        output: Output<T>,
    ) -> OutputStream<T>
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        match output.spec() {
            Ok(spec) => {
                let (stream, tool) = run::stream_output_set(
                    self.provider.clone(),
                    self.request(input.into().into_messages()),
                    self.tools.clone(),
                    Arc::clone(&self.options),
                    spec,
                );
                OutputStream::new(stream, tool)
            }
            Err(error) => OutputStream::failed(error),
        }
    }

    /// A copy of the agent whose runs use options edited by `edit`: for one run
    /// (`agent.with_options(|o| o.cancel = Some(token)).run(prompt)`) or many. The copy shares
    /// the provider and tools.
    pub fn with_options(&self, edit: impl FnOnce(&mut RunOptions)) -> Agent {
        let mut options = self.options();
        edit(&mut options);
        Agent {
            options: Arc::new(options),
            ..self.clone()
        }
    }

    /// Resume a run paused for approval ([`crate::RunStopReason::AwaitingApproval`]) with
    /// decisions by call id. The agent must have the definition the run was started with (its
    /// tools, policies and options); the paused value may come from another process
    /// ([`PausedRun::from_json`]). Calls left undecided stay pending: the run then stops again
    /// at once with the same reason and the calls still to decide.
    ///
    /// The paused value is left as it was, so a failed resume can be retried with other
    /// decisions. Fails before anything runs when a decision names no pending call
    /// ([`crate::Error::InvalidDecision`]) or an edited input does not fit the tool's schema
    /// ([`crate::Error::ToolArgumentParse`]).
    /// For options of this resume only, resume on a copy made with [`Self::with_options`].
    pub fn resume<S: Into<String>>(
        &self,
        paused: &PausedRun,
        decisions: impl IntoIterator<Item = (S, Decision)>,
    ) -> impl Future<Output = Result<RunResult>> + Send + 'static {
        use futures::FutureExt;
        match self.decided(paused, decisions) {
            Ok(machine) => futures::future::Either::Left(
                run::resume_set(
                    self.provider.clone(),
                    machine,
                    self.tools.clone(),
                    Arc::clone(&self.options),
                    None,
                )
                .map(Ok),
            ),
            Err(error) => futures::future::Either::Right(std::future::ready(Err(error))),
        }
    }

    /// Run to the end like [`Self::run`], checkpointing the run in `store` under `run_id`
    /// after every state change that matters, so that [`Self::resume_run`] continues it after
    /// a crash, in this process or another (see [`RunStore`] for what runs again). Fails with
    /// [`Error::StaleCheckpoint`] when the store has a run `run_id` already. A checkpoint that
    /// cannot be saved stops the run with [`crate::RunStopReason::Error`] and the store's error.
    pub fn run_durable<S: RunStore + Clone>(
        &self,
        run_id: impl Into<String>,
        input: impl Into<RunInput>,
        store: &S,
    ) -> impl Future<Output = Result<RunResult>> + Send + 'static {
        run::durable_set(
            self.provider.clone(),
            self.request(input.into().into_messages()),
            self.tools.clone(),
            Arc::clone(&self.options),
            Arc::new(store.clone()),
            run_id.into(),
        )
    }

    /// [`Self::run_durable`], streaming the run's [`crate::RunEvent`]s as [`Self::run_stream`]
    /// does, with the same checkpoints. Dropping the stream stops the run where it stands, as
    /// a crash would: its last checkpoint stays, for [`Self::resume_run`] or
    /// [`Self::resume_run_stream`]. A run id the store has already ends the stream with an
    /// `error` event ([`Error::StaleCheckpoint`]).
    pub fn run_durable_stream<S: RunStore + Clone>(
        &self,
        run_id: impl Into<String>,
        input: impl Into<RunInput>,
        store: &S,
    ) -> RunStream {
        run::durable_stream_set(
            self.provider.clone(),
            self.request(input.into().into_messages()),
            self.tools.clone(),
            Arc::clone(&self.options),
            Arc::new(store.clone()),
            run_id.into(),
        )
    }

    /// Continue durable run `run_id`, paused for approval, with decisions by call id, as
    /// [`Self::resume`] does for a [`PausedRun`] value: the decisions are checkpointed before
    /// anything runs, and the run goes on durably. Fails before anything runs on a decision
    /// that cannot apply ([`Error::InvalidDecision`], [`Error::ToolArgumentParse`]).
    pub fn decide_run<S: RunStore + Clone, D: Into<String>>(
        &self,
        run_id: impl Into<String>,
        decisions: impl IntoIterator<Item = (D, Decision)>,
        store: &S,
    ) -> impl Future<Output = Result<RunResult>> + Send + 'static {
        let decide = self.decider(decisions);
        run::resume_durable_set(
            self.provider.clone(),
            self.tools.clone(),
            Arc::clone(&self.options),
            Arc::new(store.clone()),
            run_id.into(),
            Some(decide),
        )
    }

    /// [`Self::decide_run`], streaming the run's events from where it paused as
    /// [`Self::resume_stream`] does, with the same checkpoints. A decision that cannot apply
    /// ends the stream with an `error` event before anything runs; a run not in the store, with
    /// an `error` event ([`Error::RunNotFound`]).
    pub fn decide_run_stream<S: RunStore + Clone, D: Into<String>>(
        &self,
        run_id: impl Into<String>,
        decisions: impl IntoIterator<Item = (D, Decision)>,
        store: &S,
    ) -> RunStream {
        let decide = self.decider(decisions);
        run::resume_durable_stream_set(
            self.provider.clone(),
            self.tools.clone(),
            Arc::clone(&self.options),
            Arc::new(store.clone()),
            run_id.into(),
            Some(decide),
        )
    }

    /// Continue durable run `run_id` from its last checkpoint in `store`, to its end (a run
    /// that is over, or paused for approval, returns its result as it stands). The agent must
    /// have the definition the run was started with. A tool call that had started and has no
    /// recorded outcome runs again only if its tool is idempotent
    /// ([`Tool::with_idempotent`]); otherwise the model sees it as interrupted. Fails with
    /// [`Error::RunNotFound`] when there is no such run.
    pub fn resume_run<S: RunStore + Clone>(
        &self,
        run_id: impl Into<String>,
        store: &S,
    ) -> impl Future<Output = Result<RunResult>> + Send + 'static {
        run::resume_durable_set(
            self.provider.clone(),
            self.tools.clone(),
            Arc::clone(&self.options),
            Arc::new(store.clone()),
            run_id.into(),
            None,
        )
    }

    /// [`Self::resume_run`], streaming the run's events from its last checkpoint on:
    /// `run_start`, then what the run does from there (results recorded before the checkpoint
    /// are not reported again). A run not in the store ends the stream with an `error` event
    /// ([`Error::RunNotFound`]).
    pub fn resume_run_stream<S: RunStore + Clone>(
        &self,
        run_id: impl Into<String>,
        store: &S,
    ) -> RunStream {
        run::resume_durable_stream_set(
            self.provider.clone(),
            self.tools.clone(),
            Arc::clone(&self.options),
            Arc::new(store.clone()),
            run_id.into(),
            None,
        )
    }

    /// [`Self::resume`], streaming the run's events from where it paused (`run_start`, the
    /// decided calls' results, `step_finish`, then the next steps).
    pub fn resume_stream<S: Into<String>>(
        &self,
        paused: &PausedRun,
        decisions: impl IntoIterator<Item = (S, Decision)>,
    ) -> Result<RunStream> {
        let machine = self.decided(paused, decisions)?;
        Ok(run::resume_stream_set(
            self.provider.clone(),
            machine,
            self.tools.clone(),
            Arc::clone(&self.options),
            None,
        ))
    }

    /// Resume a typed run paused for approval ([`Self::run_output`]) like [`Self::resume`],
    /// and return its answer as a `T`. The run asks for and checks the answer as it was
    /// started (its schema, strategy and strictness are part of the paused value). Fails with
    /// [`crate::Error::Config`] when the paused run is not a typed run
    /// ([`PausedRun::is_typed`]).
    pub fn resume_output<T>(
        &self,
        paused: &PausedRun,
        decisions: impl IntoIterator<Item = (impl Into<String>, Decision)>,
    ) -> impl Future<Output = Result<Typed<T>>> + Send + 'static
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        self.resume_output_with(paused, decisions, Output::<T>::new())
    }

    /// [`Self::resume_output`] with an [`Output`] for its validator, which a paused run
    /// cannot keep (it is code); the paused run's schema and strategy win over the output's.
    pub fn resume_output_with<T>(
        &self,
        paused: &PausedRun,
        decisions: impl IntoIterator<Item = (impl Into<String>, Decision)>,
        output: Output<T>,
    ) -> impl Future<Output = Result<Typed<T>>> + Send + 'static
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        let run = self
            .typed_resume(paused, decisions, output)
            .map(|(machine, spec)| {
                run::resume_set(
                    self.provider.clone(),
                    machine,
                    self.tools.clone(),
                    Arc::clone(&self.options),
                    Some(spec),
                )
            });
        async move { crate::output::typed(run?.await) }
    }

    /// [`Self::resume_output_with`], streamed like [`Self::run_output_stream`]: the resumed
    /// run's events with `partial_output` while the answer streams and `output` before
    /// `run_finish`.
    pub fn resume_output_stream_with<T>(
        &self,
        paused: &PausedRun,
        decisions: impl IntoIterator<Item = (impl Into<String>, Decision)>,
        output: Output<T>,
    ) -> Result<OutputStream<T>>
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        let (machine, spec) = self.typed_resume(paused, decisions, output)?;
        let tool = machine
            .expected_output()
            .and_then(|(name, by_tool, _)| by_tool.then(|| name.to_owned()));
        let stream = run::resume_stream_set(
            self.provider.clone(),
            machine,
            self.tools.clone(),
            Arc::clone(&self.options),
            Some(spec),
        );
        Ok(OutputStream::new(stream, tool))
    }

    /// [`Self::run_output_with`], durably: checkpointed in `store` under `run_id` as
    /// [`Self::run_durable`] does, the run's schema, strategy and strictness included, so
    /// [`Self::resume_output_run_with`] (or [`Self::resume_run`], without a validator)
    /// continues it after a crash.
    pub fn run_output_durable_with<T, S: RunStore + Clone>(
        &self,
        run_id: impl Into<String>,
        input: impl Into<RunInput>,
        output: Output<T>,
        store: &S,
    ) -> impl Future<Output = Result<Typed<T>>> + Send + 'static
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        let run = output.spec().map(|spec| {
            run::durable_output_set(
                self.provider.clone(),
                self.request(input.into().into_messages()),
                self.tools.clone(),
                Arc::clone(&self.options),
                spec,
                Arc::new(store.clone()),
                run_id.into(),
            )
        });
        async move { crate::output::typed(run?.await?) }
    }

    /// [`Self::run_output_durable_with`], streamed like [`Self::run_output_stream`].
    pub fn run_output_durable_stream_with<T, S: RunStore + Clone>(
        &self,
        run_id: impl Into<String>,
        input: impl Into<RunInput>,
        output: Output<T>,
        store: &S,
    ) -> OutputStream<T>
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        match output.spec() {
            Ok(spec) => {
                let (stream, tool) = run::durable_output_stream_set(
                    self.provider.clone(),
                    self.request(input.into().into_messages()),
                    self.tools.clone(),
                    Arc::clone(&self.options),
                    spec,
                    Arc::new(store.clone()),
                    run_id.into(),
                );
                OutputStream::new(stream, tool)
            }
            Err(error) => OutputStream::failed(error),
        }
    }

    /// Continue typed durable run `run_id` ([`Self::run_output_durable_with`]) from its last
    /// checkpoint, as [`Self::resume_run`] does, and return its answer as a `T`. The run asks
    /// for and checks the answer as it was started; `output` gives the type and validator (a
    /// checkpoint cannot keep code). Fails with [`Error::RunNotFound`] when there is no such
    /// run and [`Error::Config`] when it is not a typed run.
    pub fn resume_output_run_with<T, S: RunStore + Clone>(
        &self,
        run_id: impl Into<String>,
        output: Output<T>,
        store: &S,
    ) -> impl Future<Output = Result<Typed<T>>> + Send + 'static
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        let agent = self.clone();
        let store: Arc<dyn RunStore> = Arc::new(store.clone());
        let run_id = run_id.into();
        async move {
            let (checkpoint, spec, _) = typed_checkpoint(&*store, &run_id, output).await?;
            let result = run::resume_durable_output_set(
                agent.provider.clone(),
                agent.tools.clone(),
                Arc::clone(&agent.options),
                spec,
                run::Loaded {
                    store,
                    run_id,
                    checkpoint,
                },
                None,
            )
            .await?;
            crate::output::typed(result)
        }
    }

    /// [`Self::resume_output_run_with`], streamed like [`Self::resume_output_stream_with`]:
    /// the run's events from its last checkpoint on, with `partial_output` and `output`. The
    /// checkpoint is read first, so a run that is missing or not typed fails here, before
    /// any stream.
    pub async fn resume_output_run_stream_with<T, S: RunStore + Clone>(
        &self,
        run_id: impl Into<String>,
        output: Output<T>,
        store: &S,
    ) -> Result<OutputStream<T>>
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        let store: Arc<dyn RunStore> = Arc::new(store.clone());
        let run_id = run_id.into();
        let (checkpoint, spec, tool) = typed_checkpoint(&*store, &run_id, output).await?;
        let stream = run::resume_durable_output_stream_set(
            self.provider.clone(),
            self.tools.clone(),
            Arc::clone(&self.options),
            spec,
            run::Loaded {
                store,
                run_id,
                checkpoint,
            },
            None,
        );
        Ok(OutputStream::new(stream, tool))
    }

    /// Continue typed durable run `run_id`, paused for approval, with decisions by call id,
    /// as [`Self::decide_run_stream`] does, streamed like
    /// [`Self::resume_output_run_stream_with`]. The checkpoint is read first: a run that is
    /// missing or not typed fails here; a decision that cannot apply ends the stream with an
    /// `error` event before anything runs.
    pub async fn decide_output_run_stream_with<T, S: RunStore + Clone, D: Into<String>>(
        &self,
        run_id: impl Into<String>,
        decisions: impl IntoIterator<Item = (D, Decision)>,
        output: Output<T>,
        store: &S,
    ) -> Result<OutputStream<T>>
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        let decide = self.decider(decisions);
        let store: Arc<dyn RunStore> = Arc::new(store.clone());
        let run_id = run_id.into();
        let (checkpoint, spec, tool) = typed_checkpoint(&*store, &run_id, output).await?;
        let stream = run::resume_durable_output_stream_set(
            self.provider.clone(),
            self.tools.clone(),
            Arc::clone(&self.options),
            spec,
            run::Loaded {
                store,
                run_id,
                checkpoint,
            },
            Some(decide),
        );
        Ok(OutputStream::new(stream, tool))
    }

    /// The decided machine of a paused typed run and its output: the kept schema and
    /// strategy with `output`'s type and validator.
    fn typed_resume<T>(
        &self,
        paused: &PausedRun,
        decisions: impl IntoIterator<Item = (impl Into<String>, Decision)>,
        output: Output<T>,
    ) -> Result<(Machine, crate::output::OutputSpec)>
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        let Some((name, _, Some(saved))) = paused.machine().expected_output() else {
            return Err(Error::config(
                "this paused run is not a typed run; resume it with Agent::resume",
            ));
        };
        let spec = output.restored(name, saved)?;
        Ok((self.decided(paused, decisions)?, spec))
    }

    /// `decisions` applied to a durable run's paused machine once it is loaded.
    fn decider<D: Into<String>>(
        &self,
        decisions: impl IntoIterator<Item = (D, Decision)>,
    ) -> run::Decide {
        let decisions: Vec<(String, Decision)> = decisions
            .into_iter()
            .map(|(id, decision)| (id.into(), decision))
            .collect();
        let agent = self.clone();
        Box::new(move |machine| agent.decided(&PausedRun::new(machine), decisions))
    }

    /// The paused machine with the decisions applied, edited inputs checked first.
    fn decided<S: Into<String>>(
        &self,
        paused: &PausedRun,
        decisions: impl IntoIterator<Item = (S, Decision)>,
    ) -> Result<Machine> {
        let mut machine = paused.machine().clone();
        let decisions: Vec<(String, Decision)> = decisions
            .into_iter()
            .map(|(id, decision)| (id.into(), decision))
            .collect();
        for (id, decision) in &decisions {
            let Decision::ApproveEdited { input } = decision else {
                continue;
            };
            let Some(pending) = machine.pending_approvals().iter().find(|p| p.id == *id) else {
                continue;
            };
            let tool = pending.tool.clone();
            let bad = |message: String| Error::ToolArgumentParse {
                tool: tool.clone(),
                message: format!("the edited input of call `{id}` does not fit: {message}"),
            };
            let input = match input {
                Value::Null => Value::Object(Default::default()),
                input @ Value::Object(_) => input.clone(),
                other => return Err(bad(format!("it must be a JSON object, got {other}"))),
            };
            if let Some(found) = self.tools.get(&tool)
                && let Err(violations) = found.validate(&input)
            {
                let each: Vec<String> = violations.iter().map(ToString::to_string).collect();
                return Err(bad(each.join("; ")));
            }
        }
        machine.decide(decisions)?;
        for tool in &self.options.approved_tools {
            machine.approve_tool(tool.clone());
        }
        Ok(machine)
    }

    fn run_shared(
        &self,
        messages: Vec<Message>,
        options: Arc<RunOptions>,
    ) -> impl Future<Output = Result<RunResult>> + Send + 'static {
        run::run_set(
            self.provider.clone(),
            self.request(messages),
            self.tools.clone(),
            options,
        )
    }

    fn stream_shared(&self, messages: Vec<Message>, options: Arc<RunOptions>) -> RunStream {
        run::stream_set(
            self.provider.clone(),
            self.request(messages),
            self.tools.clone(),
            options,
        )
    }
}

/// Builds an [`Agent`].
pub struct AgentBuilder {
    provider: Arc<dyn Provider>,
    base: Request,
    tools: Vec<Tool>,
    options: RunOptions,
    /// Handlers named after no function tool yet: bound at [`Self::build`].
    unbound: Vec<(String, Arc<dyn ToolHandler>)>,
}

impl AgentBuilder {
    fn new(provider: Arc<dyn Provider>) -> Self {
        Self {
            provider,
            base: Request::default(),
            tools: Vec::new(),
            options: RunOptions::default(),
            unbound: Vec::new(),
        }
    }

    /// The model name, as the provider knows it.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.base.model = model.into();
        self
    }

    /// The system prompt.
    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.base.system = Some(system.into());
        self
    }

    /// Add a tool.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.retain(|t| t.name() != tool.name());
        self.tools.push(tool);
        self
    }

    /// Add tools.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Tool>) -> Self {
        for tool in tools {
            self = self.tool(tool);
        }
        self
    }

    /// Attach a handler to the tool the model calls `name`: a definition-only function tool,
    /// or a client-side native tool by its [`NativeTool::client_name`]
    /// (`str_replace_based_edit_tool`, `bash`, `computer`), whose calls then run in automatic
    /// runs with the input the model sent. A name that matches no function tool yet is bound
    /// when the agent is built, so the order of the builder calls does not matter.
    ///
    /// A client-side native tool without a handler is answered as an unknown tool: the model
    /// gets an error result listing the tools that can run, and the run goes on.
    pub fn handler(self, name: &str, handler: impl ToolHandler) -> Self {
        self.bind(name.to_owned(), Arc::new(handler))
    }

    /// [`Self::handler`] for each `(name, handler)` of a map (or any list of pairs).
    pub fn handlers<N: Into<String>>(
        mut self,
        handlers: impl IntoIterator<Item = (N, Arc<dyn ToolHandler>)>,
    ) -> Self {
        for (name, handler) in handlers {
            self = self.bind(name.into(), handler);
        }
        self
    }

    fn bind(mut self, name: String, handler: Arc<dyn ToolHandler>) -> Self {
        let mut bound = false;
        for tool in &mut self.tools {
            if tool.name() == name {
                *tool = tool.clone().with_shared_handler(handler.clone());
                bound = true;
            }
        }
        self.unbound.retain(|(unbound, _)| *unbound != name);
        if !bound {
            self.unbound.push((name, handler));
        }
        self
    }

    /// The tools with the handlers bound by name: a function tool added after its handler
    /// takes it unless it brought its own; any other name answers a native tool.
    fn bound_tools(mut self) -> (Self, Vec<Tool>) {
        let mut tools = std::mem::take(&mut self.tools);
        for (name, handler) in std::mem::take(&mut self.unbound) {
            match tools.iter_mut().find(|tool| tool.name() == name) {
                Some(tool) if tool.handler().is_none() => {
                    *tool = tool.clone().with_shared_handler(handler);
                }
                Some(_) => {}
                None => tools.push(Tool::native_slot(name).with_shared_handler(handler)),
            }
        }
        (self, tools)
    }

    /// Offer a provider-native tool (built by a provider module, e.g.
    /// `provider::anthropic::tools::bash()`).
    pub fn native_tool(mut self, tool: NativeTool) -> Self {
        self.base.tools.push(ToolDefinition::Native(tool));
        self
    }

    /// The agent's name, in its runs' spans (`invoke_agent {name}`, see [`crate::telemetry`]).
    pub fn name(mut self, name: impl Into<std::sync::Arc<str>>) -> Self {
        self.options.telemetry.agent_name = Some(name.into());
        self
    }

    /// Sampling temperature.
    pub fn temperature(mut self, t: f32) -> Self {
        self.base.temperature = Some(t);
        self
    }

    /// Token limit per response.
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.base.max_tokens = Some(n);
        self
    }

    /// Tool choice for every step (a prepare-step hook can change it per step).
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.base.tool_choice = Some(choice);
        self
    }

    /// Allow or forbid several tool calls per turn.
    pub fn parallel_tool_calls(mut self, on: bool) -> Self {
        self.base.parallel_tool_calls = Some(on);
        self
    }

    /// Cache the tool list and the system prompt (Anthropic prompt caching): a breakpoint on
    /// the last tool and one on the last system block of every request, two of Anthropic's
    /// four. Providers that cache on their own ignore it. Finer placement: [`Request::cache`]
    /// through [`AgentBuilder::request`].
    pub fn prompt_caching(mut self, control: crate::message::CacheControl) -> Self {
        use crate::message::{CacheBreakpoint, CacheTarget};
        for target in [CacheTarget::Tools, CacheTarget::System] {
            self.base.cache.retain(|b| b.target != target);
            self.base.cache.push(CacheBreakpoint::new(target, control));
        }
        self
    }

    /// Edit the base request directly (stop sequences, metadata, extensions, ...).
    pub fn request(mut self, edit: impl FnOnce(&mut Request)) -> Self {
        edit(&mut self.base);
        self
    }

    /// Rounds of tools per run before the model must answer (default 10; see
    /// [`crate::run::Limits::max_tool_iterations`]).
    pub fn max_tool_iterations(mut self, n: u32) -> Self {
        self.options.limits.max_tool_iterations = n;
        self
    }

    /// Maximum tool calls per run.
    pub fn max_tool_calls(mut self, n: u32) -> Self {
        self.options.limits.max_tool_calls = Some(n);
        self
    }

    /// Maximum total tokens per run.
    pub fn max_total_tokens(mut self, n: u64) -> Self {
        self.options.limits.max_total_tokens = Some(n);
        self
    }

    /// Whole-run timeout.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.options.timeout = Some(d);
        self
    }

    /// Default per-tool timeout (default 30 s).
    pub fn tool_timeout(mut self, d: Duration) -> Self {
        self.options.tool_timeout = d;
        self
    }

    /// At most `n` of a turn's tool calls at once (default 8); 1 runs them one after another.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.options.max_concurrency = n.max(1);
        self
    }

    /// Price steps with `prices` instead of the built-in table (see [`crate::cost`]).
    pub fn prices(mut self, prices: crate::cost::Prices) -> Self {
        self.options.prices = Some(Arc::new(prices));
        self
    }

    /// A cost budget in USD (see [`RunOptions::max_cost`]).
    pub fn max_cost(mut self, usd: crate::cost::Decimal) -> Self {
        self.options.max_cost = Some(usd);
        self
    }

    /// Keep requests within the model's context window (see [`crate::context`]).
    pub fn context(mut self, policy: crate::context::ContextPolicy) -> Self {
        self.options.context = Some(Arc::new(policy));
        self
    }

    /// Add a stop condition.
    pub fn stop_when(mut self, condition: StopCondition) -> Self {
        self.options.stop_when.push(condition);
        self
    }

    /// Set the hooks.
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.options.hooks = hooks;
        self
    }

    /// Shared state handed to tool handlers.
    pub fn state<S: Any + Send + Sync>(mut self, state: S) -> Self {
        self.options.state = Some(Arc::new(state));
        self
    }

    /// Decide for every tool's calls whether they run, need a person's approval, or are
    /// refused (see [`crate::run::ApprovalPolicy`]); each tool's own policy applies too, and
    /// the stricter answer wins.
    pub fn approval_policy(
        mut self,
        policy: impl Fn(&ApprovalContext<'_>) -> Approval + Send + Sync + 'static,
    ) -> Self {
        self.options = self.options.approval_policy(policy);
        self
    }

    /// Replace all run options.
    pub fn options(mut self, options: RunOptions) -> Self {
        self.options = options;
        self
    }

    /// Edit the run options.
    pub fn with_options(mut self, edit: impl FnOnce(&mut RunOptions)) -> Self {
        edit(&mut self.options);
        self
    }

    /// Finish.
    pub fn build(self) -> Agent {
        let (this, tools) = self.bound_tools();
        Agent {
            provider: this.provider,
            base: this.base,
            tools: ToolSet::new(tools),
            options: Arc::new(this.options),
        }
    }
}

/// A typed durable run's last checkpoint, its output (the kept schema and strategy with
/// `output`'s type and validator) and its final-answer tool's name, if the answer comes as a
/// call to it.
async fn typed_checkpoint<T>(
    store: &dyn RunStore,
    run_id: &str,
    output: Output<T>,
) -> Result<(
    crate::run::Checkpoint,
    crate::output::OutputSpec,
    Option<String>,
)>
where
    T: JsonSchema + DeserializeOwned + Send + 'static,
{
    let Some(checkpoint) = store.load(run_id).await? else {
        return Err(Error::RunNotFound {
            run_id: run_id.to_owned(),
        });
    };
    let machine = checkpoint.machine()?;
    let Some((name, by_tool, Some(saved))) = machine.expected_output() else {
        return Err(Error::config(format!(
            "run `{run_id}` is not a typed run; resume it with Agent::resume_run"
        )));
    };
    let spec = output.restored(name, saved)?;
    let tool = by_tool.then(|| name.to_owned());
    Ok((checkpoint, spec, tool))
}
