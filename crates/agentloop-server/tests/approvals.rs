//! Approvals over `/v1/chat`: a call that needs approval pauses the answer with an
//! `approval_requested` event; `POST /v1/chat/{message_id}/approvals` decides it (approve,
//! approve with an edited input, deny with a message) and the answer goes on in the same
//! stream, or a reconnect; a paused answer survives a restart of the server.

mod common;

use std::time::Duration;

use agentloop::{Agent, ContentBlock, Message, Role, ToolResult};
use agentloop_server::ServerConfig;
use agentloop_testkit::{ScriptedModel, Turn, split_pieces};
use common::deploy::{Ran, deploy_tool};
use common::{EventReader, Received, TestServer, client, event, named, post_chat};
use serde_json::{Value, json};

const ANSWER: &str = "Done.";

/// What the model reads for the denied call (the library's wording around the user's message).
const DENIED: &str = "Error: the call to `deploy` was denied: not on a Friday";

fn model() -> ScriptedModel {
    ScriptedModel::new([
        Turn::tool_call("deploy", json!({"env": "prod"})).with_ids(["call_1"]),
        Turn::text(ANSWER),
    ])
}

fn config(model: &ScriptedModel, ran: &Ran) -> ServerConfig {
    ServerConfig::new(Agent::builder(model.clone()).tool(deploy_tool(ran)).build())
        .in_memory_database()
}

fn usage(turns: u64) -> Value {
    json!({"input_tokens": 10 * turns, "output_tokens": 5 * turns, "cache_read_tokens": 0, "cache_write_tokens": 0})
}

fn header(reader: &EventReader, name: &str) -> String {
    reader.headers()[name].to_str().unwrap().to_owned()
}

/// The events up to the pause.
fn paused_events(conversation_id: &str, message_id: &str) -> Vec<(String, Value)> {
    vec![
        event(
            "message_start",
            json!({"conversation_id": conversation_id, "message_id": message_id}),
        ),
        event(
            "tool_call_start",
            json!({"id": "call_1", "name": "deploy", "arguments": {"env": "prod"}}),
        ),
        event(
            "approval_requested",
            json!({"id": "call_1", "name": "deploy", "arguments": {"env": "prod"}, "reason": "tool `deploy` needs approval"}),
        ),
    ]
}

/// The events after the decision: the call's result, the answer, the end.
fn rest_events(result: Value) -> Vec<(String, Value)> {
    let mut events = vec![event("tool_call_result", result)];
    events.extend(
        split_pieces(ANSWER, 3)
            .into_iter()
            .map(|t| event("text_delta", json!({ "text": t }))),
    );
    events.push(event(
        "message_end",
        json!({"stop_reason": "end_turn", "usage": usage(2)}),
    ));
    events
}

async fn decide(server: &TestServer, message_id: &str, body: Value) -> reqwest::Response {
    client()
        .post(server.url(&format!("/v1/chat/{message_id}/approvals")))
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// Start the chat and read up to its pause; the reader, conversation id and message id.
async fn start_paused(server: &TestServer) -> (EventReader, String, String) {
    let (reader, conversation_id, message_id, _) = start_paused_events(server).await;
    (reader, conversation_id, message_id)
}

/// [`start_paused`], and the events read.
async fn start_paused_events(server: &TestServer) -> (EventReader, String, String, Vec<Received>) {
    let response = post_chat(server, json!({"message": "Deploy it"})).await;
    assert_eq!(response.status(), 200);
    let mut reader = EventReader::new(response);
    let conversation_id = header(&reader, "x-agentloop-conversation-id");
    let message_id = header(&reader, "x-agentloop-message-id");
    let events = reader.read_until(|e| e.event == "approval_requested").await;
    assert_eq!(named(&events), paused_events(&conversation_id, &message_id));
    (reader, conversation_id, message_id, events)
}

/// The history the model gets after the decision, and the stored history at the end.
fn history_after(tool_input: Value, result: ToolResult) -> Vec<Message> {
    vec![
        Message::user("Deploy it"),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: "call_1".into(),
                name: "deploy".into(),
                input: tool_input,
            }],
        ),
        Message::tool_results([result]),
    ]
}

