//! Handlers: the code that answers a tool call.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::schema::Violation;
use crate::message::{ContentBlock, ToolResultContent, content_from_value};

/// What a handler sees besides the arguments.
#[derive(Clone)]
pub struct ToolContext {
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// Cancelled when the run is cancelled or the tool times out; long handlers should watch it.
    pub cancel: CancellationToken,
    state: Option<Arc<dyn Any + Send + Sync>>,
    /// The durable run's id, when the call belongs to one.
    run_id: Option<Arc<str>>,
    /// A person's answer to what this call asked when it ran before.
    input_reply: Option<Arc<crate::run::InputReply>>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("call_id", &self.call_id)
            .field("tool_name", &self.tool_name)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context for one call.
    pub fn new(
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        cancel: CancellationToken,
        state: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            cancel,
            state,
            run_id: None,
            input_reply: None,
        }
    }

    /// The context of a call that runs again with a person's answer to what it asked
    /// ([`ToolError::InputRequired`]).
    pub fn with_input_reply(mut self, reply: Option<Arc<crate::run::InputReply>>) -> Self {
        self.input_reply = reply;
        self
    }

    /// The answer to what this call asked when it ran before, if it asked.
    pub fn input_reply(&self) -> Option<&crate::run::InputReply> {
        self.input_reply.as_deref()
    }

    /// The context of a call in durable run `run_id` (see [`Self::idempotency_key`]).
    pub fn with_run_id(mut self, run_id: Option<Arc<str>>) -> Self {
        self.run_id = run_id;
        self
    }

    /// The durable run the call belongs to ([`crate::Agent::run_durable`]), if any.
    pub fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    /// A key that names this call and no other, for deduplication outside the process (a
    /// payment API's idempotency key, a unique row): `run_id/call_id` in a durable run, where
    /// a call re-run after a crash gets the same key; the call id alone otherwise.
    pub fn idempotency_key(&self) -> String {
        match &self.run_id {
            Some(run_id) => format!("{run_id}/{}", self.call_id),
            None => self.call_id.clone(),
        }
    }

    /// The shared state given to the agent (`Agent::builder().state(..)`), if it has type `S`.
    pub fn state<S: Send + Sync + 'static>(&self) -> Option<&S> {
        self.state.as_deref().and_then(|s| s.downcast_ref::<S>())
    }
}

/// Why a handler did not produce a result.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolError {
    /// The arguments do not fit the tool's input.
    InvalidArguments(Vec<Violation>),
    /// The tool ran and failed; the message goes to the model.
    Failed(String),
    /// The tool needs a person's input to go on (an MCP server's elicitation): the run pauses
    /// with the call pending, and runs it again with the answer
    /// ([`ToolContext::input_reply`]).
    InputRequired(Box<crate::run::InputRequest>),
}

/// Handler output that converts into tool-result content, with the structured value behind it
/// when the tool has one (an MCP tool's `structuredContent`): the model reads the content,
/// applications read the value from the run's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput(pub ToolResultContent, Option<Box<Value>>);

impl ToolOutput {
    /// Text output.
    pub fn text(text: impl Into<String>) -> Self {
        Self(ToolResultContent::Text(text.into()), None)
    }

    /// Content blocks, passed through as they are.
    pub fn blocks(blocks: Vec<ContentBlock>) -> Self {
        Self(ToolResultContent::Blocks(blocks), None)
    }

    /// Strings become text, any other JSON value its JSON text.
    pub fn json(value: Value) -> Self {
        Self(content_from_value(value), None)
    }

    /// Attach the structured value this content renders (kept in
    /// [`crate::run::ToolOutcome::Completed`]).
    pub fn with_structured(mut self, value: Value) -> Self {
        self.1 = Some(Box::new(value));
        self
    }

    /// The content the model reads.
    pub(crate) fn content(&self) -> &ToolResultContent {
        &self.0
    }

    /// The structured value, when the tool gave one.
    pub fn structured(&self) -> Option<&Value> {
        self.1.as_deref()
    }

    /// The content and the structured value.
    pub fn into_parts(self) -> (ToolResultContent, Option<Box<Value>>) {
        (self.0, self.1)
    }
}

/// Answers tool calls. Implemented for you by [`crate::Tool::function`]; implement it yourself
/// for handlers that work on raw JSON.
pub trait ToolHandler: Send + Sync + 'static {
    /// Run the tool.
    fn call(
        &self,
        ctx: ToolContext,
        input: Value,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>>;
}

impl<F, Fut> ToolHandler for F
where
    F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    fn call(
        &self,
        ctx: ToolContext,
        input: Value,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(self(ctx, input))
    }
}

/// Adapts `Fn(ToolContext, T) -> Future<Result<R, E>>` to [`ToolHandler`].
pub(crate) struct TypedHandler<T, F> {
    f: F,
    _input: PhantomData<fn(T)>,
}

impl<T, F> TypedHandler<T, F> {
    pub(crate) fn new(f: F) -> Self {
        Self {
            f,
            _input: PhantomData,
        }
    }
}

/// A typed result as tool-result text, as [`ToolOutput::json`] would give it, without building
/// a [`Value`] tree first: a string is the text itself, anything else its JSON text.
fn json_text<R: Serialize>(output: &R) -> serde_json::Result<String> {
    let text = serde_json::to_string(output)?;
    if text.starts_with('"') {
        serde_json::from_str(&text)
    } else {
        Ok(text)
    }
}

impl<T, R, E, F, Fut> ToolHandler for TypedHandler<T, F>
where
    T: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
    E: std::fmt::Display + Send + 'static,
    F: Fn(ToolContext, T) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<R, E>> + Send + 'static,
{
    fn call(
        &self,
        ctx: ToolContext,
        input: Value,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        // Zero-argument tools may stream no arguments at all; treat null as `{}`.
        let input = if input.is_null() {
            Value::Object(Default::default())
        } else {
            input
        };
        let parsed = match T::deserialize(input) {
            Ok(parsed) => parsed,
            Err(e) => {
                let violation = Violation {
                    path: String::new(),
                    message: e.to_string(),
                };
                return Box::pin(async move { Err(ToolError::InvalidArguments(vec![violation])) });
            }
        };
        let fut = (self.f)(ctx, parsed);
        Box::pin(async move {
            match fut.await {
                Ok(output) => json_text(&output)
                    .map(ToolOutput::text)
                    .map_err(|e| ToolError::Failed(format!("could not serialize the result: {e}"))),
                Err(e) => Err(ToolError::Failed(e.to_string())),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    /// Typed results skip the `Value` tree but read exactly as `ToolOutput::json` of it would.
    #[test]
    fn typed_results_read_as_their_json_value_would() {
        #[derive(Serialize)]
        struct Weather {
            city: &'static str,
            temp_c: f64,
            tags: Vec<&'static str>,
            note: Option<String>,
        }
        fn check<R: Serialize>(output: R) {
            let expected = content_from_value(serde_json::to_value(&output).unwrap());
            let text = json_text(&output).unwrap();
            assert_eq!(ToolResultContent::Text(text), expected);
        }
        check(Weather {
            city: "Paris",
            temp_c: 18.5,
            tags: vec!["mild", "dry \"mostly\""],
            note: None,
        });
        check("plain text, not a JSON literal");
        check("tab\t, quote \", unicode é and \u{1F600}");
        check(String::new());
        check(42_u64);
        check(-0.5_f64);
        check(f64::NAN);
        check(());
        check(None::<u8>);
        check(vec![json!({"b": 1, "a": [true, null]})]);
        check(BTreeMap::from([(2, "two"), (1, "one")]));
    }
}
