//! The mock and HTTP executors, through the registry.

#![cfg(feature = "registry")]

use std::time::Duration;

use agentloop::ToolResultContent;
use agentloop::registry::{HttpSpec, MockSpec, OnExhausted, Registry, ToolDescriptor, ToolMode};
use agentloop::tool::{ToolContext, ToolError, ToolOutput, Violation};
use axum::Json;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn fixtures() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tools").to_owned()
}

fn text(output: &ToolOutput) -> &str {
    match &output.0 {
        ToolResultContent::Text(text) => text,
        other => panic!("expected text output, got {other:?}"),
    }
}

fn json_of(output: &ToolOutput) -> Value {
    serde_json::from_str(text(output)).expect("the output is JSON")
}

/// Call the tool's executor directly (no registry timeout racing the executor's own).
async fn run(registry: &Registry, name: &str, input: Value) -> Result<ToolOutput, ToolError> {
    let tool = registry.get(name).expect("the tool exists");
    let ctx = ToolContext::new("call_1", name, CancellationToken::new(), None);
    tool.handler()
        .expect("it has an executor")
        .call(ctx, input)
        .await
}

fn mock(name: &str, spec: MockSpec) -> ToolDescriptor {
    let mut descriptor = ToolDescriptor::new(name, "a mock");
    descriptor.mode = ToolMode::Mock;
    descriptor.mock = Some(spec);
    descriptor
}

#[tokio::test]
async fn a_static_mock_returns_its_response() {
    let registry = Registry::load_dir(format!("{}/good", fixtures())).unwrap();
    let output = registry
        .call("get_weather", json!({"city": "Paris"}))
        .await
        .unwrap();
    assert_eq!(json_of(&output), json!({"temp_c": 18, "sky": "clear"}));
}

#[tokio::test]
async fn a_template_mock_sees_the_arguments() {
    let registry = Registry::load_dir(format!("{}/good", fixtures())).unwrap();
    let output = registry
        .call("greet", json!({"name": "Ada", "excited": true}))
        .await
        .unwrap();
    assert_eq!(
        json_of(&output),
        json!({"greeting": "Hello, Ada!", "args": {"name": "Ada", "excited": true}})
    );
    let output = registry
        .call("greet", json!({"name": "Bob"}))
        .await
        .unwrap();
    assert_eq!(
        json_of(&output),
        json!({"greeting": "Hello, Bob.", "args": {"name": "Bob"}})
    );
}

#[tokio::test]
async fn a_template_that_renders_plain_text_returns_text() {
    let mut registry = Registry::new();
    registry
        .add_descriptor(mock(
            "shout",
            MockSpec::Template("{{ word | upper }}, {{ args.word }}".to_owned()),
        ))
        .unwrap();
    let output = run(&registry, "shout", json!({"word": "hey"}))
        .await
        .unwrap();
    assert_eq!(text(&output), "HEY, hey");
}

#[tokio::test]
async fn a_sequence_plays_in_order_then_errors_when_told_to() {
    let registry = Registry::load_dir(format!("{}/good", fixtures())).unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(
            registry
                .call("deploy_status", json!({}))
                .await
                .map(|o| json_of(&o)),
        );
    }
    assert_eq!(
        seen,
        [
            Ok(json!({"status": "pending"})),
            Ok(json!({"status": "done"})),
            Err(ToolError::Failed(
                "the mock sequence of tool `deploy_status` is exhausted: all 2 responses were used"
                    .to_owned()
            )),
        ]
    );
}

#[tokio::test]
async fn a_sequence_repeats_its_last_response_by_default() {
    let mut registry = Registry::new();
    registry
        .add_descriptor(mock(
            "poll",
            MockSpec::Sequence {
                responses: vec![json!("one"), json!("two")],
                on_exhausted: OnExhausted::RepeatLast,
            },
        ))
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(text(&run(&registry, "poll", json!({})).await.unwrap()).to_owned());
    }
    assert_eq!(seen, ["one", "two", "two", "two"]);
}

