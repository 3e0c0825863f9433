//! Runs exported by `telemetry::init_from_env` (feature `otel`) to a real OTLP/HTTP receiver on
//! loopback, whose protobuf bodies are decoded with `opentelemetry-proto`: the span tree, names,
//! kinds and attributes, exactly, and the metrics.
//!
//! Conventions: OpenTelemetry GenAI semantic conventions, `semantic-conventions-genai` at commit
//! 002c8a6 (docs/gen-ai/gen-ai-spans.md, gen-ai-agent-spans.md, gen-ai-metrics.md). OTLP/HTTP:
//! protobuf bodies POSTed to `/v1/traces` and `/v1/metrics` under the endpoint.
//!
//! `init_from_env` installs the process's global subscriber, so this file holds one test.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agentloop::{Agent, Tool};
use agentloop_testkit::{ScriptedModel, Turn};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind, status::StatusCode};
use prost::Message as _;
use serde_json::json;

#[derive(Clone, Default)]
struct Received {
    spans: Arc<Mutex<Vec<Span>>>,
    metrics: Arc<Mutex<Vec<String>>>,
    service: Arc<Mutex<Option<String>>>,
}

async fn traces(State(got): State<Received>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP trace request");
    for resource in request.resource_spans {
        if let Some(resource) = &resource.resource {
            for kv in &resource.attributes {
                if kv.key == "service.name" {
                    *got.service.lock().unwrap() = kv.value.as_ref().map(text);
                }
            }
        }
        for scope in resource.scope_spans {
            got.spans.lock().unwrap().extend(scope.spans);
        }
    }
    Vec::new()
}

async fn metrics(State(got): State<Received>, body: Bytes) -> Vec<u8> {
    let request = ExportMetricsServiceRequest::decode(body).expect("an OTLP metrics request");
    for resource in request.resource_metrics {
        for scope in resource.scope_metrics {
            for metric in scope.metrics {
                got.metrics.lock().unwrap().push(metric.name);
            }
        }
    }
    Vec::new()
}

/// A receiver on its own runtime and thread: the exporters block their threads while they
/// send, and the guard's drop blocks the test's.
fn receiver() -> (String, Received) {
    let got = Received::default();
    let app = Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/metrics", post(metrics))
        .with_state(got.clone());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    (format!("http://{address}"), got)
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::ArrayValue(array)) => {
            let items: Vec<String> = array.values.iter().map(text).collect();
            format!("[{}]", items.join(","))
        }
        other => format!("{other:?}"),
    }
}

fn attributes(span: &Span) -> BTreeMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

fn agent(name: &str, second_city: &str) -> Agent {
    let weather = Tool::function("get_weather", "Current weather", |c: City| async move {
        if c.city == "Atlantis" {
            return Err(format!("no weather for {}", c.city));
        }
        Ok(format!("sunny in {}", c.city))
    });
    // The answer's model counts 3 of its output tokens as reasoning.
    let mut answer = Turn::text("Sunny.").with_usage(20, 7);
    answer.usage.reasoning_tokens = 3;
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": second_city})),
        ])
        .with_ids(["call_a", "call_b"])
        .with_usage(10, 5),
        answer,
    ]);
    Agent::builder(model)
        .model("m")
        .name(name)
        .temperature(0.5)
        .tool(weather)
        .build()
}

/// A trace's spans: the root, then its children in start order.
fn tree(spans: &[Span], agent: &str) -> (Span, Vec<Span>) {
    let root = spans
        .iter()
        .find(|s| s.name == format!("invoke_agent {agent}"))
        .unwrap_or_else(|| panic!("no span for {agent}"))
        .clone();
    let mut children: Vec<Span> = spans
        .iter()
        .filter(|s| s.trace_id == root.trace_id && s.span_id != root.span_id)
        .cloned()
        .collect();
    children.sort_by_key(|s| s.start_time_unix_nano);
    for child in &children {
        assert_eq!(
            child.parent_span_id, root.span_id,
            "{} is not under the run",
            child.name
        );
    }
    (root, children)
}

fn chat(id: &str, finish: &str, input: &str, output: &str) -> BTreeMap<String, String> {
    fields(&[
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "scripted"),
        ("gen_ai.request.model", "m"),
        ("gen_ai.request.stream", "false"),
        ("gen_ai.request.temperature", "0.5"),
        ("gen_ai.response.model", "scripted"),
        ("gen_ai.response.id", id),
        ("gen_ai.response.finish_reasons", &format!("[{finish}]")),
        ("gen_ai.usage.input_tokens", input),
        ("gen_ai.usage.output_tokens", output),
    ])
}

