//! Two `agentloop serve` processes on one Postgres database (`--db postgres://…`), as behind a
//! load balancer: a conversation written through A is listed by B; an answer paused for
//! approval through A, A then killed with SIGKILL, is followed and approved through B, and its
//! call runs once; an answer running on A when it is killed (during a slow tool, or during the
//! model's stream) is taken over by B once A's lease expires, the client reconnecting to B
//! gets exactly what it missed and the rest, and no tool runs twice.
//!
//! Needs `AGENTLOOP_TEST_POSTGRES` (CI starts a server; without it, a skip notice).

mod serve_support;

use std::io::BufRead;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::{Value, json};
use serve_support::{
    FastThenSlow, Served, Sse, assert_finished_after_an_interrupted_slow_tool,
    chat_until_the_slow_tool, command, fast_then_slow, follow_to_end, header, http_tool, names,
    read_events, sse_until, start, stored_history, tool_endpoint,
};

/// `agentloop serve --db URL` on a free port with the tools in `tools` against the mock model
/// at `base_url`; its URL and what it said about its database.
fn serve(db: &str, tools: &std::path::Path, base_url: &str) -> (Served, String, String) {
    // A short lease, so a killed server's answers are taken over soon.
    serve_leased(db, tools, base_url, "1000")
}

/// [`serve`] with answer leases of `lease_ms`.
fn serve_leased(
    db: &str,
    tools: &std::path::Path,
    base_url: &str,
    lease_ms: &str,
) -> (Served, String, String) {
    let mut command = command(db, tools, base_url);
    command.args(["--answer-lease-ms", lease_ms]);
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

/// A fresh database on the server `AGENTLOOP_TEST_POSTGRES` names, its URL; `None` after a
/// skip notice when the variable is unset.
async fn database() -> Option<String> {
    let Ok(server) = std::env::var("AGENTLOOP_TEST_POSTGRES") else {
        agentloop_testkit::skip(
            "two `agentloop serve` on Postgres: AGENTLOOP_TEST_POSTGRES is not set (CI starts a server)",
        );
        return None;
    };
    let (client, connection) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    // The time too, so a rerun on the same Postgres server never meets an old database.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!(
        "agentloop_serve_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (base, _) = server.rsplit_once('/').unwrap();
    Some(format!("{base}/{name}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_paused_through_a_killed_server_is_approved_through_another() {
    let Some(db) = database().await else {
        return;
    };

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

/// Two servers on `db` with the tools in `tools` against the mock model at `base_url`, both up
/// before anything is written (B learns of A's work from the database only).
async fn two_servers(db: &str, tools: &std::path::Path, base_url: &str) -> [(Served, String); 2] {
    let start = || {
        let (db, tools, base) = (db.to_owned(), tools.to_owned(), base_url.to_owned());
        tokio::task::spawn_blocking(move || serve(&db, &tools, &base))
    };
    let (a, a_url, _) = start().await.unwrap();
    let (b, b_url, _) = start().await.unwrap();
    [(a, a_url), (b, b_url)]
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_running_on_a_server_killed_during_a_slow_tool_is_finished_by_another() {
    let Some(db) = database().await else {
        return;
    };
    let FastThenSlow {
        model,
        dir: _dir,
        tools,
        fast,
        slow,
    } = fast_then_slow().await;
    let [(a, a_url), (b, b_url)] = two_servers(&db, &tools, &model.base_url()).await;

    let http = reqwest::Client::new();
    let (conversation_id, message_id, seen) = chat_until_the_slow_tool(&a_url, &slow).await;
    a.kill();

    // The client reconnects to B, which follows the answer from the database until A's lease
    // expires, then takes it over from its last checkpoint and finishes it.
    let (kept, rest, cuts) = follow_to_end(&b_url, &message_id, seen.clone()).await;
    assert_eq!(
        (kept.clone(), cuts),
        (seen.clone(), 0),
        "nothing seen was cut"
    );
    // The call that was running is answered as interrupted, not run again.
    assert_finished_after_an_interrupted_slow_tool(&rest, &fast, &slow);
    // The whole answer from B: what the client saw through A, then the rest.
    let all: Vec<Sse> = sse_until(
        http.get(format!("{b_url}/v1/chat/{message_id}/events"))
            .send()
            .await
            .unwrap(),
        |events| {
            events
                .last()
                .is_some_and(|(_, name, _)| name == "message_end")
        },
    )
    .await;
    assert_eq!(all, [seen, rest].concat());
    // Written through A and B, listed by B.
    let list: Value = http
        .get(format!("{b_url}/v1/conversations"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["conversations"][0]["id"], conversation_id);
    let messages = stored_history(&b_url, &conversation_id).await;
    assert_eq!(messages.len(), 6, "{messages:?}");
    assert_eq!(model.calls(), 3);
    b.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_running_on_a_server_killed_during_the_model_stream_is_finished_by_another() {
    let Some(db) = database().await else {
        return;
    };
    let (endpoint, calls) = tool_endpoint().await;
    let model = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_call("deploy", json!({})).with_ids(["call_1"]),
            // A is killed in the middle of this one.
            Turn::text("This answer is streamed slowly and never finishes.")
                .with_text_pieces(20)
                .with_chunk_delay(Duration::from_millis(200)),
            Turn::text("Deployed."),
        ],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    http_tool(&tools, "deploy", &endpoint);
    let [(a, a_url), (b, b_url)] = two_servers(&db, &tools, &model.base_url()).await;

    let http = reqwest::Client::new();
    let response = http
        .post(format!("{a_url}/v1/chat"))
        .json(&json!({"message": "Deploy it"}))
        .send()
        .await
        .unwrap();
    let conversation_id = header(&response, "x-agentloop-conversation-id");
    let message_id = header(&response, "x-agentloop-message-id");
    let seen = sse_until(response, |events| {
        events
            .iter()
            .filter(|(_, name, _)| name == "text_delta")
            .count()
            == 2
    })
    .await;
    assert_eq!(
        names(&seen),
        [
            "message_start",
            "tool_call_start",
            "tool_call_result",
            "text_delta",
            "text_delta"
        ]
    );
    a.kill();

    // The deltas came after A's last checkpoint: when B takes the answer over they are cut,
    // and B says from where to go on (409, also before that for an event A sent but did not
    // store); the client drops them and gets the rest.
    let (kept, rest, cuts) = follow_to_end(&b_url, &message_id, seen.clone()).await;
    assert!(cuts >= 1);
    assert_eq!(kept[..], seen[..3]);
    assert_eq!(
        names(&rest),
        ["text_delta", "text_delta", "text_delta", "message_end"]
    );
    let text: String = rest[..3]
        .iter()
        .map(|(_, _, data)| data["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Deployed.");
    assert_eq!(rest[3].2["stop_reason"], "end_turn");
    assert!(
        rest.iter().all(|(id, _, _)| *id >= 1_000_000_000),
        "{rest:?}"
    );
    let all: Vec<Sse> = sse_until(
        http.get(format!("{b_url}/v1/chat/{message_id}/events"))
            .send()
            .await
            .unwrap(),
        |events| {
            events
                .last()
                .is_some_and(|(_, name, _)| name == "message_end")
        },
    )
    .await;
    assert_eq!(all, [kept, rest].concat());
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the tool ran once");
    let messages = stored_history(&b_url, &conversation_id).await;
    assert_eq!(messages.len(), 4, "{messages:?}");
    assert_eq!(
        messages[3],
        agentloop::Message::assistant("Deployed."),
        "{messages:?}"
    );
    assert_eq!(model.calls(), 3);
    b.kill();
}

/// A server stopped by SIGTERM hands its answer in flight over: with leases far longer than
/// the test may take, the other server takes it over at once (told by the stopping one) and
/// finishes it; the slow tool that was running is answered as interrupted, nothing runs twice,
/// and the stopped server exits cleanly.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_stopped_by_sigterm_hands_its_answer_over_to_another_at_once() {
    let Some(db) = database().await else {
        return;
    };
    let FastThenSlow {
        model,
        dir: _dir,
        tools,
        fast,
        slow,
    } = fast_then_slow().await;
    let start = || {
        let (db, tools, base) = (db.clone(), tools.clone(), model.base_url());
        // A minute: a takeover that waited for the lease would not finish in time.
        tokio::task::spawn_blocking(move || serve_leased(&db, &tools, &base, "60000"))
    };
    let (mut a, a_url, _) = start().await.unwrap();
    let (b, b_url, _) = start().await.unwrap();

    let (_, message_id, seen) = chat_until_the_slow_tool(&a_url, &slow).await;
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &a.0.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let status = tokio::task::spawn_blocking(move || a.0.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "serve exited with {status} after SIGTERM");

    let followed = tokio::time::timeout(
        Duration::from_secs(20),
        follow_to_end(&b_url, &message_id, seen.clone()),
    )
    .await
    .expect("the other server finished the answer long before the lease would have expired");
    let (kept, rest, _) = followed;
    assert_eq!(kept, seen, "nothing seen was cut");
    // The call that was running is answered as interrupted, not run again.
    assert_finished_after_an_interrupted_slow_tool(&rest, &fast, &slow);
    assert_eq!(model.calls(), 3);
    b.kill();
}
