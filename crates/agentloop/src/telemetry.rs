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
//! `tracing` fields hold no arrays: on a `tracing` span `gen_ai.response.finish_reasons` is the
//! call's one reason as a string ([`layer`] exports it as the conventions' string array), and
//! the message attributes below are JSON text. A tool whose handler is dropped before it ends
//! (its timeout, the run's end) has `error.type` `cancelled`; calls answered without running
//! (unknown tool, arguments that do not fit, denied) have no `execute_tool` span. A handler
//! starts and runs inside its `execute_tool` span, so the spans it makes (an MCP call's, the
//! application's own) nest under it.
//!
//! Message contents (`gen_ai.input.messages`, `gen_ai.output.messages`,
//! `gen_ai.system_instructions`, `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`) are
//! recorded only with [`Telemetry::record_content`]: prompts and tool results can hold secrets.
//!
//! The `otel` feature adds OpenTelemetry export:
//!
//! - [`init_from_env`]: the spans and the conventions' metrics (`gen_ai.client.token.usage`,
//!   `gen_ai.client.operation.duration`, `gen_ai.execute_tool.duration`,
//!   `gen_ai.invoke_agent.duration`) over OTLP/HTTP, as the standard `OTEL_*` variables say,
//!   in one call; [`install`] does the same with exporters of your own.
//! - Runs build their OpenTelemetry spans themselves, for the tracer [`set_tracer`] (or
//!   [`Telemetry::tracer`]) names: the same spans [`layer`] makes of the `tracing` ones, at
//!   about half the cost, since nothing goes through `tracing`'s registry. `init_from_env` and
//!   `install` export this way.
//! - [`layer`]: the spans through a `tracing` subscriber of your own, when you prefer to compose
//!   it there; it leaves out the spans of runs that build their own.
//! - [`record_metrics`]: the metrics with a meter provider of your own; every run records them
//!   once they are set up, unless its [`Telemetry::metrics`] is off.
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
mod direct;
#[cfg(feature = "otel")]
mod layer;
#[cfg(feature = "otel")]
mod metrics;
#[cfg(feature = "otel")]
mod otel;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::error::Error;
use crate::message::{ContentBlock, Message, Request, Response, Role, ToolResultContent, Usage};
use crate::run::RunResult;
use crate::tool::{ToolCall, ToolError, ToolOutput};

#[cfg(feature = "otel")]
pub use direct::set_tracer;
#[cfg(feature = "otel")]
pub use metrics::record_metrics;
#[cfg(feature = "otel")]
pub use otel::{InitError, TelemetryGuard, init_from_env, install, layer};

/// What a run's telemetry records (see the module docs).
#[derive(Debug, Clone)]
pub struct Telemetry {
    /// The agent's name: `gen_ai.agent.name`, and the run span's `invoke_agent {name}`.
    pub agent_name: Option<Arc<str>>,
    /// Record message contents, tool arguments and results in the spans (off by default:
    /// prompts and tool results can hold secrets).
    pub record_content: bool,
    /// The tracer this run's spans go to, built by the run itself rather than through
    /// `tracing` (feature `otel`; `None`: the one [`set_tracer`] set, if any).
    #[cfg(feature = "otel")]
    pub tracer: Option<opentelemetry_sdk::trace::SdkTracer>,
    /// Record the conventions' metrics, once [`record_metrics`] (or [`init_from_env`]) set
    /// them up (on by default; feature `otel`).
    pub metrics: bool,
}

