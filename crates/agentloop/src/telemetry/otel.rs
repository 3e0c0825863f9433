//! OTLP/HTTP (protobuf) export of the runs' spans and the GenAI metrics (feature `otel`).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::metrics::Histogram;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Key, KeyValue, StringValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;

use super::{known, provider_name};
use crate::error::Error;
use crate::message::Response;

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// An exporter could not be built from the `OTEL_*` variables.
    #[error(
        "the OTLP {signal} exporter cannot be built: {source}; check the OTEL_EXPORTER_OTLP_* variables"
    )]
    Exporter {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// What the exporter said.
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// The process has a global `tracing` subscriber already.
    #[error(
        "a global tracing subscriber is set already; set telemetry up before any other subscriber"
    )]
    SubscriberSet,
}

/// Keeps the exporters running; dropping it flushes what is buffered and stops them.
#[must_use = "dropping the guard stops the export"]
pub struct TelemetryGuard {
    tracer: SdkTracerProvider,
    meter: Option<SdkMeterProvider>,
}

impl std::fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryGuard")
            .field("metrics", &self.meter.is_some())
            .finish()
    }
}

impl TelemetryGuard {
    /// Export what is buffered now (the guard's drop does it too).
    pub fn flush(&self) {
        if let Err(error) = self.tracer.force_flush() {
            tracing::debug!(%error, "flushing spans failed");
        }
        if let Some(meter) = &self.meter
            && let Err(error) = meter.force_flush()
        {
            tracing::debug!(%error, "flushing metrics failed");
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        // Shutting down flushes; a collector that is gone must not fail the program's exit.
        let _ = self.tracer.shutdown();
        if let Some(meter) = &self.meter {
            let _ = meter.shutdown();
        }
    }
}

fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// Export the runs' spans and the GenAI metrics over OTLP/HTTP (protobuf) as the standard
/// variables say: `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
/// `_METRICS_ENDPOINT`), `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES` and the exporter's other `OTEL_*` settings. `None` when no
/// endpoint is set (or `OTEL_SDK_DISABLED=true`): nothing is installed then.
///
/// Installs a global `tracing` subscriber that sends `agentloop`'s spans (level INFO and up)
/// to OpenTelemetry. Keep the guard until the program ends: dropping it flushes.
pub fn init_from_env() -> Result<Option<TelemetryGuard>, InitError> {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let general = env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
    let traces = general || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
    let metrics = general || env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_some();
    if !traces && !metrics {
        return Ok(None);
    }
    // The builder's default detectors read OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    let resource = Resource::builder().build();
    let mut tracer = SdkTracerProvider::builder().with_resource(resource.clone());
    if traces {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()
            .map_err(|source| InitError::Exporter {
                signal: "traces",
                source,
            })?;
        tracer = tracer.with_batch_exporter(exporter);
    }
    let tracer = tracer.build();
    let meter = if metrics {
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()
            .map_err(|source| InitError::Exporter {
                signal: "metrics",
                source,
            })?;
        let meter = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_periodic_exporter(exporter)
            .build();
        let _ = record_metrics(&meter);
        Some(meter)
    } else {
        None
    };
    let subscriber = tracing_subscriber::registry().with(layer(tracer.tracer("agentloop")));
    tracing::subscriber::set_global_default(subscriber).map_err(|_| InitError::SubscriberSet)?;
    Ok(Some(TelemetryGuard { tracer, meter }))
}

/// The layer [`init_from_env`] installs, for a subscriber of your own: it hands `agentloop`'s
/// spans (level INFO and up, and nothing else) to `tracer`, with the conventions' attributes
/// only (no source locations, threads, levels, targets or busy times). While a span is
/// entered (a tool's handler runs in its `execute_tool` span) its context is
/// `opentelemetry::Context::current()`, so OpenTelemetry spans of your own nest under it.
/// It builds the SDK spans itself, which costs less per span than `tracing-opentelemetry`'s
/// generic layer; that layer still works for `agentloop`'s spans if you prefer it.
///
/// ```no_run
/// use opentelemetry::trace::TracerProvider as _;
/// use tracing_subscriber::layer::SubscriberExt as _;
/// let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
/// let subscriber = tracing_subscriber::registry()
///     .with(agentloop::telemetry::layer(provider.tracer("agentloop")));
/// tracing::subscriber::set_global_default(subscriber).unwrap();
/// ```
pub fn layer<S>(tracer: SdkTracer) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    super::layer::SpanLayer::new(tracer)
        .with_filter(Targets::new().with_target("agentloop", tracing::Level::INFO))
}

/// Record the conventions' metrics (token usage, operation, tool and agent durations) with
/// `provider`, as [`init_from_env`] does with its own. The first provider set stays: `false`
/// when one was set already.
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
