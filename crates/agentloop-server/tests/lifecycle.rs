//! `Server`: bind to a free port, serve, and shut down saving the answers in flight.

mod common;

use std::convert::Infallible;

use agentloop::{Agent, ContentBlock, Message, Role, Tool, ToolResult};
use agentloop_server::{Server, ServerConfig};
use agentloop_testkit::{ScriptedModel, Turn};
use common::{EventReader, client};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

#[tokio::test]
async fn shutdown_cancels_answers_in_flight_and_saves_them() {
    let endless = Tool::function("wait_forever", "Never returns", |_: Nothing| {
        std::future::pending::<Result<String, Infallible>>()
    });
    let model = ScriptedModel::new([Turn::tool_call("wait_forever", json!({}))]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("life.db");
    let config =
        ServerConfig::new(Agent::builder(model.clone()).tool(endless).build()).database(&db);
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap();
    let addr = server.local_addr();
    assert!(addr.ip().is_loopback() && addr.port() != 0);
    let state = server.state().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run_until(async {
        let _ = stopped.await;
    }));

    let response = client()
        .post(format!("http://{addr}/v1/chat"))
        .json(&json!({"message": "Wait"}))
        .send()
        .await
        .unwrap();
    let mut reader = EventReader::new(response);
    let conversation_id = reader.headers()["x-agentloop-conversation-id"]
        .to_str()
        .unwrap()
        .to_owned();
    reader.read_until(|e| e.event == "tool_call_start").await;

    stop.send(()).unwrap();
    // The open stream ends with the cancelled call, and the server returns.
    let rest = reader.rest().await;
    assert_eq!(
        rest.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(),
        ["tool_call_result", "message_end"]
    );
    serving.await.unwrap().unwrap();

    let stored = state.conversation(&conversation_id).await.unwrap().unwrap();
    assert_eq!(
        stored.messages,
        vec![
            Message::user("Wait"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse {
                    id: "call_0_0".into(),
                    name: "wait_forever".into(),
                    input: json!({})
                }]
            ),
            Message::tool_results([ToolResult::error(
                "call_0_0",
                "Error: the call to `wait_forever` was not run: the run was cancelled"
            )]),
        ]
    );
}

#[tokio::test]
async fn binding_a_busy_address_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let model = ScriptedModel::new([]);
    let error = Server::bind(
        addr,
        ServerConfig::new(Agent::builder(model).build()).in_memory_database(),
    )
    .await
    .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with(&format!("could not serve on {addr}: ")),
        "{error}"
    );
}

#[tokio::test]
async fn a_missing_sandbox_directory_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let model = ScriptedModel::new([]);
    let error = agentloop_server::AppState::new(
        ServerConfig::new(Agent::builder(model).build())
            .in_memory_database()
            .sandbox(&missing),
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "sandbox directory `{}`: cannot open it: no such file or directory",
            missing.display()
        )
    );
}
