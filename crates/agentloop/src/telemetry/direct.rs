//! Runs' OpenTelemetry spans built by the run itself (feature `otel`): the same spans
//! [`layer`](super::layer) makes of the `tracing` ones, without the `tracing` span underneath.
//!
//! Going through `tracing` costs a registry entry, a visit of every field and a lookup of
//! every recorded field by name, per span; a run that knows its tracer sets typed attributes
//! on the SDK span directly. [`init_from_env`](super::init_from_env) exports this way.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use opentelemetry::trace::{Span as _, SpanBuilder, SpanKind, SpanRef, Status};
use opentelemetry::trace::{TraceContextExt as _, Tracer as _};
use opentelemetry::{Array, Context, Key, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SdkTracer, Span as SdkSpan};

use super::{Answered, Telemetry, UsageFields, known, provider_name};

/// The tracer of the runs that name none ([`set_tracer`]).
static GLOBAL: OnceLock<SdkTracer> = OnceLock::new();

/// Export the spans of every run that names no tracer of its own ([`Telemetry::tracer`])
/// straight to `tracer`, without `tracing`: the cheapest way to trace runs, and what
/// [`init_from_env`](super::init_from_env) does. The first tracer set stays: `false` when one
/// was set already.
///
/// A subscriber with [`layer`](super::layer) skips the spans of runs exported this way, so
/// none is exported twice; `tracing-opentelemetry`'s layer does not know to, so leave
/// `agentloop`'s spans out of it.
pub fn set_tracer(tracer: SdkTracer) -> bool {
    GLOBAL.set(tracer).is_ok()
}

/// The tracer a run with `telemetry` exports its spans to, if any.
pub(super) fn tracer(telemetry: &Telemetry) -> Option<&SdkTracer> {
    telemetry.tracer.as_ref().or_else(|| GLOBAL.get())
}

fn attribute(key: &'static str, value: impl Into<Value>) -> KeyValue {
    KeyValue::new(Key::from_static_str(key), value)
}

/// A string value, borrowed when it is a [`known`] one.
fn text(value: &str) -> Value {
    match known(value) {
        Some(known) => Value::from(known),
        None => Value::from(value.to_owned()),
    }
}

fn shared(value: &Arc<str>) -> Value {
    Value::String(StringValue::from(Arc::clone(value)))
}