fn tool(id: &str) -> BTreeMap<String, String> {
    fields(&[
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "get_weather"),
        ("gen_ai.tool.call.id", id),
        ("gen_ai.tool.type", "function"),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_exported_over_otlp_http_with_the_genai_spans_and_metrics() {
    let (endpoint, got) = receiver();
    // SAFETY: set before the exporters start, in the only test of this binary; no other
    // thread reads the environment meanwhile.
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
        std::env::set_var("OTEL_SERVICE_NAME", "otel-test");
    }
    let guard = agentloop::telemetry::init_from_env()
        .unwrap()
        .expect("an endpoint is set");

    agent("plain", "Rome").run("Weather?").await.unwrap();
    agent("content", "Rome")
        .with_options(|o| o.telemetry.record_content = true)
        .run("Weather?")
        .await
        .unwrap();
    agent("failing", "Atlantis").run("Weather?").await.unwrap();
    drop(guard); // flushes both exporters

    let spans = got.spans.lock().unwrap().clone();
    assert_eq!(got.service.lock().unwrap().as_deref(), Some("otel-test"));

    // The plain run: the tree, names, kinds and attributes, exactly; no contents.
    let (root, children) = tree(&spans, "plain");
    assert_eq!(root.kind, SpanKind::Internal as i32);
    assert!(root.parent_span_id.is_empty());
    assert_eq!(
        attributes(&root),
        fields(&[
            ("gen_ai.operation.name", "invoke_agent"),
            ("gen_ai.provider.name", "scripted"),
            ("gen_ai.agent.name", "plain"),
            ("gen_ai.request.model", "m"),
            ("gen_ai.usage.input_tokens", "30"),
            ("gen_ai.usage.output_tokens", "12"),
            ("gen_ai.usage.reasoning.output_tokens", "3"),
        ])
    );
    // Token counts are integers, as the conventions type them (not their text).
    let input = root
        .attributes
        .iter()
        .find(|kv| kv.key == "gen_ai.usage.input_tokens")
        .and_then(|kv| kv.value.clone())
        .and_then(|v| v.value);
    assert_eq!(input, Some(any_value::Value::IntValue(30)));
    // The finish reasons are the conventions' string array.
    let reasons = children[0]
        .attributes
        .iter()
        .find(|kv| kv.key == "gen_ai.response.finish_reasons")
        .and_then(|kv| kv.value.clone())
        .and_then(|v| v.value);
    assert!(
        matches!(&reasons, Some(any_value::Value::ArrayValue(array)) if array.values.len() == 1),
        "{reasons:?}"
    );
    let shape: Vec<(&str, i32)> = children.iter().map(|s| (s.name.as_str(), s.kind)).collect();
    assert_eq!(
        shape,
        [
            ("chat m", SpanKind::Client as i32),
            ("execute_tool get_weather", SpanKind::Internal as i32),
            ("execute_tool get_weather", SpanKind::Internal as i32),
            ("chat m", SpanKind::Client as i32),
        ]
    );
    assert_eq!(
        attributes(&children[0]),
        chat("msg_0", "tool_use", "10", "5")
    );
    assert_eq!(attributes(&children[1]), tool("call_a"));
    assert_eq!(attributes(&children[2]), tool("call_b"));
    let mut answered = chat("msg_1", "end_turn", "20", "7");
    answered.insert("gen_ai.usage.reasoning.output_tokens".into(), "3".into());
    assert_eq!(attributes(&children[3]), answered);
    for span in std::iter::once(&root).chain(&children) {
        let status = span.status.as_ref().map_or(0, |s| s.code);
        assert_eq!(status, StatusCode::Unset as i32, "{}", span.name);
    }

    // Opted in: the contents are there.
    let (_, children) = tree(&spans, "content");
    let first = attributes(&children[0]);
    assert_eq!(
        first.get("gen_ai.input.messages").map(String::as_str),
        Some(r#"[{"role":"user","parts":[{"type":"text","content":"Weather?"}]}]"#)
    );
    assert!(first.contains_key("gen_ai.output.messages"));
    let call = attributes(&children[1]);
    assert_eq!(
        call.get("gen_ai.tool.call.arguments").map(String::as_str),
        Some(r#"{"city":"Paris"}"#)
    );
    assert_eq!(
        call.get("gen_ai.tool.call.result").map(String::as_str),
        Some("sunny in Paris")
    );

    // A failing tool: an error span with its type.
    let (_, children) = tree(&spans, "failing");
    let failed = &children[2];
    assert_eq!(
        failed.status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );
    let mut expected = tool("call_b");
    expected.insert("error.type".into(), "failed".into());
    assert_eq!(attributes(failed), expected);

    // Metrics.
    let mut names = got.metrics.lock().unwrap().clone();
    names.sort();
    names.dedup();
    assert_eq!(
        names,
        [
            "gen_ai.client.operation.duration",
            "gen_ai.client.token.usage",
            "gen_ai.execute_tool.duration",
            "gen_ai.invoke_agent.duration",
        ]
    );
}
