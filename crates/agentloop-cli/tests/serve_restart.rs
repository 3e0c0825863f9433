//! `agentloop serve` killed with SIGKILL: an answer waiting for approval still waits after a
//! restart on the same database, is approved, runs its call once and finishes; an answer
//! killed during a slow tool or during the model's stream goes on from its last checkpoint at
//! start-up, runs no completed tool again, and a client reconnecting with `Last-Event-ID` gets
//! the events it missed and the rest.

mod serve_support;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use serde_json::{Value, json};
use serve_support::{
    FastThenSlow, Served, Sse, assert_finished_after_an_interrupted_slow_tool,
    chat_until_the_slow_tool, command, counting_endpoint, fast_then_slow, header, http_tool, names,
    read_events, sse_until, start, stored_history, tool_endpoint, wait_for,
};

/// `agentloop serve` with database `db` and the tools in `tools` against the mock model at
/// `base_url`; its URL.
fn serve(db: &Path, tools: &Path, base_url: &str) -> (Served, String) {
    start(command(db, tools, base_url))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_waiting_for_approval_survives_sigkill_and_is_approved_after_the_restart() {
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
    let db = dir.path().join("chats.db");
    let start = |db: std::path::PathBuf, tools: std::path::PathBuf, base: String| {
        tokio::task::spawn_blocking(move || serve(&db, &tools, &base))
    };
    let (server, url) = start(db.clone(), tools.clone(), model.base_url())
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{url}/v1/chat"))
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
    let events = read_events(response, "approval_requested").await;
    assert_eq!(
        events.last().unwrap(),
        &(
            "approval_requested".to_owned(),
            json!({"id": "call_1", "name": "deploy", "arguments": {"env": "prod"}, "reason": "tool `deploy` needs approval"})
        )
    );
    // SIGKILL: nothing is saved on the way out.
    server.kill();
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    let (server, url) = start(db, tools, model.base_url()).await.unwrap();
    let response = http
        .get(format!("{url}/v1/chat/{message_id}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let decided = http
        .post(format!("{url}/v1/chat/{message_id}/approvals"))
        .json(&json!({"decisions": [{"id": "call_1", "decision": "approve"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 202);
    let events = read_events(response, "message_end").await;
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "tool_call_start",
            "approval_requested",
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
    assert_eq!(events[7].1["stop_reason"], "end_turn");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the call ran once");
    let stored: Value = http
        .get(format!("{url}/v1/conversations/{conversation_id}"))
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
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_killed_during_a_slow_tool_goes_on_after_the_restart_without_running_a_tool_twice()
 {
    let FastThenSlow {
        model,
        dir,
        tools,
        fast,
        slow,
    } = fast_then_slow().await;
    let db = dir.path().join("chats.db");
    let start = |db: std::path::PathBuf, tools: std::path::PathBuf, base: String| {
        tokio::task::spawn_blocking(move || serve(&db, &tools, &base))
    };
    let (server, url) = start(db.clone(), tools.clone(), model.base_url())
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let (conversation_id, message_id, seen) = chat_until_the_slow_tool(&url, &slow).await;
    server.kill();

    let (server, url) = start(db, tools, model.base_url()).await.unwrap();
    let last_id = seen.last().unwrap().0;
    let response = http
        .get(format!("{url}/v1/chat/{message_id}/events"))
        .header("last-event-id", last_id.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let rest = sse_until(response, |events| {
        events
            .last()
            .is_some_and(|(_, name, _)| name == "message_end")
    })
    .await;
    // The call that was running is answered as interrupted, not run again.
    assert_finished_after_an_interrupted_slow_tool(&rest, &fast, &slow);
    // The whole answer, read again from the start: what the first client saw, then the rest.
    let all = sse_until(
        http.get(format!("{url}/v1/chat/{message_id}/events"))
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
    let messages = stored_history(&url, &conversation_id).await;
    assert_eq!(messages.len(), 6, "{messages:?}");
    assert_eq!(model.calls(), 3);
    server.kill();
}

/// A typed answer (`output_schema`) killed during a slow tool goes on after the restart as a
/// typed answer: the model is asked for the schema again, and the answer ends in its `output`.
#[tokio::test(flavor = "multi_thread")]
async fn a_typed_answer_killed_during_a_slow_tool_goes_on_after_the_restart_as_a_typed_answer() {
    let (slow_url, slow) = counting_endpoint(true).await;
    let model = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_call("slow", json!({})).with_ids(["call_slow"]),
            Turn::text(r#"{"city": "Paris", "temp_c": 18}"#),
        ],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    http_tool(&tools, "slow", &slow_url);
    let db = dir.path().join("chats.db");
    let start = |db: std::path::PathBuf, tools: std::path::PathBuf, base: String| {
        tokio::task::spawn_blocking(move || serve(&db, &tools, &base))
    };
    let (server, url) = start(db.clone(), tools.clone(), model.base_url())
        .await
        .unwrap();
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
        "required": ["city", "temp_c"],
        "additionalProperties": false
    });
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{url}/v1/chat"))
        .json(&json!({"message": "Weather in Paris?", "output_schema": schema}))
        .send()
        .await
        .unwrap();
    let message_id = header(&response, "x-agentloop-message-id");
    let seen = sse_until(response, |events| {
        events.iter().any(|(_, name, _)| name == "tool_call_start")
    })
    .await;
    wait_for(&slow, 1).await;
    server.kill();

    let (server, url) = start(db, tools, model.base_url()).await.unwrap();
    let response = http
        .get(format!("{url}/v1/chat/{message_id}/events"))
        .header("last-event-id", seen.last().unwrap().0.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let rest = sse_until(response, |events| {
        events
            .last()
            .is_some_and(|(_, name, _)| name == "message_end")
    })
    .await;
    let output = rest
        .iter()
        .find(|(_, name, _)| name == "output")
        .unwrap_or_else(|| panic!("no output event: {rest:?}"));
    assert_eq!(output.2["value"], json!({"city": "Paris", "temp_c": 18}));
    assert_eq!(rest.last().unwrap().2["stop_reason"], "end_turn");
    assert_eq!(
        slow.load(Ordering::SeqCst),
        1,
        "the slow tool was not run again"
    );
    // The resumed run asked for the same schema.
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].body["response_format"]["json_schema"]["schema"],
        schema
    );
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_killed_during_the_model_stream_goes_on_after_the_restart() {
    let (endpoint, calls) = tool_endpoint().await;
    let model = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_call("deploy", json!({})).with_ids(["call_1"]),
            // Killed in the middle of this one.
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
    let db = dir.path().join("chats.db");
    let start = |db: std::path::PathBuf, tools: std::path::PathBuf, base: String| {
        tokio::task::spawn_blocking(move || serve(&db, &tools, &base))
    };
    let (server, url) = start(db.clone(), tools.clone(), model.base_url())
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{url}/v1/chat"))
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
    server.kill();

    let (server, url) = start(db, tools, model.base_url()).await.unwrap();
    // The deltas came after the last checkpoint: they are cut, and the server says from
    // where to go on.
    let response = http
        .get(format!("{url}/v1/chat/{message_id}/events"))
        .header("last-event-id", seen.last().unwrap().0.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
    let error: Value = response.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    let last_kept: u64 = message
        .split("reconnect with Last-Event-ID ")
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (seen[2].0..seen[3].0).contains(&last_kept),
        "{last_kept} {seen:?}"
    );
    let kept: Vec<Sse> = seen.iter().filter(|e| e.0 <= last_kept).cloned().collect();
    let response = http
        .get(format!("{url}/v1/chat/{message_id}/events"))
        .header("last-event-id", last_kept.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let rest = sse_until(response, |events| {
        events
            .last()
            .is_some_and(|(_, name, _)| name == "message_end")
    })
    .await;
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
    let all = sse_until(
        http.get(format!("{url}/v1/chat/{message_id}/events"))
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
    let messages = stored_history(&url, &conversation_id).await;
    assert_eq!(messages.len(), 4, "{messages:?}");
    assert_eq!(
        messages[3],
        agentloop::Message::assistant("Deployed."),
        "{messages:?}"
    );
    assert_eq!(model.calls(), 3);
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_killed_while_running_an_approved_call_goes_on_after_the_restart() {
    let (slow_url, slow) = counting_endpoint(true).await;
    let model = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_call("deploy", json!({})).with_ids(["call_1"]),
            Turn::text("Done."),
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
            "input_schema": {"type": "object", "properties": {}},
            "mode": "http",
            "http": {"url": slow_url},
            "needs_approval": true,
        })
        .to_string(),
    )
    .unwrap();
    let db = dir.path().join("chats.db");
    let start = |db: std::path::PathBuf, tools: std::path::PathBuf, base: String| {
        tokio::task::spawn_blocking(move || serve(&db, &tools, &base))
    };
    let (server, url) = start(db.clone(), tools.clone(), model.base_url())
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{url}/v1/chat"))
        .json(&json!({"message": "Deploy it"}))
        .send()
        .await
        .unwrap();
    let conversation_id = header(&response, "x-agentloop-conversation-id");
    let message_id = header(&response, "x-agentloop-message-id");
    let seen = sse_until(response, |events| {
        events
            .last()
            .is_some_and(|(_, name, _)| name == "approval_requested")
    })
    .await;
    assert_eq!(
        names(&seen),
        ["message_start", "tool_call_start", "approval_requested"]
    );
    let decided = http
        .post(format!("{url}/v1/chat/{message_id}/approvals"))
        .json(&json!({"decisions": [{"id": "call_1", "decision": "approve"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 202);
    // The approved call is running: the decisions were checkpointed before it started.
    wait_for(&slow, 1).await;
    server.kill();

    let (server, url) = start(db, tools, model.base_url()).await.unwrap();
    let response = http
        .get(format!("{url}/v1/chat/{message_id}/events"))
        .header("last-event-id", seen.last().unwrap().0.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let rest = sse_until(response, |events| {
        events
            .last()
            .is_some_and(|(_, name, _)| name == "message_end")
    })
    .await;
    assert_eq!(
        names(&rest),
        [
            "tool_call_result",
            "text_delta",
            "text_delta",
            "text_delta",
            "message_end"
        ]
    );
    assert_eq!(rest[0].2["is_error"], true);
    assert_eq!(rest[4].2["stop_reason"], "end_turn");
    assert_eq!(slow.load(Ordering::SeqCst), 1, "the call was not run again");
    let all = sse_until(
        http.get(format!("{url}/v1/chat/{message_id}/events"))
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
    let messages = stored_history(&url, &conversation_id).await;
    assert_eq!(messages.len(), 4, "{messages:?}");
    server.kill();
}
