//! agentloop as an MCP server: a registry's descriptor tools (mock, HTTP, function) served
//! over streamable HTTP and stdio, driven by our own client and by the official Python SDK
//! (PyPI `mcp`, installed by `.ci/run` into `target/pyenv`).
//!
//! Spec relied on: MCP 2025-11-25 "Tools" (`structuredContent` with `outputSchema`, which
//! must be an object schema; tool failures as `isError` results) and 2026-07-28 (stateless:
//! `server/discover` and per-request `_meta` instead of `initialize`).

#![cfg(feature = "mcp-server")]

use std::path::{Path, PathBuf};

use agentloop::Tool;
use agentloop::executor::{McpHttp, McpProtocol};
use agentloop::mcp_server::McpServer;
use agentloop::registry::Registry;
use agentloop::tool::ToolOutput;
use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    x: i64,
    y: i64,
}

/// A loopback HTTP endpoint the `lookup_order` descriptor calls.
async fn shop() -> String {
    let app = axum::Router::new().route(
        "/orders/lookup",
        post(|Json(body): Json<Value>| async move {
            Json(json!({"id": body["id"], "state": "shipped"}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/orders/lookup")
}

/// Descriptor files for a mock and an HTTP tool (listed in path order), as `agentloop mcp serve --tools DIR` reads.
fn write_tools(dir: &Path, shop_url: &str) {
    std::fs::write(
        dir.join("weather.yaml"),
        r#"name: get_weather
description: Current weather for a city
input_schema:
  type: object
  properties: {city: {type: string}}
  required: [city]
output_schema:
  type: object
  properties: {city: {type: string}, temp_c: {type: integer}}
  required: [temp_c]
mock:
  template: '{"city": {{ city | tojson }}, "temp_c": 18}'
"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("orders.json"),
        json!({
            "name": "lookup_order",
            "description": "Look up an order",
            "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            "output_schema": {"type": "object", "required": ["state"]},
            "http": {"url": shop_url, "allowed_hosts": ["127.0.0.1"]},
        })
        .to_string(),
    )
    .unwrap();
}

async fn registry() -> (Registry, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    write_tools(dir.path(), &shop().await);
    let mut registry = Registry::load_dir(dir.path()).unwrap();
    registry
        .register(Tool::function(
            "add",
            "Add two integers",
            |a: Add| async move { Ok::<_, std::convert::Infallible>(a.x + a.y) },
        ))
        .unwrap();
    (registry, dir)
}

struct Served {
    url: String,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve(server: impl FnOnce(McpServer) -> McpServer) -> Served {
    let (registry, dir) = registry().await;
    let stop = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let server = server(McpServer::new(registry).cancel_on(stop.clone()));
    tokio::spawn(server.serve_http(listener));
    Served {
        url,
        stop,
        _dir: dir,
    }
}

fn text(output: &ToolOutput) -> String {
    output.0.to_text()
}

#[tokio::test]
async fn our_client_lists_and_calls_our_servers_descriptor_tools_over_http() {
    let served = serve(|s| s).await;
    for (protocol, agreed) in [
        (McpProtocol::Auto, "2026-07-28"),
        (McpProtocol::Stateless, "2026-07-28"),
        (McpProtocol::Handshake("2025-06-18".into()), "2025-06-18"),
        (McpProtocol::Handshake("2025-11-25".into()), "2025-11-25"),
    ] {
        our_client_against(&served.url, protocol, agreed).await;
    }
}

async fn our_client_against(url: &str, protocol: McpProtocol, agreed: &str) {
    let mut client = Registry::new();
    let info = client
        .add_mcp_http(McpHttp::new(url).prefix("remote_").protocol(protocol))
        .await
        .unwrap();
    assert_eq!(info.protocol_version.as_deref(), Some(agreed));
    assert_eq!(info.name.as_deref(), Some("agentloop"));
    assert_eq!(
        info.tools,
        ["remote_lookup_order", "remote_get_weather", "remote_add"]
    );
    let weather = client.descriptor("remote_get_weather").unwrap();
    assert_eq!(
        weather.output_schema.as_ref().unwrap()["required"],
        json!(["temp_c"])
    );
    assert_eq!(weather.input_schema["required"], json!(["city"]));
    let out = client
        .call("remote_get_weather", json!({"city": "Paris"}))
        .await
        .unwrap();
    assert_eq!(text(&out), r#"{"city":"Paris","temp_c":18}"#);
    let out = client
        .call("remote_lookup_order", json!({"id": 7}))
        .await
        .unwrap();
    assert_eq!(text(&out), r#"{"id":7,"state":"shipped"}"#);
    let out = client
        .call("remote_add", json!({"x": 2, "y": 3}))
        .await
        .unwrap();
    assert_eq!(text(&out), "5");
    client.close().await;
}

#[tokio::test]
async fn tools_list_is_paged_when_a_page_size_is_set() {
    let served = serve(|s| s.page_size(1)).await;
    let mut client = Registry::new();
    let info = client
        .add_mcp_http(McpHttp::new(&served.url))
        .await
        .unwrap();
    assert_eq!(info.tools, ["lookup_order", "get_weather", "add"]);
    client.close().await;

    // The pages themselves: one tool each, with the cursor of the next; a bad cursor is an
    // invalid-params error (MCP 2025-11-25 "Pagination").
    let (registry, _dir) = registry().await;
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_end);
    tokio::spawn(
        McpServer::new(registry)
            .page_size(2)
            .serve_io(server_read, server_write),
    );
    use rmcp::ServiceExt;
    let client = ().serve(tokio::io::split(client_end)).await.unwrap();
    let first = client.peer().list_tools(None).await.unwrap();
    let names: Vec<&str> = first.tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["lookup_order", "get_weather"]);
    assert_eq!(first.next_cursor.as_deref(), Some("2"));
    let second = client
        .peer()
        .list_tools(Some(
            rmcp::model::PaginatedRequestParams::default().with_cursor(Some("2".into())),
        ))
        .await
        .unwrap();
    assert_eq!(second.tools[0].name, "add");
    assert_eq!(second.next_cursor, None);
    let err = client
        .peer()
        .list_tools(Some(
            rmcp::model::PaginatedRequestParams::default().with_cursor(Some("x".into())),
        ))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("invalid tools/list cursor `x`"),
        "{err}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn serve_io_speaks_mcp_on_a_pipe() {
    let (registry, _dir) = registry().await;
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_end);
    let server = tokio::spawn(McpServer::new(registry).serve_io(server_read, server_write));
    let (client_read, client_write) = tokio::io::split(client_end);
    use rmcp::ServiceExt;
    let client = ().serve((client_read, client_write)).await.unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["lookup_order", "get_weather", "add"]);
    let result = client
        .peer()
        .call_tool(
            rmcp::model::CallToolRequestParams::new("get_weather")
                .with_arguments(json!({"city": "Oslo"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&result).unwrap(),
        json!({
            "content": [{"type": "text", "text": r#"{"city":"Oslo","temp_c":18}"#}],
            "structuredContent": {"city": "Oslo", "temp_c": 18},
            "isError": false,
        })
    );
    client.cancel().await.unwrap();
    server.await.unwrap().unwrap();
}

/// A Python with the official MCP SDK: `$AGENTLOOP_MCP_PYTHON`, or `target/pyenv` as `.ci/run`
/// sets it up. `None` (with a skip notice) when there is none.
pub fn python_with_mcp() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = std::env::var_os("AGENTLOOP_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/pyenv/bin/python"));
    let ok = std::process::Command::new(&python)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Some(python)
    } else {
        agentloop_testkit::skip(&format!(
            "the Python MCP SDK is not installed at {} (bash .ci/run installs it)",
            python.display()
        ));
        None
    }
}

/// Run the official Python client against `target` and return what it printed.
async fn python_client(python: &Path, target: &str, mode: &str, calls: Value) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let output = tokio::process::Command::new(python)
        .arg(script)
        .args([target, mode, &calls.to_string()])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(60), output)
        .await
        .expect("the Python client finishes within a minute")
        .unwrap();
    assert!(
        output.status.success(),
        "the Python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// What the official client must see from our server, whichever revision it speaks.
fn expected_tools() -> Value {
    json!([
        {
            "name": "lookup_order",
            "inputSchema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            "outputSchema": {"type": "object", "required": ["state"]},
        },
        {
            "name": "get_weather",
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "outputSchema": {"type": "object", "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}}, "required": ["temp_c"]},
        },
        {
            "name": "add",
            "inputSchema": Tool::function("add", "", |a: Add| async move {
                Ok::<_, std::convert::Infallible>(a.x + a.y)
            }).definition().input_schema.clone(),
            "outputSchema": null,
        },
    ])
}

fn calls() -> Value {
    json!([
        ["get_weather", {"city": "Paris"}],
        ["lookup_order", {"id": 42}],
        ["add", {"x": 2, "y": 40}],
        ["get_weather", {}],
    ])
}

fn expected_results() -> Value {
    json!([
        {
            "content": [{"type": "text", "text": r#"{"city":"Paris","temp_c":18}"#}],
            "structuredContent": {"city": "Paris", "temp_c": 18},
            "isError": false,
        },
        {
            "content": [{"type": "text", "text": r#"{"id":42,"state":"shipped"}"#}],
            "structuredContent": {"id": 42, "state": "shipped"},
            "isError": false,
        },
        {
            "content": [{"type": "text", "text": "42"}],
            "structuredContent": null,
            "isError": false,
        },
        {
            "content": [{"type": "text", "text": "invalid arguments:\n- /: \"city\" is a required property"}],
            "structuredContent": null,
            "isError": true,
        },
    ])
}

#[tokio::test]
async fn the_official_python_client_uses_our_http_server_in_both_generations() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let served = serve(|s| s).await;
    // `legacy`: the initialize handshake; `auto`: `server/discover`, then stateless requests;
    // a pinned revision: stateless requests without discovery (so no server name).
    for (mode, protocol, name) in [
        ("legacy", "2025-11-25", json!("agentloop")),
        ("auto", "2026-07-28", json!("agentloop")),
        ("2026-07-28", "2026-07-28", Value::Null),
    ] {
        let seen = python_client(&python, &served.url, mode, calls()).await;
        assert_eq!(seen["protocol"], protocol, "{mode}: {seen}");
        assert_eq!(seen["server"], name, "{mode}");
        assert_eq!(seen["tools"], expected_tools(), "{mode}");
        assert_eq!(seen["results"], expected_results(), "{mode}");
    }
}

/// MCP tools go through the providers' schema dialects: a tool with optional properties (the
/// shape of `@modelcontextprotocol/server-filesystem`'s `read_text_file`: `path`, optional
/// `tail` and `head`) is sent to OpenAI in strict mode (every property required, the optional
/// ones nullable, the object closed), and the `null` strict mode sends for an absent property
/// is dropped before the call reaches the server, whose schema does not take it.
#[tokio::test]
async fn mcp_tools_are_sent_in_the_strict_dialect_and_their_absent_nulls_dropped() {
    use agentloop::Agent;
    use agentloop::provider::http::{ApiKey, HttpConfig};
    use agentloop::provider::openai::OpenAi;
    use agentloop_testkit::Turn;
    use agentloop_testkit::server::{MockServer, Wire};

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("read.json"),
        json!({
            "name": "read_text_file",
            "description": "Read a file",
            "input_schema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "tail": {"type": "number", "description": "The last N lines"},
                    "head": {"type": "number", "description": "The first N lines"}
                },
                "required": ["path"],
                "additionalProperties": false
            },
            "mock": {"template": "{{ path }} head={{ head }} tail={{ tail is defined }}"}
        })
        .to_string(),
    )
    .unwrap();
    let stop = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let server = McpServer::new(Registry::load_dir(dir.path()).unwrap()).cancel_on(stop.clone());
    tokio::spawn(server.serve_http(listener));
    let _stop = stop.drop_guard();

    let mut client = Registry::new();
    client.add_mcp_http(McpHttp::new(&url)).await.unwrap();
    let model = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_call(
                "read_text_file",
                json!({"path": "notes.txt", "tail": null, "head": 2}),
            ),
            Turn::text("Read."),
        ],
    )
    .await
    .unwrap();
    let mut config = HttpConfig::new(model.base_url());
    config.api_key = Some(ApiKey::new("sk-test"));
    let agent = Agent::builder(OpenAi::new(config).unwrap())
        .model("gpt-4.1")
        .tools(client.tools())
        .build();
    let result = agent.run("Read notes.txt").await.unwrap();
    assert_eq!(result.text(), "Read.");
    let first = &model.requests()[0].body;
    assert_eq!(
        first["tools"][0]["function"]["parameters"],
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "tail": {"type": ["number", "null"], "description": "The last N lines"},
                "head": {"type": ["number", "null"], "description": "The first N lines"}
            },
            "required": ["path", "tail", "head"],
            "additionalProperties": false
        })
    );
    assert_eq!(first["tools"][0]["function"]["strict"], json!(true));
    // The server got `head` and no `tail` at all.
    let result_message = model.requests()[1].body["messages"][2].clone();
    assert_eq!(
        result_message["content"],
        json!("notes.txt head=2 tail=False"),
        "{result_message}"
    );
    client.close().await;
    model.assert_complete();
}
