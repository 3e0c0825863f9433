//! Two `agentloop serve` processes on one Postgres database (`--db postgres://…`), as behind a
//! load balancer: a conversation written through A is listed by B; an answer paused for
//! approval through A, A then killed with SIGKILL, is followed and approved through B, and its
//! call runs once.
//!
//! Needs `AGENTLOOP_TEST_POSTGRES` (CI starts a server; without it, a skip notice).

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::{Value, json};

/// `agentloop serve --db URL` on a free port with the tools in `tools` against the mock model
/// at `base_url`; its URL and what it said about its database.
fn serve(db: &str, tools: &std::path::Path, base_url: &str) -> (Child, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentloop"))
        .env_remove("AGENTLOOP_MODEL")
        .env_remove("AGENTLOOP_TOKEN")
        .env("NO_COLOR", "1")
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(["--model", "openai-compatible/demo", "--base-url", base_url])
        .args(["--db", db])
        .arg("--tools")
        .arg(tools)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the agentloop binary runs");
    let line = std::io::BufReader::new(child.stdout.take().unwrap())
        .lines()
        .next()
        .expect("serve prints its address")
        .unwrap();
    let url = line.trim_start_matches("serving on ").to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    // Read to the end on a thread of its own: a closed pipe would fail the server's next log.
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (said, database) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.starts_with("agentloop: database ") {
                let _ = said.send(line);
            }
        }
    });
    let database = database.recv().expect("serve names its database");
    (child, url, database)
}

/// A tool endpoint on loopback that counts its calls and answers `{"deployed": true}`.
async fn tool_endpoint() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/deploy", listener.local_addr().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = axum::Router::new().route(
        "/deploy",
        axum::routing::post(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { axum::Json(json!({"deployed": true})) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, calls)
}

/// `(event, data)` of each SSE event of `response` up to the first `stop` event.
async fn read_events(mut response: reqwest::Response, stop: &str) -> Vec<(String, Value)> {
    let mut text = String::new();
    let mut events = Vec::new();
    // A guard against a stream that never sends `stop`, not a timing assumption.
    let read = async {
        while let Some(chunk) = response.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find("\n\n") {
                let block = text[..end].to_owned();
                text.drain(..end + 2);
                let name = block.lines().find_map(|l| l.strip_prefix("event: "));
                let data = block.lines().find_map(|l| l.strip_prefix("data: "));
                if let (Some(name), Some(data)) = (name, data) {
                    events.push((name.to_owned(), serde_json::from_str(data).unwrap()));
                    if name == stop {
                        return;
                    }
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the stream reaches its event");
    events
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
    let (mut a, a_url, said) = start().await.unwrap();
    assert_eq!(said, format!("agentloop: database {db}"));
    let (mut b, b_url, _) = start().await.unwrap();

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
    a.kill().unwrap();
    a.wait().unwrap();
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
    b.kill().unwrap();
    b.wait().unwrap();
}
