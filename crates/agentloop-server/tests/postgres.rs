//! Two servers on one Postgres database, as behind a load balancer: what one writes the other
//! lists and reads, renames and deletes are seen by both, and an answer paused for approval
//! through one is approved through the other (and only once).
//!
//! Needs `AGENTLOOP_TEST_POSTGRES` (CI starts a server; without it, a skip notice).

mod common;

use std::sync::Arc;
use std::time::Duration;

use agentloop::{Agent, ContentBlock, Message, Role, Tool, ToolResult};
use agentloop_server::ServerConfig;
use agentloop_testkit::{ScriptedModel, Turn, split_pieces};
use common::deploy::{Deploy, Ran, deploy_tool};
use common::{EventReader, TestServer, client, event, named, post_chat};
use serde_json::{Value, json};

/// A fresh database on the server `AGENTLOOP_TEST_POSTGRES` names, its URL.
async fn database(test: &str) -> Option<String> {
    let Ok(server) = std::env::var("AGENTLOOP_TEST_POSTGRES") else {
        agentloop_testkit::skip(&format!(
            "{test} on Postgres: AGENTLOOP_TEST_POSTGRES is not set (CI starts a server)"
        ));
        return None;
    };
    let (client, connection) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let db = format!("agentloop_two_{:016x}", rand::random::<u64>());
    client
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    let (base, _) = server.rsplit_once('/').unwrap();
    Some(format!("{base}/{db}"))
}

