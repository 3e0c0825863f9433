//! The GenAI conventions' metrics (feature `otel`): token usage and the durations of model
//! calls, tools and runs.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::metrics::Histogram;
use opentelemetry::{Key, KeyValue, StringValue, Value};
use opentelemetry_sdk::metrics::SdkMeterProvider;

use super::{known, provider_name};
use crate::error::Error;
use crate::message::Response;

/// Whether the conventions' metrics are recorded.
pub(super) fn metrics_on() -> bool {
    INSTRUMENTS.get().is_some()
}

/// Record the conventions' metrics (token usage, operation, tool and agent durations) with
/// `provider`, as [`init_from_env`](super::init_from_env) does with its own. The first
/// provider set stays: `false` when one was set already.
pub fn record_metrics(provider: &SdkMeterProvider) -> bool {
    INSTRUMENTS.set(Instruments::new(provider)).is_ok()
}

/// The conventions' histograms, set once the metrics exporter is.
struct Instruments {
    token_usage: Histogram<u64>,
    operation_duration: Histogram<f64>,
    tool_duration: Histogram<f64>,
    agent_duration: Histogram<f64>,
}

static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();

/// The conventions' bucket boundaries for durations in seconds.
const SECONDS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

impl Instruments {
    fn new(provider: &SdkMeterProvider) -> Self {
        use opentelemetry::metrics::MeterProvider as _;
        let meter = provider.meter("agentloop");
        let seconds = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(SECONDS.to_vec())
                .build()
        };
        Self {
            token_usage: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Number of input and output tokens used.")
                .with_boundaries(
                    (0..14).map(|i| 4f64.powi(i)).collect(), // 1, 4, 16, ... 67108864
                )
                .build(),
            operation_duration: seconds(
                "gen_ai.client.operation.duration",
                "GenAI operation duration.",
            ),
            tool_duration: seconds(
                "gen_ai.execute_tool.duration",
                "Duration of a tool execution.",
            ),
            agent_duration: seconds(
                "gen_ai.invoke_agent.duration",
                "Duration of an agent invocation.",
            ),
        }
    }
}

/// A string attribute's value, borrowed when it is a [`known`] one.
fn value(text: &str) -> Value {
    match known(text) {
        Some(known) => Value::from(known),
        None => Value::from(text.to_owned()),
    }
}

/// `model` as an attribute value: the call's shared copy when they are the same.
fn model_value(model: &str, shared: &Arc<str>) -> Value {
    if model == &**shared {
        Value::String(StringValue::from(Arc::clone(shared)))
    } else {
        Value::from(model.to_owned())
    }
}

/// A placeholder in an attribute array, never recorded.
fn unset() -> KeyValue {
    KeyValue::new(Key::from_static_str(""), false)
}

/// A model call's token usage and duration. The three measurements share one attribute array,
/// each a prefix of it or its last entry changed.
pub(super) fn chat_metrics(
    provider: &str,
    request_model: &Arc<str>,
    answer: Result<&Response, &Error>,
    took: Duration,
) {
    let Some(instruments) = INSTRUMENTS.get() else {
        return;
    };
    let mut attributes = [
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.provider.name", value(provider_name(provider))),
        KeyValue::new(
            "gen_ai.request.model",
            Value::String(StringValue::from(Arc::clone(request_model))),
        ),
        unset(),
        unset(),
    ];
    let mut len = 3;
    match answer {
        Ok(response) => {
            if !response.model.is_empty() {
                attributes[len] = KeyValue::new(
                    "gen_ai.response.model",
                    model_value(&response.model, request_model),
                );
                len += 1;
            }
            instruments
                .operation_duration
                .record(took.as_secs_f64(), &attributes[..len]);
            let usage = &response.usage;
            let cached = usage.cache_read_tokens + usage.cache_write_tokens;
            let input = if super::cache_apart(provider) {
                usage.input_tokens + cached
            } else {
                usage.input_tokens
            };
            attributes[len] = KeyValue::new("gen_ai.token.type", "input");
            instruments.token_usage.record(input, &attributes[..=len]);
            attributes[len] = KeyValue::new("gen_ai.token.type", "output");
            instruments
                .token_usage
                .record(usage.output_tokens, &attributes[..=len]);
        }
        Err(error) => {
            attributes[len] = KeyValue::new("error.type", error.kind());
            instruments
                .operation_duration
                .record(took.as_secs_f64(), &attributes[..=len]);
        }
    }
}

/// A tool call's duration.
pub(super) fn tool_duration(name: &Arc<str>, took: Duration, error: Option<&'static str>) {
    let Some(instruments) = INSTRUMENTS.get() else {
        return;
    };
    let attributes = [
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
        KeyValue::new(
            "gen_ai.tool.name",
            Value::String(StringValue::from(Arc::clone(name))),
        ),
        match error {
            Some(kind) => KeyValue::new("error.type", kind),
            None => unset(),
        },
    ];
    let len = if error.is_some() { 3 } else { 2 };
    instruments
        .tool_duration
        .record(took.as_secs_f64(), &attributes[..len]);
}

/// A run's duration.
pub(super) fn agent_duration(provider: &str, took: Duration, error: Option<&'static str>) {
    let Some(instruments) = INSTRUMENTS.get() else {
        return;
    };
    let attributes = [
        KeyValue::new("gen_ai.operation.name", "invoke_agent"),
        KeyValue::new("gen_ai.provider.name", value(provider_name(provider))),
        match error {
            Some(kind) => KeyValue::new("error.type", kind),
            None => unset(),
        },
    ];
    let len = if error.is_some() { 3 } else { 2 };
    instruments
        .agent_duration
        .record(took.as_secs_f64(), &attributes[..len]);
}
