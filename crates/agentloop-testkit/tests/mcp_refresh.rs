//! A registry follows a server's tool list: `notifications/tools/list_changed` (MCP
//! 2025-11-25 "Tools > List Changed Notification") marks the server, and
//! `Registry::refresh` lists its tools again, every page of them; a stateless 2026-07-28
//! server is listed again on every refresh.

#![cfg(feature = "mcp")]

use std::time::Duration;

use agentloop::executor::{McpHttp, McpProtocol, McpStdio};
use agentloop::registry::Registry;
use serde_json::json;

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_agentloop-mcp-test-server");

/// Wait (up to 5 s of real time) for the server's announcement to arrive.
async fn announced(registry: &Registry) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if registry.mcp_tools_changed() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

const BASE: [&str; 5] = ["p_echo", "p_add", "p_fail", "p_toggle_extra", "p_sleep"];

fn sorted(names: Vec<&str>) -> Vec<String> {
    let mut names: Vec<String> = names.into_iter().map(str::to_owned).collect();
    names.sort();
    names
}

fn expected(extra: bool) -> Vec<String> {
    let mut names: Vec<&str> = BASE.to_vec();
    if extra {
        names.push("p_extra");
    }
    sorted(names)
}

async fn follows_the_list(registry: &mut Registry, announces: bool) {
    assert_eq!(sorted(registry.names()), expected(false));
    registry
        .register(agentloop::Tool::function(
            "local",
            "",
            |_: serde_json::Value| async { Ok::<_, String>("local") },
        ))
        .unwrap();

    let out = registry.call("p_toggle_extra", json!({})).await.unwrap();
    assert_eq!(out.0.to_text(), "extra is listed");
    if announces {
        assert!(announced(registry).await, "no list_changed arrived");
    }
    assert!(registry.refresh().await.unwrap());
    assert!(!registry.mcp_tools_changed());
    let mut with_local = expected(true);
    with_local.push("local".into());
    with_local.sort();
    assert_eq!(sorted(registry.names()), with_local);
    // The server's tools stay together, before the tool registered after them.
    assert_eq!(registry.names().last(), Some(&"local"));
    let out = registry
        .call("p_extra", json!({"message": "hi"}))
        .await
        .unwrap();
    assert_eq!(out.0.to_text(), "Extra: hi");
    // Nothing changed since: nothing to report.
    assert!(!registry.refresh().await.unwrap());

    registry.call("p_toggle_extra", json!({})).await.unwrap();
    if announces {
        assert!(announced(registry).await);
    }
    assert!(registry.refresh().await.unwrap());
    assert!(registry.get("p_extra").is_none());
    assert_eq!(registry.names().len(), BASE.len() + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_session_refreshes_after_list_changed_over_stdio() {
    let mut registry = Registry::new();
    registry
        .add_mcp_stdio(
            McpStdio::new(TEST_SERVER)
                .prefix("p_")
                .protocol(McpProtocol::Handshake("2025-11-25".into())),
        )
        .await
        .unwrap();
    follows_the_list(&mut registry, true).await;
    registry.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_session_refreshes_after_list_changed_over_http() {
    let server = agentloop_testkit::mcp::serve_http().await.unwrap();
    let mut registry = Registry::new();
    registry
        .add_mcp_http(
            McpHttp::new(server.url.clone())
                .prefix("p_")
                .protocol(McpProtocol::Handshake("2025-11-25".into())),
        )
        .await
        .unwrap();
    follows_the_list(&mut registry, true).await;
    registry.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_server_is_listed_again_on_every_refresh() {
    let mut registry = Registry::new();
    let info = registry
        .add_mcp_stdio(McpStdio::new(TEST_SERVER).prefix("p_"))
        .await
        .unwrap();
    assert_eq!(info.protocol_version.as_deref(), Some("2026-07-28"));
    follows_the_list(&mut registry, false).await;
    registry.close().await;
}

/// The function names of an OpenAI Chat Completions request's `tools`.
fn wire_tools(body: &serde_json::Value) -> Vec<String> {
    let mut names: Vec<String> = body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A run whose registry is its tool updates: the server's `notifications/tools/list_changed`
/// after the first step's call makes the second request carry the new tool (on the wire,
/// OpenAI Chat Completions `tools`), and the model's call of it runs.
async fn a_list_change_reaches_the_next_request(registry: Registry) {
    use agentloop::provider::http::{ApiKey, HttpConfig};
    use agentloop::provider::openai::OpenAi;
    use agentloop::{Agent, RunStopReason};
    use agentloop_testkit::Turn;
    use agentloop_testkit::server::{MockServer, Wire};
    use std::sync::Arc;

    let server = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_call("p_toggle_extra", json!({})),
            Turn::tool_call("p_extra", json!({"message": "hi"})),
            Turn::text("Done."),
        ],
    )
    .await
    .unwrap();
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-test"));
    let tools = registry.tools();
    let registry = Arc::new(tokio::sync::Mutex::new(registry));
    let agent = Agent::builder(OpenAi::new(config).unwrap())
        .model("gpt-4o")
        .tools(tools)
        .with_options(|o| o.tool_updates = Some(registry.clone()))
        .build();
    let result = agent.run("Toggle, then use extra").await.unwrap();
    assert_eq!(result.stop_reason, RunStopReason::EndTurn);
    let bodies: Vec<serde_json::Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 3);
    assert_eq!(wire_tools(&bodies[0]), expected(false));
    assert_eq!(wire_tools(&bodies[1]), expected(true));
    assert_eq!(wire_tools(&bodies[2]), expected(true));
    let results: Vec<String> = result
        .steps
        .iter()
        .flat_map(|s| s.tool_results.iter().map(|r| r.content.to_text()))
        .collect();
    assert_eq!(results, ["extra is listed", "Extra: hi"]);
    // The shared registry saw the change too.
    assert!(registry.lock().await.get("p_extra").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_change_during_a_run_reaches_the_next_model_request_over_http() {
    let server = agentloop_testkit::mcp::serve_http().await.unwrap();
    let mut registry = Registry::new();
    registry
        .add_mcp_http(
            McpHttp::new(&server.url)
                .prefix("p_")
                .protocol(McpProtocol::Handshake("2025-11-25".into())),
        )
        .await
        .unwrap();
    a_list_change_reaches_the_next_request(registry).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_change_during_a_run_reaches_the_next_model_request_over_stdio() {
    let mut registry = Registry::new();
    registry
        .add_mcp_stdio(
            McpStdio::new(TEST_SERVER)
                .prefix("p_")
                .protocol(McpProtocol::Handshake("2025-06-18".into())),
        )
        .await
        .unwrap();
    a_list_change_reaches_the_next_request(registry).await;
}
