//! A stateful conversation over any provider: send prompts, receive content as it streams, and
//! either answer tool calls yourself (manual mode) or let the run loop do it (automatic mode).
//! A reply that stops for approval ([`RunStopReason::AwaitingApproval`]) goes on with
//! [`Conversation::decide`]; "always approve" decisions last for the conversation.
//!
//! ```
//! # use agentloop::{Agent, conversation::Conversation};
//! # use agentloop_testkit::{ScriptedModel, Turn};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let model = ScriptedModel::new([Turn::text("Hi!"), Turn::text("Paris.")]);
//! let mut chat = Conversation::new(&Agent::builder(model).build());
//! assert_eq!(chat.send("Hello").await?.finish().await?.text(), "Hi!");
//! assert_eq!(chat.send("Capital of France?").await?.finish().await?.text(), "Paris.");
//! assert_eq!(chat.history().len(), 4);
//! # Ok::<(), agentloop::Error>(()) }).unwrap();
//! ```

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::Stream;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::error::{Error, Result};
use crate::history;
use crate::message::{ContentBlock, Message, Request, Role, ToolResult};
use crate::output::{Output, Typed};
use crate::provider::Provider;
use crate::run::{
    self, Decision, PausedRun, PendingApproval, RunEvent, RunOptions, RunResult, RunStopReason,
    RunStream,
};
use crate::tool::{Tool, ToolCall};

/// Who runs the tools the model asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolExecution {
    /// The run loop runs them (hooks, validation, parallelism, timeouts), up to this many
    /// rounds of tools per send, and then asks the model for its answer. If it still calls
    /// tools, the reply finishes with [`RunStopReason::MaxToolIterations`]; those last calls are
    /// answered as not run, so the history stays valid and the next send goes on from it.
    Automatic {
        /// Rounds of tools per send (see [`crate::run::Limits::max_tool_iterations`]).
        max_tool_iterations: u32,
    },
    /// The reply stops at the model's tool calls; answer them with
    /// [`Conversation::add_tool_result`] and go on with [`Conversation::resume`].
    Manual,
}

#[derive(Debug, Default)]
struct Shared {
    history: Vec<Message>,
    /// Tool uses of the last reply still waiting for results (manual mode), in call order.
    pending: Vec<ToolCall>,
    results: HashMap<String, ToolResult>,
    busy: bool,
    /// The last reply's run, stopped for approval.
    paused: Option<PausedRun>,
    /// Tools approved for the whole conversation ([`Decision::AlwaysApprove`]).
    approved_tools: Vec<String>,
}

/// Cancels the reply in flight from any task. The conversation stays usable.
#[derive(Debug, Clone, Default)]
pub struct InterruptHandle(Arc<Mutex<CancellationToken>>);

impl InterruptHandle {
    /// Stop the current reply: it ends promptly with [`RunStopReason::Cancelled`], keeping
    /// only complete content in the history.
    pub fn interrupt(&self) {
        lock(&self.0).cancel();
    }

    /// Interrupt the reply whose run `token` cancels from now on.
    fn follow(&self, token: CancellationToken) {
        *lock(&self.0) = token;
    }
}

/// Why a send or resume is refused while a reply streams.
const BUSY: &str = "a reply is still streaming: finish or drop it before sending again";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The state stays consistent across a panic elsewhere: every update is a single assignment.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A conversation: a history plus the agent it talks through.
pub struct Conversation {
    /// Its own copy (cheap: the configuration is shared), so [`Self::set_model`] changes no
    /// other conversation.
    agent: Agent,
    mode: ToolExecution,
    shared: Arc<Mutex<Shared>>,
    interrupt: InterruptHandle,
}

impl std::fmt::Debug for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversation")
            .field("provider", &self.agent.provider().name())
            .field("model", &self.agent.base_request().model)
            .field("mode", &self.mode)
            .field("messages", &lock(&self.shared).history.len())
            .finish_non_exhaustive()
    }
}

impl Conversation {
    /// A conversation with `agent`'s model, system prompt, tools and options, in automatic mode
    /// with the agent's tool-iteration limit.
    pub fn new(agent: &Agent) -> Self {
        Self {
            agent: agent.clone(),
            mode: ToolExecution::Automatic {
                max_tool_iterations: agent.run_options().limits.max_tool_iterations,
            },
            shared: Arc::default(),
            interrupt: InterruptHandle::default(),
        }
    }

    /// Set who runs the tools the model asks for.
    pub fn with_tool_execution(mut self, mode: ToolExecution) -> Self {
        self.mode = mode;
        self
    }

    /// Start from this history.
    pub fn with_history(self, history: Vec<Message>) -> Self {
        lock(&self.shared).history = history;
        self
    }

