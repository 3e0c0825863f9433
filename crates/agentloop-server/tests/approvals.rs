//! Approvals over `/v1/chat`: a call that needs approval pauses the answer with an
//! `approval_requested` event; `POST /v1/chat/{message_id}/approvals` decides it (approve,
//! approve with an edited input, deny with a message) and the answer goes on in the same
//! stream, or a reconnect; a paused answer survives a restart of the server.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentloop::{Agent, ContentBlock, Message, Role, Tool, ToolResult};
use agentloop_server::ServerConfig;
use agentloop_testkit::{ScriptedModel, Turn, split_pieces};
use common::{EventReader, Received, TestServer, client, event, named, post_chat};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Deploy {
    env: String,
}

/// Where each run of the tool is written down, to count runs.
type Ran = Arc<Mutex<Vec<String>>>;

fn deploy_tool(ran: &Ran) -> Tool {
    let ran = ran.clone();
    Tool::function("deploy", "Deploy the app", move |d: Deploy| {
        let ran = ran.clone();
        async move {
            ran.lock().unwrap().push(d.env.clone());
            Ok::<_, String>(format!("deployed to {}", d.env))
        }
    })
    .with_approval_required(true)
}

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
    let (reader, conversation_id, message_id) = start_paused(&server).await;
    drop(reader);
    server.stop().await;

    // A new server on the same file: the answer waits again, with the same ids.
    let server = TestServer::start(config(&model, &ran).database(&db)).await;
    let response = client()
        .get(server.url(&format!("/v1/chat/{message_id}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut reader = EventReader::new(response);
    let before: Vec<Received> = reader.read_until(|e| e.event == "approval_requested").await;
    let mut expected = paused_events(&conversation_id, &message_id);
    // What came before the pause (the model's call) is not kept over a restart.
    expected.remove(1);
    assert_eq!(named(&before), expected);
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
