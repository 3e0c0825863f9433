//! `POST /v1/chat`: the exact event sequences, limits, errors, disconnects and reconnects.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use agentloop::{Agent, ContentBlock, Message, Role, Tool, ToolDefinition, ToolResult};
use agentloop_server::ServerConfig;
use agentloop_testkit::{ScriptedModel, Turn, split_pieces};
use common::{EventReader, Received, TestServer, client, event, named, post_chat};
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

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

/// A tool that never finishes.
fn endless_tool() -> Tool {
    Tool::function("wait_forever", "Never returns", |_: Nothing| {
        std::future::pending::<Result<String, Infallible>>()
    })
}

/// A tool that finishes when the test opens the gate.
fn gated_tool(gate: Arc<tokio::sync::Notify>) -> Tool {
    Tool::function("gated", "Waits for the test", move |_: Nothing| {
        let gate = gate.clone();
        async move {
            gate.notified().await;
            Ok::<_, Infallible>("opened".to_owned())
        }
    })
}

fn config(model: &ScriptedModel, tools: Vec<Tool>) -> ServerConfig {
    ServerConfig::new(Agent::builder(model.clone()).tools(tools).build()).in_memory_database()
}

fn usage(turns: u64) -> Value {
    json!({"input_tokens": 10 * turns, "output_tokens": 5 * turns, "cache_read_tokens": 0, "cache_write_tokens": 0})
}

fn text_deltas(text: &str) -> Vec<(String, Value)> {
    split_pieces(text, 3)
        .into_iter()
        .map(|t| event("text_delta", json!({ "text": t })))
        .collect()
}

fn ids_strictly_increase(events: &[Received]) {
    let ids: Vec<u64> = events.iter().map(Received::id_number).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "event ids must increase: {ids:?}"
    );
}

const ANSWER: &str = "It is 18 °C in Paris.";

fn weather_model() -> ScriptedModel {
    ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::text(ANSWER),
    ])
}

/// The whole event sequence of the weather chat.
fn weather_events(conversation_id: &str, message_id: &str) -> Vec<(String, Value)> {
    let mut expected = vec![
        event(
            "message_start",
            json!({"conversation_id": conversation_id, "message_id": message_id}),
        ),
        event(
            "tool_call_start",
            json!({"id": "call_0_0", "name": "get_weather", "arguments": {"city": "Paris"}}),
        ),
        event(
            "tool_call_result",
            json!({"id": "call_0_0", "content": "18 °C in Paris", "is_error": false}),
        ),
    ];
    expected.extend(text_deltas(ANSWER));
    expected.push(event(
        "message_end",
        json!({"stop_reason": "end_turn", "usage": usage(2)}),
    ));
    expected
}

fn header<'a>(reader: &'a EventReader, name: &str) -> &'a str {
    reader
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("header {name} is set"))
        .to_str()
        .unwrap()
}

#[tokio::test]
async fn a_tool_using_chat_streams_exactly_the_protocol_events() {
    let model = weather_model();
    let server = TestServer::start(config(&model, vec![weather_tool()])).await;
    let response = post_chat(&server, json!({"message": "Weather in Paris?"})).await;
    assert_eq!(response.status(), 200);
    let reader = EventReader::new(response);
    assert_eq!(header(&reader, "content-type"), "text/event-stream");
    assert_eq!(header(&reader, "x-agentloop-protocol"), "1");
    let conversation_id = header(&reader, "x-agentloop-conversation-id").to_owned();
    let message_id = header(&reader, "x-agentloop-message-id").to_owned();
    let events = reader.rest().await;
    assert_eq!(
        named(&events),
        weather_events(&conversation_id, &message_id)
    );
    ids_strictly_increase(&events);

    // The model got the tool result, and the stored history is the run's history.
    model.assert_complete();
    let second = &model.requests()[1];
    let expected_history = vec![
        Message::user("Weather in Paris?"),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: "call_0_0".into(),
                name: "get_weather".into(),
                input: json!({"city": "Paris"}),
            }],
        ),
        Message::tool_results([ToolResult::text("call_0_0", "18 °C in Paris")]),
    ];
    assert_eq!(second.messages, expected_history);
    let stored = server
        .state
        .conversation(&conversation_id)
        .await
        .unwrap()
        .unwrap();
    let mut full = expected_history;
    full.push(Message::assistant(ANSWER));
    assert_eq!(stored.messages, full);
    assert_eq!(stored.summary.title, "Weather in Paris?");
}