    /// Who runs the tools the model asks for.
    pub fn tool_execution(&self) -> ToolExecution {
        self.mode
    }

    /// The run options every send starts from (limits, hooks, timeouts, stop conditions). In
    /// automatic mode the mode's `max_tool_iterations` replaces the
    /// limit of these options at each send.
    pub fn options(&self) -> &RunOptions {
        self.agent.run_options()
    }

    /// The agent the conversation talks through (model, system prompt, tools, options).
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// Talk to another provider and model from the next send on; the history carries over.
    pub fn set_model(&mut self, provider: Arc<dyn Provider>, model: impl Into<String>) {
        self.agent.set_model(provider, model.into());
    }

    /// A copy of the history.
    pub fn history(&self) -> Vec<Message> {
        lock(&self.shared).history.clone()
    }

    /// Edit the history (it is checked for validity at the next send).
    pub fn edit_history<R>(&mut self, edit: impl FnOnce(&mut Vec<Message>) -> R) -> R {
        let mut shared = lock(&self.shared);
        shared.pending.clear();
        shared.results.clear();
        shared.paused = None;
        edit(&mut shared.history)
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        let mut shared = lock(&self.shared);
        shared.history.clear();
        shared.pending.clear();
        shared.results.clear();
        shared.paused = None;
    }

