//! Typed answers: a run that ends in a value of a Rust type, after any tool calls.
//!
//! [`crate::Agent::run_output`] runs the loop as usual and returns the answer parsed into `T`
//! ([`Typed`]), checked against `T`'s JSON Schema, by deserializing it, and by an optional
//! validator of your own ([`Output::with_validator`]). How the model is made to answer in that
//! shape is the [`OutputStrategy`], chosen per provider and model
//! ([`crate::Provider::output_strategy_for`]) unless set with [`Output::with_strategy`]:
//!
//! | strategy | what the request carries | where the answer is |
//! | --- | --- | --- |
//! | [`OutputStrategy::Native`] (the default of OpenAI, Responses, Gemini 3, and Claude 4.5 and later on Anthropic and Bedrock) | OpenAI `response_format` (`json_schema`), Responses `text.format`, Anthropic `output_config.format`, Gemini `generationConfig.responseJsonSchema`, Bedrock `outputConfig.textFormat` ([`crate::message::Request::output`]), each in its provider's [schema dialect](crate::tool::schema::Dialect) | the answer's text |
//! | [`OutputStrategy::Tool`] (the default elsewhere: Claudes before 4.5 and Bedrock's other models, whose structured output only some take, and Geminis before 3, which refuse it beside tools) | a `final_answer` tool beside the others, and a tool choice of "some tool" | the final-answer call's arguments; the run ends when it is called with valid input |
//! | [`OutputStrategy::Prompted`] | the schema in the system prompt | JSON found in the answer's text (a code fence, or the outermost `{...}` / `[...]`) |
//!
//! An answer that fails the checks goes back to the model with each problem at its JSON
//! pointer, and counts against the retry budget for invalid tool arguments
//! ([`crate::run::Limits::invalid_argument_retries`]): past it the run stops with
//! [`crate::run::RunStopReason::InvalidOutput`] and [`Error::InvalidOutput`]; the same
//! invalid answer twice in a row stops it early with
//! [`crate::run::RunStopReason::RepeatedInvalidCall`], as a repeated invalid tool call does.
//!
//! ```
//! # use agentloop::Agent;
//! # use agentloop_testkit::{ScriptedModel, Turn};
//! #[derive(serde::Deserialize, schemars::JsonSchema, Debug, PartialEq)]
//! struct City { name: String, population: u64 }
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! // A scripted model has no structured output: it answers by the final-answer tool.
//! let answer = serde_json::json!({"name": "Paris", "population": 2100000});
//! let model = ScriptedModel::new([Turn::tool_call("final_answer", answer)]);
//! let agent = Agent::builder(model).build();
//! let city = agent.run_output::<City>("The biggest city of France?").await?;
//! assert_eq!(city.value, City { name: "Paris".into(), population: 2_100_000 });
//! # Ok::<(), agentloop::Error>(()) }).unwrap();
//! ```
//!
//! A streamed typed run ([`crate::Agent::run_output_stream`]) adds
//! [`crate::RunEvent::PartialOutput`] events while the answer streams (the value parsed so
//! far, with [`partial_json`]) and [`crate::RunEvent::Output`] with the checked value before
//! `run_finish`.

use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::message::{OutputFormat, Request};
use crate::run::{RunEvent, RunResult, RunStream};
use crate::stream::StreamEvent;
use crate::tool::schema::{Violation, schema_for};
use crate::tool::{Tool, ToolChoice, ToolContext, ToolError, ToolOutput};

mod partial;

pub use partial::partial_json;

/// How the model is made to answer in the output's shape. See the [module doc](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStrategy {
    /// The provider's own structured output (constrained decoding where it has it).
    Native,
    /// A final-answer tool the model must call; works with every provider that has tools.
    Tool,
    /// The schema in the instructions and JSON taken from the text, for servers with neither.
    Prompted,
}

/// A value check of your own: `Err(message)` rejects the value, and the model sees `message`.
type Validator<T> = Arc<dyn Fn(&T) -> std::result::Result<(), String> + Send + Sync>;

/// What a typed run must answer with: `T`, under a name, with a strategy and a validator.
pub struct Output<T> {
    name: String,
    /// A schema given at run time, in place of `T`'s.
    schema: Option<Value>,
    strategy: Option<OutputStrategy>,
    strict: bool,
    validator: Option<Validator<T>>,
    _type: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for Output<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("name", &self.name)
            .field("strategy", &self.strategy)
            .field("strict", &self.strict)
            .field("validator", &self.validator.is_some())
            .finish()
    }
}

impl<T: JsonSchema + DeserializeOwned + 'static> Default for Output<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: JsonSchema + DeserializeOwned + 'static> Output<T> {
    /// `T` under the name `final_answer`, the provider's strategy, strict where allowed.
    pub fn new() -> Self {
        Self {
            name: "final_answer".to_owned(),
            schema: None,
            strategy: None,
            strict: true,
            validator: None,
            _type: PhantomData,
        }
    }