async fn get_json(server: &TestServer, path: &str) -> (u16, Value) {
    let response = client().get(server.url(path)).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn decide(server: &TestServer, message_id: &str) -> reqwest::Response {
    client()
        .post(server.url(&format!("/v1/chat/{message_id}/approvals")))
        .json(&json!({"decisions": [{"id": "call_1", "decision": "approve"}]}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn two_servers_on_one_database_share_conversations_and_paused_answers() {
    let Some(url) =
        database("two_servers_on_one_database_share_conversations_and_paused_answers").await
    else {
        return;
    };
    let ran = Ran::default();
    let model = ScriptedModel::new([
        Turn::tool_call("deploy", json!({"env": "prod"})).with_ids(["call_1"]),
        Turn::text("Done."),
        Turn::text("You're welcome."),
    ]);
    let config = || {
        ServerConfig::new(
            Agent::builder(model.clone())
                .tool(deploy_tool(&ran))
                .build(),
        )
        .postgres(url.clone())
    };
    // Both up before anything is written: B learns of A's work from the database only.
    let a = TestServer::start(config()).await;
    let b = TestServer::start(config()).await;

    let response = post_chat(&a, json!({"message": "Deploy it"})).await;
    assert_eq!(response.status(), 200);
    let mut through_a = EventReader::new(response);
    let conversation_id = through_a.headers()["x-agentloop-conversation-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let message_id = through_a.headers()["x-agentloop-message-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let paused = through_a
        .read_until(|e| e.event == "approval_requested")
        .await;
    drop(through_a);

    // Written through A, listed and read through B.
    let (status, list) = get_json(&b, "/v1/conversations").await;
    assert_eq!(status, 200);
    assert_eq!(list["conversations"][0]["id"], conversation_id);
    assert_eq!(list["conversations"][0]["title"], "Deploy it");
    let (status, stored) = get_json(&b, &format!("/v1/conversations/{conversation_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(stored["messages"][0]["content"][0]["text"], "Deploy it");

    // The answer waiting on A keeps the conversation busy through B too.
    let (_, stored) = get_json(&b, &format!("/v1/conversations/{conversation_id}")).await;
    assert_eq!(stored["active_message_id"], message_id);
    let response = post_chat(
        &b,
        json!({"conversation_id": conversation_id, "message": "And staging?"}),
    )
    .await;
    assert_eq!(response.status(), 409);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("(message `{message_id}`)")),
        "{error}"
    );
    let response = client()
        .delete(b.url(&format!("/v1/conversations/{conversation_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);

    // B follows the paused answer: the same events under the same ids, then the rest once
    // it approved the call.
    let response = client()
        .get(b.url(&format!("/v1/chat/{message_id}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut through_b = EventReader::new(response);
    let again = through_b
        .read_until(|e| e.event == "approval_requested")
        .await;
    assert_eq!(again, paused);
    assert_eq!(decide(&b, &message_id).await.status(), 202);
    let mut rest = vec![event(
        "tool_call_result",
        json!({"id": "call_1", "content": "deployed to prod", "is_error": false}),
    )];
    rest.extend(
        split_pieces("Done.", 3)
            .into_iter()
            .map(|t| event("text_delta", json!({ "text": t }))),
    );
    rest.push(event(
        "message_end",
        json!({"stop_reason": "end_turn", "usage": {"input_tokens": 20, "output_tokens": 10,
            "cache_read_tokens": 0, "cache_write_tokens": 0}}),
    ));
    assert_eq!(named(&through_b.rest().await), rest);
    assert_eq!(*ran.lock().unwrap(), ["prod"]);

    // A still holds its copy of the pause, but the decision was taken: the conversation is
    // not busy there any more, and there is no second run.
    let (_, stored) = get_json(&a, &format!("/v1/conversations/{conversation_id}")).await;
    assert_eq!(stored["active_message_id"], Value::Null);
    let response = decide(&a, &message_id).await;
    assert_eq!(response.status(), 409);
    assert_eq!(*ran.lock().unwrap(), ["prod"]);

    // The whole answer, saved by B, read through A.
    let full = vec![
        Message::user("Deploy it"),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: "call_1".into(),
                name: "deploy".into(),
                input: json!({"env": "prod"}),
            }],
        ),
        Message::tool_results([ToolResult::text("call_1", "deployed to prod")]),
        Message::assistant("Done."),
    ];
    let stored = a
        .state
        .conversation(&conversation_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.messages, full);
    assert_eq!(stored.answers.len(), 1);
    assert_eq!(stored.answers[0].stop_reason, "end_turn");

    // The conversation goes on through A.
    let response = post_chat(
        &a,
        json!({"conversation_id": conversation_id, "message": "Thanks"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let events = EventReader::new(response).rest().await;
    assert_eq!(events.last().unwrap().data["stop_reason"], "end_turn");

    // Renamed and deleted through B, seen through A.
    let response = client()
        .patch(b.url(&format!("/v1/conversations/{conversation_id}")))
        .json(&json!({"title": "Friday deploy"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (_, list) = get_json(&a, "/v1/conversations").await;
    assert_eq!(list["conversations"][0]["title"], "Friday deploy");
    let response = client()
        .delete(b.url(&format!("/v1/conversations/{conversation_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let (status, _) = get_json(&a, &format!("/v1/conversations/{conversation_id}")).await;
    assert_eq!(status, 404);
    let (_, list) = get_json(&a, "/v1/conversations").await;
    assert_eq!(list["conversations"], json!([]));
}

async fn post_ui(server: &TestServer, body: Value) -> Vec<Value> {
    let response = client()
        .post(server.url("/v1/chat/ui-stream"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // A guard against a stream left open, not a timing assumption.
    tokio::time::timeout(Duration::from_secs(30), EventReader::new(response).rest())
        .await
        .expect("the UI stream ends")
        .into_iter()
        .map(|e| e.data)
        .collect()
}

/// `useChat` behind a load balancer: the request that pauses reaches A, the one carrying the
/// approval response (the AI SDK's `approval-responded` tool part, as in tests/approvals.rs)
/// reaches B, which continues the same assistant message.
#[tokio::test]
async fn the_ui_stream_decides_through_another_server() {
    let Some(url) = database("the_ui_stream_decides_through_another_server").await else {
        return;
    };
    let ran = Ran::default();
    let model = ScriptedModel::new([
        Turn::tool_call("deploy", json!({"env": "prod"})).with_ids(["call_1"]),
        Turn::text("Done."),
    ]);
    let config = || {
        ServerConfig::new(
            Agent::builder(model.clone())
                .tool(deploy_tool(&ran))
                .build(),
        )
        .postgres(url.clone())
    };
    let a = TestServer::start(config()).await;
    let b = TestServer::start(config()).await;
    let question =
        json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Deploy it"}]});
    let first = post_ui(&a, json!({"id": "chat-a", "messages": [question]})).await;
    let message_id = first[0]["messageId"].as_str().unwrap().to_owned();
    assert_eq!(
        first[first.len() - 4],
        json!({"type": "tool-approval-request", "approvalId": "call_1", "toolCallId": "call_1"})
    );
    let answered = json!({"id": message_id, "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-deploy", "toolCallId": "call_1", "state": "approval-responded",
         "input": {"env": "prod"}, "approval": {"id": "call_1", "approved": true}}
    ]});
    let second = post_ui(
        &b,
        json!({"id": "chat-a", "messages": [question, answered], "trigger": "submit-message", "messageId": message_id}),
    )
    .await;
    assert_eq!(second[0], json!({"type": "start", "messageId": message_id}));
    assert_eq!(
        second[1],
        json!({"type": "tool-output-available", "toolCallId": "call_1", "output": "deployed to prod"})
    );
    assert_eq!(
        second[second.len() - 2],
        json!({"type": "finish", "finishReason": "stop"})
    );
    assert_eq!(*ran.lock().unwrap(), ["prod"]);
    let stored = a.state.conversation("chat-a").await.unwrap().unwrap();
    assert_eq!(stored.messages.len(), 4);
    assert_eq!(stored.messages[3], Message::assistant("Done."));
}

/// A client following a paused answer through A when B decides it: A hears of the decision
/// (Postgres `LISTEN/NOTIFY`) and ends the stream instead of leaving it waiting.
#[tokio::test]
async fn a_stream_waiting_on_one_server_ends_when_another_decides_the_answer() {
    let Some(url) =
        database("a_stream_waiting_on_one_server_ends_when_another_decides_the_answer").await
    else {
        return;
    };
    let ran = Ran::default();
    let model = ScriptedModel::new([
        Turn::tool_call("deploy", json!({"env": "prod"})).with_ids(["call_1"]),
        Turn::text("Done."),
    ]);
    let config = || {
        ServerConfig::new(
            Agent::builder(model.clone())
                .tool(deploy_tool(&ran))
                .build(),
        )
        .postgres(url.clone())
    };
    let a = TestServer::start(config()).await;
    let b = TestServer::start(config()).await;
    let response = post_chat(&a, json!({"message": "Deploy it"})).await;
    let mut through_a = EventReader::new(response);
    let message_id = through_a.headers()["x-agentloop-message-id"]
        .to_str()
        .unwrap()
        .to_owned();
    through_a
        .read_until(|e| e.event == "approval_requested")
        .await;
    assert_eq!(decide(&b, &message_id).await.status(), 202);
    // A guard against a stream left waiting, not a timing assumption.
    let rest = tokio::time::timeout(Duration::from_secs(10), through_a.rest())
        .await
        .expect("A ends the stream of the answer decided through B");
    assert_eq!(rest, vec![]);
    assert!(b.state.wait_for_message(&message_id).await);
    assert_eq!(*ran.lock().unwrap(), ["prod"]);
}

/// An answer running on A (not paused) is followed live through B, from a `Last-Event-ID`
/// and from the start, with A's event ids; while it runs its conversation is busy through B
/// (409), and B shows it as the conversation's active answer.
#[tokio::test]
async fn a_running_answer_is_followed_through_another_server_and_keeps_its_conversation_busy() {
    let Some(url) = database(
        "a_running_answer_is_followed_through_another_server_and_keeps_its_conversation_busy",
    )
    .await
    else {
        return;
    };
    let model = ScriptedModel::new([Turn::text("one two three four five six seven eight")
        .with_text_pieces(8)
        .with_chunk_delay(Duration::from_millis(60))]);
    let config = || ServerConfig::new(Agent::builder(model.clone()).build()).postgres(url.clone());
    let a = TestServer::start(config()).await;
    let b = TestServer::start(config()).await;

    let mut through_a = EventReader::new(post_chat(&a, json!({"message": "Count"})).await);
    let conversation_id = through_a.headers()["x-agentloop-conversation-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let message_id = through_a.headers()["x-agentloop-message-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let deltas = std::cell::Cell::new(0);
    let seen = through_a
        .read_until(|e| {
            deltas.set(deltas.get() + usize::from(e.event == "text_delta"));
            deltas.get() == 2
        })
        .await;
    assert_eq!(seen.last().unwrap().event, "text_delta", "{seen:?}");

    // Busy through B while it runs on A: a unique row in the database, not B's memory.
    let response = post_chat(
        &b,
        json!({"conversation_id": conversation_id, "message": "Again"}),
    )
    .await;
    assert_eq!(response.status(), 409);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("(message `{message_id}`)")),
        "{error}"
    );
    let (_, stored) = get_json(&b, &format!("/v1/conversations/{conversation_id}")).await;
    assert_eq!(stored["active_message_id"], message_id);

    // Followed through B: what came after the last event the client saw, then the rest live.
    let last = seen.last().unwrap().id.clone().unwrap();
    let response = client()
        .get(b.url(&format!("/v1/chat/{message_id}/events")))
        .header("last-event-id", &last)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let through_b = EventReader::new(response);
    let from_start = EventReader::new(
        client()
            .get(b.url(&format!("/v1/chat/{message_id}/events")))
            .send()
            .await
            .unwrap(),
    );
    // The AI SDK's resume request through B replays the answer as UI message chunks.
    let ui_resume = client()
        .get(b.url(&format!("/v1/chat/ui-stream/{conversation_id}/stream")))
        .send()
        .await
        .unwrap();
    assert_eq!(ui_resume.status(), 200);
    assert_eq!(ui_resume.headers()["x-vercel-ai-ui-message-stream"], "v1");
    let ui_resume = EventReader::new(ui_resume);
    // A guard against a stream that never ends, not a timing assumption.
    let ten = Duration::from_secs(10);
    let rest_b = tokio::time::timeout(ten, through_b.rest()).await.unwrap();
    let rest_a = tokio::time::timeout(ten, through_a.rest()).await.unwrap();
    let all_b = tokio::time::timeout(ten, from_start.rest()).await.unwrap();
    let chunks: Vec<Value> = tokio::time::timeout(ten, ui_resume.rest())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.data)
        .collect();
    let types: Vec<&str> = chunks
        .iter()
        .map(|c| c["type"].as_str().unwrap_or("[DONE]"))
        .filter(|t| *t != "text-delta")
        .collect();
    assert_eq!(
        types,
        [
            "start",
            "start-step",
            "text-start",
            "text-end",
            "finish-step",
            "finish",
            "[DONE]"
        ],
        "{chunks:?}"
    );
    assert_eq!(chunks[0]["messageId"], message_id);
    assert_eq!(chunks[chunks.len() - 2]["finishReason"], "stop");
    let ui_text: String = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().unwrap())
        .collect();
    assert_eq!(ui_text, "one two three four five six seven eight");
    assert_eq!(rest_b.last().unwrap().event, "message_end", "{rest_b:?}");
    assert_eq!(rest_b, rest_a, "the same events under the same ids");
    assert_eq!(all_b, [seen, rest_a].concat());
    let text: String = all_b
        .iter()
        .filter(|e| e.event == "text_delta")
        .map(|e| e.data["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "one two three four five six seven eight");

    // Finished: the conversation is free through B, and its log still read there.
    assert!(a.state.wait_for_message(&message_id).await);
    let response = post_chat(
        &b,
        json!({"conversation_id": conversation_id, "message": "Again"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    drop(response);
}

/// A cancel sent through B stops the answer A runs: A's stream ends as `interrupted`, what
/// was produced is kept, and a second cancel gets 409.
#[tokio::test]
async fn a_running_answer_is_cancelled_through_another_server() {
    let Some(url) = database("a_running_answer_is_cancelled_through_another_server").await else {
        return;
    };
    let model = ScriptedModel::new([Turn::text("one two three four five six seven eight")
        .with_text_pieces(8)
        .with_chunk_delay(Duration::from_millis(300))]);
    let config = || ServerConfig::new(Agent::builder(model.clone()).build()).postgres(url.clone());
    let a = TestServer::start(config()).await;
    let b = TestServer::start(config()).await;
    let mut through_a = EventReader::new(post_chat(&a, json!({"message": "Count"})).await);
    let message_id = through_a.headers()["x-agentloop-message-id"]
        .to_str()
        .unwrap()
        .to_owned();
    through_a.read_until(|e| e.event == "text_delta").await;
    let cancel = || {
        client()
            .post(b.url(&format!("/v1/chat/{message_id}/cancel")))
            .send()
    };
    assert_eq!(cancel().await.unwrap().status(), 202);
    // A guard against a stream that never ends, not a timing assumption.
    let rest = tokio::time::timeout(Duration::from_secs(10), through_a.rest())
        .await
        .unwrap();
    let end = rest.iter().find(|e| e.event == "message_end").unwrap();
    assert_eq!(end.data["stop_reason"], "interrupted", "{rest:?}");
    assert!(
        rest.iter().filter(|e| e.event == "text_delta").count() < 7,
        "stopped early: {rest:?}"
    );
    assert!(a.state.wait_for_message(&message_id).await);
    assert_eq!(cancel().await.unwrap().status(), 409);
}

/// A stalls past its lease while a tool runs: B takes the answer over from its checkpoint
/// before the tool (the call answered as interrupted, not run again), and A's late writes are
/// refused: its stream ends without an end of its own, and nothing of its tool's result is
/// stored. The client reconnecting to B gets the rest.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_lost_its_lease_cannot_write_and_another_finishes_the_answer() {
    let Some(url) =
        database("a_server_that_lost_its_lease_cannot_write_and_another_finishes_the_answer").await
    else {
        return;
    };
    let ran = Ran::default();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let slow = {
        let (ran, gate) = (ran.clone(), gate.clone());
        Tool::function("deploy", "Deploy the app", move |d: Deploy| {
            let (ran, gate) = (ran.clone(), gate.clone());
            async move {
                ran.lock().unwrap().push(d.env.clone());
                let _ = gate.acquire().await;
                Ok::<_, String>(format!("deployed to {}", d.env))
            }
        })
    };
    let model = ScriptedModel::new([
        Turn::tool_call("deploy", json!({"env": "prod"})).with_ids(["call_1"]),
        Turn::text("Done."),
    ]);
    let config = |lease| {
        ServerConfig::new(Agent::builder(model.clone()).tool(slow.clone()).build())
            .postgres(url.clone())
            .answer_lease(lease)
    };
    // A renews rarely; B looks for expired leases often.
    let a = TestServer::start(config(Duration::from_secs(30))).await;
    let response = post_chat(&a, json!({"message": "Deploy it"})).await;
    let mut through_a = EventReader::new(response);
    let conversation_id = through_a.headers()["x-agentloop-conversation-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let message_id = through_a.headers()["x-agentloop-message-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let seen = through_a.read_until(|e| e.event == "tool_call_start").await;
    // The tool is running on A.
    for _ in 0..200 {
        if !ran.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*ran.lock().unwrap(), ["prod"]);

    // A stalls: its lease runs out (set in the past here), and B takes the answer over.
    let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let owner_of = || async {
        db.query_one(
            "SELECT owner FROM agentloop_chat_runs WHERE message_id = $1",
            &[&message_id],
        )
        .await
        .unwrap()
        .get::<_, Option<String>>(0)
    };
    let owner_a = owner_of().await.unwrap();
    let b = TestServer::start(config(Duration::from_millis(200))).await;
    for _ in 0..500 {
        if owner_of().await.as_deref() != Some(&owner_a) {
            break;
        }
        // Again, should A's heartbeat have renewed it meanwhile.
        db.execute(
            "UPDATE agentloop_chat_runs SET lease_until = clock_timestamp() - interval '1 second'
             WHERE message_id = $1 AND owner = $2",
            &[&message_id, &owner_a],
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_ne!(
        owner_of().await.as_deref(),
        Some(&*owner_a),
        "B took it over"
    );

    // A's tool finishes late: its checkpoint is refused and A stops the answer there.
    gate.add_permits(1);
    // A guard against a stream that never ends, not a timing assumption.
    let ten = Duration::from_secs(10);
    let rest_a = tokio::time::timeout(ten, through_a.rest()).await.unwrap();
    assert!(
        rest_a.iter().all(|e| e.event != "message_end"),
        "A ended the answer it lost: {rest_a:?}"
    );

    // Through B: the rest, from the last event seen through A.
    let last = seen.last().unwrap().id.clone().unwrap();
    let response = client()
        .get(b.url(&format!("/v1/chat/{message_id}/events")))
        .header("last-event-id", &last)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let rest = tokio::time::timeout(ten, EventReader::new(response).rest())
        .await
        .unwrap();
    let names: Vec<&str> = rest.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        names,
        [
            "tool_call_result",
            "text_delta",
            "text_delta",
            "text_delta",
            "message_end"
        ],
        "{rest:?}"
    );
    assert_eq!(rest[0].data["is_error"], true);
    assert!(
        rest[0].data["content"]
            .as_str()
            .unwrap()
            .contains("was interrupted"),
        "{rest:?}"
    );
    assert_eq!(*ran.lock().unwrap(), ["prod"], "the tool ran once");
    // The stored log has B's result of the call only, not A's late one.
    let all = tokio::time::timeout(
        ten,
        EventReader::new(
            client()
                .get(b.url(&format!("/v1/chat/{message_id}/events")))
                .send()
                .await
                .unwrap(),
        )
        .rest(),
    )
    .await
    .unwrap();
    assert_eq!(all, [seen, rest].concat());
    let (_, stored) = get_json(&b, &format!("/v1/conversations/{conversation_id}")).await;
    let messages: Vec<Message> = serde_json::from_value(stored["messages"].clone()).unwrap();
    assert!(agentloop::history::is_valid(&messages), "{messages:?}");
    assert_eq!(messages.len(), 4, "{messages:?}");
}