    /// The tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.agent.tool(name)
    }

    /// A handle that interrupts the reply in flight, from any task.
    pub fn interrupt_handle(&self) -> InterruptHandle {
        self.interrupt.clone()
    }

    /// Tool calls waiting for results (manual mode).
    pub fn pending_tool_calls(&self) -> Vec<ToolCall> {
        lock(&self.shared).pending.clone()
    }

    /// Answer a pending tool call (manual mode).
    pub fn add_tool_result(&mut self, result: ToolResult) -> Result<()> {
        let mut shared = lock(&self.shared);
        if !shared.pending.iter().any(|c| c.id == result.tool_use_id) {
            let pending: Vec<&str> = shared.pending.iter().map(|c| c.id.as_str()).collect();
            return Err(Error::InvalidHistory {
                message: format!(
                    "no pending tool call has id `{}` (pending: {pending:?})",
                    result.tool_use_id
                ),
            });
        }
        shared.results.insert(result.tool_use_id.clone(), result);
        Ok(())
    }

    /// Send a prompt (through the prompt hook, which may rewrite or block it) and stream the
    /// reply. A blocked prompt is an error and leaves the history untouched.
    pub async fn send(&mut self, prompt: impl Into<String>) -> Result<Reply> {
        self.send_message(Message::user(prompt)).await
    }

    /// Send any user message (text, images, ...).
    pub async fn send_message(&mut self, message: Message) -> Result<Reply> {
        let messages = self.with_prompt(message).await?;
        self.start(messages)
    }

    /// Send a prompt and take the reply as a typed answer ([`crate::Agent::run_output`]):
    /// tool calls first if the model makes any, then a value of `T`, checked. The history
    /// keeps the whole turn, the answer included, whether it was accepted or not.
    ///
    /// ```
    /// # use agentloop::{Agent, conversation::Conversation};
    /// # use agentloop_testkit::{ScriptedModel, Turn};
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Capital { city: String }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let answer = serde_json::json!({"city": "Paris"});
    /// let model = ScriptedModel::new([Turn::text("Hi!"), Turn::tool_call("final_answer", answer)]);
    /// let mut chat = Conversation::new(&Agent::builder(model).build());
    /// chat.send("Hello").await?.finish().await?;
    /// let capital = chat.send_output::<Capital>("Capital of France?").await?;
    /// assert_eq!(capital.value.city, "Paris");
    /// // The final-answer call and its result are in the history too.
    /// assert_eq!(chat.history().len(), 5);
    /// # Ok::<(), agentloop::Error>(()) }).unwrap();
    /// ```
    pub async fn send_output<T>(&mut self, prompt: impl Into<String>) -> Result<Typed<T>>
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        self.send_output_with(prompt, Output::new()).await
    }

    /// [`Self::send_output`] with an [`Output`] saying how: name, strategy, validator.
    pub async fn send_output_with<T>(
        &mut self,
        prompt: impl Into<String>,
        output: Output<T>,
    ) -> Result<Typed<T>>
    where
        T: JsonSchema + DeserializeOwned + Send + 'static,
    {
        use futures::StreamExt;
        let messages = self.with_prompt(Message::user(prompt)).await?;
        history::validate(&messages)?;
        self.set_busy()?;
        // Clears `busy` if the turn is dropped half-way; a finished turn settles it.
        let _busy = BusyGuard(self.shared.clone());
        let options = self.run_options();
        let mut stream = self
            .agent
            .with_options(|o| *o = options)
            .run_output_stream_with(messages, output);
        if let Some(token) = stream.cancel_handle() {
            self.interrupt.follow(token);
        }
        let mut error = None;
        while let Some(event) = stream.next().await {
            match event {
                RunEvent::RunFinish { result } => {
                    settle(&self.shared, &result);
                    return crate::output::typed(*result);
                }
                RunEvent::Error { error: e } => error = Some(e),
                _ => {}
            }
        }
        Err(error.unwrap_or(Error::Cancelled))
    }

    /// The history with `message` appended, after the refusals and the prompt hook.
    async fn with_prompt(&self, message: Message) -> Result<Vec<Message>> {
        // Refused before the prompt hook runs, so a refused send has no hook side effects.
        self.refuse_while_pending()?;
        self.refuse_while_busy()?;
        // Copied only for prompt hooks to see.
        let history: Arc<[Message]> = if self.options().hooks.on_prompt.is_empty() {
            Arc::new([])
        } else {
            lock(&self.shared).history.as_slice().into()
        };
        let message = self
            .options()
            .hooks
            .prompt(message, history)
            .await
            .map_err(|reason| Error::HookBlocked {
                hook: "prompt".into(),
                reason,
            })?;
        let mut messages = lock(&self.shared).history.clone();
        messages.push(message);
        Ok(messages)
    }

    fn set_busy(&self) -> Result<()> {
        let mut shared = lock(&self.shared);
        if shared.busy {
            return Err(Error::config(BUSY));
        }
        shared.busy = true;
        Ok(())
    }

    fn refuse_while_busy(&self) -> Result<()> {
        if lock(&self.shared).busy {
            return Err(Error::config(BUSY));
        }
        Ok(())
    }

    fn refuse_while_pending(&self) -> Result<()> {
        let shared = lock(&self.shared);
        if let Some(paused) = &shared.paused {
            return Err(Error::InvalidHistory {
                message: format!(
                    "tool calls {:?} wait for approval: decide them with decide before sending again",
                    paused.pending().iter().map(|p| &p.id).collect::<Vec<_>>()
                ),
            });
        }
        if shared.pending.is_empty() {
            return Ok(());
        }
        Err(Error::InvalidHistory {
            message: format!(
                "tool calls {:?} still need results: add them with add_tool_result and call resume",
                shared.pending.iter().map(|c| &c.id).collect::<Vec<_>>()
            ),
        })
    }

    /// Go on after answering every pending tool call (manual mode).
    pub fn resume(&mut self) -> Result<Reply> {
        let messages = {
            let mut shared = lock(&self.shared);
            let missing: Vec<&str> = shared
                .pending
                .iter()
                .filter(|c| !shared.results.contains_key(&c.id))
                .map(|c| c.id.as_str())
                .collect();
            if !missing.is_empty() {
                return Err(Error::InvalidHistory {
                    message: format!("tool calls {missing:?} have no result yet"),
                });
            }
            let pending = std::mem::take(&mut shared.pending);
            let mut results = std::mem::take(&mut shared.results);
            let blocks = pending
                .iter()
                .filter_map(|c| results.remove(&c.id))
                .map(ContentBlock::ToolResult)
                .collect();
            shared.history.push(Message::new(Role::User, blocks));
            shared.history.clone()
        };
        self.start(messages)
    }

    /// Calls of the last reply waiting for a person's decision (the reply stopped with
    /// [`RunStopReason::AwaitingApproval`]).
    pub fn pending_approvals(&self) -> Vec<PendingApproval> {
        lock(&self.shared)
            .paused
            .as_ref()
            .map(|paused| paused.pending().to_vec())
            .unwrap_or_default()
    }

    /// The last reply's run, stopped for approval: a value to save and resume elsewhere.
    pub fn paused_run(&self) -> Option<PausedRun> {
        lock(&self.shared).paused.clone()
    }

    /// Decide calls waiting for approval (by call id) and stream the rest of the reply, as
    /// [`Agent::resume_stream`] does. Calls left undecided keep the reply paused.
    /// [`Decision::AlwaysApprove`] holds for the rest of the conversation. An edited input that
    /// does not fit the tool's schema, or an id no call waits under, is an error and changes
    /// nothing.
    pub fn decide<S: Into<String>>(
        &mut self,
        decisions: impl IntoIterator<Item = (S, Decision)>,
    ) -> Result<Reply> {
        let decisions: Vec<(String, Decision)> = decisions
            .into_iter()
            .map(|(id, decision)| (id.into(), decision))
            .collect();
        let (paused, mut approved) = {
            let shared = lock(&self.shared);
            if shared.busy {
                return Err(Error::config(BUSY));
            }
            let Some(paused) = shared.paused.clone() else {
                return Err(Error::InvalidDecision {
                    call_id: decisions
                        .first()
                        .map(|(id, _)| id.clone())
                        .unwrap_or_default(),
                    message: "no call of this conversation waits for approval".into(),
                });
            };
            (paused, shared.approved_tools.clone())
        };
        for (id, decision) in &decisions {
            if *decision == Decision::AlwaysApprove
                && let Some(pending) = paused.pending().iter().find(|p| p.id == *id)
                && !approved.contains(&pending.tool)
            {
                approved.push(pending.tool.clone());
            }
        }
        let mut options = self.run_options();
        options.approved_tools = approved.clone();
        let stream = self
            .agent
            .with_options(|o| *o = options)
            .resume_stream(&paused, decisions)?;
        {
            let mut shared = lock(&self.shared);
            shared.approved_tools = approved;
            shared.busy = true;
        }
        self.interrupt.follow(stream.cancel_handle());
        Ok(Reply {
            stream,
            shared: self.shared.clone(),
            done: false,
        })
    }

    /// The options of this conversation's runs: the agent's, with the mode's limits and the
    /// conversation's sticky approvals.
    fn run_options(&self) -> RunOptions {
        let mut options = self.agent.options();
        // The prompt hook already ran in `send`.
        options.hooks.on_prompt.clear();
        match self.mode {
            ToolExecution::Automatic {
                max_tool_iterations,
            } => options.limits.max_tool_iterations = max_tool_iterations,
            ToolExecution::Manual => options.limits.manual_tools = true,
        }
        options
            .approved_tools
            .extend(lock(&self.shared).approved_tools.iter().cloned());
        options
    }

    fn start(&mut self, messages: Vec<Message>) -> Result<Reply> {
        history::validate(&messages)?;
        self.set_busy()?;
        let options = self.run_options();
        let stream = self
            .agent
            .with_options(|o| *o = options)
            .run_stream(messages);
        self.interrupt.follow(stream.cancel_handle());
        Ok(Reply {
            stream,
            shared: self.shared.clone(),
            done: false,
        })
    }
}