    /// The name the model sees: the final-answer tool's, or the native schema's.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Ask for an answer of this JSON Schema instead of `T`'s, for shapes known only at run
    /// time (a schema file, a request's field): `Output::<serde_json::Value>::new()
    /// .with_schema(schema)`. `T` must deserialize what the schema accepts. The answer is
    /// checked against the schema with the `validation` feature (on by default).
    pub fn with_schema(mut self, schema: Value) -> Self {
        self.schema = Some(schema);
        self
    }

    /// Use this strategy instead of the provider's choice.
    pub fn with_strategy(mut self, strategy: OutputStrategy) -> Self {
        self.strategy = Some(strategy);
        self
    }

    /// Ask for strict decoding (default on; used only where the schema allows it).
    pub fn with_strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Reject parsed values that break a rule the schema cannot say ("the end date is after
    /// the start date"); the model sees the message and tries again.
    pub fn with_validator(
        mut self,
        validator: impl Fn(&T) -> std::result::Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.validator = Some(Arc::new(validator));
        self
    }

    /// The type-erased form of a resumed run's output: the schema, strategy and strictness
    /// the run was started with (`saved`), with this output's type and validator.
    pub(crate) fn restored(mut self, name: &str, saved: &SavedOutput) -> Result<OutputSpec> {
        self.name = name.to_owned();
        self.schema = Some(saved.schema.clone());
        self.strategy = Some(saved.strategy);
        self.strict = saved.strict;
        let mut spec = self.spec()?;
        spec.description.clone_from(&saved.description);
        Ok(spec)
    }

    /// The type-erased form a run carries.
    pub(crate) fn spec(self) -> Result<OutputSpec> {
        let (schema, description) = match self.schema {
            Some(schema) => {
                let description = schema
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                (schema, description)
            }
            None => schema_for::<T>(),
        };
        #[cfg(feature = "validation")]
        let compiled =
            crate::tool::schema::compile(&schema).map_err(|message| Error::InvalidToolSchema {
                tool: self.name.clone(),
                message,
            })?;
        let validator = self.validator;
        let check = move |value: &Value| -> std::result::Result<(), Vec<Violation>> {
            #[cfg(feature = "validation")]
            crate::tool::schema::violations(&compiled, value)?;
            let parsed: T = T::deserialize(value).map_err(|e| {
                vec![Violation {
                    path: String::new(),
                    message: format!("does not match the answer's type: {e}"),
                }]
            })?;
            match &validator {
                Some(validator) => validator(&parsed).map_err(|message| {
                    vec![Violation {
                        path: String::new(),
                        message,
                    }]
                }),
                None => Ok(()),
            }
        };
        Ok(OutputSpec {
            name: self.name,
            description: description.unwrap_or_default(),
            schema,
            strategy: self.strategy,
            strict: self.strict,
            check: Arc::new(check),
        })
    }
}

type Check = Arc<dyn Fn(&Value) -> std::result::Result<(), Vec<Violation>> + Send + Sync>;

/// An [`Output`] without its type: what the run needs to ask for and check the answer.
#[derive(Clone)]
pub(crate) struct OutputSpec {
    pub(crate) name: String,
    description: String,
    schema: Value,
    strategy: Option<OutputStrategy>,
    strict: bool,
    check: Check,
}

/// What a paused run or a checkpoint keeps of a typed run's output, so that it resumes as a
/// typed run: everything but the validator, which is code (a resumed run gets it again from
/// the [`Output`] it is resumed with).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedOutput {
    schema: Value,
    strategy: OutputStrategy,
    strict: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    description: String,
}

/// A rejected answer: what the model gave (the parsed value, or its text as a JSON string)
/// and what is wrong with it.
pub(crate) type Rejected = (Value, Vec<Violation>);

impl OutputSpec {
    /// Settle the strategy for a provider that prefers `preferred`, unless one was chosen.
    pub(crate) fn resolve(&mut self, preferred: OutputStrategy) -> OutputStrategy {
        *self.strategy.get_or_insert(preferred)
    }

    /// What a paused run keeps of this output (the strategy settled by [`Self::resolve`]).
    pub(crate) fn saved(&self) -> SavedOutput {
        SavedOutput {
            schema: self.schema.clone(),
            strategy: self.strategy.unwrap_or(OutputStrategy::Tool),
            strict: self.strict,
            description: self.description.clone(),
        }
    }

    /// The output a paused run kept, checked against its schema only.
    pub(crate) fn restore(name: &str, saved: &SavedOutput) -> Result<OutputSpec> {
        Output::<Value>::new().restored(name, saved)
    }

