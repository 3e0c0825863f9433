//! `telemetry::layer` under a subscriber of the test's own, and runs that build their
//! OpenTelemetry spans themselves (`Telemetry::tracer`), feature `otel`: both export the same
//! spans; the layer leaves out those of a run that builds its own; and while a tool's handler
//! runs, its `execute_tool` span is OpenTelemetry's current context, so a span the handler
//! starts itself nests under it, in the run's trace.

use std::collections::BTreeMap;
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

/// A span as both ways of building it must agree on: its name, kind, status, its parent's
/// name and its attributes with their types.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Shape {
    name: String,
    parent: Option<String>,
    kind: String,
    status: String,
    attributes: BTreeMap<String, String>,
}

/// A value with its type, however its text is held.
fn typed(value: &opentelemetry::Value) -> String {
    use opentelemetry::{Array, Value};
    match value {
        Value::Bool(b) => format!("bool {b}"),
        Value::I64(i) => format!("int {i}"),
        Value::F64(f) => format!("double {f}"),
        Value::String(s) => format!("string {}", s.as_str()),
        Value::Array(Array::String(items)) => {
            let items: Vec<&str> = items.iter().map(|s| s.as_str()).collect();
            format!("strings {items:?}")
        }
        other => format!("{other:?}"),
    }
}

fn shapes(spans: &[SpanData]) -> Vec<Shape> {
    let mut shapes: Vec<Shape> = spans
        .iter()
        .map(|span| Shape {
            name: span.name.to_string(),
            parent: spans
                .iter()
                .find(|p| p.span_context.span_id() == span.parent_span_id)
                .map(|p| p.name.to_string()),
            kind: format!("{:?}", span.span_kind),
            status: format!("{:?}", span.status),
            attributes: span
                .attributes
                .iter()
                .map(|kv| {
                    // A time differs between runs: its type is what must agree.
                    let value = match kv.key.as_str() {
                        "gen_ai.response.time_to_first_chunk" => "double (a time)".to_owned(),
                        _ => typed(&kv.value),
                    };
                    (kv.key.to_string(), value)
                })
                .collect(),
        })
        .collect();
    shapes.sort();
    shapes
}

/// Two tools in parallel, the second failing, then the answer; contents recorded.
fn two_tools(name: &str) -> Agent {
    let weather = Tool::function("get_weather", "Current weather", |c: City| async move {
        if c.city == "Atlantis" {
            return Err(format!("no weather for {}", c.city));
        }
        Ok(format!("sunny in {}", c.city))
    });
    let mut answer = Turn::text("Sunny.").with_usage(20, 7);
    answer.usage.reasoning_tokens = 3;
    let model = ScriptedModel::new([
        Turn::tool_calls([
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": "Atlantis"})),
        ])
        .with_ids(["call_a", "call_b"])
        .with_usage(10, 5),
        answer,
    ]);
    Agent::builder(model)
        .model("m")
        .name(name)
        .temperature(0.5)
        .max_tokens(100)
        .tool(weather)
        .build()
        .with_options(|o| o.telemetry.record_content = true)
}

fn keeping() -> (Keep, SdkTracerProvider) {
    let kept = Keep::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(kept.clone())
        .build();
    (kept, provider)
}

#[tokio::test]
async fn a_run_that_builds_its_own_spans_exports_what_the_layer_exports() {
    // Through `tracing` and the layer.
    let (through_layer, provider) = keeping();
    {
        let subscriber = tracing_subscriber::registry()
            .with(agentloop::telemetry::layer(provider.tracer("agentloop")));
        let _default = tracing::subscriber::set_default(subscriber);
        two_tools("support").run("Weather?").await.unwrap();
    }
    provider.force_flush().unwrap();

    // Built by the run itself, with no subscriber at all.
    let (built, provider) = keeping();
    let tracer = provider.tracer("agentloop");
    two_tools("support")
        .with_options(|o| o.telemetry.tracer = Some(tracer))
        .run("Weather?")
        .await
        .unwrap();
    provider.force_flush().unwrap();

    let through_layer = shapes(&through_layer.0.lock().unwrap());
    let built = shapes(&built.0.lock().unwrap());
    assert_eq!(through_layer.len(), 5, "{through_layer:#?}");
    assert_eq!(built, through_layer);
    // What they agree on, spot-checked: typed counts, the finish reasons as an array, the
    // failed tool's status.
    let answer = built
        .iter()
        .find(|s| {
            s.attributes.get("gen_ai.response.id").map(String::as_str) == Some("string msg_1")
        })
        .expect("the answer's chat span");
    assert_eq!(answer.parent.as_deref(), Some("invoke_agent support"));
    assert_eq!(
        answer.attributes["gen_ai.usage.reasoning.output_tokens"],
        "int 3"
    );
    assert_eq!(
        answer.attributes["gen_ai.response.finish_reasons"],
        r#"strings ["end_turn"]"#
    );
    let failed = built
        .iter()
        .find(|s| s.attributes.get("error.type").map(String::as_str) == Some("string failed"))
        .expect("the failed tool's span");
    assert_eq!(failed.name, "execute_tool get_weather");
    assert!(failed.status.starts_with("Error"), "{failed:?}");
}

