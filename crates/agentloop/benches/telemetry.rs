//! What a run's spans cost: the peer benchmark's workload (a `get_weather` call in 8 argument
//! fragments, the tool, a 60-delta answer) on the scripted model, streamed, with
//!
//! - `off`: no subscriber (what every untraced program pays: a callsite check per span);
//! - `filtered`: a subscriber that does not want `agentloop`'s spans;
//! - `otel_noop` (feature `otel`): `tracing-opentelemetry` with an SDK tracer provider whose batch exporter
//!   drops every span (the cost of building and handing over the spans, without the network).

use std::hint::black_box;

use agentloop::run::RunEvent;
use agentloop::stream::StreamEvent;
use agentloop::{Agent, ContentBlock, Request, Tool};
use agentloop_testkit::{ScriptedModel, Turn};
use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
#[cfg(feature = "otel")]
use opentelemetry::trace::TracerProvider as _;
#[cfg(feature = "otel")]
use opentelemetry_sdk::{
    error::OTelSdkResult,
    trace::{SdkTracerProvider, SpanData, SpanExporter},
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;

/// Current weather for a city.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    /// City name, e.g. Paris
    city: String,
}

fn answer() -> String {
    let words = "It is mild in Paris today with light wind from the west and a few clouds";
    let mut text = String::new();
    for word in words.split(' ').cycle().take(155) {
        text.push_str(word);
        text.push(' ');
    }
    text
}

fn answered_tool(request: &Request) -> bool {
    request.messages.iter().any(|message| {
        message
            .content
            .iter()
            .any(|block| matches!(block, ContentBlock::ToolResult(_)))
    })
}

fn agent() -> Agent {
    let text = answer();
    let model = ScriptedModel::from_fn(move |request, _| {
        if answered_tool(request) {
            Turn::text(text.clone()).with_text_pieces(60)
        } else {
            Turn::tool_call("get_weather", json!({"city": "Paris"})).with_argument_pieces(8)
        }
    })
    .unrecorded();
    Agent::builder(model)
        .model("m")
        .tool(Tool::function(
            "get_weather",
            "Current weather for a city",
            |args: GetWeather| async move {
                Ok::<_, std::convert::Infallible>(json!({"city": args.city, "temp_c": 18}))
            },
        ))
        .build()
}

async fn streamed(agent: &Agent) -> usize {
    let mut events = agent.run_stream("What's the weather in Paris?");
    let mut text = 0;
    while let Some(event) = events.next().await {
        if let RunEvent::Model(StreamEvent::TextDelta { text: delta }) = event {
            text += delta.len();
        }
    }
    text
}

/// Drops every span it is given.
#[cfg(feature = "otel")]
#[derive(Debug)]
struct Discard;

#[cfg(feature = "otel")]
impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        black_box(batch);
        Ok(())
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let agent = agent();
    let mut group = c.benchmark_group("telemetry");
    group.bench_function("off", |b| {
        b.iter(|| runtime.block_on(streamed(black_box(&agent))))
    });

    let filtered = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .with_filter(Targets::new().with_target("nothing", tracing::Level::INFO)),
    );
    tracing::subscriber::with_default(filtered, || {
        group.bench_function("filtered", |b| {
            b.iter(|| runtime.block_on(streamed(black_box(&agent))))
        });
    });

    #[cfg(feature = "otel")]
    otel_noop(&mut group, &runtime, &agent);
    group.finish();
}

#[cfg(feature = "otel")]
fn otel_noop(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    runtime: &tokio::runtime::Runtime,
    agent: &Agent,
) {
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("agentloop"))
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_tracked_inactivity(false);
    let traced = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(traced, || {
        group.bench_function("otel_noop", |b| {
            b.iter(|| runtime.block_on(streamed(black_box(agent))))
        });
    });
    let _ = provider.shutdown();
}

criterion_group!(benches, bench);
criterion_main!(benches);
