//! `POST /v1/chat/ui-stream`: the Vercel AI SDK's UI message stream protocol, checked chunk by
//! chunk here and end to end with the `ai` npm package's own client (tests/node/ui_stream.mjs).

mod common;

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentloop::{Agent, ContentBlock, Message, Role, Tool, ToolResult};
use agentloop_server::ServerConfig;
use agentloop_testkit::{ScriptedModel, Turn, split_pieces};
use common::{EventReader, TestServer, client};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct City {
    city: String,
}

fn weather_tool() -> Tool {
    Tool::function("get_weather", "Current weather", |c: City| async move {
        Ok::<_, Infallible>(format!("18 °C in {}", c.city))
    })
}

fn weather_model() -> ScriptedModel {
    ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::text("It is 18 °C in Paris."),
        Turn::text("Tomorrow too."),
    ])
}

async fn server(model: &ScriptedModel, tools: Vec<Tool>) -> TestServer {
    let agent = Agent::builder(model.clone()).tools(tools).build();
    TestServer::start(ServerConfig::new(agent).in_memory_database()).await
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
}

async fn post_ui(server: &TestServer, body: Value) -> reqwest::Response {
    client()
        .post(server.url("/v1/chat/ui-stream"))
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// The `data:` payloads of a UI message stream.
async fn chunks(response: reqwest::Response) -> Vec<Value> {
    EventReader::new(response)
        .rest()
        .await
        .into_iter()
        .map(|e| {
            assert_eq!(e.event, "", "UI message stream events have no name");
            e.data
        })
        .collect()
}

#[tokio::test]
async fn a_tool_using_chat_streams_the_ui_message_chunks() {
    let model = weather_model();
    let server = server(&model, vec![weather_tool()]).await;
    let response = post_ui(
        &server,
        json!({"id": "chat-1", "messages": [user("u1", "Weather in Paris?")], "trigger": "submit-message", "messageId": null}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-vercel-ai-ui-message-stream"], "v1");
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let message_id = response.headers()["x-agentloop-message-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(response.headers()["x-agentloop-conversation-id"], "chat-1");

    let mut expected = vec![
        json!({"type": "start", "messageId": message_id}),
        json!({"type": "start-step"}),
        json!({"type": "tool-input-start", "toolCallId": "call_0_0", "toolName": "get_weather"}),
    ];
    for piece in split_pieces(&json!({"city": "Paris"}).to_string(), 4) {
        expected.push(
            json!({"type": "tool-input-delta", "toolCallId": "call_0_0", "inputTextDelta": piece}),
        );
    }
    expected.extend([
        json!({"type": "tool-input-available", "toolCallId": "call_0_0", "toolName": "get_weather", "input": {"city": "Paris"}}),
        json!({"type": "tool-output-available", "toolCallId": "call_0_0", "output": "18 °C in Paris"}),
        json!({"type": "finish-step"}),
        json!({"type": "start-step"}),
        json!({"type": "text-start", "id": "text_1"}),
    ]);
    for piece in split_pieces("It is 18 °C in Paris.", 3) {
        expected.push(json!({"type": "text-delta", "id": "text_1", "delta": piece}));
    }
    expected.extend([
        json!({"type": "text-end", "id": "text_1"}),
        json!({"type": "finish-step"}),
        json!({"type": "finish", "finishReason": "stop"}),
        json!("[DONE]"),
    ]);
    assert_eq!(chunks(response).await, expected);
}

#[tokio::test]
async fn errors_become_error_chunks_then_finish() {
    let model =
        ScriptedModel::from_fn(|_, _| Turn::tool_call("get_weather", json!({"city": "Rome"})));
    let agent = Agent::builder(model.clone()).tool(weather_tool()).build();
    let server = TestServer::start(
        ServerConfig::new(agent)
            .in_memory_database()
            .max_tool_iterations(1),
    )
    .await;
    let all = chunks(
        post_ui(
            &server,
            json!({"id": "chat-2", "messages": [user("u1", "Loop")]}),
        )
        .await,
    )
    .await;
    assert_eq!(
        all[all.len() - 4..].to_vec(),
        vec![
            json!({"type": "finish-step"}),
            json!({"type": "error", "errorText": "the model was still calling tools after 1 tool iterations (the server's max_tool_iterations limit); send another message to let it go on"}),
            json!({"type": "finish", "finishReason": "error"}),
            json!("[DONE]"),
        ]
    );
}

#[tokio::test]
async fn known_chats_use_the_stored_history_and_regenerate_answers_the_last_prompt_again() {
    let model = ScriptedModel::new([
        Turn::text("First answer."),
        Turn::text("Second answer."),
        Turn::text("Second answer, again."),
    ]);
    let server = server(&model, vec![]).await;
    chunks(
        post_ui(
            &server,
            json!({"id": "chat-3", "messages": [user("u1", "One")]}),
        )
        .await,
    )
    .await;
    // The client's copy of earlier messages is ignored for a known chat: only the new prompt counts.
    let client_copy = json!({"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "edited by the client"}]});
    chunks(
        post_ui(
            &server,
            json!({"id": "chat-3", "messages": [user("u1", "One"), client_copy, user("u2", "Two")], "trigger": "submit-message"}),
        )
        .await,
    )
    .await;
    let first_two = vec![
        Message::user("One"),
        Message::assistant("First answer."),
        Message::user("Two"),
    ];
    assert_eq!(model.requests()[1].messages, first_two);

    chunks(
        post_ui(
            &server,
            json!({"id": "chat-3", "messages": [user("u1", "One")], "trigger": "regenerate-message"}),
        )
        .await,
    )
    .await;
    assert_eq!(model.requests()[2].messages, first_two);
    let stored = server.state.conversation("chat-3").await.unwrap().unwrap();
    let mut expected = first_two;
    expected.push(Message::assistant("Second answer, again."));
    assert_eq!(stored.messages, expected);
}

#[tokio::test]
async fn an_unknown_chat_starts_from_the_clients_messages() {
    let model = ScriptedModel::new([Turn::text("Noted.")]);
    let server = server(&model, vec![]).await;
    let history = json!([
        user("u1", "Weather in Paris?"),
        {"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "tool-get_weather", "toolCallId": "c1", "state": "output-available",
             "input": {"city": "Paris"}, "output": {"celsius": 18}},
            {"type": "step-start"},
            {"type": "text", "text": "18 °C.", "state": "done"}
        ]},
        user("u2", "Thanks")
    ]);
    chunks(post_ui(&server, json!({"id": "imported", "messages": history})).await).await;
    assert_eq!(
        model.requests()[0].messages,
        vec![
            Message::user("Weather in Paris?"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Paris"})
                }]
            ),
            Message::tool_results([ToolResult::text("c1", r#"{"celsius":18}"#)]),
            Message::assistant("18 °C."),
            Message::user("Thanks"),
        ]
    );
    let stored = server
        .state
        .conversation("imported")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.summary.title, "Weather in Paris?");

    for (body, status) in [
        (json!({"id": "x", "messages": []}), 400),
        (
            json!({"id": "bad id/..", "messages": [user("u1", "Hi")]}),
            400,
        ),
        (
            json!({"id": "x", "messages": [user("u1", "Hi")], "trigger": "dance"}),
            400,
        ),
    ] {
        assert_eq!(post_ui(&server, body).await.status(), status);
    }
}

#[tokio::test]
async fn resume_replays_a_running_answer_or_answers_204() {
    let gate = Arc::new(tokio::sync::Notify::new());
    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}
    let opener = gate.clone();
    let gated = Tool::function("gated", "Waits", move |_: Nothing| {
        let gate = opener.clone();
        async move {
            gate.notified().await;
            Ok::<_, Infallible>("opened")
        }
    });
    let model = ScriptedModel::new([Turn::tool_call("gated", json!({})), Turn::text("Done.")]);
    let server = server(&model, vec![gated]).await;
    let idle = client()
        .get(server.url("/v1/chat/ui-stream/chat-4/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(idle.status(), 204);

    let mut first = EventReader::new(
        post_ui(
            &server,
            json!({"id": "chat-4", "messages": [user("u1", "Go")]}),
        )
        .await,
    );
    let before = first
        .read_until(|e| e.data["type"] == "tool-input-available")
        .await;
    drop(first);
    let resumed = client()
        .get(server.url("/v1/chat/ui-stream/chat-4/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    assert_eq!(resumed.headers()["x-vercel-ai-ui-message-stream"], "v1");
    gate.notify_one();
    let replay = chunks(resumed).await;
    // A full replay: the same beginning, then the rest.
    let before: Vec<Value> = before.into_iter().map(|e| e.data).collect();
    assert_eq!(replay[..before.len()], before[..]);
    assert_eq!(
        replay[before.len()],
        json!({"type": "tool-output-available", "toolCallId": "call_0_0", "output": "opened"})
    );
    assert_eq!(replay.last().unwrap(), &json!("[DONE]"));
}

fn npm_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("AGENTLOOP_NPM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/npm"));
    dir.join("node_modules/ai/package.json")
        .is_file()
        .then_some(dir)
}

fn node_available() -> bool {
    std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_client_rebuilds_the_tool_using_message() {
    let Some(npm) = npm_dir() else {
        agentloop_testkit::skip(
            "the `ai` npm package is not installed; run `npm install --prefix target/npm ai@6.0.326` (see crates/agentloop-server/tests/node/package.json)",
        );
        return;
    };
    if !node_available() {
        agentloop_testkit::skip("node is not installed");
        return;
    }
    let model = weather_model();
    let server = server(&model, vec![weather_tool()]).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/ui_stream.mjs");
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
    assert_eq!(stdout.trim(), "ai sdk client: 3 checks passed");
    model.assert_complete();
}
