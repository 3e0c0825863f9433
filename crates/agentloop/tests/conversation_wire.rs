//! The conversation client over real HTTP against the testkit's wire servers: manual mode on
//! both providers, and one history moving from Anthropic to OpenAI mid-conversation.
//!
//! Wire shapes relied on: OpenAI Chat Completions (assistant `tool_calls` with
//! `{id, type: "function", function: {name, arguments}}`, then one `{"role": "tool",
//! "tool_call_id"}` message per result) and Anthropic Messages (`tool_use` blocks, then one
//! user message holding every `tool_result` of the turn).

use std::sync::Arc;

use agentloop::conversation::{Conversation, ToolExecution};
use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
use agentloop::run::RunStopReason;
use agentloop::{Agent, Provider, Tool, ToolResult, history};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// Current weather for a city.
#[derive(Deserialize, JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
}

fn weather_tool() -> Tool {
    Tool::function(
        "get_weather",
        "Current weather for a city",
        |w: GetWeather| async move { Ok::<_, String>(format!("{}: 18 °C", w.city)) },
    )
}

fn openai(server: &MockServer) -> Arc<dyn Provider> {
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-test"));
    Arc::new(OpenAi::new(config).unwrap())
}

fn anthropic(server: &MockServer) -> Arc<dyn Provider> {
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-ant-test"));
    Arc::new(Anthropic::new(config).unwrap())
}

fn agent(provider: Arc<dyn Provider>, model: &str) -> Agent {
    Agent::builder_shared(provider)
        .model(model)
        .tool(weather_tool())
        .build()
}

#[tokio::test]
async fn manual_mode_over_the_openai_wire_sends_tool_calls_and_tool_messages() {
    let server = MockServer::start(
        Wire::OpenAi,
        [
            Turn::tool_calls([
                ("get_weather", json!({"city": "Paris"})),
                ("get_weather", json!({"city": "Rome"})),
            ])
            .with_ids(["call_a", "call_b"]),
            Turn::text("Paris 18, Rome 20."),
        ],
    )
    .await
    .unwrap();
    let mut chat = Conversation::new(&agent(openai(&server), "gpt-4o"))
        .with_tool_execution(ToolExecution::Manual);
    let first = chat
        .send("Weather in Paris and Rome?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(first.stop_reason, RunStopReason::AwaitingToolResults);
    let pending = chat.pending_tool_calls();
    assert_eq!(
        pending.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["call_a", "call_b"]
    );
    chat.add_tool_result(ToolResult::text("call_b", "20 °C"))
        .unwrap();
    chat.add_tool_result(ToolResult::text("call_a", "18 °C"))
        .unwrap();
    let second = chat.resume().unwrap().finish().await.unwrap();
    assert_eq!(second.text(), "Paris 18, Rome 20.");

    // The continuation carries the assistant's tool calls and one tool message per result:
    // the history the seed-001 client lost when it re-sent a conversation.
    let body = &server.requests()[1].body;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_a", "content": "18 °C"},
            {"role": "tool", "tool_call_id": "call_b", "content": "20 °C"}
        ])
    );
    server.assert_complete();
    history::validate(&chat.history()).unwrap();
}

#[tokio::test]
async fn manual_mode_over_the_anthropic_wire_groups_results_in_one_user_message() {
    let server = MockServer::start(
        Wire::Anthropic,
        [
            Turn::tool_calls([
                ("get_weather", json!({"city": "Paris"})),
                ("get_weather", json!({"city": "Rome"})),
            ])
            .with_ids(["toolu_a", "toolu_b"]),
            Turn::text("Paris 18, Rome 20."),
        ],
    )
    .await
    .unwrap();
    let mut chat = Conversation::new(&agent(anthropic(&server), "claude-test"))
        .with_tool_execution(ToolExecution::Manual);
    chat.send("Weather?").await.unwrap().finish().await.unwrap();
    chat.add_tool_result(ToolResult::text("toolu_a", "18 °C"))
        .unwrap();
    chat.add_tool_result(ToolResult::error("toolu_b", "service down"))
        .unwrap();
    let second = chat.resume().unwrap().finish().await.unwrap();
    assert_eq!(second.text(), "Paris 18, Rome 20.");
    let body = &server.requests()[1].body;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"city": "Rome"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "18 °C", "is_error": false},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "service down", "is_error": true}
            ]}
        ])
    );
    server.assert_complete();
}

