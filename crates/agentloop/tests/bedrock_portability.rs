//! One conversation moving between Bedrock and the other wires (OpenAI, Anthropic, Gemini),
//! over real HTTP against the testkit's wire servers: two tool turns started on each continue
//! on Bedrock, and two started on Bedrock continue on each. Each continuing request is
//! compared with a golden body.
//!
//! What the goldens encode (Bedrock API reference "Message", "ToolUseBlock",
//! "ToolResultBlock", "ReasoningContentBlock"; the other shapes as in `gemini_portability.rs`):
//! call ids are kept (they are all in Bedrock's `[a-zA-Z0-9_-]` alphabet here); another
//! provider's reasoning cannot be verified by Bedrock and is left out; Bedrock's own signed
//! reasoning goes back to Bedrock whole and is left out by the others (Gemini puts its
//! documented stand-in signature on each model turn's first call instead).

use std::sync::Arc;

use agentloop::conversation::Conversation;
use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::bedrock::{Bedrock, BedrockAuth};
use agentloop::provider::gemini::Gemini;
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
use agentloop::{Agent, ContentBlock, Provider, Tool, history};
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

fn provider(wire: Wire, server: &MockServer) -> Arc<dyn Provider> {
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("test-key"));
    match wire {
        Wire::OpenAi => Arc::new(OpenAi::new(config).unwrap()),
        Wire::Anthropic => Arc::new(Anthropic::new(config).unwrap()),
        Wire::Gemini => Arc::new(Gemini::new(config).unwrap()),
        Wire::Bedrock => Arc::new(
            Bedrock::new(
                config,
                "us-east-1",
                BedrockAuth::Bearer(ApiKey::new("test-key")),
            )
            .unwrap(),
        ),
        Wire::Responses => {
            Arc::new(agentloop::provider::responses::OpenAiResponses::new(config).unwrap())
        }
    }
}

fn model(wire: Wire) -> &'static str {
    match wire {
        Wire::OpenAi => "gpt-4o",
        Wire::Anthropic => "claude-test",
        Wire::Gemini => "gemini-3-pro-preview",
        Wire::Bedrock => "us.anthropic.claude-sonnet-4-20250514-v1:0",
        Wire::Responses => "gpt-5",
    }
}

/// Two tool turns and an answer, with signed reasoning first; ids in the wire's own style.
fn two_tool_turns(wire: Wire) -> [Turn; 3] {
    let (first, second, signature) = match wire {
        Wire::OpenAi => ("call_1", "call_2", None),
        Wire::Anthropic => ("toolu_1", "toolu_2", Some("sig-anthropic")),
        Wire::Gemini => ("fc_1", "fc_2", Some("sig-gemini")),
        Wire::Bedrock => ("tooluse_1", "tooluse_2", Some("sig-bedrock")),
        Wire::Responses => ("call_r1", "call_r2", Some("gAAAA-encrypted")),
    };
    [
        Turn::text("Checking Paris.")
            .then_tool_call("get_weather", json!({"city": "Paris"}))
            .with_thinking("The user wants weather.", signature)
            .with_ids([first]),
        Turn::tool_call("get_weather", json!({"city": "Rome"})).with_ids([second]),
        Turn::text("Paris and Rome are both 18 °C."),
    ]
}

/// Runs the two tool turns on `from`, then one more message on `to`; the body `to` received.
async fn continue_on(from: Wire, to: Wire) -> Value {
    let source = MockServer::start(from, two_tool_turns(from)).await.unwrap();
    let target = MockServer::start(to, [Turn::text("Pack a light jacket.")])
        .await
        .unwrap();
    let agent = Agent::builder_shared(provider(from, &source))
        .model(model(from))
        .tool(weather_tool())
        .build();
    let mut chat = Conversation::new(&agent);
    let first = chat
        .send("Weather in Paris, then Rome?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(first.tool_calls, 2, "{from:?}: {:?}", first.error);
    source.assert_complete();
    chat.set_model(provider(to, &target), model(to));
    let reply = chat
        .send("What should I wear?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_eq!(reply.text(), "Pack a light jacket.", "{from:?} → {to:?}");
    history::validate(&chat.history()).unwrap();
    // The source's reasoning stays in the history, for a later return to the source.
    if from != Wire::OpenAi {
        assert!(
            chat.history()[1].content.iter().any(|b| matches!(
                b,
                ContentBlock::Thinking {
                    signature: Some(_),
                    ..
                }
            )),
            "{from:?}"
        );
    }
    target.assert_complete();
    target.requests()[0].body.clone()
}

fn assert_body(actual: &Value, expected: &Value, label: &str) {
    assert!(
        actual == expected,
        "{label}\nexpected: {}\nactual:   {}",
        serde_json::to_string_pretty(expected).unwrap(),
        serde_json::to_string_pretty(actual).unwrap()
    );
}

/// The continuing Bedrock body's messages and tools; `reasoning` is the first turn's own
/// reasoning block when the history came from Bedrock.
fn bedrock_body(first: &str, second: &str, reasoning: Option<Value>) -> Value {
    let mut first_turn: Vec<Value> = reasoning.into_iter().collect();
    first_turn.push(json!({"text": "Checking Paris."}));
    first_turn.push(
        json!({"toolUse": {"toolUseId": first, "name": "get_weather", "input": {"city": "Paris"}}}),
    );
    json!({
        "messages": [
            {"role": "user", "content": [{"text": "Weather in Paris, then Rome?"}]},
            {"role": "assistant", "content": first_turn},
            {"role": "user", "content": [
                {"toolResult": {"toolUseId": first, "content": [{"text": "Paris: 18 °C"}]}}
            ]},
            {"role": "assistant", "content": [
                {"toolUse": {"toolUseId": second, "name": "get_weather", "input": {"city": "Rome"}}}
            ]},
            {"role": "user", "content": [
                {"toolResult": {"toolUseId": second, "content": [{"text": "Rome: 18 °C"}]}}
            ]},
            {"role": "assistant", "content": [{"text": "Paris and Rome are both 18 °C."}]},
            {"role": "user", "content": [{"text": "What should I wear?"}]}
        ],
        "toolConfig": {"tools": [{"toolSpec": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "inputSchema": {"json": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name."}},
                "required": ["city"]
            }}
        }}]}
    })
}

