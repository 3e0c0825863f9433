//! What a run's spans cost: the client CPU of the peer benchmark's workload (a `get_weather`
//! call in 8 argument fragments, the tool, a 155-word answer in 60 deltas, streamed, one run at
//! a time) on two models:
//!
//! - `http`: the OpenAI provider over loopback HTTP against the testkit's pre-rendered server
//!   (one SSE event per write), which runs in a child process so that its CPU is not counted:
//!   the peer matrix's `event / stream / 1` cell (`TELEMETRY_BENCH_SERVER_CPU=0` pins the
//!   server to CPU 0, apart from the client, as the peer matrix does);
//! - `scripted`: the testkit's scripted model, no network (the run layer alone);
//!
//! each with
//!
//! - `off`: no subscriber, no tracer, no metrics (what every untraced program pays: a callsite
//!   check per span);
//! - `filtered`: a subscriber that does not want `agentloop`'s spans;
//! - `registry`: `tracing`'s registry with a layer that wants `agentloop`'s spans and does
//!   nothing with them: what building the `tracing` spans costs;
//! - `otel_layer` (feature `otel`): [`agentloop::telemetry::layer`] on an SDK tracer provider
//!   whose batch exporter drops every span: the OpenTelemetry spans made from the `tracing`
//!   ones;
//! - `otel_noop` (feature `otel`): what [`agentloop::telemetry::init_from_env`] sets up, with
//!   exporters that drop everything: the runs build their OpenTelemetry spans themselves for
//!   that provider's tracer, and record the GenAI metrics with a periodic reader
//!   (`TELEMETRY_BENCH_NO_METRICS=1` leaves the metrics out, for the spans' share).
//!
//! The OpenTelemetry variants' runs record the metrics (`Telemetry::metrics`), the others'
//! do not. CPU is the process's (`CLOCK_PROCESS_CPUTIME_ID`: every thread, the span
//! processor's and the metric reader's included). Each round runs every variant's batch in
//! turn, the order rotating; the table gives each variant's median over the rounds, per run
//! and as a ratio to `off`. `TELEMETRY_BENCH_ONLY=otel_noop` keeps `off` and that variant,
//! `TELEMETRY_BENCH_WORKLOAD=http` one workload:
//!
//! ```text
//! cargo bench -p agentloop --features otel --bench telemetry --no-run
//! TELEMETRY_BENCH_ONLY=otel_noop TELEMETRY_BENCH_RUNS=2000 TELEMETRY_BENCH_ROUNDS=9 \
//!   taskset -c 1 target/release/deps/telemetry-* --bench
//! ```
//!
//! Several dispatchers alive in one process make `tracing` ask each span callsite whether it
//! is wanted every time (its cached interest becomes "sometimes"), which a program with one
//! global subscriber never pays; `otel_noop` and `off` pay it alike. To run one variant as
//! the process's global subscriber (`otel_noop`: `telemetry::install`, as `init_from_env`
//! does), processes alternating, and compare their medians:
//!
//! ```text
//! for i in 1 2 3 4 5; do for v in off otel_noop; do
//!   TELEMETRY_BENCH_GLOBAL=$v taskset -c 1 target/release/deps/telemetry-* --bench; done; done
//! ```
//!
//! Separate processes differ by a few microseconds per HTTP run on their own (their memory
//! layouts differ), so the one-process comparison is the finer one.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agentloop::provider::openai::OpenAi;
use agentloop::run::RunEvent;
use agentloop::stream::StreamEvent;
use agentloop::{Agent, ContentBlock, Provider, Request, Tool};
use agentloop_testkit::{ScriptedModel, Turn, Wire};
use futures::StreamExt;
use nix::time::{ClockId, clock_gettime};
#[cfg(feature = "otel")]
use opentelemetry::trace::TracerProvider as _;
#[cfg(feature = "otel")]
use opentelemetry_sdk::{
    error::OTelSdkResult,
    metrics::{SdkMeterProvider, Temporality, data::ResourceMetrics, exporter::PushMetricExporter},
    trace::{SdkTracerProvider, SpanData, SpanExporter},
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tracing::Dispatch;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;

/// Set in the child process that serves the model.
const SERVE: &str = "TELEMETRY_BENCH_SERVE";

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

/// The peer matrix's two turns.
fn turns() -> [Turn; 2] {
    [
        Turn::tool_call_raw("get_weather", r#"{"city":"Paris"}"#)
            .with_argument_pieces(8)
            .with_usage(120, 18),
        Turn::text(answer())
            .with_text_pieces(60)
            .with_usage(160, 210),
    ]
}

fn answered_tool(request: &Request) -> bool {
    request.messages.iter().any(|message| {
        message
            .content
            .iter()
            .any(|block| matches!(block, ContentBlock::ToolResult(_)))
    })
}

fn agent(model: impl Provider) -> Agent {
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

fn scripted() -> Agent {
    let [call, text] = turns();
    let model = ScriptedModel::from_fn(move |request, _| {
        if answered_tool(request) {
            text.clone()
        } else {
            call.clone()
        }
    })
    .unrecorded();
    agent(model)
}

async fn streamed(agent: &Agent) {
    let mut events = agent.run_stream("What's the weather in Paris?");
    let mut text = 0;
    while let Some(event) = events.next().await {
        match event {
            RunEvent::Model(StreamEvent::TextDelta { text: delta }) => text += delta.len(),
            RunEvent::RunFinish { result } => assert!(result.error.is_none(), "{result:?}"),
            _ => {}
        }
    }
    assert!(text > 500, "the answer arrived");
}

/// Drops every span it is given.
#[cfg(feature = "otel")]
#[derive(Debug)]
struct Discard;

#[cfg(feature = "otel")]
impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        std::hint::black_box(batch);
        Ok(())
    }
}

#[cfg(feature = "otel")]
impl PushMetricExporter for Discard {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        std::hint::black_box(metrics);
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

/// A variant: its name, the subscriber its batches run under (`None`: no subscriber), the
/// tracer its runs build their spans for and whether they record the metrics.
struct Variant {
    name: &'static str,
    dispatch: Option<Dispatch>,
    #[cfg(feature = "otel")]
    tracer: Option<opentelemetry_sdk::trace::SdkTracer>,
    metrics: bool,
}

impl Variant {
    fn new(name: &'static str, dispatch: Option<Dispatch>) -> Self {
        Self {
            name,
            dispatch,
            #[cfg(feature = "otel")]
            tracer: None,
            metrics: false,
        }
    }
}

/// The variants; `global`: the one that will be the process's global subscriber, alone.
fn variants(global: Option<&str>) -> Vec<Variant> {
    let filtered = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .with_filter(Targets::new().with_target("nothing", tracing::Level::INFO)),
    );
    let mut variants = vec![
        Variant::new("off", None),
        Variant::new("filtered", Some(Dispatch::new(filtered))),
    ];
    {
        /// Wants `agentloop`'s spans (through the filter) and does nothing with them.
        struct Nothing;
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Nothing {}
        let registry = tracing_subscriber::registry().with(
            Nothing.with_filter(Targets::new().with_target("agentloop", tracing::Level::INFO)),
        );
        variants.push(Variant::new("registry", Some(Dispatch::new(registry))));
    }
    #[cfg(feature = "otel")]
    {
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(Discard)
            .build();
        let tracer = provider.tracer("agentloop");
        // Kept for the process: the span processor's thread.
        std::mem::forget(provider);
        // Recorded by the OpenTelemetry variants' runs only (`Telemetry::metrics`).
        let metrics = std::env::var_os("TELEMETRY_BENCH_NO_METRICS").is_none();
        let meter = metrics.then(|| {
            let meter = SdkMeterProvider::builder()
                .with_periodic_exporter(Discard)
                .build();
            // Kept for the process: the instruments and the reader's thread.
            std::mem::forget(meter.clone());
            meter
        });
        let traced =
            tracing_subscriber::registry().with(agentloop::telemetry::layer(tracer.clone()));
        variants.push(Variant {
            metrics,
            ..Variant::new("otel_layer", Some(Dispatch::new(traced)))
        });
        if global == Some("otel_noop") {
            // What `init_from_env` installs, with exporters that drop everything.
            agentloop::telemetry::install(tracer, meter.as_ref()).expect("the only subscriber");
            variants.push(Variant {
                metrics,
                ..Variant::new("otel_noop", None)
            });
        } else {
            if let Some(meter) = &meter {
                assert!(agentloop::telemetry::record_metrics(meter));
            }
            variants.push(Variant {
                tracer: Some(tracer),
                metrics,
                ..Variant::new("otel_noop", None)
            });
        }
    }
    #[cfg(not(feature = "otel"))]
    let _ = global;
    variants
}

/// `runs` streamed runs; the CPU time they took.
fn batch(
    runtime: &tokio::runtime::Runtime,
    agent: &Agent,
    variant: &Variant,
    runs: usize,
) -> Duration {
    let traced = agent.with_options(|o| {
        o.telemetry.metrics = variant.metrics;
        #[cfg(feature = "otel")]
        {
            o.telemetry.tracer = variant.tracer.clone();
        }
    });
    let agent = &traced;
    let run_all = || {
        let started = cpu();
        runtime.block_on(async {
            for _ in 0..runs {
                streamed(agent).await;
            }
        });
        cpu() - started
    };
    match &variant.dispatch {
        Some(dispatch) => tracing::dispatcher::with_default(dispatch, run_all),
        None => run_all(),
    }
}

fn cpu() -> Duration {
    let now = clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID).expect("the process's CPU clock");
    Duration::new(now.tv_sec() as u64, now.tv_nsec() as u32)
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The child process: serve the turns on a loopback port, print it, serve until killed.
fn serve() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        println!("{}", listener.local_addr().expect("its address"));
        agentloop_testkit::serve_prerendered_on(listener, Wire::OpenAi, turns())
            .await
            .expect("the server runs");
    });
}