async fn check_history(
    server: &TestServer,
    model: &ScriptedModel,
    conversation_id: &str,
    expected: Vec<Message>,
) {
    model.assert_complete();
    assert_eq!(
        model.requests()[1].messages,
        expected,
        "the model saw the decision"
    );
    let stored = server
        .state
        .conversation(conversation_id)
        .await
        .unwrap()
        .unwrap();
    let mut full = expected;
    full.push(Message::assistant(ANSWER));
    assert!(agentloop::history::is_valid(&stored.messages));
    assert_eq!(stored.messages, full);
    assert_eq!(stored.answers.len(), 1);
    assert_eq!(stored.answers[0].stop_reason, "end_turn");
}

#[tokio::test]
async fn an_approved_call_runs_after_the_decision_and_the_answer_goes_on_in_the_same_stream() {
    let ran = Ran::default();
    let model = model();
    let server = TestServer::start(config(&model, &ran)).await;
    let (reader, conversation_id, message_id) = start_paused(&server).await;
    assert!(
        ran.lock().unwrap().is_empty(),
        "nothing runs before the decision"
    );
    assert_eq!(model.requests().len(), 1);

    let response = decide(
        &server,
        &message_id,
        json!({"decisions": [{"id": "call_1", "decision": "approve"}]}),
    )
    .await;
    assert_eq!(response.status(), 202);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"message_id": message_id, "resumed": true})
    );
    let rest = reader.rest().await;
    assert_eq!(
        named(&rest),
        rest_events(json!({"id": "call_1", "content": "deployed to prod", "is_error": false}))
    );
    assert_eq!(*ran.lock().unwrap(), ["prod"]);
    check_history(
        &server,
        &model,
        &conversation_id,
        history_after(
            json!({"env": "prod"}),
            ToolResult::text("call_1", "deployed to prod"),
        ),
    )
    .await;

    // Decided once: a second decision is refused.
    let again = decide(
        &server,
        &message_id,
        json!({"decisions": [{"id": "call_1", "decision": "approve"}]}),
    )
    .await;
    assert_eq!(again.status(), 409);
}