/// A reply streaming in: [`RunEvent`]s (text deltas, tool calls, tool results, ...). The
/// conversation's history is updated when the reply finishes; a reply dropped before its end
/// leaves the history as it was before the send.
pub struct Reply {
    stream: RunStream,
    shared: Arc<Mutex<Shared>>,
    done: bool,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply").field("done", &self.done).finish()
    }
}

impl Reply {
    /// Read to the end and return the run's result.
    pub async fn finish(mut self) -> Result<RunResult> {
        use futures::StreamExt;
        while let Some(event) = self.next().await {
            if let RunEvent::RunFinish { result } = event {
                return Ok(*result);
            }
        }
        Err(Error::Cancelled)
    }

    fn settle(&mut self, result: &RunResult) {
        settle(&self.shared, result);
        self.done = true;
    }
}

/// Clears a typed turn's `busy` flag when the turn ends early.
struct BusyGuard(Arc<Mutex<Shared>>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        lock(&self.0).busy = false;
    }
}

/// Take a finished run's history, pending calls and pause into the conversation.
fn settle(shared: &Mutex<Shared>, result: &RunResult) {
    let mut shared = lock(shared);
    shared.history = result.messages.clone();
    shared.pending = if result.stop_reason == RunStopReason::AwaitingToolResults {
        result.response.tool_uses()
    } else {
        Vec::new()
    };
    shared.results.clear();
    shared.paused = if result.stop_reason == RunStopReason::AwaitingApproval {
        result.paused.as_deref().cloned()
    } else {
        None
    };
    shared.busy = false;
}

impl Stream for Reply {
    type Item = RunEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RunEvent>> {
        let polled = Pin::new(&mut self.stream).poll_next(cx);
        if let Poll::Ready(Some(RunEvent::RunFinish { result })) = &polled {
            let result = result.clone();
            self.settle(&result);
        }
        polled
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.shared).busy = false;
        }
    }
}

/// Options of a one-shot [`query`].
#[derive(Clone, Default)]
pub struct QueryOptions {
    /// The model name.
    pub model: String,
    /// The system prompt.
    pub system: Option<String>,
    /// Tools the model may use (run automatically).
    pub tools: Vec<Tool>,
    /// Run options (limits, hooks, timeouts, cancellation).
    pub run: RunOptions,
}

/// A one-shot streamed run with no retained history.
pub fn query(
    provider: Arc<dyn Provider>,
    prompt: impl Into<String>,
    options: QueryOptions,
) -> RunStream {
    let request = Request {
        model: options.model,
        system: options.system,
        messages: vec![Message::user(prompt)],
        ..Request::default()
    };
    run::run_stream(provider, request, options.tools, options.run)
}