/// The server in a child process (this binary again), and its base URL.
///
/// `TELEMETRY_BENCH_SERVER_CPU=0` pins it to CPU 0 (with `taskset`), as the peer matrix pins
/// its servers apart from the client: a server sharing the client's core also shares its caches.
fn server() -> (Child, String) {
    let exe = std::env::current_exe().expect("this binary's path");
    let mut command = match std::env::var("TELEMETRY_BENCH_SERVER_CPU") {
        Ok(cpu) => {
            let mut taskset = Command::new("taskset");
            taskset.arg("-c").arg(cpu).arg(exe);
            taskset
        }
        Err(_) => Command::new(exe),
    };
    let mut child = command
        .env(SERVE, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the server process starts");
    let stdout = child.stdout.take().expect("its stdout");
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("its address");
    (child, format!("http://{}/v1", line.trim()))
}

fn main() {
    if std::env::var_os(SERVE).is_some() {
        return serve();
    }
    // `cargo test --benches` runs this with `--test`: once, briefly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let runs = if quick {
        3
    } else {
        env("TELEMETRY_BENCH_RUNS", 1000)
    };
    let rounds = if quick {
        1
    } else {
        env("TELEMETRY_BENCH_ROUNDS", 7)
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (mut child, base_url) = server();
    let http = agent(OpenAi::compatible(base_url).expect("the provider"));
    let mut workloads = vec![("http", http), ("scripted", scripted())];
    // For a profile of one workload: `TELEMETRY_BENCH_WORKLOAD=http`.
    if let Ok(only) = std::env::var("TELEMETRY_BENCH_WORKLOAD") {
        workloads.retain(|(name, _)| *name == only);
    }
    let global = std::env::var("TELEMETRY_BENCH_GLOBAL").ok();
    let mut variants = variants(global.as_deref());
    // For a profile of one variant: `TELEMETRY_BENCH_ONLY=otel_noop` (`off` stays, as the base).
    if let Ok(only) = std::env::var("TELEMETRY_BENCH_ONLY") {
        variants.retain(|v| v.name == "off" || v.name == only);
    }
    // One variant as the process's global subscriber, nothing else alive (see the module docs).
    if let Some(global) = global {
        variants.retain(|v| v.name == global);
        let Some(variant) = variants.first_mut() else {
            panic!("no variant `{global}`");
        };
        if let Some(dispatch) = variant.dispatch.take() {
            tracing::dispatcher::set_global_default(dispatch).expect("the only global subscriber");
        }
    }
    for (workload, agent) in &workloads {
        // Warm up: connections, allocator, price table.
        for variant in &variants {
            batch(&runtime, agent, variant, runs.min(50));
        }
        let mut per_run: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
        for round in 0..rounds {
            for i in 0..variants.len() {
                let v = (i + round) % variants.len();
                let took = batch(&runtime, agent, &variants[v], runs);
                per_run[v].push(took.as_secs_f64() * 1e6 / runs as f64);
            }
        }
        let off = median(per_run[0].clone());
        println!("{workload}: {runs} runs x {rounds} rounds, process CPU per run (median)");
        for (variant, samples) in variants.iter().zip(per_run) {
            let mut sorted = samples.clone();
            sorted.sort_by(f64::total_cmp);
            let m = median(samples);
            println!(
                "  {:<14} {:>8.1} us  x{:.3}  (rounds: {:.1} .. {:.1})",
                variant.name,
                m,
                m / off,
                sorted[0],
                sorted[sorted.len() - 1]
            );
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}