impl Default for Telemetry {
    fn default() -> Self {
        Self {
            agent_name: None,
            record_content: false,
            #[cfg(feature = "otel")]
            tracer: None,
            metrics: true,
        }
    }
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

/// Whether `metadata` is one of a run's own spans (`invoke_agent`, `chat`, `execute_tool`).
#[cfg(feature = "otel")]
fn is_run_span(metadata: &tracing::Metadata<'_>) -> bool {
    metadata.is_span()
        && metadata.target() == module_path!()
        && matches!(metadata.name(), "invoke_agent" | "chat" | "execute_tool")
}

/// What a run builds its OpenTelemetry spans for (nothing without the `otel` feature).
#[cfg(feature = "otel")]
type Tracer = opentelemetry_sdk::trace::SdkTracer;
#[cfg(not(feature = "otel"))]
type Tracer = std::convert::Infallible;

/// The tracer a run with `telemetry` builds its spans for, if any.
fn tracer(telemetry: &Telemetry) -> Option<&Tracer> {
    #[cfg(feature = "otel")]
    return direct::tracer(telemetry);
    #[cfg(not(feature = "otel"))]
    {
        let _ = telemetry;
        None
    }
}

/// Whether a run with `telemetry` records the conventions' metrics ([`record_metrics`]).
fn metrics_on(telemetry: &Telemetry) -> bool {
    #[cfg(feature = "otel")]
    return telemetry.metrics && metrics::metrics_on();
    #[cfg(not(feature = "otel"))]
    {
        let _ = telemetry;
        false
    }
}

/// The span of a run, for a subscriber. Its fields are filled only when one wants it.
/// `exported`: the run builds its OpenTelemetry span itself, and [`layer`] leaves this one be.
fn agent_span(
    telemetry: &Telemetry,
    provider: &str,
    model: &str,
    conversation: Option<&str>,
    exported: bool,
) -> Span {
    let agent = telemetry.agent_name.as_deref();
    tracing::info_span!(
        "invoke_agent",
        otel.name = %SpanName("invoke_agent", agent),
        otel.kind = "internal",
        otel.status_code = Empty,
        agentloop.exported = exported.then_some(true),
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

/// A traced run: its span for subscribers, its OpenTelemetry span when it exports its own
/// ([`Telemetry::tracer`]), and when it started. Kept out of the run's future (see
/// `run::driver`).
pub(crate) struct RunTrace {
    span: Span,
    /// The run's OpenTelemetry span, when it exports its own.
    #[cfg(feature = "otel")]
    otel: Option<opentelemetry::Context>,
    /// The model it asks for, shared with its calls' spans and metrics.
    #[cfg(feature = "otel")]
    model: Arc<str>,
    /// Whether it records the metrics.
    metrics: bool,
    started: Instant,
}

impl RunTrace {
    /// A run's trace, when a subscriber, a tracer or the metrics want it.
    pub(crate) fn start(
        telemetry: &Telemetry,
        provider: &str,
        model: &str,
        conversation: Option<&str>,
    ) -> Option<Self> {
        let tracer = tracer(telemetry);
        let exported = tracer.is_some();
        let span = agent_span(telemetry, provider, model, conversation, exported);
        let metrics = metrics_on(telemetry);
        if span.is_disabled() && !exported && !metrics {
            return None;
        }
        #[cfg(feature = "otel")]
        let model: Arc<str> = model.into();
        #[cfg(feature = "otel")]
        let otel =
            tracer.map(|tracer| direct::agent(tracer, telemetry, provider, &model, conversation));
        Some(Self {
            span,
            #[cfg(feature = "otel")]
            otel,
            #[cfg(feature = "otel")]
            model,
            metrics,
            started: Instant::now(),
        })
    }

    /// The run's span, when a subscriber wants it: its calls' spans go under it.
    fn span(&self) -> Option<&Span> {
        (!self.span.is_disabled()).then_some(&self.span)
    }

    /// Record how the run ended: its result, or the error that ended it before its first
    /// step (a prompt hook blocked it).
    pub(crate) fn ended(&self, provider: &str, ended: Result<&RunResult, &Error>) {
        let took = self.started.elapsed();
        let (error, usage) = match ended {
            Ok(result) => (
                result.error.as_ref().map(Error::kind),
                Some(UsageFields::new(provider, &result.usage)),
            ),
            Err(error) => (Some(error.kind()), None),
        };
        if let Some(span) = self.span() {
            match (&usage, error) {
                (Some(usage), _) => {
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
                }
                (None, Some(kind)) => record_error(span, kind),
                (None, None) => {}
            }
        }
        #[cfg(feature = "otel")]
        {
            if let Some(run) = &self.otel {
                direct::agent_end(run, usage.as_ref(), error);
            }
            if self.metrics {
                metrics::agent_duration(provider, took, error);
            }
        }
        #[cfg(not(feature = "otel"))]
        let _ = (took, usage, self.metrics);
    }
}

/// The span of a model call, for a subscriber.
fn chat_span(
    parent: Option<&Span>,
    provider: &str,
    request: &Request,
    streamed: bool,
    exported: bool,
) -> Span {
    span_under!(
        parent,
        "chat",
        otel.name = %SpanName("chat", Some(&request.model)),
        otel.kind = "client",
        otel.status_code = Empty,
        agentloop.exported = exported.then_some(true),
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
    )
}

/// A request's `gen_ai.system_instructions` (when it has some) and `gen_ai.input.messages`.
fn chat_content(request: &Request) -> (Option<String>, String) {
    let system = request
        .system
        .as_ref()
        .map(|system| json!([{"type": "text", "content": system}]).to_string());
    let messages: Vec<Value> = request.messages.iter().map(message_json).collect();
    (system, Value::Array(messages).to_string())
}

/// A response's `gen_ai.output.messages`.
fn output_content(response: &Response) -> String {
    let mut message = message_json(&response.to_message());
    message["finish_reason"] = response.stop_reason.as_str().into();
    json!([message]).to_string()
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

/// What a model call's answer tells its span.
struct Answered<'a> {
    model: Option<&'a str>,
    id: Option<&'a str>,
    finish_reason: &'a str,
    usage: UsageFields,
}

impl<'a> Answered<'a> {
    fn new(provider: &str, response: &'a Response) -> Self {
        Self {
            model: (!response.model.is_empty()).then_some(response.model.as_str()),
            id: (!response.id.is_empty()).then_some(response.id.as_str()),
            finish_reason: response.stop_reason.as_str(),
            usage: UsageFields::new(provider, &response.usage),
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

/// The span of a tool call, for a subscriber.
fn tool_span(parent: Option<&Span>, call: &ToolCall, exported: bool) -> Span {
    span_under!(
        parent,
        "execute_tool",
        otel.name = %SpanName("execute_tool", Some(&call.name)),
        otel.kind = "internal",
        otel.status_code = Empty,
        agentloop.exported = exported.then_some(true),
        error.type = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = call.name.as_str(),
        gen_ai.tool.call.id = call.id.as_str(),
        gen_ai.tool.type = "function",
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
    )
}

/// `gen_ai.tool.call.result`: what the handler gave, as text.
fn tool_result(ended: &Result<ToolOutput, ToolError>) -> String {
    match ended {
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
    }
}

/// A model call's or a tool's span, carried by the call's own (boxed) future so that a run's
/// future does not grow with it; only built when a subscriber, a tracer or the metrics want
/// it.
pub(crate) struct CallTrace {
    span: Span,
    /// The call's OpenTelemetry span, when the run exports its own.
    #[cfg(feature = "otel")]
    otel: Option<direct::CallSpan>,
    /// Whether it records the metrics.
    metrics: bool,
    started: Instant,
    /// The provider (a model call).
    provider: Cow<'static, str>,
    /// The requested model (a model call) or the tool's name, shared with the spans and the
    /// metrics.
    #[cfg(feature = "otel")]
    target: Arc<str>,
    record_content: bool,
    /// A streamed call's first chunk is still to come.
    waiting_first: bool,
    /// When it came, in seconds: recorded with the call's end, in the same record.
    first_chunk: Option<f64>,
}

/// The OpenTelemetry context a call's span goes under: its run's, else the current one.
#[cfg(feature = "otel")]
fn otel_parent<T>(run: Option<&RunTrace>, start: impl FnOnce(&opentelemetry::Context) -> T) -> T {
    match run.and_then(|run| run.otel.as_ref()) {
        Some(parent) => start(parent),
        None => start(&opentelemetry::Context::current()),
    }
}

impl CallTrace {
    /// A model call's trace under its run's, when it is wanted.
    pub(crate) fn chat(
        run: Option<&RunTrace>,
        telemetry: &Telemetry,
        provider: &str,
        request: &Request,
        streamed: bool,
    ) -> Option<Self> {
        let tracer = tracer(telemetry);
        let exported = tracer.is_some();
        let span = chat_span(
            run.and_then(RunTrace::span),
            provider,
            request,
            streamed,
            exported,
        );
        let traced = !span.is_disabled();
        let metrics = metrics_on(telemetry);
        if !traced && !exported && !metrics {
            return None;
        }
        let content =
            (telemetry.record_content && (traced || exported)).then(|| chat_content(request));
        if traced && let Some((system, messages)) = &content {
            if let Some(system) = system {
                span.record("gen_ai.system_instructions", system.as_str());
            }
            span.record("gen_ai.input.messages", messages.as_str());
        }
        #[cfg(feature = "otel")]
        let target: Arc<str> = match run {
            Some(run) if *run.model == *request.model => Arc::clone(&run.model),
            _ => request.model.as_str().into(),
        };
        #[cfg(feature = "otel")]
        let otel = tracer.map(|tracer| {
            let call = direct::ChatStart {
                provider,
                model: &target,
                streamed,
                max_tokens: request.max_tokens,
                temperature: request.temperature,
                top_p: request.top_p,
                top_k: request.top_k,
                content,
            };
            direct::CallSpan::Chat(otel_parent(run, |parent| {
                direct::chat(tracer, parent, call)
            }))
        });
        #[cfg(not(feature = "otel"))]
        let _ = content;
        Some(Self {
            span,
            #[cfg(feature = "otel")]
            otel,
            metrics,
            started: Instant::now(),
            provider: known(provider).map_or_else(|| provider.to_owned().into(), Cow::Borrowed),
            #[cfg(feature = "otel")]
            target,
            record_content: telemetry.record_content,
            waiting_first: streamed,
            first_chunk: None,
        })
    }

    /// A tool call's trace under its run's, when it is wanted.
    pub(crate) fn tool(
        run: Option<&RunTrace>,
        telemetry: &Telemetry,
        call: &ToolCall,
        input: &Value,
    ) -> Option<Self> {
        let tracer = tracer(telemetry);
        let exported = tracer.is_some();
        let span = tool_span(run.and_then(RunTrace::span), call, exported);
        let traced = !span.is_disabled();
        let metrics = metrics_on(telemetry);
        if !traced && !exported && !metrics {
            return None;
        }
        let arguments =
            (telemetry.record_content && (traced || exported)).then(|| input.to_string());
        if traced && let Some(arguments) = &arguments {
            span.record("gen_ai.tool.call.arguments", arguments.as_str());
        }
        #[cfg(feature = "otel")]
        let target: Arc<str> = call.name.as_str().into();
        #[cfg(feature = "otel")]
        let otel = tracer.map(|tracer| {
            direct::CallSpan::Tool(otel_parent(run, |parent| {
                direct::tool(tracer, parent, &target, &call.id, arguments)
            }))
        });
        #[cfg(not(feature = "otel"))]
        let _ = arguments;
        Some(Self {
            span,
            #[cfg(feature = "otel")]
            otel,
            metrics,
            started: Instant::now(),
            provider: Cow::Borrowed(""),
            #[cfg(feature = "otel")]
            target,
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
    pub(crate) fn chat_stopped(&mut self) {
        if let Some(first) = self.first_chunk
            && !self.span.is_disabled()
        {
            self.span
                .record("gen_ai.response.time_to_first_chunk", first);
        }
        #[cfg(feature = "otel")]
        if let Some(direct::CallSpan::Chat(call)) = &mut self.otel {
            direct::chat_end(call, None, self.first_chunk);
        }
    }

    /// Record how the model call ended, and its metrics.
    pub(crate) fn chat_ended(&mut self, answer: Result<&Response, &Error>) {
        let took = self.started.elapsed();
        let first_chunk = self.first_chunk;
        let answered = answer.map(|response| Answered::new(&self.provider, response));
        let output = match answer {
            Ok(response) if self.record_content && self.records() => Some(output_content(response)),
            _ => None,
        };
        if !self.span.is_disabled() {
            match &answered {
                Ok(answered) => {
                    let usage = &answered.usage;
                    record_fields(
                        &self.span,
                        [
                            ("gen_ai.response.model", &answered.model),
                            ("gen_ai.response.id", &answered.id),
                            ("gen_ai.response.finish_reasons", &answered.finish_reason),
                            ("gen_ai.usage.input_tokens", &usage.input),
                            ("gen_ai.usage.output_tokens", &usage.output),
                            ("gen_ai.usage.cache_read.input_tokens", &usage.read),
                            ("gen_ai.usage.cache_creation.input_tokens", &usage.write),
                            ("gen_ai.usage.reasoning.output_tokens", &usage.reasoning),
                            ("gen_ai.response.time_to_first_chunk", &first_chunk),
                        ],
                    );
                    if let Some(output) = &output {
                        self.span.record("gen_ai.output.messages", output.as_str());
                    }
                }
                Err(error) => record_fields(
                    &self.span,
                    [
                        ("otel.status_code", &"error"),
                        ("error.type", &error.kind()),
                        ("gen_ai.response.time_to_first_chunk", &first_chunk),
                    ],
                ),
            }
        }
        #[cfg(feature = "otel")]
        {
            if let Some(direct::CallSpan::Chat(call)) = &mut self.otel {
                let ended = answered
                    .as_ref()
                    .map(|answered| direct::ChatEnd {
                        answered,
                        request_model: &self.target,
                        output,
                    })
                    .map_err(|error| error.kind());
                direct::chat_end(call, Some(ended), first_chunk);
            }
            if self.metrics {
                metrics::chat_metrics(&self.provider, &self.target, answer, took);
            }
        }
        #[cfg(not(feature = "otel"))]
        let _ = (took, output, answered, self.metrics);
    }

    /// Whether a span records this call: a subscriber's, or its own OpenTelemetry one.
    fn records(&self) -> bool {
        #[cfg(feature = "otel")]
        let exported = self.otel.is_some();
        #[cfg(not(feature = "otel"))]
        let exported = false;
        !self.span.is_disabled() || exported
    }

    /// Record how a tool's handler ended, and its duration: `None` when it was dropped before
    /// it ended (its timeout, or the run's end).
    fn tool_ended(&self, ended: Option<&Result<ToolOutput, ToolError>>) {
        let took = self.started.elapsed();
        let error = match ended {
            Some(Ok(_)) => None,
            Some(Err(ToolError::Failed(_))) => Some("failed"),
            Some(Err(ToolError::InvalidArguments(_))) => Some("invalid_arguments"),
            // Asking a person for input pauses the call; it did not fail.
            Some(Err(ToolError::InputRequired(_))) => None,
            None => Some("cancelled"),
        };
        let result = ended
            .filter(|_| self.record_content && self.records())
            .map(tool_result);
        if !self.span.is_disabled() {
            if let Some(kind) = error {
                record_error(&self.span, kind);
            }
            if let Some(result) = &result {
                self.span.record("gen_ai.tool.call.result", result.as_str());
            }
        }
        #[cfg(feature = "otel")]
        {
            if let Some(direct::CallSpan::Tool(call)) = &self.otel {
                direct::tool_end(call, result, error);
            }
            if self.metrics {
                metrics::tool_duration(&self.target, took, error);
            }
        }
        #[cfg(not(feature = "otel"))]
        let _ = (took, result, self.metrics);
    }

    /// The provider's whole answer in this span, recorded when it ends.
    pub(crate) fn complete(
        self,
        call: BoxFuture<'static, Result<Response, Error>>,
    ) -> BoxFuture<'static, Result<Response, Error>> {
        let mut trace = self;
        Box::pin(async move {
            let answer = call.instrument(trace.span.clone()).await;
            trace.chat_ended(answer.as_ref());
            answer
        })
    }

    /// The tool's handler, started by `start` and run in this span, its end recorded (also
    /// when it is dropped first). The handler starts and runs with the span entered and, when
    /// the run exports its own spans, its OpenTelemetry context current: spans the handler
    /// makes (an MCP call's, the application's own) nest under it.
    pub(crate) fn run_tool(
        self,
        start: impl FnOnce() -> BoxFuture<'static, Result<ToolOutput, ToolError>>,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let span = self.span.clone();
        #[cfg(feature = "otel")]
        let context = match &self.otel {
            Some(direct::CallSpan::Tool(context)) => Some(context.clone()),
            _ => None,
        };
        let call = {
            let _entered = span.enter();
            #[cfg(feature = "otel")]
            let _attached = context.as_ref().map(|context| context.clone().attach());
            start()
        };
        let mut ending = ToolEnding(Some(self));
        let handler = async move {
            let ended = call.await;
            if let Some(trace) = ending.0.take() {
                trace.tool_ended(Some(&ended));
            }
            ended
        };
        #[cfg(feature = "otel")]
        if let Some(context) = context {
            use opentelemetry::trace::FutureExt as _;
            return Box::pin(handler.with_context(context).instrument(span));
        }
        Box::pin(handler.instrument(span))
    }
}

/// Records a tool dropped before its handler ended.
struct ToolEnding(Option<CallTrace>);

impl Drop for ToolEnding {
    fn drop(&mut self) {
        if let Some(trace) = self.0.take() {
            trace.tool_ended(None);
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