#[tokio::test]
async fn a_conversation_moves_from_anthropic_to_openai() {
    let claude = MockServer::start(
        Wire::Anthropic,
        [
            Turn::text("Checking Paris.")
                .then_tool_call("get_weather", json!({"city": "Paris"}))
                .with_thinking("The user wants weather.", Some("sig-1"))
                .with_ids(["toolu_1"]),
            Turn::tool_call("get_weather", json!({"city": "Rome"})).with_ids(["toolu_2"]),
            Turn::text("Paris and Rome are both 18 °C."),
        ],
    )
    .await
    .unwrap();
    let gpt = MockServer::start(Wire::OpenAi, [Turn::text("Pack a light jacket.")])
        .await
        .unwrap();

    let mut chat = Conversation::new(&agent(anthropic(&claude), "claude-test"));
    let first = chat
        .send("Weather in Paris, then Rome?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(first.tool_calls, 2);
    claude.assert_complete();

    chat.set_model(openai(&gpt), "gpt-4o");
    let reply = chat
        .send("What should I wear?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(reply.text(), "Pack a light jacket.");
    history::validate(&chat.history()).unwrap();

    let body = &gpt.requests()[0].body;
    let expected: Value = json!({
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "Weather in Paris, then Rome?"},
            {"role": "assistant", "content": "Checking Paris.", "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "Paris: 18 °C"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "toolu_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "toolu_2", "content": "Rome: 18 °C"},
            {"role": "assistant", "content": "Paris and Rome are both 18 °C."},
            {"role": "user", "content": "What should I wear?"}
        ],
        "tools": [{"type": "function", "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name."}}, "required": ["city"]}
        }}],
        "stream": true,
        "stream_options": {"include_usage": true}
    });
    assert_eq!(
        body,
        &expected,
        "{}",
        serde_json::to_string_pretty(body).unwrap()
    );
    // The Anthropic thinking block (signed by Anthropic) stays in the history for Anthropic.
    assert!(chat.history()[1].content.iter().any(|b| matches!(
        b,
        agentloop::ContentBlock::Thinking { provider: Some(p), signature: Some(_), .. } if p == "anthropic"
    )));
}

/// A weather report.
#[derive(Debug, PartialEq, Deserialize, JsonSchema)]
struct Report {
    city: String,
    temp_c: i32,
}

/// A typed turn in the middle of a conversation: it sees the history before it (the request
/// carries the earlier turn and `response_format`), runs the tool, answers with a checked value
/// after one invalid try, and leaves the whole turn in the history for the next send, which
/// goes without `response_format`.
#[tokio::test]
async fn a_typed_turn_sees_the_history_and_stays_in_it() {
    let server = MockServer::start(
        Wire::OpenAi,
        [
            Turn::text("Hello!"),
            Turn::tool_call("get_weather", json!({"city": "Paris"})),
            Turn::text(r#"{"city": "Paris"}"#),
            Turn::text(r#"{"city": "Paris", "temp_c": 18}"#),
            Turn::text("You're welcome."),
        ],
    )
    .await
    .unwrap();
    let mut chat = Conversation::new(&agent(openai(&server), "gpt-4.1"));
    chat.send("Hi").await.unwrap().finish().await.unwrap();
    let typed = chat
        .send_output::<Report>("Weather in Paris?")
        .await
        .unwrap();
    assert_eq!(
        typed.value,
        Report {
            city: "Paris".into(),
            temp_c: 18
        }
    );
    let requests = server.requests();
    let typed_request = &requests[1].body;
    assert_eq!(typed_request["messages"][0]["content"], "Hi");
    assert_eq!(typed_request["messages"][1]["content"], "Hello!");
    assert_eq!(
        typed_request["response_format"]["json_schema"]["name"],
        "final_answer"
    );
    // The retry carries the pointer error.
    let retry = requests[3].body["messages"].as_array().unwrap();
    assert!(
        retry.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("- /: \"temp_c\" is a required property"),
        "{retry:?}"
    );
    // user, assistant, user, tool call, tool result, invalid answer, feedback, answer.
    assert_eq!(chat.history().len(), 8);
    history::validate(&chat.history()).unwrap();
    let next = chat.send("Thanks").await.unwrap().finish().await.unwrap();
    assert_eq!(next.text(), "You're welcome.");
    let last = server.last_request().unwrap();
    assert_eq!(last.body.get("response_format"), None);
    assert_eq!(last.body["messages"].as_array().unwrap().len(), 9);
    server.assert_complete();
}