/// `{operation} {target}`, or the operation alone.
fn name(operation: &'static str, target: Option<&str>) -> Cow<'static, str> {
    match target {
        Some(target) => Cow::Owned(format!("{operation} {target}")),
        None => Cow::Borrowed(operation),
    }
}

fn start(
    tracer: &SdkTracer,
    parent: &Context,
    name: Cow<'static, str>,
    kind: SpanKind,
    attributes: Vec<KeyValue>,
) -> SdkSpan {
    let mut builder = SpanBuilder::from_name(name);
    builder.span_kind = Some(kind);
    builder.attributes = Some(attributes);
    tracer.build_with_context(builder, parent)
}

/// A count as the integer OTLP carries (a count past `i64` as its text).
fn int(count: u64) -> Value {
    match i64::try_from(count) {
        Ok(count) => Value::I64(count),
        Err(_) => Value::from(count.to_string()),
    }
}

/// At most this many attributes are set when a span ends.
const END_ATTRIBUTES: usize = 10;

/// Attributes to set on a started span, on the stack: a span ends with (and a record sets) a
/// few, and a `Vec` each would be an allocation each.
#[derive(Default)]
pub(super) struct Few {
    inline: [Option<KeyValue>; END_ATTRIBUTES],
    len: usize,
    more: Vec<KeyValue>,
}

impl Few {
    pub(super) fn push(&mut self, attribute: KeyValue) {
        match self.inline.get_mut(self.len) {
            Some(slot) => {
                *slot = Some(attribute);
                self.len += 1;
            }
            None => self.more.push(attribute),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn into_attributes(self) -> impl Iterator<Item = KeyValue> {
        self.inline.into_iter().flatten().chain(self.more)
    }
}

/// How a span ends: its attributes, and `error.type` when it failed.
#[derive(Default)]
struct Ending {
    attributes: Few,
    error: Option<&'static str>,
}

impl Ending {
    fn push(&mut self, attribute: KeyValue) {
        self.attributes.push(attribute);
    }

    fn push_usage(&mut self, usage: &UsageFields) {
        self.push(attribute("gen_ai.usage.input_tokens", int(usage.input)));
        self.push(attribute("gen_ai.usage.output_tokens", int(usage.output)));
        let optional = [
            ("gen_ai.usage.cache_read.input_tokens", usage.read),
            ("gen_ai.usage.cache_creation.input_tokens", usage.write),
            ("gen_ai.usage.reasoning.output_tokens", usage.reasoning),
        ];
        for (key, count) in optional {
            if let Some(count) = count {
                self.push(attribute(key, int(count)));
            }
        }
    }

    /// Failed, with `error.type` `kind`.
    fn fail(&mut self, kind: &'static str) {
        self.error = Some(kind);
        self.push(attribute("error.type", kind));
    }

    /// End a span that a context holds.
    fn end_in(self, span: SpanRef<'_>) {
        if self.error.is_some() {
            span.set_status(Status::error(""));
        }
        if !self.attributes.is_empty() {
            span.set_attributes(self.attributes.into_attributes());
        }
        span.end();
    }

    /// End a span held alone.
    fn end(self, span: &mut SdkSpan) {
        if self.error.is_some() {
            span.set_status(Status::error(""));
        }
        if !self.attributes.is_empty() {
            span.set_attributes(self.attributes.into_attributes());
        }
        span.end();
    }
}

/// A run's `invoke_agent` span, under the context current where the run started: the
/// context its calls' spans go under.
pub(super) fn agent(
    tracer: &SdkTracer,
    telemetry: &Telemetry,
    provider: &str,
    model: &Arc<str>,
    conversation: Option<&str>,
) -> Context {
    let agent = telemetry.agent_name.as_ref();
    // Room for what it ends with too: the usage and `error.type`.
    let count = 3 + usize::from(agent.is_some()) + usize::from(conversation.is_some()) + 6;
    let mut attributes = Vec::with_capacity(count);
    attributes.push(attribute("gen_ai.operation.name", "invoke_agent"));
    attributes.push(attribute(
        "gen_ai.provider.name",
        text(provider_name(provider)),
    ));
    if let Some(agent) = agent {
        attributes.push(attribute("gen_ai.agent.name", shared(agent)));
    }
    attributes.push(attribute("gen_ai.request.model", shared(model)));
    if let Some(id) = conversation {
        attributes.push(attribute("gen_ai.conversation.id", id.to_owned()));
    }
    let parent = Context::current();
    let span = start(
        tracer,
        &parent,
        name("invoke_agent", agent.map(|a| &**a)),
        SpanKind::Internal,
        attributes,
    );
    parent.with_span(span)
}

/// End a run's span: its usage when it has a result, `error.type` when it failed.
pub(super) fn agent_end(run: &Context, usage: Option<&UsageFields>, error: Option<&'static str>) {
    let mut ending = Ending::default();
    if let Some(usage) = usage {
        ending.push_usage(usage);
    }
    if let Some(kind) = error {
        ending.fail(kind);
    }
    ending.end_in(run.span());
}

/// What a model call's span starts with.
pub(super) struct ChatStart<'a> {
    pub(super) provider: &'a str,
    pub(super) model: &'a Arc<str>,
    pub(super) streamed: bool,
    pub(super) max_tokens: Option<u32>,
    pub(super) temperature: Option<f32>,
    pub(super) top_p: Option<f32>,
    pub(super) top_k: Option<u32>,
    /// `gen_ai.system_instructions` and `gen_ai.input.messages`, when recorded.
    pub(super) content: Option<(Option<String>, String)>,
}

/// A model call's `chat` span under `parent`.
pub(super) fn chat(tracer: &SdkTracer, parent: &Context, call: ChatStart<'_>) -> SdkSpan {
    let options = [
        call.max_tokens.is_some(),
        call.temperature.is_some(),
        call.top_p.is_some(),
        call.top_k.is_some(),
    ];
    let content = call
        .content
        .as_ref()
        .map_or(0, |(system, _)| 1 + usize::from(system.is_some()));
    // Room for what it ends with too (`END_ATTRIBUTES` at most).
    let count = 4 + options.iter().filter(|set| **set).count() + content + END_ATTRIBUTES;
    let mut attributes = Vec::with_capacity(count);
    attributes.push(attribute("gen_ai.operation.name", "chat"));
    attributes.push(attribute(
        "gen_ai.provider.name",
        text(provider_name(call.provider)),
    ));
    attributes.push(attribute("gen_ai.request.model", shared(call.model)));
    attributes.push(attribute("gen_ai.request.stream", call.streamed));
    if let Some(max) = call.max_tokens {
        attributes.push(attribute("gen_ai.request.max_tokens", i64::from(max)));
    }
    let floats = [
        (
            "gen_ai.request.temperature",
            call.temperature.map(f64::from),
        ),
        ("gen_ai.request.top_p", call.top_p.map(f64::from)),
        ("gen_ai.request.top_k", call.top_k.map(f64::from)),
    ];
    for (key, value) in floats {
        if let Some(value) = value {
            attributes.push(attribute(key, value));
        }
    }
    if let Some((system, messages)) = call.content {
        if let Some(system) = system {
            attributes.push(attribute("gen_ai.system_instructions", system));
        }
        attributes.push(attribute("gen_ai.input.messages", messages));
    }
    start(
        tracer,
        parent,
        name("chat", Some(call.model)),
        SpanKind::Client,
        attributes,
    )
}

/// How a model call answered, for its span.
pub(super) struct ChatEnd<'a> {
    pub(super) answered: &'a Answered<'a>,
    pub(super) request_model: &'a Arc<str>,
    pub(super) output: Option<String>,
}

/// End a model call's span: how it ended (`None` when the run stopped it, or `Err` with its
/// `error.type`) and when its first chunk came.
pub(super) fn chat_end(
    call: &mut SdkSpan,
    ended: Option<Result<ChatEnd<'_>, &'static str>>,
    first_chunk: Option<f64>,
) {
    let mut ending = Ending::default();
    match ended {
        Some(Ok(ChatEnd {
            answered,
            request_model,
            output,
        })) => {
            if let Some(model) = answered.model {
                let value = if model == &**request_model {
                    shared(request_model)
                } else {
                    Value::from(model.to_owned())
                };
                ending.push(attribute("gen_ai.response.model", value));
            }
            if let Some(id) = answered.id {
                ending.push(attribute("gen_ai.response.id", id.to_owned()));
            }
            ending.push(finish_reasons(answered.finish_reason));
            ending.push_usage(&answered.usage);
            if let Some(output) = output {
                ending.push(attribute("gen_ai.output.messages", output));
            }
        }
        Some(Err(kind)) => ending.fail(kind),
        None => {}
    }
    if let Some(first) = first_chunk {
        ending.push(attribute("gen_ai.response.time_to_first_chunk", first));
    }
    ending.end(call);
}

/// `gen_ai.response.finish_reasons`: the conventions' array of the call's one reason.
pub(super) fn finish_reasons(reason: &str) -> KeyValue {
    let reason = match known(reason) {
        Some(known) => StringValue::from(known),
        None => StringValue::from(reason.to_owned()),
    };
    attribute(
        "gen_ai.response.finish_reasons",
        Value::Array(Array::String(vec![reason])),
    )
}

/// A tool's `execute_tool` span under `parent`, in the context its handler runs in.
pub(super) fn tool(
    tracer: &SdkTracer,
    parent: &Context,
    tool_name: &Arc<str>,
    id: &str,
    arguments: Option<String>,
) -> Context {
    // Room for what it ends with too: its result and `error.type`.
    let count = 4 + usize::from(arguments.is_some()) + 2;
    let mut attributes = Vec::with_capacity(count);
    attributes.push(attribute("gen_ai.operation.name", "execute_tool"));
    attributes.push(attribute("gen_ai.tool.name", shared(tool_name)));
    attributes.push(attribute("gen_ai.tool.call.id", id.to_owned()));
    attributes.push(attribute("gen_ai.tool.type", "function"));
    if let Some(arguments) = arguments {
        attributes.push(attribute("gen_ai.tool.call.arguments", arguments));
    }
    let span = start(
        tracer,
        parent,
        name("execute_tool", Some(tool_name)),
        SpanKind::Internal,
        attributes,
    );
    parent.with_span(span)
}

/// End a tool's span: its result when recorded, `error.type` when it did not complete.
pub(super) fn tool_end(call: &Context, result: Option<String>, error: Option<&'static str>) {
    let mut ending = Ending::default();
    if let Some(result) = result {
        ending.push(attribute("gen_ai.tool.call.result", result));
    }
    if let Some(kind) = error {
        ending.fail(kind);
    }
    ending.end_in(call.span());
}

/// A call's OpenTelemetry span: a model call's alone, a tool's in the context its handler
/// runs in.
// The call's trace that holds it is boxed already; boxing the span too would cost an
// allocation per model call.
#[allow(clippy::large_enum_variant)]
pub(super) enum CallSpan {
    Chat(SdkSpan),
    Tool(Context),
}
