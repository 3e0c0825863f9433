//! Traces (and, with the `otel` feature, metrics) after the OpenTelemetry GenAI semantic
//! conventions: the `semantic-conventions-genai` repository at commit `002c8a6` (development
//! status; its stable attributes from semantic-conventions v1.41.1).
//!
//! Every run emits `tracing` spans, so any subscriber sees them; they cost a callsite check
//! when nothing listens. Each span's tracing name is its operation; the conventions' name
//! (`invoke_agent {agent}`, `chat {model}`, `execute_tool {tool}`) is its `otel.name` field,
//! which [`layer`] (and `tracing-opentelemetry`, for a subscriber of your own) uses as the
//! span's name.
//!
//! | span | kind | attributes |
//! | --- | --- | --- |
//! | `invoke_agent` per run (blocking, streamed, resumed, durable) | internal | `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.agent.name` (when [`Telemetry::agent_name`] is set), `gen_ai.request.model`, `gen_ai.conversation.id` (a durable run's id), the run's `gen_ai.usage.*`, `error.type` when it failed |
//! | `chat` per model call | client | `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.request.stream`, the request's `max_tokens`, `temperature`, `top_p`, `top_k`; `gen_ai.response.model`, `.id`, `.finish_reasons`, `.time_to_first_chunk` (streamed calls); `gen_ai.usage.input_tokens` (cached ones included, as the conventions count), `output_tokens`, `cache_read.input_tokens`, `cache_creation.input_tokens`, `reasoning.output_tokens` (of the output tokens, those spent reasoning, where the provider counts them: semantic-conventions-genai `model/gen-ai/registry.yaml` at e8fc575); `error.type` when it failed |
//! | `execute_tool` per tool handler run | internal | `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type` (`function`), `error.type` (`failed`, `invalid_arguments`, `cancelled`) when it did not complete |
//! | `tools/call` per MCP tool call | client | `mcp.method.name`, `gen_ai.operation.name`, `gen_ai.tool.name` |
//!
//! `tracing` fields hold no arrays: `gen_ai.response.finish_reasons` is the call's one reason
//! as a string, and the message attributes below are JSON text. A tool whose handler is dropped
//! before it ends (its timeout, the run's end) has `error.type` `cancelled`; calls answered
//! without running (unknown tool, arguments that do not fit, denied) have no `execute_tool`
//! span.
//!
//! Message contents (`gen_ai.input.messages`, `gen_ai.output.messages`,
//! `gen_ai.system_instructions`, `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`) are
//! recorded only with [`Telemetry::record_content`]: prompts and tool results can hold secrets.
//!
//! The `otel` feature adds [`init_from_env`], which exports these spans and the conventions'
//! metrics (`gen_ai.client.token.usage`, `gen_ai.client.operation.duration`,
//! `gen_ai.execute_tool.duration`, `gen_ai.invoke_agent.duration`) over OTLP/HTTP, and its
//! parts for a subscriber and exporters of your own: [`layer`] (the spans) and
//! [`record_metrics`] (the metrics).
//!
//! ```
//! # use agentloop::Agent;
//! # use agentloop_testkit::{ScriptedModel, Turn};
//! let agent = Agent::builder(ScriptedModel::new([Turn::text("Hi")]))
//!     .build()
//!     .with_options(|o| {
//!         o.telemetry.agent_name = Some("support".into());
//!         o.telemetry.record_content = false; // the default
//!     });
//! # drop(agent);
//! ```

#[cfg(feature = "otel")]
mod layer;
#[cfg(feature = "otel")]
mod otel;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::error::Error;
use crate::message::{ContentBlock, Message, Request, Response, Role, ToolResultContent, Usage};
use crate::run::RunResult;
use crate::tool::{ToolCall, ToolError, ToolOutput};

#[cfg(feature = "otel")]
pub use otel::{InitError, TelemetryGuard, init_from_env, layer, record_metrics};

/// What a run's telemetry records (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Telemetry {
    /// The agent's name: `gen_ai.agent.name`, and the run span's `invoke_agent {name}`.
    pub agent_name: Option<Arc<str>>,
    /// Record message contents, tool arguments and results in the spans (off by default:
    /// prompts and tool results can hold secrets).
    pub record_content: bool,
}

