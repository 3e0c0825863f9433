//! Hooks: async callbacks at fixed points of a run, each returning a decision typed for its
//! point (a pre-tool hook cannot rewrite the request, and so on).

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::outcome::ToolOutcome;
use super::result::RunStopReason;
use crate::message::{Message, Request, Response, Usage};
use crate::tool::ToolCall;

/// What the prompt hook decides.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptDecision {
    /// Send the prompt as it is.
    Continue,
    /// Send this message instead.
    Replace(Message),
    /// Do not send; the run (or send) fails with [`crate::Error::HookBlocked`].
    Block(String),
}

/// What a pre-tool hook decides.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolDecision {
    /// Run the tool with the model's arguments.
    Continue,
    /// Run the tool with these arguments instead (the history keeps the model's call).
    ModifyInput(Value),
    /// Do not run it; the model gets an error result with the reason.
    Block(String),
}

/// What the prepare-step hook gets: the request the step is about to send and where the run
/// stands. The hook returns the request to send, edited or not (model, tool choice, offered
/// tools with [`Request::retain_tools`], system prompt, sampling, or the messages). The edits
/// hold for this step only: the run's history and its next steps are unchanged.
#[derive(Debug, Clone)]
pub struct StepRequest {
    /// The step about to start (0-based).
    pub step: usize,
    /// Tool calls answered so far.
    pub tool_calls: u32,
    /// Usage so far.
    pub usage: Usage,
    /// The request the step sends unless the hook returns another; its `messages` are the
    /// history so far.
    pub request: Request,
}

/// What the stop hook sees.
#[derive(Debug, Clone)]
pub struct StopInfo {
    /// Why the run stopped.
    pub reason: RunStopReason,
    /// Model calls made.
    pub turns: u32,
    /// Tool calls answered.
    pub tool_calls: u32,
    /// Summed usage.
    pub usage: Usage,
    /// The history the run ended with.
    pub messages: Vec<Message>,
}

/// What the prompt, response and tool hooks see: the prompt, response or tool call, and the
/// conversation's history at that point. It derefs to the item, so `call.name` or
/// `prompt.text()` read as before.
///
/// The history is the one sent to the model so far: for the prompt hook, the messages before
/// the prompt; for the response hook, the messages the response answers; for the tool hooks,
/// everything up to the assistant message holding the calls.
#[derive(Debug, Clone)]
pub struct WithHistory<T> {
    /// The prompt, response or tool call.
    pub item: T,
    /// The history at that point (shared by the hooks of one step).
    pub messages: Arc<[Message]>,
}

impl<T> WithHistory<T> {
    /// `item` seen with `messages`.
    pub fn new(item: T, messages: Arc<[Message]>) -> Self {
        Self { item, messages }
    }

    /// The item without the history.
    pub fn into_inner(self) -> T {
        self.item
    }
}

impl<T> std::ops::Deref for WithHistory<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.item
    }
}

type Hook<I, O> = Arc<dyn Fn(I) -> BoxFuture<'static, O> + Send + Sync>;

fn boxed<I, O, F, Fut>(f: F) -> Hook<I, O>
where
    F: Fn(I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = O> + Send + 'static,
{
    Arc::new(move |input| Box::pin(f(input)))
}

/// The hooks of a run. Several hooks at one point run in the order they were added; the first
/// that blocks wins, and rewrites chain.
///
/// ```
/// use agentloop::run::{Hooks, ToolDecision};
/// let hooks = Hooks::new().before_tool(|call| async move {
///     if call.name == "delete_everything" {
///         ToolDecision::Block("not allowed".into())
///     } else {
///         ToolDecision::Continue
///     }
/// });
/// ```
#[derive(Clone, Default)]
pub struct Hooks {
    pub(crate) on_prompt: Vec<Hook<WithHistory<Message>, PromptDecision>>,
    pub(crate) prepare_step: Vec<Hook<StepRequest, Request>>,
    pub(crate) after_response: Vec<Hook<WithHistory<Response>, ()>>,
    pub(crate) before_tool: Vec<Hook<WithHistory<ToolCall>, ToolDecision>>,
    pub(crate) after_tool: Vec<Hook<(WithHistory<ToolCall>, ToolOutcome), ToolOutcome>>,
    pub(crate) on_stop: Vec<Hook<StopInfo, ()>>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("on_prompt", &self.on_prompt.len())
            .field("prepare_step", &self.prepare_step.len())
            .field("after_response", &self.after_response.len())
            .field("before_tool", &self.before_tool.len())
            .field("after_tool", &self.after_tool.len())
            .field("on_stop", &self.on_stop.len())
            .finish()
    }
}

impl Hooks {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// On the user's prompt (with the history before it): continue, replace it, or block it.
    pub fn on_prompt<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(WithHistory<Message>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = PromptDecision> + Send + 'static,
    {
        self.on_prompt.push(boxed(f));
        self
    }

    /// Before each model call: return the request the step sends, edited or not (see
    /// [`StepRequest`]). Several hooks chain, each getting the request the one before returned.
    ///
    /// ```
    /// use agentloop::run::Hooks;
    /// use agentloop::ToolChoice;
    /// // Make the first step call `search`, then offer only `answer`.
    /// let hooks = Hooks::new().prepare_step(|mut step| async move {
    ///     if step.step == 0 {
    ///         step.request.tool_choice = Some(ToolChoice::tool("search"));
    ///     } else {
    ///         step.request.retain_tools(&["answer"]);
    ///     }
    ///     step.request
    /// });
    /// ```
    pub fn prepare_step<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(StepRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Request> + Send + 'static,
    {
        self.prepare_step.push(boxed(f));
        self
    }

    /// After each model response (with the history it answers).
    pub fn after_response<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(WithHistory<Response>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.after_response.push(boxed(f));
        self
    }

    /// Before each tool call (with the history, ending with the call's assistant message):
    /// continue, change its input, or block it.
    pub fn before_tool<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(WithHistory<ToolCall>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolDecision> + Send + 'static,
    {
        self.before_tool.push(boxed(f));
        self
    }

    /// After each tool call: return the outcome to record (the same one, or a replacement).
    /// Also the place to observe every call. The call comes with the history, as for
    /// [`Self::before_tool`].
    pub fn after_tool<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(WithHistory<ToolCall>, ToolOutcome) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolOutcome> + Send + 'static,
    {
        self.after_tool
            .push(Arc::new(move |(call, outcome)| Box::pin(f(call, outcome))));
        self
    }

    /// When the run stops.
    pub fn on_stop<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(StopInfo) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.on_stop.push(boxed(f));
        self
    }

    /// Run the prompt hooks on `message`, which follows `history`.
    pub(crate) async fn prompt(
        &self,
        mut message: Message,
        history: Arc<[Message]>,
    ) -> Result<Message, String> {
        for hook in &self.on_prompt {
            match hook(WithHistory::new(message.clone(), history.clone())).await {
                PromptDecision::Continue => {}
                PromptDecision::Replace(replacement) => message = replacement,
                PromptDecision::Block(reason) => return Err(reason),
            }
        }
        Ok(message)
    }
}
