//! The mock executor: canned answers for tests, demos and offline development.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use serde_json::Value;

use super::OutputCheck;
use crate::registry::{MockSpec, OnExhausted};
use crate::tool::{ToolContext, ToolError, ToolHandler, ToolOutput};

/// Answers every call from the descriptor's `mock` section.
pub struct MockExecutor {
    tool: String,
    answer: Answer,
    output: Option<Arc<OutputCheck>>,
}

enum Answer {
    Fixed(Value),
    Template(minijinja::Environment<'static>),
    Sequence {
        responses: Vec<Value>,
        next: AtomicUsize,
        on_exhausted: OnExhausted,
    },
}

impl std::fmt::Debug for MockExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.answer {
            Answer::Fixed(_) => "response",
            Answer::Template(_) => "template",
            Answer::Sequence { .. } => "sequence",
        };
        f.debug_struct("MockExecutor")
            .field("tool", &self.tool)
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

/// The template's name inside its environment (shown in render errors).
const TEMPLATE: &str = "mock template";

impl MockExecutor {
    /// Build from a mock spec; a template is compiled here, so syntax errors surface at load.
    pub(crate) fn new(
        tool: &str,
        spec: &MockSpec,
        output: Option<Arc<OutputCheck>>,
    ) -> Result<Self, String> {
        let answer = match spec {
            MockSpec::Response(value) => Answer::Fixed(value.clone()),
            MockSpec::Template(source) => {
                let mut env = minijinja::Environment::new();
                env.add_template_owned(TEMPLATE, source.clone())
                    .map_err(|e| format!("the mock template does not compile: {}", describe(&e)))?;
                Answer::Template(env)
            }
            MockSpec::Sequence { responses, .. } if responses.is_empty() => {
                return Err("the mock `sequence` is empty".to_owned());
            }
            MockSpec::Sequence {
                responses,
                on_exhausted,
            } => Answer::Sequence {
                responses: responses.clone(),
                next: AtomicUsize::new(0),
                on_exhausted: *on_exhausted,
            },
        };
        Ok(Self {
            tool: tool.to_owned(),
            answer,
            output,
        })
    }

    fn answer(&self, input: &Value) -> Result<Value, ToolError> {
        match &self.answer {
            Answer::Fixed(value) => Ok(value.clone()),
            Answer::Template(env) => self.render(env, input),
            Answer::Sequence {
                responses,
                next,
                on_exhausted,
            } => {
                let index = next.fetch_add(1, Ordering::Relaxed);
                match (responses.get(index), on_exhausted) {
                    (Some(value), _) => Ok(value.clone()),
                    (None, OnExhausted::RepeatLast) => {
                        Ok(responses.last().cloned().unwrap_or(Value::Null))
                    }
                    (None, OnExhausted::Error) => Err(ToolError::Failed(format!(
                        "the mock sequence of tool `{}` is exhausted: all {} responses were used",
                        self.tool,
                        responses.len()
                    ))),
                }
            }
        }
    }

    fn render(
        &self,
        env: &minijinja::Environment<'static>,
        input: &Value,
    ) -> Result<Value, ToolError> {
        let failed = |e: minijinja::Error| {
            ToolError::Failed(format!(
                "the mock template of tool `{}` failed: {}",
                self.tool,
                describe(&e)
            ))
        };
        // Each argument is a variable of its own; `args` is the whole object.
        let mut context: BTreeMap<String, Value> = match input {
            Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            _ => BTreeMap::new(),
        };
        context.insert("args".to_owned(), input.clone());
        let template = env.get_template(TEMPLATE).map_err(failed)?;
        let text = template
            .render(minijinja::value::Serde(&context))
            .map_err(failed)?;
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }
}

/// A minijinja error with its line, without the template dump of its `Debug`.
fn describe(e: &minijinja::Error) -> String {
    let mut text = e.kind().to_string();
    if let Some(detail) = e.detail() {
        text.push_str(": ");
        text.push_str(detail);
    }
    if let Some(line) = e.line() {
        text.push_str(&format!(" (template line {line})"));
    }
    text
}

impl ToolHandler for MockExecutor {
    fn call(
        &self,
        _ctx: ToolContext,
        input: Value,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let result = self.answer(&input).and_then(|value| {
            if let Some(output) = &self.output {
                output.check(&value)?;
            }
            Ok(ToolOutput::json(value))
        });
        Box::pin(std::future::ready(result))
    }
}
