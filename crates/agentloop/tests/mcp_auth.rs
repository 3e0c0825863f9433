//! A streamable-HTTP MCP server behind a bearer token: the token comes from the environment
//! when connecting, is sent on every request, and shows in no debug output or error; without
//! it, the error says that the server wants authorization (MCP 2025-11-25 "Authorization":
//! 401 with `WWW-Authenticate`).
//!
//! Its own test binary: it sets an environment variable, which must not race other tests'
//! reads of the environment.

#![cfg(feature = "mcp-server")]

use agentloop::Tool;
use agentloop::executor::McpHttp;
use agentloop::mcp_server::McpServer;
use agentloop::registry::Registry;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

const TOKEN: &str = "s3cret-token-4f9a";

async fn require_token(request: Request, next: Next) -> Response {
    let expected = format!("Bearer {TOKEN}");
    let given = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    if given == Some(expected.as_str()) {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [("www-authenticate", r#"Bearer realm="tools""#)],
        )
            .into_response()
    }
}

#[tokio::test]
async fn a_bearer_token_from_the_environment_is_sent_and_never_shown() {
    let mut registry = Registry::new();
    registry
        .register(Tool::function(
            "ping",
            "Answer pong",
            |_: serde_json::Value| async { Ok::<_, String>("pong") },
        ))
        .unwrap();
    let app = McpServer::new(registry)
        .router()
        .layer(axum::middleware::from_fn(require_token));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    // SAFETY: the only test in this binary; nothing else reads the environment meanwhile.
    unsafe { std::env::set_var("AGENTLOOP_TEST_MCP_TOKEN", TOKEN) };

    let without = Registry::new()
        .add_mcp_http(McpHttp::new(&url))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        without.contains("the server requires authorization (HTTP 401"),
        "{without}"
    );

    let spec = McpHttp::new(&url).bearer_token_env("AGENTLOOP_TEST_MCP_TOKEN");
    assert!(!format!("{spec:?}").contains(TOKEN));
    let mut client = Registry::new();
    client.add_mcp_http(spec).await.unwrap();
    let out = client.call("ping", json!({})).await.unwrap();
    assert_eq!(out.0.to_text(), "pong");
    client.close().await;

    let unset = Registry::new()
        .add_mcp_http(McpHttp::new(&url).bearer_token_env("AGENTLOOP_TEST_MCP_NO_SUCH_TOKEN"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        unset.ends_with(
            "header `Authorization`: the environment variable `AGENTLOOP_TEST_MCP_NO_SUCH_TOKEN` is not set"
        ),
        "{unset}"
    );
}