/// The same, streamed: the calls' spans carry their time to first chunk both ways.
#[tokio::test]
async fn a_streamed_run_that_builds_its_own_spans_exports_what_the_layer_exports() {
    use futures::StreamExt as _;
    async fn streamed(agent: Agent) {
        let mut events = agent.run_stream("Weather?");
        while events.next().await.is_some() {}
    }
    let (through_layer, provider) = keeping();
    {
        let subscriber = tracing_subscriber::registry()
            .with(agentloop::telemetry::layer(provider.tracer("agentloop")));
        let _default = tracing::subscriber::set_default(subscriber);
        streamed(two_tools("support")).await;
    }
    provider.force_flush().unwrap();
    let (built, provider) = keeping();
    let tracer = provider.tracer("agentloop");
    streamed(two_tools("support").with_options(|o| o.telemetry.tracer = Some(tracer))).await;
    provider.force_flush().unwrap();

    let through_layer = shapes(&through_layer.0.lock().unwrap());
    let built = shapes(&built.0.lock().unwrap());
    assert_eq!(built, through_layer);
    let chats: Vec<&Shape> = built.iter().filter(|s| s.name == "chat m").collect();
    assert_eq!(chats.len(), 2);
    for chat in chats {
        assert_eq!(chat.attributes["gen_ai.request.stream"], "bool true");
        assert_eq!(
            chat.attributes["gen_ai.response.time_to_first_chunk"],
            "double (a time)"
        );
    }
}

#[tokio::test]
async fn the_layer_leaves_out_the_spans_of_a_run_that_builds_its_own() {
    let (through_layer, layer_provider) = keeping();
    let subscriber = tracing_subscriber::registry().with(agentloop::telemetry::layer(
        layer_provider.tracer("agentloop"),
    ));
    let _default = tracing::subscriber::set_default(subscriber);

    let (built, provider) = keeping();
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
    let tracer = provider.tracer("agentloop");
    Agent::builder(model)
        .model("m")
        .tool(weather)
        .build()
        .with_options(|o| o.telemetry.tracer = Some(tracer))
        .run("Weather?")
        .await
        .unwrap();
    layer_provider.force_flush().unwrap();
    provider.force_flush().unwrap();

    assert!(
        through_layer.0.lock().unwrap().is_empty(),
        "exported twice: {:?}",
        through_layer.0.lock().unwrap()
    );
    let spans = built.0.lock().unwrap().clone();
    let mut names: Vec<&str> = spans.iter().map(|s| &*s.name).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "chat m",
            "chat m",
            "execute_tool get_weather",
            "invoke_agent",
            "lookup"
        ]
    );
    let find = |name: &str| spans.iter().find(|s| s.name == name).unwrap();
    let (run, tool, lookup) = (
        find("invoke_agent"),
        find("execute_tool get_weather"),
        find("lookup"),
    );
    assert_eq!(tool.parent_span_id, run.span_context.span_id());
    // While the handler runs, its span is the current context: the app's span nests under it.
    assert_eq!(lookup.parent_span_id, tool.span_context.span_id());
    assert_eq!(lookup.span_context.trace_id(), run.span_context.trace_id());
    assert!(!opentelemetry::Context::current().has_active_span());
}

/// An MCP tool's `tools/call` span nests under its `execute_tool` span, whether the run's
/// spans go through the layer or the run builds them itself (docs/gen-ai/mcp.md).
#[cfg(feature = "mcp-server")]
#[tokio::test]
async fn an_mcp_call_nests_under_its_tool_both_ways() {
    use agentloop::executor::McpHttp;
    use agentloop::mcp_server::McpServer;
    use agentloop::registry::Registry;

    let mut served = Registry::new();
    served
        .register(Tool::function(
            "ping",
            "Answer pong",
            |_: serde_json::Value| async { Ok::<_, String>("pong") },
        ))
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = McpServer::new(served).router();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut client = Registry::new();
    client.add_mcp_http(McpHttp::new(&url)).await.unwrap();

    for builds_its_own in [false, true] {
        let (kept, provider) = keeping();
        let tracer = provider.tracer("agentloop");
        let subscriber =
            tracing_subscriber::registry().with(agentloop::telemetry::layer(tracer.clone()));
        let _default = tracing::subscriber::set_default(subscriber);
        let model = ScriptedModel::new([
            Turn::tool_calls([("ping", json!({}))]).with_ids(["call_a"]),
            Turn::text("Pong."),
        ]);
        let mut agent = Agent::builder(model)
            .model("m")
            .tools(client.tools())
            .build();
        if builds_its_own {
            agent = agent.with_options(|o| o.telemetry.tracer = Some(tracer));
        }
        agent.run("Ping?").await.unwrap();
        provider.force_flush().unwrap();

        let spans = kept.0.lock().unwrap().clone();
        let find = |name: &str| {
            let found: Vec<&SpanData> = spans.iter().filter(|s| s.name == name).collect();
            assert_eq!(found.len(), 1, "{name} ({builds_its_own}): {spans:#?}");
            found[0]
        };
        let (tool, call) = (find("execute_tool ping"), find("tools/call ping"));
        assert_eq!(
            call.parent_span_id,
            tool.span_context.span_id(),
            "builds its own: {builds_its_own}"
        );
        assert_eq!(call.span_kind, opentelemetry::trace::SpanKind::Client);
    }
    client.close().await;
}