/// The conventions' `gen_ai.provider.name` for one of ours ([`crate::Provider::name`]).
pub fn provider_name(provider: &str) -> &str {
    match provider {
        "gemini" => "gcp.gemini",
        "vertex" => "gcp.vertex_ai",
        "bedrock" | "aws" => "aws.bedrock",
        "xai" | "grok" => "x_ai",
        "mistral" => "mistral_ai",
        "moonshot" => "moonshot_ai",
        other => other,
    }
}

/// A value the spans and metrics carry often (operation, provider and finish-reason names, tool
/// outcomes) as a `'static` string: kept borrowed, an exporter copies nothing for it.
pub(crate) fn known(value: &str) -> Option<&'static str> {
    Some(match value {
        "chat" => "chat",
        "invoke_agent" => "invoke_agent",
        "execute_tool" => "execute_tool",
        "function" => "function",
        "tools/call" => "tools/call",
        "openai" => "openai",
        "openai-responses" => "openai-responses",
        "anthropic" => "anthropic",
        "gemini" => "gemini",
        "vertex" => "vertex",
        "bedrock" => "bedrock",
        "scripted" => "scripted",
        "gcp.gemini" => "gcp.gemini",
        "gcp.vertex_ai" => "gcp.vertex_ai",
        "aws.bedrock" => "aws.bedrock",
        "x_ai" => "x_ai",
        "mistral_ai" => "mistral_ai",
        "moonshot_ai" => "moonshot_ai",
        "deepseek" => "deepseek",
        "groq" => "groq",
        "openrouter" => "openrouter",
        "end_turn" => "end_turn",
        "tool_use" => "tool_use",
        "max_tokens" => "max_tokens",
        "stop_sequence" => "stop_sequence",
        "refusal" => "refusal",
        "failed" => "failed",
        "invalid_arguments" => "invalid_arguments",
        "cancelled" => "cancelled",
        _ => return None,
    })
}

/// A span's conventional name, `{operation} {target}`: formatted only by a subscriber that
/// records it, once.
struct SpanName<'a>(&'static str, Option<&'a str>);

impl fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(target) => write!(f, "{} {target}", self.0),
            None => f.write_str(self.0),
        }
    }
}

/// Whether `provider`'s `input_tokens` leave the cached tokens out (the conventions count
/// them in).
fn cache_apart(provider: &str) -> bool {
    matches!(provider, "anthropic" | "bedrock" | "aws")
}

/// An INFO span under `parent` when there is one, else under the current span.
macro_rules! span_under {
    ($parent:expr, $name:literal, $($fields:tt)*) => {
        match $parent {
            Some(parent) => tracing::info_span!(parent: parent, $name, $($fields)*),
            None => tracing::info_span!($name, $($fields)*),
        }
    };
}

/// The span of a run. Its fields are filled only when a subscriber wants it.
pub(crate) fn agent_span(
    telemetry: &Telemetry,
    provider: &str,
    model: &str,
    conversation: Option<&str>,
) -> Span {
    let agent = telemetry.agent_name.as_deref();
    tracing::info_span!(
        "invoke_agent",
        otel.name = %SpanName("invoke_agent", agent),
        otel.kind = "internal",
        otel.status_code = Empty,
        error.type = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.provider.name = provider_name(provider),
        gen_ai.agent.name = agent,
        gen_ai.request.model = model,
        gen_ai.conversation.id = conversation,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        gen_ai.usage.reasoning.output_tokens = Empty,
    )
}

/// Record how a run ended on its span.
pub(crate) fn agent_end(span: &Span, provider: &str, result: &RunResult, took: Duration) {
    if span.is_disabled() {
        return;
    }
    let error = result.error.as_ref().map(Error::kind);
    let usage = UsageFields::new(provider, &result.usage);
    let status = error.map(|_| "error");
    record_fields(
        span,
        [
            ("otel.status_code", &status),
            ("error.type", &error),
            ("gen_ai.usage.input_tokens", &usage.input),
            ("gen_ai.usage.output_tokens", &usage.output),
            ("gen_ai.usage.cache_read.input_tokens", &usage.read),
            ("gen_ai.usage.cache_creation.input_tokens", &usage.write),
            ("gen_ai.usage.reasoning.output_tokens", &usage.reasoning),
        ],
    );
    #[cfg(feature = "otel")]
    otel::agent_duration(provider, took, error);
    #[cfg(not(feature = "otel"))]
    let _ = took;
}