#[test]
fn descriptors_built_in_code_are_checked_too() {
    let mut registry = Registry::new();
    let empty = mock(
        "empty",
        MockSpec::Sequence {
            responses: Vec::new(),
            on_exhausted: OnExhausted::Error,
        },
    );
    assert_eq!(
        registry.add_descriptor(empty).unwrap_err().to_string(),
        "code: tool `empty`: the mock `sequence` is empty"
    );
    let mut instant = mock("instant", MockSpec::Response(json!(1)));
    instant.timeout_ms = Some(0);
    assert_eq!(
        registry.add_descriptor(instant).unwrap_err().to_string(),
        "code: tool `instant`: `timeout_ms` must be greater than 0"
    );
    let mut no_section = ToolDescriptor::new("nothing", "");
    no_section.mode = ToolMode::Http;
    assert_eq!(
        registry.add_descriptor(no_section).unwrap_err().to_string(),
        "code: tool `nothing`: `mode: http` needs an `http` section"
    );
    assert!(registry.is_empty());
}

#[tokio::test]
async fn arguments_are_checked_before_the_executor_runs() {
    let registry = Registry::load_dir(format!("{}/good", fixtures())).unwrap();
    let err = registry
        .call("deploy_status", json!({"unexpected": 1}))
        .await
        .map(|_| ());
    assert_eq!(err, Ok(()), "an open schema accepts extra arguments");
    let err = registry
        .call("get_weather", json!({"city": 7}))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ToolError::InvalidArguments(vec![Violation {
            path: "/city".to_owned(),
            message: "7 is not of type \"string\"".to_owned(),
        }])
    );
}

#[tokio::test]
async fn results_that_break_the_output_schema_are_error_results() {
    let mut descriptor = mock("thermometer", MockSpec::Response(json!({"temp_c": "hot"})));
    descriptor.output_schema = Some(json!({
        "type": "object",
        "properties": {"temp_c": {"type": "number"}},
        "required": ["temp_c", "unit"]
    }));
    let mut registry = Registry::new();
    registry.add_descriptor(descriptor).unwrap();
    let err = run(&registry, "thermometer", json!({})).await.unwrap_err();
    assert_eq!(
        err,
        ToolError::Failed(
            "the result of tool `thermometer` does not match its output schema:\n- /: \"unit\" is a required property\n- /temp_c: \"hot\" is not of type \"number\""
                .to_owned()
        )
    );
}

/// A bound function that never finishes: with no timeout of its own a direct call ends at
/// the default; with one, at its own. The clock is paused, so the 30 s pass at once.
#[tokio::test(start_paused = true)]
async fn a_direct_call_times_out_at_the_tool_timeout_or_the_default() {
    let mut registry = Registry::new();
    for (name, timeout_ms) in [("hang", None), ("hang_briefly", Some(250))] {
        let mut descriptor = ToolDescriptor::new(name, "Never answers");
        descriptor.timeout_ms = timeout_ms;
        registry.add_descriptor(descriptor).unwrap();
        registry
            .bind(name, |_ctx: ToolContext, _input: Value| async move {
                std::future::pending::<()>().await;
                Ok(ToolOutput::text("unreachable"))
            })
            .unwrap();
    }
    let started = tokio::time::Instant::now();
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(3600),
        registry.call("hang", json!({})),
    )
    .await
    .expect("a direct call without a tool timeout must not hang");
    assert_eq!(
        outcome.unwrap_err(),
        ToolError::Failed("tool `hang` timed out after 30000 ms".to_owned())
    );
    assert_eq!(started.elapsed(), agentloop::registry::DEFAULT_CALL_TIMEOUT);
    assert_eq!(
        registry.call("hang_briefly", json!({})).await.unwrap_err(),
        ToolError::Failed("tool `hang_briefly` timed out after 250 ms".to_owned())
    );

    // Removing a tool makes a direct call to it an unknown tool.
    assert!(registry.remove("hang"));
    assert!(!registry.remove("hang"));
    assert_eq!(
        registry.call("hang", json!({})).await.unwrap_err(),
        ToolError::Failed("there is no tool named `hang`".to_owned())
    );
    assert!(registry.get("hang_briefly").is_some());
}

