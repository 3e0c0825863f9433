//! `telemetry::layer` under a subscriber of the test's own (feature `otel`): while a tool's
//! handler runs, its `execute_tool` span is OpenTelemetry's current context, so a span the
//! handler starts itself nests under it, in the run's trace.

use std::sync::{Arc, Mutex};

use agentloop::{Agent, Tool};
use agentloop_testkit::{ScriptedModel, Turn};
use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt as _;

/// Keeps every span it is given.
#[derive(Debug, Clone, Default)]
struct Keep(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Keep {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

#[tokio::test]
async fn a_span_started_in_a_tool_nests_under_its_execute_tool_span() {
    let kept = Keep::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(kept.clone())
        .build();
    let tracer = provider.tracer("agentloop");
    let subscriber = tracing_subscriber::registry().with(agentloop::telemetry::layer(tracer));
    let _default = tracing::subscriber::set_default(subscriber);

    let own = provider.tracer("the-app");
    let weather = Tool::function("get_weather", "Current weather", move |c: City| {
        let own = own.clone();
        async move {
            let mut span = own.start_with_context("lookup", &opentelemetry::Context::current());
            span.end();
            Ok::<_, String>(format!("sunny in {}", c.city))
        }
    });
    let model = ScriptedModel::new([
        Turn::tool_calls([("get_weather", json!({"city": "Paris"}))]).with_ids(["call_a"]),
        Turn::text("Sunny."),
    ]);
    let agent = Agent::builder(model).model("m").tool(weather).build();
    agent.run("Weather?").await.unwrap();
    provider.force_flush().unwrap();

    let spans = kept.0.lock().unwrap().clone();
    let find = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no span {name}: {spans:?}"))
    };
    let run = find("invoke_agent");
    let tool = find("execute_tool get_weather");
    let lookup = find("lookup");
    assert_eq!(tool.parent_span_id, run.span_context.span_id());
    assert_eq!(lookup.parent_span_id, tool.span_context.span_id());
    assert_eq!(
        lookup.span_context.trace_id(),
        run.span_context.trace_id(),
        "one trace"
    );
    // Outside the handler no agentloop context stays current.
    assert!(!opentelemetry::Context::current().has_active_span());
}