/// Record a run that failed before its first step (a prompt hook blocked it).
pub(crate) fn agent_failed(span: &Span, provider: &str, error: &Error, took: Duration) {
    if span.is_disabled() {
        return;
    }
    record_error(span, error.kind());
    #[cfg(feature = "otel")]
    otel::agent_duration(provider, took, Some(error.kind()));
    #[cfg(not(feature = "otel"))]
    let _ = (provider, took);
}

/// The span of a model call.
fn chat_span(
    parent: Option<&Span>,
    telemetry: &Telemetry,
    provider: &str,
    request: &Request,
    streamed: bool,
) -> Span {
    let span = span_under!(
        parent,
        "chat",
        otel.name = %SpanName("chat", Some(&request.model)),
        otel.kind = "client",
        otel.status_code = Empty,
        error.type = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider_name(provider),
        gen_ai.request.model = request.model.as_str(),
        gen_ai.request.stream = streamed,
        gen_ai.request.max_tokens = request.max_tokens.map(u64::from),
        gen_ai.request.temperature = request.temperature.map(f64::from),
        gen_ai.request.top_p = request.top_p.map(f64::from),
        gen_ai.request.top_k = request.top_k.map(f64::from),
        gen_ai.response.model = Empty,
        gen_ai.response.id = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.response.time_to_first_chunk = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        gen_ai.usage.reasoning.output_tokens = Empty,
        gen_ai.system_instructions = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if telemetry.record_content {
        if let Some(system) = &request.system {
            let parts = json!([{"type": "text", "content": system}]);
            span.record("gen_ai.system_instructions", parts.to_string());
        }
        let messages: Vec<Value> = request.messages.iter().map(message_json).collect();
        span.record("gen_ai.input.messages", Value::Array(messages).to_string());
    }
    span
}

/// Record a model call's end on its span, and its metrics.
fn chat_end(
    span: &Span,
    record_content: bool,
    provider: &str,
    request_model: &Arc<str>,
    answer: Result<&Response, &Error>,
    first_chunk: Option<f64>,
    took: Duration,
) {
    if span.is_disabled() {
        return;
    }
    match answer {
        Ok(response) => {
            let model = (!response.model.is_empty()).then_some(response.model.as_str());
            let id = (!response.id.is_empty()).then_some(response.id.as_str());
            let usage = UsageFields::new(provider, &response.usage);
            record_fields(
                span,
                [
                    ("gen_ai.response.model", &model),
                    ("gen_ai.response.id", &id),
                    (
                        "gen_ai.response.finish_reasons",
                        &response.stop_reason.as_str(),
                    ),
                    ("gen_ai.usage.input_tokens", &usage.input),
                    ("gen_ai.usage.output_tokens", &usage.output),
                    ("gen_ai.usage.cache_read.input_tokens", &usage.read),
                    ("gen_ai.usage.cache_creation.input_tokens", &usage.write),
                    ("gen_ai.usage.reasoning.output_tokens", &usage.reasoning),
                    ("gen_ai.response.time_to_first_chunk", &first_chunk),
                ],
            );
            if record_content {
                let mut message = message_json(&response.to_message());
                message["finish_reason"] = response.stop_reason.as_str().into();
                span.record("gen_ai.output.messages", json!([message]).to_string());
            }
        }
        Err(error) => record_fields(
            span,
            [
                ("otel.status_code", &"error"),
                ("error.type", &error.kind()),
                ("gen_ai.response.time_to_first_chunk", &first_chunk),
            ],
        ),
    }
    #[cfg(feature = "otel")]
    otel::chat_metrics(provider, request_model, answer, took);
    #[cfg(not(feature = "otel"))]
    let _ = (request_model, took);
}

/// A usage's `gen_ai.usage.*` values, as the conventions count them (a zero count of the
/// optional kinds is left out).
struct UsageFields {
    input: u64,
    output: u64,
    read: Option<u64>,
    write: Option<u64>,
    reasoning: Option<u64>,
}

impl UsageFields {
    fn new(provider: &str, usage: &Usage) -> Self {
        let cached = usage.cache_read_tokens + usage.cache_write_tokens;
        let input = if cache_apart(provider) {
            usage.input_tokens + cached
        } else {
            usage.input_tokens
        };
        let nonzero = |n: u64| (n > 0).then_some(n);
        Self {
            input,
            output: usage.output_tokens,
            read: nonzero(usage.cache_read_tokens),
            write: nonzero(usage.cache_write_tokens),
            reasoning: nonzero(usage.reasoning_tokens),
        }
    }
}

/// Record a failure (`error.type` `kind`) on a span, in one record.
fn record_error(span: &Span, kind: &'static str) {
    record_fields(
        span,
        [("otel.status_code", &"error"), ("error.type", &kind)],
    );
}

/// Record several of a span's fields at once (a `None` value records nothing): a subscriber
/// handles one record, not one per field, and exporting layers pay per record.
fn record_fields<const N: usize>(span: &Span, values: [(&str, &dyn tracing::Value); N]) {
    let Some(metadata) = span.metadata() else {
        return;
    };
    let fields = metadata.fields();
    let found = values.map(|(name, value)| (fields.field(name), value));
    // A name the span lacks records nothing: it takes a field that exists, with no value.
    let Some(any) = found.iter().find_map(|(field, _)| field.clone()) else {
        return;
    };
    let found = found.map(|(field, value)| match field {
        Some(field) => (field, Some(value)),
        None => (any.clone(), None),
    });
    let pairs = found.each_ref().map(|(field, value)| (field, *value));
    span.record_all(&fields.value_set(&pairs));
}

/// The span of a tool call.
fn tool_span(parent: Option<&Span>, telemetry: &Telemetry, call: &ToolCall, input: &Value) -> Span {
    let span = span_under!(
        parent,
        "execute_tool",
        otel.name = %SpanName("execute_tool", Some(&call.name)),
        otel.kind = "internal",
        otel.status_code = Empty,
        error.type = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = call.name.as_str(),
        gen_ai.tool.call.id = call.id.as_str(),
        gen_ai.tool.type = "function",
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
    );
    if telemetry.record_content && !span.is_disabled() {
        span.record("gen_ai.tool.call.arguments", input.to_string());
    }
    span
}

/// Record how a tool's handler ended on its span, and its duration: `None` when it was
/// dropped before it ended (its timeout, or the run's end).
fn tool_end(
    span: &Span,
    record_content: bool,
    name: &Arc<str>,
    ended: Option<&Result<ToolOutput, ToolError>>,
    took: Duration,
) {
    let error = match ended {
        Some(Ok(_)) => None,
        Some(Err(ToolError::Failed(_))) => Some("failed"),
        Some(Err(ToolError::InvalidArguments(_))) => Some("invalid_arguments"),
        // Asking a person for input pauses the call; it did not fail.
        Some(Err(ToolError::InputRequired(_))) => None,
        None => Some("cancelled"),
    };
    if let Some(kind) = error {
        record_error(span, kind);
    }
    if record_content && let Some(ended) = ended {
        let result = match ended {
            Ok(output) => match output.structured() {
                Some(value) => value.to_string(),
                None => output.content().to_text(),
            },
            Err(ToolError::Failed(message)) => message.clone(),
            Err(ToolError::InvalidArguments(violations)) => violations
                .iter()
                .map(|v| format!("{}: {}", v.path, v.message))
                .collect::<Vec<_>>()
                .join("; "),
            Err(ToolError::InputRequired(request)) => {
                format!("input required: {}", request.message)
            }
        };
        span.record("gen_ai.tool.call.result", result);
    }
    #[cfg(feature = "otel")]
    otel::tool_duration(name, took, error);
    #[cfg(not(feature = "otel"))]
    let _ = (name, took);
}

/// A model call's or a tool's span, carried by the call's own (boxed) future so that a run's
/// future does not grow with it; only built when a subscriber wants the span.
pub(crate) struct CallTrace {
    span: Span,
    started: Instant,
    /// The provider (a model call).
    provider: Cow<'static, str>,
    /// The requested model (a model call) or the tool's name, shared with the metrics.
    target: Arc<str>,
    record_content: bool,
    /// A streamed call's first chunk is still to come.
    waiting_first: bool,
    /// When it came, in seconds: recorded with the call's end, in the same record.
    first_chunk: Option<f64>,
}

impl CallTrace {
    /// A model call's trace, when its span is wanted.
    pub(crate) fn chat(
        parent: Option<&Span>,
        telemetry: &Telemetry,
        provider: &str,
        request: &Request,
        streamed: bool,
    ) -> Option<Self> {
        let span = chat_span(parent, telemetry, provider, request, streamed);
        (!span.is_disabled()).then(|| Self {
            span,
            started: Instant::now(),
            provider: known(provider).map_or_else(|| provider.to_owned().into(), Cow::Borrowed),
            target: request.model.as_str().into(),
            record_content: telemetry.record_content,
            waiting_first: streamed,
            first_chunk: None,
        })
    }

    /// A tool call's trace, when its span is wanted.
    pub(crate) fn tool(
        parent: Option<&Span>,
        telemetry: &Telemetry,
        call: &ToolCall,
        input: &Value,
    ) -> Option<Self> {
        let span = tool_span(parent, telemetry, call, input);
        (!span.is_disabled()).then(|| Self {
            span,
            started: Instant::now(),
            provider: Cow::Borrowed(""),
            target: call.name.as_str().into(),
            record_content: telemetry.record_content,
            waiting_first: false,
            first_chunk: None,
        })
    }

    /// A streamed call's event arrived: the first one sets the time to first chunk.
    #[inline]
    pub(crate) fn chunk(&mut self) {
        if self.waiting_first {
            self.waiting_first = false;
            self.first_chunk = Some(self.started.elapsed().as_secs_f64());
        }
    }

    /// The run stopped the call: only its time to first chunk is recorded.
    pub(crate) fn chat_stopped(&self) {
        if let Some(first) = self.first_chunk {
            self.span
                .record("gen_ai.response.time_to_first_chunk", first);
        }
    }

    /// Record how the model call ended.
    pub(crate) fn chat_ended(&self, answer: Result<&Response, &Error>) {
        chat_end(
            &self.span,
            self.record_content,
            &self.provider,
            &self.target,
            answer,
            self.first_chunk,
            self.started.elapsed(),
        );
    }

    /// The provider's whole answer in this span, recorded when it ends.
    pub(crate) fn complete(
        self,
        call: BoxFuture<'static, Result<Response, Error>>,
    ) -> BoxFuture<'static, Result<Response, Error>> {
        Box::pin(async move {
            let answer = call.instrument(self.span.clone()).await;
            self.chat_ended(answer.as_ref());
            answer
        })
    }

    /// The tool's handler in this span, its end recorded (also when it is dropped first).
    pub(crate) fn run_tool(
        self,
        call: BoxFuture<'static, Result<ToolOutput, ToolError>>,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let span = self.span.clone();
        let mut ending = ToolEnding(Some(self));
        Box::pin(
            async move {
                let ended = call.await;
                if let Some(trace) = ending.0.take() {
                    tool_end(
                        &trace.span,
                        trace.record_content,
                        &trace.target,
                        Some(&ended),
                        trace.started.elapsed(),
                    );
                }
                ended
            }
            .instrument(span),
        )
    }
}