#[tokio::test]
async fn a_bound_function_is_checked_against_the_file_output_schema() {
    let mut descriptor = ToolDescriptor::new("double", "Double a number");
    descriptor.output_schema = Some(json!({"type": "integer"}));
    let mut registry = Registry::new();
    registry.add_descriptor(descriptor).unwrap();
    registry
        .bind("double", |_ctx: ToolContext, input: Value| async move {
            let n = input["n"].as_i64().unwrap_or(0);
            if n < 0 {
                Ok(ToolOutput::text("negative"))
            } else {
                Ok(ToolOutput::json(json!(n * 2)))
            }
        })
        .unwrap();
    assert_eq!(
        text(&registry.call("double", json!({"n": 21})).await.unwrap()),
        "42"
    );
    assert_eq!(
        registry.call("double", json!({"n": -1})).await.unwrap_err(),
        ToolError::Failed(
            "the result of tool `double` does not match its output schema:\n- /: \"negative\" is not of type \"integer\""
                .to_owned()
        )
    );
    let err = registry
        .bind("nothing", |_ctx: ToolContext, _input: Value| async move {
            Ok(ToolOutput::text(""))
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "configuration error: cannot bind a handler: there is no tool named `nothing`"
    );
}

// ---------------------------------------------------------------------------------------------
// HTTP

struct Server {
    base: String,
    port: u16,
}

async fn echo(headers: HeaderMap, Json(body): Json<Value>) -> Json<Value> {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let custom = headers
        .get("x-tenant")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Json(json!({"received": body, "authorization": auth, "tenant": custom}))
}

async fn start_server() -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new()
        .route("/echo", post(echo).put(echo))
        .route(
            "/fail",
            post(|| async {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Json(json!({"error": "database unavailable"})),
                )
            }),
        )
        .route(
            "/slow",
            post(|| async {
                std::future::pending::<()>().await;
                "never"
            }),
        )
        .route(
            "/html",
            post(|| async { axum::response::Html("<html><body>Service moved</body></html>") }),
        )
        .route(
            "/away",
            post(move || async move {
                (
                    StatusCode::FOUND,
                    [(header::LOCATION, format!("http://localhost:{port}/echo"))],
                )
                    .into_response()
            }),
        )
        .route(
            "/same",
            post(|| async {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, "/echo")],
                )
                    .into_response()
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server {
        base: format!("http://127.0.0.1:{port}"),
        port,
    }
}

fn http_tool(name: &str, spec: HttpSpec, timeout_ms: Option<u64>) -> ToolDescriptor {
    let mut descriptor = ToolDescriptor::new(name, "an HTTP tool");
    descriptor.mode = ToolMode::Http;
    descriptor.http = Some(spec);
    descriptor.timeout_ms = timeout_ms;
    descriptor
}

#[tokio::test]
async fn http_success_returns_the_json_body_and_sends_expanded_headers() {
    let server = start_server().await;
    // SAFETY: a name no other test reads or writes; set before any tool is built.
    unsafe { std::env::set_var("AGENTLOOP_TEST_ECHO_TOKEN", "s3cret-value") };
    let spec = HttpSpec::post(format!("{}/echo", server.base))
        .header("Authorization", "Bearer ${AGENTLOOP_TEST_ECHO_TOKEN}")
        .header("X-Tenant", "acme-$${not a var}");
    let mut registry = Registry::new();
    registry
        .add_descriptor(http_tool("echo", spec, None))
        .unwrap();
    let output = run(&registry, "echo", json!({"q": "rust", "n": 3}))
        .await
        .unwrap();
    assert_eq!(
        json_of(&output),
        json!({
            "received": {"q": "rust", "n": 3},
            "authorization": "Bearer s3cret-value",
            "tenant": "acme-${not a var}"
        })
    );
    // The secret is in neither the descriptor's nor the registry's Debug output.
    let debug = format!(
        "{:?} {:?} {:?}",
        registry,
        registry.descriptor("echo"),
        registry.get("echo")
    );
    assert!(!debug.contains("s3cret"), "{debug}");
    assert!(debug.contains("Authorization"), "{debug}");
}