#[tokio::test]
async fn a_plain_chat_has_no_tool_events() {
    let model = ScriptedModel::new([Turn::text("Hello there, friend!")]);
    let server = TestServer::start(config(&model, vec![weather_tool()])).await;
    let reader = EventReader::new(post_chat(&server, json!({"message": "Hi"})).await);
    let conversation_id = header(&reader, "x-agentloop-conversation-id").to_owned();
    let message_id = header(&reader, "x-agentloop-message-id").to_owned();
    let events = reader.rest().await;
    let mut expected = vec![event(
        "message_start",
        json!({"conversation_id": conversation_id, "message_id": message_id}),
    )];
    expected.extend(text_deltas("Hello there, friend!"));
    expected.push(event(
        "message_end",
        json!({"stop_reason": "end_turn", "usage": usage(1)}),
    ));
    assert_eq!(named(&events), expected);
}

#[tokio::test]
async fn the_tool_iteration_limit_ends_the_stream_with_an_error_event() {
    let model = ScriptedModel::from_fn(|_, i| {
        Turn::tool_call("get_weather", json!({"city": format!("City {i}")}))
    });
    let server =
        TestServer::start(config(&model, vec![weather_tool()]).max_tool_iterations(2)).await;
    let reader = EventReader::new(post_chat(&server, json!({"message": "Loop"})).await);
    let conversation_id = header(&reader, "x-agentloop-conversation-id").to_owned();
    let message_id = header(&reader, "x-agentloop-message-id").to_owned();
    let events = reader.rest().await;
    let mut expected = vec![event(
        "message_start",
        json!({"conversation_id": conversation_id, "message_id": message_id}),
    )];
    for i in 0..2 {
        let id = format!("call_{i}_0");
        expected.push(event(
            "tool_call_start",
            json!({"id": id, "name": "get_weather", "arguments": {"city": format!("City {i}")}}),
        ));
        expected.push(event(
            "tool_call_result",
            json!({"id": id, "content": format!("18 °C in City {i}"), "is_error": false}),
        ));
    }
    // After two rounds the model is called once more for its answer; the call it makes
    // instead is answered as not run.
    expected.push(event(
        "tool_call_start",
        json!({"id": "call_2_0", "name": "get_weather", "arguments": {"city": "City 2"}}),
    ));
    expected.push(event(
        "tool_call_result",
        json!({"id": "call_2_0", "content": "Error: the call to `get_weather` was not run: the run's limit of 2 tool iterations was reached", "is_error": true}),
    ));
    expected.push(event(
        "message_end",
        json!({"stop_reason": "max_tool_iterations", "usage": usage(3)}),
    ));
    expected.push(event(
        "error",
        json!({"message": "the model was still calling tools after 2 tool iterations (the server's max_tool_iterations limit); send another message to let it go on"}),
    ));
    assert_eq!(named(&events), expected);
    assert_eq!(model.calls(), 3);
}