    /// The final-answer tool when the strategy is [`OutputStrategy::Tool`], for a resumed run
    /// whose request has the tool's definition already.
    pub(crate) fn answer_tool(&self) -> Option<Tool> {
        self.prepare(&mut Request::default())
    }

    /// Set `request` up for the strategy; the final-answer tool to add, if it is one.
    pub(crate) fn prepare(&self, request: &mut Request) -> Option<Tool> {
        match self.strategy.unwrap_or(OutputStrategy::Tool) {
            OutputStrategy::Native => {
                request.output = Some(Box::new(OutputFormat {
                    name: self.name.clone(),
                    schema: self.schema.clone(),
                    strict: self.strict,
                }));
                None
            }
            OutputStrategy::Prompted => {
                let instructions = format!(
                    "Give your final answer as one JSON value, and nothing else, that follows \
                     this JSON Schema:\n{}",
                    self.schema
                );
                request.system = Some(match request.system.take() {
                    Some(system) => format!("{system}\n\n{instructions}"),
                    None => instructions,
                });
                None
            }
            OutputStrategy::Tool => {
                request.tool_choice.get_or_insert(ToolChoice::Required);
                let description = if self.description.is_empty() {
                    "Give your final answer by calling this tool; the run ends when it is \
                     called with valid arguments."
                        .to_owned()
                } else {
                    format!(
                        "{} Give your final answer by calling this tool; the run ends when it \
                         is called with valid arguments.",
                        self.description
                    )
                };
                let check = self.check.clone();
                let tool = Tool::from_definition(crate::tool::FunctionDefinition {
                    name: self.name.clone(),
                    description,
                    input_schema: self.schema.clone(),
                    strict: self.strict,
                })
                .with_handler(move |_: ToolContext, input: Value| {
                    let checked = check(&input);
                    async move {
                        checked
                            .map(|()| ToolOutput::text("Final answer received."))
                            .map_err(ToolError::InvalidArguments)
                    }
                });
                Some(tool)
            }
        }
    }

    /// Check a value (a final-answer call's arguments).
    pub(crate) fn check(&self, value: &Value) -> std::result::Result<(), Vec<Violation>> {
        (self.check)(value)
    }

    /// Parse and check an answer's text. With the tool strategy the answer was due as a call
    /// to the final-answer tool, so text is wrong whatever it says.
    pub(crate) fn check_text(&self, text: &str) -> std::result::Result<Value, Rejected> {
        let strategy = self.strategy.unwrap_or(OutputStrategy::Tool);
        let given = || Value::String(text.to_owned());
        if strategy == OutputStrategy::Tool {
            return Err((
                given(),
                vec![Violation {
                    path: String::new(),
                    message: format!(
                        "the answer must be a call to the `{}` tool, not text",
                        self.name
                    ),
                }],
            ));
        }
        let candidate = match strategy {
            OutputStrategy::Prompted => extract_json(text),
            _ => strip_fence(text.trim()),
        };
        let value: Value = serde_json::from_str(candidate).map_err(|e| {
            (
                given(),
                vec![Violation {
                    path: String::new(),
                    message: format!("the answer is not valid JSON: {e}"),
                }],
            )
        })?;
        match self.check(&value) {
            Ok(()) => Ok(value),
            Err(violations) => Err((value, violations)),
        }
    }
}

/// The text inside a Markdown code fence, when the whole text is one.
fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    // The fence's info string (`json`) ends at the first newline.
    match body.find('\n') {
        Some(at) => body[at + 1..].trim(),
        None => body.trim(),
    }
}

/// The JSON in a prompted answer: a fenced block, else from the first `{` or `[` to the last
/// matching closer, else the text itself (whose parse error the model then sees).
pub(crate) fn extract_json(text: &str) -> &str {
    let trimmed = text.trim();
    if let Some(start) = trimmed.find("```") {
        let after = &trimmed[start + 3..];
        let body_start = after.find('\n').map_or(0, |at| at + 1);
        if let Some(end) = after[body_start..].find("```") {
            return after[body_start..body_start + end].trim();
        }
    }
    let open = trimmed.find(['{', '[']);
    if let Some(open) = open {
        let closer = if trimmed[open..].starts_with('{') {
            '}'
        } else {
            ']'
        };
        if let Some(close) = trimmed.rfind(closer)
            && close > open
        {
            return &trimmed[open..=close];
        }
    }
    trimmed
}

/// A typed run's answer with the run that gave it.
#[derive(Debug, Clone)]
pub struct Typed<T> {
    /// The checked answer.
    pub value: T,
    /// The run: steps, usage, history (ending with the answer).
    pub result: RunResult,
}