#[tokio::test]
async fn the_descriptor_method_is_used() {
    let server = start_server().await;
    let mut spec = HttpSpec::post(format!("{}/echo", server.base));
    spec.method = "put".to_owned();
    let mut registry = Registry::new();
    registry
        .add_descriptor(http_tool("put", spec, None))
        .unwrap();
    let output = run(&registry, "put", json!({"k": 1})).await.unwrap();
    assert_eq!(json_of(&output)["received"], json!({"k": 1}));
}

#[tokio::test]
async fn http_errors_carry_status_and_a_body_excerpt() {
    let server = start_server().await;
    let mut registry = Registry::new();
    for (name, path) in [("fail", "/fail"), ("html", "/html")] {
        registry
            .add_descriptor(http_tool(
                name,
                HttpSpec::post(format!("{}{path}", server.base)),
                None,
            ))
            .unwrap();
    }
    assert_eq!(
        run(&registry, "fail", json!({})).await.unwrap_err(),
        ToolError::Failed(format!(
            "POST {}/fail answered 500 Internal Server Error: {{\"error\":\"database unavailable\"}}",
            server.base
        ))
    );
    assert_eq!(
        run(&registry, "html", json!({})).await.unwrap_err(),
        ToolError::Failed(format!(
            "POST {}/html answered 200 OK with a body that is not JSON (expected value at line 1 column 1): <html><body>Service moved</body></html>",
            server.base
        ))
    );
}

#[tokio::test]
async fn a_slow_endpoint_times_out() {
    let server = start_server().await;
    let mut registry = Registry::new();
    registry
        .add_descriptor(http_tool(
            "slow",
            HttpSpec::post(format!("{}/slow", server.base)),
            Some(200),
        ))
        .unwrap();
    assert_eq!(
        registry.get("slow").unwrap().timeout(),
        Some(Duration::from_millis(200))
    );
    assert_eq!(
        run(&registry, "slow", json!({})).await.unwrap_err(),
        ToolError::Failed(format!("POST {}/slow timed out after 200 ms", server.base))
    );
}

#[tokio::test]
async fn redirects_stay_on_the_endpoint_origin() {
    let server = start_server().await;
    let mut registry = Registry::new();
    for (name, path) in [("away", "/away"), ("same", "/same")] {
        registry
            .add_descriptor(http_tool(
                name,
                HttpSpec::post(format!("{}{path}", server.base)),
                None,
            ))
            .unwrap();
    }
    let port = server.port;
    assert_eq!(
        run(&registry, "away", json!({})).await.unwrap_err(),
        ToolError::Failed(format!(
            "POST http://127.0.0.1:{port}/away failed: error following redirect for url (http://127.0.0.1:{port}/away): redirect to http://localhost:{port}/echo refused: it leaves the endpoint's origin http://127.0.0.1:{port}"
        ))
    );
    let output = run(&registry, "same", json!({"x": 1})).await.unwrap();
    assert_eq!(json_of(&output)["received"], json!({"x": 1}));
}

#[tokio::test]
async fn a_refused_connection_is_an_error_result() {
    // Bind then drop, so the port is very likely closed.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut registry = Registry::new();
    registry
        .add_descriptor(http_tool(
            "down",
            HttpSpec::post(format!("http://127.0.0.1:{port}/x")),
            None,
        ))
        .unwrap();
    let ToolError::Failed(message) = run(&registry, "down", json!({})).await.unwrap_err() else {
        panic!("expected a failure");
    };
    assert!(
        message.starts_with(&format!(
            "POST http://127.0.0.1:{port}/x failed: error sending request"
        )),
        "{message}"
    );
}