/// Records a tool dropped before its handler ended.
struct ToolEnding(Option<CallTrace>);

impl Drop for ToolEnding {
    fn drop(&mut self) {
        if let Some(trace) = self.0.take() {
            tool_end(
                &trace.span,
                trace.record_content,
                &trace.target,
                None,
                trace.started.elapsed(),
            );
        }
    }
}

/// A message in the conventions' JSON form (`gen_ai.input.messages`).
fn message_json(message: &Message) -> Value {
    let tool_results = message
        .content
        .iter()
        .all(|block| matches!(block, ContentBlock::ToolResult(_)));
    let role = match message.role {
        Role::System => "system",
        Role::Assistant => "assistant",
        Role::User if tool_results && !message.content.is_empty() => "tool",
        Role::User => "user",
    };
    let parts: Vec<Value> = message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(json!({"type": "text", "content": text})),
            ContentBlock::ToolUse { id, name, input } => Some(json!({
                "type": "tool_call", "id": id, "name": name, "arguments": input,
            })),
            ContentBlock::ToolResult(result) => {
                let response = match &result.content {
                    ToolResultContent::Text(text) => Value::String(text.clone()),
                    other => Value::String(other.to_text()),
                };
                Some(json!({
                    "type": "tool_call_response", "id": result.tool_use_id, "response": response,
                }))
            }
            ContentBlock::Thinking { thinking, .. } => {
                Some(json!({"type": "reasoning", "content": thinking}))
            }
            _ => None,
        })
        .collect();
    json!({"role": role, "parts": parts})
}