/// The typed answer of a finished run, or why there is none.
pub(crate) fn typed<T: DeserializeOwned>(result: RunResult) -> Result<Typed<T>> {
    let Some(value) = result.output.clone() else {
        return Err(match (result.error, result.paused) {
            (Some(error), _) => error,
            (None, Some(paused)) => Error::AwaitingApproval { paused },
            (None, None) => Error::Incomplete {
                reason: result.stop_reason.to_string(),
            },
        });
    };
    // Checked by the run already (schema and deserialization); this fails only when `T`'s
    // `Deserialize` is not deterministic.
    let value = T::deserialize(&value).map_err(|e| Error::parse("the typed answer", e))?;
    Ok(Typed { value, result })
}

/// A streamed typed run: the run's events with [`RunEvent::PartialOutput`] after each piece
/// of the answer and [`RunEvent::Output`] before `run_finish`.
pub struct OutputStream<T> {
    inner: Option<RunStream>,
    /// Where the answer streams: the text, or the arguments of a call to this tool.
    tool: Option<String>,
    /// The answer's text so far in this step, and the output call's index when by tool.
    text: String,
    call: Option<usize>,
    last: Option<Value>,
    pending: std::collections::VecDeque<RunEvent>,
    failed: Option<Error>,
    _type: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for OutputStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputStream")
            .field("running", &self.inner.is_some())
            .finish_non_exhaustive()
    }
}

impl<T: DeserializeOwned> OutputStream<T> {
    pub(crate) fn new(inner: RunStream, tool: Option<String>) -> Self {
        Self {
            inner: Some(inner),
            tool,
            text: String::new(),
            call: None,
            last: None,
            pending: Default::default(),
            failed: None,
            _type: PhantomData,
        }
    }

    /// A stream that fails at once (the output's schema could not be compiled).
    pub(crate) fn failed(error: Error) -> Self {
        Self {
            inner: None,
            tool: None,
            text: String::new(),
            call: None,
            last: None,
            pending: [RunEvent::Error {
                error: error.clone(),
            }]
            .into(),
            failed: Some(error),
            _type: PhantomData,
        }
    }

    /// A handle that stops this run (see [`RunStream::cancel_handle`]); `None` when it never
    /// started.
    pub fn cancel_handle(&self) -> Option<tokio_util::sync::CancellationToken> {
        self.inner.as_ref().map(RunStream::cancel_handle)
    }

    /// Stop the run (see [`RunStream::cancel`]).
    pub fn cancel(&self) {
        if let Some(inner) = &self.inner {
            inner.cancel();
        }
    }

    /// Drain the stream and return the typed answer.
    pub async fn into_output(mut self) -> Result<Typed<T>> {
        use futures::StreamExt;
        let mut error = self.failed.take();
        while let Some(event) = self.next().await {
            match event {
                RunEvent::RunFinish { result } => return typed(*result),
                RunEvent::Error { error: e } => error = Some(e),
                _ => {}
            }
        }
        Err(error.unwrap_or(Error::Cancelled))
    }

    /// Follow the answer as it streams; the partial value when it changed.
    fn observe(&mut self, event: &RunEvent) -> Option<Value> {
        match event {
            RunEvent::StepStart { .. } => {
                self.text.clear();
                self.call = None;
                self.last = None;
                None
            }
            RunEvent::Model(StreamEvent::TextDelta { text }) if self.tool.is_none() => {
                self.text.push_str(text);
                self.partial()
            }
            RunEvent::Model(StreamEvent::ToolCallStart { index, name, .. })
                if self.tool.as_deref() == Some(name.as_str()) =>
            {
                self.call = Some(*index);
                None
            }
            RunEvent::Model(StreamEvent::ToolCallDelta { index, arguments })
                if self.call == Some(*index) =>
            {
                self.text.push_str(arguments);
                self.partial()
            }
            _ => None,
        }
    }

    fn partial(&mut self) -> Option<Value> {
        let start = self.text.find(['{', '['])?;
        let value = partial_json(&self.text[start..])?;
        if self.last.as_ref() == Some(&value) {
            return None;
        }
        self.last = Some(value.clone());
        Some(value)
    }
}

impl<T: DeserializeOwned> Stream for OutputStream<T> {
    type Item = RunEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RunEvent>> {
        let this = &mut *self;
        if let Some(event) = this.pending.pop_front() {
            return Poll::Ready(Some(event));
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_next(cx) {
            Poll::Ready(Some(event)) => {
                let output = match &event {
                    RunEvent::RunFinish { result } => result.output.clone(),
                    _ => None,
                };
                if let Some(value) = output {
                    this.pending.push_back(event);
                    return Poll::Ready(Some(RunEvent::Output {
                        value: Box::new(value),
                    }));
                }
                if let Some(value) = this.observe(&event) {
                    this.pending.push_back(RunEvent::PartialOutput {
                        value: Box::new(value),
                    });
                }
                Poll::Ready(Some(event))
            }
            Poll::Ready(None) => {
                this.inner = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
