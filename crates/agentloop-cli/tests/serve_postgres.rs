//! Two `agentloop serve` processes on one Postgres database (`--db postgres://…`), as behind a
//! load balancer: a conversation written through A is listed by B; an answer paused for
//! approval through A, A then killed with SIGKILL, is followed and approved through B, and its
//! call runs once.
//!
//! Needs `AGENTLOOP_TEST_POSTGRES` (CI starts a server; without it, a skip notice).

mod serve_support;

use std::io::BufRead;
use std::process::Stdio;
use std::sync::atomic::Ordering;

use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::{Value, json};
use serve_support::{Served, command, read_events, start, tool_endpoint};

/// `agentloop serve --db URL` on a free port with the tools in `tools` against the mock model
/// at `base_url`; its URL and what it said about its database.
fn serve(db: &str, tools: &std::path::Path, base_url: &str) -> (Served, String, String) {
    let mut command = command(db, tools, base_url);
    command.stderr(Stdio::piped());
    let (mut served, url) = start(command);
    // Read to the end on a thread of its own: a closed pipe would fail the server's next log.
    let stderr = std::io::BufReader::new(served.0.stderr.take().unwrap());
    let (said, database) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.starts_with("agentloop: database ") {
                let _ = said.send(line);
            }
        }
    });
    let database = database.recv().expect("serve names its database");
    (served, url, database)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_paused_through_a_killed_server_is_approved_through_another() {
    let Ok(server) = std::env::var("AGENTLOOP_TEST_POSTGRES") else {
        agentloop_testkit::skip(
            "two `agentloop serve` on Postgres: AGENTLOOP_TEST_POSTGRES is not set (CI starts a server)",
        );
        return;
    };
    let (client, connection) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let name = format!("agentloop_serve_{}", std::process::id());
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (base, _) = server.rsplit_once('/').unwrap();
    let db = format!("{base}/{name}");

    let (endpoint, calls) = tool_endpoint().await;
    let model = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_call("deploy", json!({"env": "prod"})).with_ids(["call_1"]),
            Turn::text("Deployed."),
        ],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    std::fs::write(
        tools.join("deploy.json"),
        json!({
            "name": "deploy",
            "description": "Deploy the app",
            "input_schema": {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]},
            "mode": "http",
            "http": {"url": endpoint},
            "needs_approval": true,
        })
        .to_string(),
    )
    .unwrap();
    let start = || {
        let (db, tools, base) = (db.clone(), tools.clone(), model.base_url());
        tokio::task::spawn_blocking(move || serve(&db, &tools, &base))
    };
    // Both up before anything is written: B learns of A's work from the database only.
    let (a, a_url, said) = start().await.unwrap();
    assert_eq!(said, format!("agentloop: database {db}"));
    let (b, b_url, _) = start().await.unwrap();

    let http = reqwest::Client::new();
    let response = http
        .post(format!("{a_url}/v1/chat"))
        .json(&json!({"message": "Deploy it"}))
        .send()
        .await
        .unwrap();
    let conversation_id = response.headers()["x-agentloop-conversation-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let message_id = response.headers()["x-agentloop-message-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let paused = read_events(response, "approval_requested").await;
    let list: Value = http
        .get(format!("{b_url}/v1/conversations"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["conversations"][0]["id"], conversation_id);
    assert_eq!(list["conversations"][0]["title"], "Deploy it");

    // SIGKILL: A is gone; B follows the answer from the database and decides it.
    a.kill();
    let response = http
        .get(format!("{b_url}/v1/chat/{message_id}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let decided = http
        .post(format!("{b_url}/v1/chat/{message_id}/approvals"))
        .json(&json!({"decisions": [{"id": "call_1", "decision": "approve"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 202);
    let events = read_events(response, "message_end").await;
    assert_eq!(events[..3], paused[..]);
    let names: Vec<&str> = events[3..].iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "tool_call_result",
            "text_delta",
            "text_delta",
            "text_delta",
            "message_end"
        ]
    );
    assert_eq!(
        events[3].1,
        json!({"id": "call_1", "content": "{\"deployed\":true}", "is_error": false})
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the call ran once");
    let stored: Value = http
        .get(format!("{b_url}/v1/conversations/{conversation_id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let messages: Vec<agentloop::Message> =
        serde_json::from_value(stored["messages"].clone()).unwrap();
    assert!(agentloop::history::is_valid(&messages));
    assert_eq!(messages.len(), 4);
    b.kill();
}
