//! The MCP client across protocol generations, against the testkit's rmcp server narrowed to
//! the revisions an older or newer server speaks: the `initialize` handshake of 2025-06-18 and
//! 2025-11-25 servers (a session), and the stateless 2026-07-28 revision (`server/discover`,
//! then per-request `_meta`, no session), detected or configured.
//!
//! Spec relied on: MCP 2025-11-25 "Lifecycle" (initialize, version negotiation: the server
//! answers with a revision it supports) and 2026-07-28 (SEP-2567: no initialize; a server
//! that does not know `server/discover` is an older one).

#![cfg(feature = "mcp")]

use agentloop::executor::{McpHttp, McpProtocol, McpStdio};
use agentloop::registry::Registry;
use agentloop_testkit::mcp::{TestMcpServer, serve_http_with};
use rmcp::model::ProtocolVersion;
use serde_json::json;

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_agentloop-mcp-test-server");

const OLD: &[ProtocolVersion] = &[ProtocolVersion::V_2025_03_26, ProtocolVersion::V_2025_06_18];
const HANDSHAKE: &[ProtocolVersion] =
    &[ProtocolVersion::V_2025_06_18, ProtocolVersion::V_2025_11_25];
const STATELESS: &[ProtocolVersion] = &[ProtocolVersion::V_2026_07_28];

/// Connect over HTTP to a server speaking `versions`; the agreed revision, or the error.
async fn over_http(versions: &[ProtocolVersion], protocol: McpProtocol) -> Result<String, String> {
    let server = serve_http_with(TestMcpServer::speaking(versions))
        .await
        .unwrap();
    let mut registry = Registry::new();
    let info = registry
        .add_mcp_http(McpHttp::new(server.url.clone()).protocol(protocol))
        .await
        .map_err(|e| e.to_string())?;
    // Calls work in the agreed revision, not just the opening.
    let out = registry
        .call("echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert_eq!(out.0.to_text(), "Echo: hi");
    registry.close().await;
    Ok(info.protocol_version.unwrap())
}

async fn over_stdio(versions: &str, protocol: McpProtocol) -> Result<String, String> {
    let mut registry = Registry::new();
    let info = registry
        .add_mcp_stdio(
            McpStdio::new(TEST_SERVER)
                .env("AGENTLOOP_TEST_MCP_PROTOCOLS", versions)
                .protocol(protocol),
        )
        .await
        .map_err(|e| e.to_string())?;
    let out = registry.call("add", json!({"a": 1, "b": 2})).await.unwrap();
    assert_eq!(out.structured(), Some(&json!({"sum": 3})));
    registry.close().await;
    Ok(info.protocol_version.unwrap())
}

fn handshake(version: &str) -> McpProtocol {
    McpProtocol::Handshake(version.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_06_18_server_is_detected_and_gets_the_handshake() {
    assert_eq!(
        over_http(OLD, McpProtocol::Auto).await.unwrap(),
        "2025-06-18"
    );
    assert_eq!(
        over_http(OLD, handshake("2025-06-18")).await.unwrap(),
        "2025-06-18"
    );
    // Offered a newer revision, it answers with its own, which we accept.
    assert_eq!(
        over_http(OLD, handshake("2025-11-25")).await.unwrap(),
        "2025-06-18"
    );
    assert_eq!(
        over_stdio("2025-03-26,2025-06-18", McpProtocol::Auto)
            .await
            .unwrap(),
        "2025-06-18"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_predates_discover_gets_the_handshake() {
    let server = serve_http_with(TestMcpServer::predating_discover(HANDSHAKE))
        .await
        .unwrap();
    let mut registry = Registry::new();
    let info = registry
        .add_mcp_http(McpHttp::new(server.url.clone()))
        .await
        .unwrap();
    assert_eq!(info.protocol_version.as_deref(), Some("2025-11-25"));
    assert_eq!(info.name.as_deref(), Some("agentloop-test-mcp"));
    registry.close().await;

    let mut registry = Registry::new();
    let info = registry
        .add_mcp_stdio(
            McpStdio::new(TEST_SERVER)
                .env("AGENTLOOP_TEST_MCP_PROTOCOLS", "2025-03-26,2025-06-18")
                .env("AGENTLOOP_TEST_MCP_NO_DISCOVER", "1"),
        )
        .await
        .unwrap();
    assert_eq!(info.protocol_version.as_deref(), Some("2025-06-18"));
    let out = registry
        .call("echo", json!({"message": "old"}))
        .await
        .unwrap();
    assert_eq!(out.0.to_text(), "Echo: old");
    registry.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_11_25_server_is_detected_and_gets_the_handshake() {
    assert_eq!(
        over_http(HANDSHAKE, McpProtocol::Auto).await.unwrap(),
        "2025-11-25"
    );
    assert_eq!(
        over_stdio("2025-06-18,2025-11-25", McpProtocol::Auto)
            .await
            .unwrap(),
        "2025-11-25"
    );
    assert_eq!(
        over_stdio("2025-06-18,2025-11-25", handshake("2025-06-18"))
            .await
            .unwrap(),
        "2025-06-18"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_2026_07_28_server_is_detected_and_needs_no_handshake() {
    assert_eq!(
        over_http(STATELESS, McpProtocol::Auto).await.unwrap(),
        "2026-07-28"
    );
    assert_eq!(
        over_http(STATELESS, McpProtocol::Stateless).await.unwrap(),
        "2026-07-28"
    );
    assert_eq!(
        over_stdio("2026-07-28", McpProtocol::Auto).await.unwrap(),
        "2026-07-28"
    );
    // A server that speaks every revision gets the newest.
    assert_eq!(
        over_http(ProtocolVersion::KNOWN_VERSIONS, McpProtocol::Auto)
            .await
            .unwrap(),
        "2026-07-28"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_generation_the_server_does_not_speak_is_a_clear_error() {
    let err = over_http(OLD, McpProtocol::Stateless).await.unwrap_err();
    assert!(err.contains("the MCP handshake failed"), "{err}");
    let err = over_http(STATELESS, handshake("2025-11-25"))
        .await
        .unwrap_err();
    assert!(err.contains("the MCP handshake failed"), "{err}");
    let err = over_http(STATELESS, handshake("2026-07-28"))
        .await
        .unwrap_err();
    assert!(
        err.ends_with(
            "`2026-07-28` is not an MCP revision with a handshake; use one of 2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25"
        ),
        "{err}"
    );
}