#[tokio::test]
async fn a_model_error_ends_with_message_end_and_the_error() {
    let failure = agentloop::Error::Overloaded {
        provider: "scripted".into(),
        message: "try later".into(),
    };
    let model = ScriptedModel::new([Turn::error(failure.clone())]);
    let server = TestServer::start(config(&model, vec![])).await;
    let events = EventReader::new(post_chat(&server, json!({"message": "Hi"})).await)
        .rest()
        .await;
    assert_eq!(
        named(&events[1..]),
        vec![
            event(
                "message_end",
                json!({"stop_reason": "error", "usage": usage(0)})
            ),
            event(
                "error",
                json!({"message": "the model provider is overloaded; try again later"})
            ),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_client_cancels_the_run_and_the_saved_history_is_valid() {
    let model = ScriptedModel::new([
        Turn::text("Let me wait.").then_tool_call("wait_forever", json!({})),
        Turn::text("never sent"),
    ]);
    let server = TestServer::start(config(&model, vec![endless_tool()])).await;
    let mut reader = EventReader::new(post_chat(&server, json!({"message": "Wait"})).await);
    let conversation_id = header(&reader, "x-agentloop-conversation-id").to_owned();
    let message_id = header(&reader, "x-agentloop-message-id").to_owned();
    let seen = reader.read_until(|e| e.event == "tool_call_start").await;
    assert_eq!(seen.last().unwrap().event, "tool_call_start");
    drop(reader);

    // Nobody reconnects: after the grace period the run is cancelled and saved.
    assert!(server.state.wait_for_message(&message_id).await);
    assert_eq!(model.calls(), 1, "the model must not be called again");
    let stored = server
        .state
        .conversation(&conversation_id)
        .await
        .unwrap()
        .unwrap();
    agentloop::history::validate(&stored.messages).unwrap();
    assert_eq!(
        stored.messages,
        vec![
            Message::user("Wait"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text("Let me wait."),
                    ContentBlock::ToolUse {
                        id: "call_0_0".into(),
                        name: "wait_forever".into(),
                        input: json!({}),
                    }
                ]
            ),
            Message::tool_results([ToolResult::error(
                "call_0_0",
                "Error: the call to `wait_forever` was not run: the run was cancelled"
            )]),
        ]
    );

    // A late reconnect sees how it ended.
    let tail = EventReader::new(
        client()
            .get(server.url(&format!("/v1/chat/{message_id}/events")))
            .header("last-event-id", seen.last().unwrap().id.clone().unwrap())
            .send()
            .await
            .unwrap(),
    )
    .rest()
    .await;
    assert_eq!(
        named(&tail),
        vec![
            event(
                "tool_call_result",
                json!({"id": "call_0_0", "content": "Error: the call to `wait_forever` was not run: the run was cancelled", "is_error": true})
            ),
            event(
                "message_end",
                json!({"stop_reason": "interrupted", "usage": usage(1)})
            ),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_dropped_mid_text_keeps_the_partial_text() {
    let text = "First part. Second part. Third part.";
    let model = ScriptedModel::new([Turn::text(text).with_chunk_delay(Duration::from_secs(60))]);
    let server = TestServer::start(config(&model, vec![])).await;
    let mut reader = EventReader::new(post_chat(&server, json!({"message": "Talk"})).await);
    let conversation_id = header(&reader, "x-agentloop-conversation-id").to_owned();
    let message_id = header(&reader, "x-agentloop-message-id").to_owned();
    let seen = reader.read_until(|e| e.event == "text_delta").await;
    drop(reader);
    assert!(server.state.wait_for_message(&message_id).await);
    let first = split_pieces(text, 3).remove(0);
    assert_eq!(seen.last().unwrap().data, json!({ "text": first }));
    let stored = server
        .state
        .conversation(&conversation_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.messages,
        vec![Message::user("Talk"), Message::assistant(first)]
    );
}

#[tokio::test]
async fn a_reconnect_with_last_event_id_gets_exactly_the_remaining_events() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let model = ScriptedModel::new([
        Turn::tool_call("gated", json!({})),
        Turn::text("The gate opened."),
    ]);
    let server = TestServer::start(config(&model, vec![gated_tool(gate.clone())])).await;
    let mut first = EventReader::new(post_chat(&server, json!({"message": "Open it"})).await);
    let conversation_id = header(&first, "x-agentloop-conversation-id").to_owned();
    let message_id = header(&first, "x-agentloop-message-id").to_owned();
    let before = first.read_until(|e| e.event == "tool_call_start").await;
    drop(first);

    let response = client()
        .get(server.url(&format!("/v1/chat/{message_id}/events")))
        .header("last-event-id", before.last().unwrap().id.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-agentloop-protocol"], "1");
    let mut second = EventReader::new(response);
    gate.notify_one();
    let mut after = Vec::new();
    while let Some(event) = second.next().await {
        after.push(event);
    }

    let mut expected = vec![
        event(
            "message_start",
            json!({"conversation_id": conversation_id, "message_id": message_id}),
        ),
        event(
            "tool_call_start",
            json!({"id": "call_0_0", "name": "gated", "arguments": {}}),
        ),
        event(
            "tool_call_result",
            json!({"id": "call_0_0", "content": "opened", "is_error": false}),
        ),
    ];
    expected.extend(text_deltas("The gate opened."));
    expected.push(event(
        "message_end",
        json!({"stop_reason": "end_turn", "usage": usage(2)}),
    ));
    assert_eq!(named(&before), expected[..2].to_vec());
    assert_eq!(named(&after), expected[2..].to_vec());
    let mut all = before.clone();
    all.extend(after);
    ids_strictly_increase(&all);
}

#[tokio::test]
async fn reconnect_errors_are_clear() {
    let model = ScriptedModel::new([Turn::text("Hi")]);
    let server = TestServer::start(config(&model, vec![])).await;
    let unknown = client()
        .get(server.url("/v1/chat/msg_nope/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let reader = EventReader::new(post_chat(&server, json!({"message": "Hi"})).await);
    let message_id = header(&reader, "x-agentloop-message-id").to_owned();
    reader.rest().await;
    let bad = client()
        .get(server.url(&format!("/v1/chat/{message_id}/events")))
        .header("last-event-id", "yesterday")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(
        bad.json::<Value>().await.unwrap(),
        json!({"error": {"message": "Last-Event-ID must be the id of an event of this stream"}})
    );
    // Without Last-Event-ID a finished answer is replayed whole.
    let replay = EventReader::new(
        client()
            .get(server.url(&format!("/v1/chat/{message_id}/events")))
            .send()
            .await
            .unwrap(),
    )
    .rest()
    .await;
    assert_eq!(replay.first().unwrap().event, "message_start");
    assert_eq!(replay.last().unwrap().event, "message_end");
}

#[tokio::test(start_paused = true)]
async fn long_tool_runs_get_keep_alive_comments() {
    #[derive(Deserialize, JsonSchema)]
    struct Slow {}
    let slow = Tool::function("slow", "Takes 50 s", |_: Slow| async {
        tokio::time::sleep(Duration::from_secs(50)).await;
        Ok::<_, Infallible>("done")
    });
    let model = ScriptedModel::new([Turn::tool_call("slow", json!({})), Turn::text("ok")]);
    let agent = Agent::builder(model.clone())
        .tool(slow)
        .tool_timeout(Duration::from_secs(300))
        .build();
    let server = TestServer::start(
        ServerConfig::new(agent)
            .in_memory_database()
            .keep_alive(Duration::from_secs(15)),
    )
    .await;
    let mut response = post_chat(&server, json!({"message": "Go"})).await;
    let mut body = String::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    let start = body.find("event: tool_call_start").unwrap();
    let end = body.find("event: tool_call_result").unwrap();
    let comments = |text: &str| text.lines().filter(|l| *l == ": keep-alive").count();
    assert_eq!(comments(&body[start..end]), 3);
    assert_eq!(comments(&body[..start]), 0);
}

#[tokio::test]
async fn a_busy_conversation_refuses_a_second_message_and_cancel_stops_it() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let model = ScriptedModel::new([Turn::tool_call("gated", json!({}))]);
    let server = TestServer::start(config(&model, vec![gated_tool(gate)])).await;
    let mut reader = EventReader::new(post_chat(&server, json!({"message": "Go"})).await);
    let conversation_id = header(&reader, "x-agentloop-conversation-id").to_owned();
    let message_id = header(&reader, "x-agentloop-message-id").to_owned();
    reader.read_until(|e| e.event == "tool_call_start").await;

    let busy = post_chat(
        &server,
        json!({"conversation_id": conversation_id, "message": "Again"}),
    )
    .await;
    assert_eq!(busy.status(), 409);

    let cancel = client()
        .post(server.url(&format!("/v1/chat/{message_id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 202);
    let rest = reader.rest().await;
    assert_eq!(
        named(&rest),
        vec![
            event(
                "tool_call_result",
                json!({"id": "call_0_0", "content": "Error: the call to `gated` was not run: the run was cancelled", "is_error": true})
            ),
            event(
                "message_end",
                json!({"stop_reason": "interrupted", "usage": usage(1)})
            ),
        ]
    );
    let again = client()
        .post(server.url(&format!("/v1/chat/{message_id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
}

#[tokio::test]
async fn bad_requests_are_refused_with_json_errors() {
    let model = ScriptedModel::new([]);
    let server = TestServer::start(config(&model, vec![]).max_body_bytes(1024)).await;
    let too_big = post_chat(&server, json!({"message": "x".repeat(2000)})).await;
    assert_eq!(too_big.status(), 413);
    let unknown = post_chat(
        &server,
        json!({"conversation_id": "conv_missing", "message": "Hi"}),
    )
    .await;
    assert_eq!(unknown.status(), 404);
    assert_eq!(
        unknown.json::<Value>().await.unwrap(),
        json!({"error": {"message": "no conversation has the id `conv_missing`"}})
    );
    let empty = post_chat(&server, json!({"message": "  "})).await;
    assert_eq!(empty.status(), 400);
    let malformed = client()
        .post(server.url("/v1/chat"))
        .header("content-type", "application/json")
        .body("{\"message\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 400);
    assert_eq!(model.calls(), 0);
}

/// A chat with an `output_schema`: the answer comes by the final-answer tool (the scripted
/// model has no structured output), a first invalid one is sent back with its pointer error,
/// and the checked value is an `output` event before `message_end`.
#[tokio::test]
async fn an_output_schema_gives_a_checked_output_event() {
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::tool_call("final_answer", json!({"city": "Paris"})),
        Turn::tool_call("final_answer", json!({"city": "Paris", "temp_c": 18})),
    ]);
    let server = TestServer::start(config(&model, vec![weather_tool()])).await;
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
        "required": ["city", "temp_c"]
    });
    let reader = EventReader::new(
        post_chat(
            &server,
            json!({"message": "Weather in Paris?", "output_schema": schema.clone()}),
        )
        .await,
    );
    let events = reader.rest().await;
    let named = named(&events);
    let names: Vec<&str> = named.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "tool_call_start",
            "tool_call_result",
            "tool_call_start",
            "tool_call_result",
            "tool_call_start",
            "tool_call_result",
            "output",
            "message_end"
        ]
    );
    assert_eq!(named[4].1["is_error"], json!(true));
    assert!(
        named[4].1["content"]
            .as_str()
            .unwrap()
            .contains("- /: \"temp_c\" is a required property"),
        "{:?}",
        named[4]
    );
    assert_eq!(
        named[7],
        event("output", json!({"value": {"city": "Paris", "temp_c": 18}}))
    );
    assert_eq!(named[8].1["stop_reason"], "end_turn");
    // The final-answer tool carried the schema the request gave.
    let tools = &model.requests()[0].tools;
    let given = tools.iter().find_map(|t| match t {
        ToolDefinition::Function(f) if f.name == "final_answer" => Some(f.input_schema.clone()),
        _ => None,
    });
    assert_eq!(given, Some(schema));
    model.assert_complete();

    let refused = post_chat(&server, json!({"message": "Hi", "output_schema": "text"})).await;
    assert_eq!(refused.status(), 400);
}
