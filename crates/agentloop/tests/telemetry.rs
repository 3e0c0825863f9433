//! The spans a run emits, seen by a `tracing` subscriber: names, parents and fields, exactly.
//!
//! The names and attributes follow the OpenTelemetry GenAI semantic conventions
//! (`semantic-conventions-genai` at commit 002c8a6, docs/gen-ai/gen-ai-spans.md and
//! gen-ai-agent-spans.md): `invoke_agent {agent}` (internal), `chat {model}` (client),
//! `execute_tool {tool}` (internal); contents only when opted in.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use agentloop::{Agent, RunEvent, Tool};
use agentloop_testkit::{ScriptedModel, Turn};
use futures::StreamExt;
use serde_json::json;
use tracing::span::{Attributes, Id, Record};
use tracing::{Subscriber, field::Field, field::Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One span as the subscriber saw it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    name: &'static str,
    parent: Option<usize>,
    fields: BTreeMap<String, String>,
}

/// Collects every span with its fields, in creation order.
#[derive(Clone, Default)]
struct Spans {
    seen: Arc<Mutex<Vec<Seen>>>,
    live: Arc<Mutex<HashMap<u64, usize>>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent())
            .and_then(|parent| {
                self.live
                    .lock()
                    .unwrap()
                    .get(&parent.id().into_u64())
                    .copied()
            });
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let mut seen = self.seen.lock().unwrap();
        self.live.lock().unwrap().insert(id.into_u64(), seen.len());
        seen.push(Seen {
            name: attrs.metadata().name(),
            parent,
            fields,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let Some(&at) = self.live.lock().unwrap().get(&id.into_u64()) else {
            return;
        };
        values.record(&mut Fields(&mut self.seen.lock().unwrap()[at].fields));
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        self.live.lock().unwrap().remove(&id.into_u64());
    }
}

impl Spans {
    fn take(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
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

fn weather() -> Tool {
    Tool::function("get_weather", "Current weather", |c: City| async move {
        if c.city == "Atlantis" {
            return Err(format!("no weather for {}", c.city));
        }
        Ok(format!("sunny in {}", c.city))
    })
}

/// Two steps, the first with two calls run side by side.
fn two_steps(second_city: &str) -> ScriptedModel {
    ScriptedModel::new([
        Turn::tool_calls([
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": second_city})),
        ])
        .with_ids(["call_a", "call_b"])
        .with_usage(10, 5),
        Turn::text("Sunny.").with_usage(20, 7),
    ])
}

fn agent(model: ScriptedModel) -> Agent {
    Agent::builder(model)
        .model("m")
        .name("weather")
        .system("Be brief.")
        .temperature(0.5)
        .max_tokens(100)
        .tool(weather())
        .build()
}

fn subscriber(spans: &Spans) -> impl Subscriber + Send + Sync + use<> {
    tracing_subscriber::registry().with(spans.clone())
}

fn agent_fields(input: &str, output: &str) -> BTreeMap<String, String> {
    fields(&[
        ("otel.name", "invoke_agent weather"),
        ("otel.kind", "internal"),
        ("gen_ai.operation.name", "invoke_agent"),
        ("gen_ai.provider.name", "scripted"),
        ("gen_ai.agent.name", "weather"),
        ("gen_ai.request.model", "m"),
        ("gen_ai.usage.input_tokens", input),
        ("gen_ai.usage.output_tokens", output),
    ])
}

fn chat_fields(
    streamed: bool,
    id: &str,
    finish: &str,
    input: &str,
    output: &str,
) -> BTreeMap<String, String> {
    fields(&[
        ("otel.name", "chat m"),
        ("otel.kind", "client"),
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "scripted"),
        ("gen_ai.request.model", "m"),
        (
            "gen_ai.request.stream",
            if streamed { "true" } else { "false" },
        ),
        ("gen_ai.request.max_tokens", "100"),
        ("gen_ai.request.temperature", "0.5"),
        ("gen_ai.response.model", "scripted"),
        ("gen_ai.response.id", id),
        ("gen_ai.response.finish_reasons", finish),
        ("gen_ai.usage.input_tokens", input),
        ("gen_ai.usage.output_tokens", output),
    ])
}

fn tool_fields(id: &str) -> BTreeMap<String, String> {
    fields(&[
        ("otel.name", "execute_tool get_weather"),
        ("otel.kind", "internal"),
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "get_weather"),
        ("gen_ai.tool.call.id", id),
        ("gen_ai.tool.type", "function"),
    ])
}

fn expected_tree(streamed: bool) -> Vec<Seen> {
    vec![
        Seen {
            name: "invoke_agent",
            parent: None,
            fields: agent_fields("30", "12"),
        },
        Seen {
            name: "chat",
            parent: Some(0),
            fields: chat_fields(streamed, "msg_0", "tool_use", "10", "5"),
        },
        Seen {
            name: "execute_tool",
            parent: Some(0),
            fields: tool_fields("call_a"),
        },
        Seen {
            name: "execute_tool",
            parent: Some(0),
            fields: tool_fields("call_b"),
        },
        Seen {
            name: "chat",
            parent: Some(0),
            fields: chat_fields(streamed, "msg_1", "end_turn", "20", "7"),
        },
    ]
}