fn messages_and_tools(body: &Value) -> Value {
    json!({"messages": body["messages"], "toolConfig": body["toolConfig"]})
}

#[tokio::test]
async fn histories_from_the_other_four_continue_on_bedrock() {
    for (from, first, second) in [
        (Wire::OpenAi, "call_1", "call_2"),
        (Wire::Anthropic, "toolu_1", "toolu_2"),
        (Wire::Gemini, "fc_1", "fc_2"),
        (Wire::Responses, "call_r1", "call_r2"),
    ] {
        let body = continue_on(from, Wire::Bedrock).await;
        assert_body(
            &messages_and_tools(&body),
            &bedrock_body(first, second, None),
            &format!("{from:?} → bedrock"),
        );
    }
}

#[tokio::test]
async fn a_history_from_bedrock_goes_back_to_bedrock_with_its_signed_reasoning() {
    let body = continue_on(Wire::Bedrock, Wire::Bedrock).await;
    let reasoning = json!({"reasoningContent": {"reasoningText": {
        "text": "The user wants weather.",
        "signature": "sig-bedrock"
    }}});
    assert_body(
        &messages_and_tools(&body),
        &bedrock_body("tooluse_1", "tooluse_2", Some(reasoning)),
        "bedrock → bedrock",
    );
}

#[tokio::test]
async fn a_history_from_bedrock_continues_on_anthropic_and_openai() {
    let body = continue_on(Wire::Bedrock, Wire::Anthropic).await;
    let expected = json!([
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris, then Rome?"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking Paris."},
            {"type": "tool_use", "id": "tooluse_1", "name": "get_weather", "input": {"city": "Paris"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tooluse_1", "content": "Paris: 18 °C", "is_error": false}
        ]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "tooluse_2", "name": "get_weather", "input": {"city": "Rome"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tooluse_2", "content": "Rome: 18 °C", "is_error": false}
        ]},
        {"role": "assistant", "content": [{"type": "text", "text": "Paris and Rome are both 18 °C."}]},
        {"role": "user", "content": [{"type": "text", "text": "What should I wear?"}]}
    ]);
    assert_body(&body["messages"], &expected, "bedrock → anthropic");

    let body = continue_on(Wire::Bedrock, Wire::OpenAi).await;
    let expected = json!([
        {"role": "user", "content": "Weather in Paris, then Rome?"},
        {"role": "assistant", "content": "Checking Paris.", "tool_calls": [
            {"id": "tooluse_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "tooluse_1", "content": "Paris: 18 °C"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "tooluse_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "tooluse_2", "content": "Rome: 18 °C"},
        {"role": "assistant", "content": "Paris and Rome are both 18 °C."},
        {"role": "user", "content": "What should I wear?"}
    ]);
    assert_body(&body["messages"], &expected, "bedrock → openai");
}

#[tokio::test]
async fn a_history_from_bedrock_continues_on_gemini_with_the_stand_in_signature() {
    let body = continue_on(Wire::Bedrock, Wire::Gemini).await;
    let stand_in = "skip_thought_signature_validator";
    let expected = json!([
        {"role": "user", "parts": [{"text": "Weather in Paris, then Rome?"}]},
        {"role": "model", "parts": [
            {"text": "Checking Paris."},
            {"functionCall": {"id": "tooluse_1", "name": "get_weather", "args": {"city": "Paris"}},
             "thoughtSignature": stand_in}
        ]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "tooluse_1", "name": "get_weather", "response": {"output": "Paris: 18 °C"}}}
        ]},
        {"role": "model", "parts": [
            {"functionCall": {"id": "tooluse_2", "name": "get_weather", "args": {"city": "Rome"}},
             "thoughtSignature": stand_in}
        ]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "tooluse_2", "name": "get_weather", "response": {"output": "Rome: 18 °C"}}}
        ]},
        {"role": "model", "parts": [{"text": "Paris and Rome are both 18 °C."}]},
        {"role": "user", "parts": [{"text": "What should I wear?"}]}
    ]);
    assert_body(&body["contents"], &expected, "bedrock → gemini");
}