#[tokio::test]
async fn an_edited_call_runs_with_the_edit_and_invalid_edits_are_422() {
    let ran = Ran::default();
    let model = model();
    let server = TestServer::start(config(&model, &ran)).await;
    let (reader, conversation_id, message_id) = start_paused(&server).await;

    for (body, expected) in [
        (
            json!({"decisions": [{"id": "call_1", "decision": "approve_edited", "input": {"env": 5}}]}),
            "edited input of call `call_1` does not fit",
        ),
        (
            json!({"decisions": [{"id": "call_9", "decision": "approve"}]}),
            "no call `call_9` waits for approval",
        ),
        (
            json!({"decisions": []}),
            "every pending call needs a decision; undecided: [\"call_1\"]",
        ),
    ] {
        let response = decide(&server, &message_id, body.clone()).await;
        assert_eq!(response.status(), 422, "{body}");
        let error = response.json::<Value>().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(expected), "{body}: {error}");
    }
    assert!(ran.lock().unwrap().is_empty());

    let response = decide(
        &server,
        &message_id,
        json!({"decisions": [{"id": "call_1", "decision": "approve_edited", "input": {"env": "staging"}}]}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let rest = reader.rest().await;
    assert_eq!(
        named(&rest),
        rest_events(json!({"id": "call_1", "content": "deployed to staging", "is_error": false}))
    );
    assert_eq!(*ran.lock().unwrap(), ["staging"]);
    check_history(
        &server,
        &model,
        &conversation_id,
        history_after(
            json!({"env": "staging"}),
            ToolResult::text("call_1", "deployed to staging"),
        ),
    )
    .await;
}

#[tokio::test]
async fn a_denied_call_does_not_run_and_the_model_gets_the_message() {
    let ran = Ran::default();
    let model = model();
    let server = TestServer::start(config(&model, &ran)).await;
    let (reader, conversation_id, message_id) = start_paused(&server).await;
    let response = decide(
        &server,
        &message_id,
        json!({"decisions": [{"id": "call_1", "decision": "deny", "message": "not on a Friday"}]}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let rest = reader.rest().await;
    assert_eq!(
        named(&rest),
        rest_events(json!({"id": "call_1", "content": DENIED, "is_error": true}))
    );
    assert!(ran.lock().unwrap().is_empty());
    check_history(
        &server,
        &model,
        &conversation_id,
        history_after(json!({"env": "prod"}), ToolResult::error("call_1", DENIED)),
    )
    .await;
}

#[tokio::test]
async fn a_paused_answer_outlives_its_listeners_and_a_reconnect_gets_the_rest() {
    let ran = Ran::default();
    let model = model();
    let server =
        TestServer::start(config(&model, &ran).disconnect_grace(Duration::from_millis(50))).await;
    let (reader, _, message_id, events) = start_paused_events(&server).await;
    let last_id = events.last().unwrap().id.clone().unwrap();
    drop(reader);
    // Well past the grace: a running answer would be cancelled by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let response = decide(
        &server,
        &message_id,
        json!({"decisions": [{"id": "call_1", "decision": "approve"}]}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let response = client()
        .get(server.url(&format!("/v1/chat/{message_id}/events")))
        .header("last-event-id", last_id)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let rest = EventReader::new(response).rest().await;
    assert_eq!(
        named(&rest),
        rest_events(json!({"id": "call_1", "content": "deployed to prod", "is_error": false}))
    );
    assert_eq!(*ran.lock().unwrap(), ["prod"]);
}

#[tokio::test]
async fn cancelling_a_paused_answer_ends_it_without_running_the_call() {
    let ran = Ran::default();
    let model = model();
    let server = TestServer::start(config(&model, &ran)).await;
    let (reader, conversation_id, message_id) = start_paused(&server).await;
    let response = client()
        .post(server.url(&format!("/v1/chat/{message_id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    assert_eq!(
        named(&reader.rest().await),
        [event(
            "message_end",
            json!({"stop_reason": "interrupted", "usage": usage(1)})
        )]
    );
    assert!(ran.lock().unwrap().is_empty());
    let stored = server
        .state
        .conversation(&conversation_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.messages, [Message::user("Deploy it")]);
    let decided = decide(
        &server,
        &message_id,
        json!({"decisions": [{"id": "call_1", "decision": "approve"}]}),
    )
    .await;
    assert_eq!(decided.status(), 409);
}

#[tokio::test]
async fn a_paused_answer_survives_a_restart_and_is_approved_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");
    let ran = Ran::default();
    let model = model();
    let server = TestServer::start(config(&model, &ran).database(&db)).await;
    let (reader, conversation_id, message_id, first) = start_paused_events(&server).await;
    drop(reader);
    server.stop().await;

    // A new server on the same file: the answer waits again, its events as they were, under
    // the same ids.
    let server = TestServer::start(config(&model, &ran).database(&db)).await;
    let response = client()
        .get(server.url(&format!("/v1/chat/{message_id}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut whole = EventReader::new(response);
    let again: Vec<Received> = whole.read_until(|e| e.event == "approval_requested").await;
    assert_eq!(again, first);
    drop(whole);
    // A client that saw the first event before the restart gets exactly the rest.
    let response = client()
        .get(server.url(&format!("/v1/chat/{message_id}/events")))
        .header("last-event-id", first[0].id.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut reader = EventReader::new(response);
    let missed: Vec<Received> = reader.read_until(|e| e.event == "approval_requested").await;
    assert_eq!(missed, first[1..]);
    let response = decide(
        &server,
        &message_id,
        json!({"decisions": [{"id": "call_1", "decision": "approve"}]}),
    )
    .await;
    assert_eq!(response.status(), 202);
    assert_eq!(
        named(&reader.rest().await),
        rest_events(json!({"id": "call_1", "content": "deployed to prod", "is_error": false}))
    );
    assert_eq!(*ran.lock().unwrap(), ["prod"]);
    check_history(
        &server,
        &model,
        &conversation_id,
        history_after(
            json!({"env": "prod"}),
            ToolResult::text("call_1", "deployed to prod"),
        ),
    )
    .await;
}

#[tokio::test]
async fn the_sandbox_write_file_and_a_server_policy_ask_first() {
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let model = ScriptedModel::new([Turn {
        items: vec![
            agentloop_testkit::TurnItem::ToolCall {
                id: Some("call_w".into()),
                name: "write_file".into(),
                arguments: r#"{"path": "a.txt", "content": "hi"}"#.into(),
            },
            agentloop_testkit::TurnItem::ToolCall {
                id: Some("call_d".into()),
                name: "deploy".into(),
                arguments: r#"{"env": "dev"}"#.into(),
            },
        ],
        ..Turn::default()
    }]);
    // `deploy` itself needs no approval here: the server's policy asks for it.
    let deploy = deploy_tool(&ran).with_approval_required(false);
    let policy = agentloop::run::ApprovalPolicy::new(|ctx| {
        if ctx.call.name == "deploy" {
            agentloop::run::Approval::Require("deployments need a person".into())
        } else {
            agentloop::run::Approval::Allow
        }
    });
    let config = ServerConfig::new(Agent::builder(model).tool(deploy).build())
        .in_memory_database()
        .sandbox(dir.path())
        .approval_policy(policy);
    let server = TestServer::start(config).await;
    let mut reader = EventReader::new(post_chat(&server, json!({"message": "Go"})).await);
    let events = reader
        .read_until(|e| e.event == "approval_requested" && e.data["id"] == "call_d")
        .await;
    let approvals: Vec<(String, Value)> = named(&events)
        .into_iter()
        .filter(|(name, _)| name == "approval_requested")
        .collect();
    assert_eq!(
        approvals,
        [
            event(
                "approval_requested",
                json!({"id": "call_w", "name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}, "reason": "tool `write_file` needs approval"})
            ),
            event(
                "approval_requested",
                json!({"id": "call_d", "name": "deploy", "arguments": {"env": "dev"}, "reason": "deployments need a person"})
            ),
        ]
    );
    assert!(!dir.path().join("a.txt").exists());
    assert!(ran.lock().unwrap().is_empty());
}

async fn post_ui(server: &TestServer, body: Value) -> reqwest::Response {
    client()
        .post(server.url("/v1/chat/ui-stream"))
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// The `data:` payloads of a UI message stream, which must end (a pause ends it too).
async fn ui_chunks(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status(), 200);
    // A guard against a stream left open, not a timing assumption.
    tokio::time::timeout(Duration::from_secs(30), EventReader::new(response).rest())
        .await
        .expect("the UI stream ends")
        .into_iter()
        .map(|e| e.data)
        .collect()
}

/// The AI SDK's approval chunks (package `ai` 6.0.326 and 7.0.173, `uiMessageChunkSchema`:
/// `tool-approval-request {approvalId, toolCallId}`, `tool-output-denied {toolCallId}`): the
/// paused answer's response ends after the request; the client's next request carries the
/// assistant message with its tool part `approval-responded` (`approval: {id, approved,
/// reason?}`, what `addToolApprovalResponse` writes), and the response continues the same
/// assistant message.
#[tokio::test]
async fn the_ui_stream_asks_with_approval_requests_and_continues_after_the_response() {
    let ran = Ran::default();
    let model = model();
    let server = TestServer::start(config(&model, &ran)).await;
    let question =
        json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Deploy it"}]});
    let first =
        ui_chunks(post_ui(&server, json!({"id": "chat-a", "messages": [question]})).await).await;
    let message_id = first[0]["messageId"].as_str().unwrap().to_owned();
    let mut expected = vec![
        json!({"type": "start", "messageId": message_id}),
        json!({"type": "start-step"}),
        json!({"type": "tool-input-start", "toolCallId": "call_1", "toolName": "deploy"}),
    ];
    // The scripted model streams the arguments in pieces of four characters.
    expected.extend(
        split_pieces(r#"{"env":"prod"}"#, 4).into_iter().map(
            |d| json!({"type": "tool-input-delta", "toolCallId": "call_1", "inputTextDelta": d}),
        ),
    );
    expected.extend([
        json!({"type": "tool-input-available", "toolCallId": "call_1", "toolName": "deploy", "input": {"env": "prod"}}),
        json!({"type": "tool-approval-request", "approvalId": "call_1", "toolCallId": "call_1"}),
        json!({"type": "finish-step"}),
        json!({"type": "finish", "finishReason": "other"}),
        json!("[DONE]"),
    ]);
    assert_eq!(first, expected);
    assert!(ran.lock().unwrap().is_empty());
    // Nothing to replay while the answer waits for the user.
    let resume = client()
        .get(server.url("/v1/chat/ui-stream/chat-a/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(resume.status(), 204);

    let answered = json!({"id": message_id, "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-deploy", "toolCallId": "call_1", "state": "approval-responded",
         "input": {"env": "prod"}, "approval": {"id": "call_1", "approved": false, "reason": "not on a Friday"}}
    ]});
    let second = ui_chunks(
        post_ui(
            &server,
            json!({"id": "chat-a", "messages": [question, answered], "trigger": "submit-message", "messageId": message_id}),
        )
        .await,
    )
    .await;
    let mut expected = vec![
        json!({"type": "start", "messageId": message_id}),
        json!({"type": "tool-output-denied", "toolCallId": "call_1"}),
        json!({"type": "start-step"}),
        json!({"type": "text-start", "id": "text_1"}),
    ];
    expected.extend(
        split_pieces(ANSWER, 3)
            .into_iter()
            .map(|t| json!({"type": "text-delta", "id": "text_1", "delta": t})),
    );
    expected.extend([
        json!({"type": "text-end", "id": "text_1"}),
        json!({"type": "finish-step"}),
        json!({"type": "finish", "finishReason": "stop"}),
        json!("[DONE]"),
    ]);
    assert_eq!(second, expected);
    assert!(ran.lock().unwrap().is_empty());
    check_history(
        &server,
        &model,
        "chat-a",
        history_after(json!({"env": "prod"}), ToolResult::error("call_1", DENIED)),
    )
    .await;
}

/// The directory holding `node_modules/ai`: `AGENTLOOP_NPM_DIR` (CI runs the Node tests once
/// per major of `ai`), else `target/npm`.
fn npm_dir() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("AGENTLOOP_NPM_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/npm")
        });
    dir.join("node_modules/ai/package.json")
        .is_file()
        .then_some(dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_chat_approves_and_denies_with_the_real_client() {
    let Some(npm) = npm_dir() else {
        agentloop_testkit::skip(
            "the `ai` npm package is not installed; run `npm install --prefix target/npm ai@6.0.326` (see crates/agentloop-server/tests/node/package.json)",
        );
        return;
    };
    if !std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        agentloop_testkit::skip("node is not installed");
        return;
    }
    let ran = Ran::default();
    let model = ScriptedModel::new([
        Turn::tool_call("deploy", json!({"env": "prod"})).with_ids(["call_1"]),
        Turn::text(ANSWER),
        Turn::tool_call("deploy", json!({"env": "prod"})).with_ids(["call_2"]),
        Turn::text(ANSWER),
    ]);
    let server = TestServer::start(config(&model, &ran)).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/approvals.mjs");
    let run = tokio::process::Command::new("node")
        .arg(&script)
        .arg(&server.url)
        .env("AGENTLOOP_NPM_DIR", &npm)
        .kill_on_drop(true)
        .output();
    // A guard against a hung client, not a timing assumption.
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the node client finishes")
        .expect("node starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the AI SDK client failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert_eq!(stdout.trim(), "ai sdk approvals: 2 checks passed");
    // The approved call ran once, the denied one never; the model saw both decisions.
    assert_eq!(*ran.lock().unwrap(), ["prod"]);
    model.assert_complete();
    let requests = model.requests();
    assert_eq!(
        requests[1].messages[2],
        Message::tool_results([ToolResult::text("call_1", "deployed to prod")])
    );
    assert_eq!(
        requests[3].messages.last().unwrap(),
        &Message::tool_results([ToolResult::error("call_2", DENIED)])
    );
    let stored = server
        .state
        .conversation("node-approvals")
        .await
        .unwrap()
        .unwrap();
    assert!(agentloop::history::is_valid(&stored.messages));
    assert_eq!(stored.messages.len(), 8);
}

/// A chat with an `output_schema` that pauses for approval stays typed after the decision:
/// the scripted model answers by the final-answer tool, a first invalid answer goes back with
/// its pointer error, and the answer ends in its `output` event.
#[tokio::test]
async fn a_typed_chat_paused_for_approval_ends_in_its_output_event() {
    let ran = Ran::default();
    let model = ScriptedModel::new([
        Turn::tool_call("deploy", json!({"env": "prod"})).with_ids(["call_1"]),
        Turn::tool_call("final_answer", json!({"deployed": "yes"})).with_ids(["call_2"]),
        Turn::tool_call("final_answer", json!({"deployed": true})).with_ids(["call_3"]),
    ]);
    let server = TestServer::start(config(&model, &ran)).await;
    let schema = json!({
        "type": "object",
        "properties": {"deployed": {"type": "boolean"}},
        "required": ["deployed"]
    });
    let response = post_chat(
        &server,
        json!({"message": "Deploy it", "output_schema": schema}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let mut reader = EventReader::new(response);
    let message_id = header(&reader, "x-agentloop-message-id");
    let events = reader.read_until(|e| e.event == "approval_requested").await;
    assert_eq!(named(&events).last().unwrap().0, "approval_requested");

    let response = decide(
        &server,
        &message_id,
        json!({"decisions": [{"id": "call_1", "decision": "approve"}]}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let rest = named(&reader.rest().await);
    let names: Vec<&str> = rest.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "tool_call_result",
            "tool_call_start",
            "tool_call_result",
            "tool_call_start",
            "tool_call_result",
            "output",
            "message_end"
        ]
    );
    assert_eq!(
        rest[2].1,
        json!({
            "id": "call_2",
            "content": "Error: invalid arguments for tool `final_answer`:\n\
                        - /deployed: \"yes\" is not of type \"boolean\"\n\
                        Fix the arguments and call the tool again (retry 1 of 2).",
            "is_error": true
        })
    );
    assert_eq!(
        rest[5],
        event("output", json!({"value": {"deployed": true}}))
    );
    assert_eq!(rest[6].1["stop_reason"], "end_turn");
    assert_eq!(*ran.lock().unwrap(), ["prod"]);
    model.assert_complete();
}

#[tokio::test]
async fn a_pause_not_kept_before_a_crash_is_asked_again_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chats.db");
    let ran = Ran::default();
    let model = model();
    let server = TestServer::start(config(&model, &ran).database(&db)).await;
    let (reader, conversation_id, message_id, first) = start_paused_events(&server).await;
    drop(reader);
    server.stop().await;
    // As if the process died after the run's paused checkpoint and before the pause was kept.
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute("DELETE FROM paused_answers", [])
        .unwrap();

    let server = TestServer::start(config(&model, &ran).database(&db)).await;
    let response = client()
        .get(server.url(&format!("/v1/chat/{message_id}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut reader = EventReader::new(response);
    let again: Vec<Received> = reader.read_until(|e| e.event == "approval_requested").await;
    assert_eq!(named(&again), named(&first));
    // The request is asked again by the resumed run, under a new id.
    assert!(again.last().unwrap().id_number() >= 1_000_000_000);
    let response = decide(
        &server,
        &message_id,
        json!({"decisions": [{"id": "call_1", "decision": "approve"}]}),
    )
    .await;
    assert_eq!(response.status(), 202);
    assert_eq!(
        named(&reader.rest().await),
        rest_events(json!({"id": "call_1", "content": "deployed to prod", "is_error": false}))
    );
    assert_eq!(*ran.lock().unwrap(), ["prod"]);
    check_history(
        &server,
        &model,
        &conversation_id,
        history_after(
            json!({"env": "prod"}),
            ToolResult::text("call_1", "deployed to prod"),
        ),
    )
    .await;
}