#[tokio::test]
async fn a_blocking_run_has_an_agent_span_with_its_model_calls_and_tools_under_it() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(subscriber(&spans));

    let result = agent(two_steps("Rome")).run("Weather?").await.unwrap();

    assert_eq!(result.text(), "Sunny.");
    assert_eq!(spans.take(), expected_tree(false));
}

#[tokio::test]
async fn a_streamed_run_has_the_same_spans_and_the_time_to_the_first_chunk() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(subscriber(&spans));

    let events: Vec<RunEvent> = agent(two_steps("Rome"))
        .run_stream("Weather?")
        .collect()
        .await;

    assert!(matches!(events.last(), Some(RunEvent::RunFinish { .. })));
    let mut seen = spans.take();
    for span in seen.iter_mut().filter(|s| s.name == "chat") {
        let first = span
            .fields
            .remove("gen_ai.response.time_to_first_chunk")
            .expect("a streamed call records its time to first chunk");
        let seconds: f64 = first.parse().unwrap();
        assert!((0.0..60.0).contains(&seconds), "{seconds}");
    }
    assert_eq!(seen, expected_tree(true));
}

#[tokio::test]
async fn a_failing_tool_span_has_the_error_status_and_type() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(subscriber(&spans));

    agent(two_steps("Atlantis")).run("Weather?").await.unwrap();

    let seen = spans.take();
    let mut failed = tool_fields("call_b");
    failed.insert("otel.status_code".into(), "error".into());
    failed.insert("error.type".into(), "failed".into());
    assert_eq!(seen[3].fields, failed);
    assert_eq!(seen[2].fields, tool_fields("call_a"));
}

#[tokio::test]
async fn contents_are_recorded_only_when_opted_in() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(subscriber(&spans));

    agent(two_steps("Rome"))
        .with_options(|o| o.telemetry.record_content = true)
        .run("Weather?")
        .await
        .unwrap();

    let seen = spans.take();
    let field = |at: usize, name: &str| seen[at].fields.get(name).cloned();
    assert_eq!(
        field(1, "gen_ai.system_instructions").as_deref(),
        Some(r#"[{"type":"text","content":"Be brief."}]"#)
    );
    assert_eq!(
        field(1, "gen_ai.input.messages").as_deref(),
        Some(r#"[{"role":"user","parts":[{"type":"text","content":"Weather?"}]}]"#)
    );
    assert_eq!(
        field(1, "gen_ai.output.messages").as_deref(),
        Some(
            r#"[{"role":"assistant","parts":[{"type":"tool_call","id":"call_a","name":"get_weather","arguments":{"city":"Paris"}},{"type":"tool_call","id":"call_b","name":"get_weather","arguments":{"city":"Rome"}}],"finish_reason":"tool_use"}]"#
        )
    );
    assert_eq!(
        field(2, "gen_ai.tool.call.arguments").as_deref(),
        Some(r#"{"city":"Paris"}"#)
    );
    assert_eq!(
        field(2, "gen_ai.tool.call.result").as_deref(),
        Some("sunny in Paris")
    );
    // The second call's request holds the tool results, in the conventions' `tool` role.
    let second = field(4, "gen_ai.input.messages").unwrap();
    assert!(
        second.contains(r#"{"role":"tool","parts":[{"type":"tool_call_response","id":"call_a","response":"sunny in Paris"},{"type":"tool_call_response","id":"call_b","response":"sunny in Rome"}]}"#),
        "{second}"
    );
}

#[tokio::test]
async fn no_contents_by_default() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(subscriber(&spans));

    agent(two_steps("Rome")).run("Weather?").await.unwrap();

    for span in spans.take() {
        for name in [
            "gen_ai.system_instructions",
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ] {
            assert!(!span.fields.contains_key(name), "{name} in {span:?}");
        }
    }
}

#[tokio::test]
async fn a_durable_run_names_its_conversation() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(subscriber(&spans));
    let store = agentloop::run::MemoryStore::default();

    agent(two_steps("Rome"))
        .run_durable("run-7", "Weather?", &store)
        .await
        .unwrap();

    let seen = spans.take();
    assert_eq!(
        seen[0]
            .fields
            .get("gen_ai.conversation.id")
            .map(String::as_str),
        Some("run-7")
    );
    assert_eq!(seen.len(), 5);
}

/// An MCP tool call gets the MCP conventions' client span (docs/gen-ai/mcp.md): `tools/call
/// {tool}` with `mcp.method.name`.
#[cfg(feature = "mcp-server")]
#[tokio::test]
async fn an_mcp_tool_call_has_a_tools_call_span() {
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

    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(subscriber(&spans));
    let out = client.call("ping", json!({})).await.unwrap();
    assert_eq!(out.0.to_text(), "pong");
    drop(_guard);
    client.close().await;

    let calls: Vec<Seen> = spans
        .take()
        .into_iter()
        .filter(|s| s.name == "tools/call")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        calls[0].fields,
        fields(&[
            ("otel.name", "tools/call ping"),
            ("otel.kind", "client"),
            ("mcp.method.name", "tools/call"),
            ("gen_ai.operation.name", "execute_tool"),
            ("gen_ai.tool.name", "ping"),
        ])
    );
}
