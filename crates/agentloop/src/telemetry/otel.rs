//! OTLP/HTTP (protobuf) export of the runs' spans and the GenAI metrics (feature `otel`).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{FilterFn, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;

use super::metrics::record_metrics;
use super::set_tracer;

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
/// The runs build their OpenTelemetry spans themselves ([`set_tracer`]), which costs less
/// than going through `tracing`; a global `tracing` subscriber is installed for `agentloop`'s
/// other spans and events (level INFO and up). Keep the guard until the program ends: dropping
/// it flushes.
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
        Some(meter)
    } else {
        None
    };
    install(tracer.tracer("agentloop"), meter.as_ref())?;
    Ok(Some(TelemetryGuard { tracer, meter }))
}

/// What [`init_from_env`] does, with exporters of your own: the runs build their spans for
/// `tracer` themselves ([`set_tracer`]), the conventions' metrics are recorded with `meter`
/// ([`record_metrics`]), and a global `tracing` subscriber hands `agentloop`'s other spans (an
/// MCP call's) and its events (level INFO and up) to `tracer`; the runs' own `tracing` spans
/// are not even made then. Fails when the process has a global subscriber already.
pub fn install(tracer: SdkTracer, meter: Option<&SdkMeterProvider>) -> Result<(), InitError> {
    let others = FilterFn::new(|metadata| {
        metadata.target().starts_with("agentloop")
            && *metadata.level() <= tracing::Level::INFO
            && !super::is_run_span(metadata)
    })
    .with_max_level_hint(tracing::Level::INFO);
    let subscriber = tracing_subscriber::registry()
        .with(super::layer::SpanLayer::new(tracer.clone()).with_filter(others));
    tracing::subscriber::set_global_default(subscriber).map_err(|_| InitError::SubscriberSet)?;
    set_tracer(tracer);
    if let Some(meter) = meter {
        record_metrics(meter);
    }
    Ok(())
}

/// The layer that hands `agentloop`'s spans to OpenTelemetry, for a subscriber of your own
/// (with [`install`] or [`init_from_env`], the runs' spans do not go through it): it hands
/// `agentloop`'s spans (level INFO and up, and nothing else) to `tracer`, with the conventions'
/// attributes only (no source locations, threads, levels, targets or busy times). While a span is
/// entered (a tool's handler runs in its `execute_tool` span) its context is
/// `opentelemetry::Context::current()`, so OpenTelemetry spans of your own nest under it.
/// It builds the SDK spans itself, which costs less per span than `tracing-opentelemetry`'s
/// generic layer; that layer still works for `agentloop`'s spans if you prefer it. Runs that
/// build their spans themselves ([`set_tracer`], [`Telemetry::tracer`](super::Telemetry::tracer))
/// mark theirs, and this layer leaves those out, so none is exported twice.
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
