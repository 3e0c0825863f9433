//! One conversation moving between the OpenAI Responses API and the other wires (Chat
//! Completions, Anthropic, Gemini), over real HTTP against the testkit's wire servers: two tool
//! turns started on each continue on Responses, and two started on Responses continue on each.
//! Each continuing request is compared with a golden body.
//!
//! What the goldens encode (OpenAI API reference, "Create a model response": `function_call`
//! and `function_call_output` items keyed by `call_id`; the "Reasoning" guide: reasoning items
//! go back with their `encrypted_content` when `store` is false): call ids are kept as they
//! are in every provider's shape; another provider's reasoning cannot be checked by OpenAI and
//! is left out; the Responses reasoning item (kept as the signature of a reasoning block tagged
//! `openai-responses`) is left out by the others and returns to Responses whole.

use std::sync::Arc;

use agentloop::conversation::Conversation;
use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::gemini::Gemini;
use agentloop::provider::http::{ApiKey, HttpConfig};
use agentloop::provider::openai::OpenAi;
use agentloop::provider::responses::OpenAiResponses;
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
        Wire::Responses => Arc::new(OpenAiResponses::new(config).unwrap()),
        Wire::Bedrock => Arc::new(
            agentloop::provider::bedrock::Bedrock::new(
                config,
                "us-east-1",
                agentloop::provider::bedrock::BedrockAuth::Bearer(ApiKey::new("test-key")),
            )
            .unwrap(),
        ),
    }
}

fn model(wire: Wire) -> &'static str {
    match wire {
        Wire::OpenAi => "gpt-4o",
        Wire::Anthropic => "claude-test",
        Wire::Gemini => "gemini-3-pro-preview",
        Wire::Responses => "gpt-5",
        Wire::Bedrock => "us.anthropic.claude-sonnet-4-20250514-v1:0",
    }
}

/// Two tool turns and an answer, with signed reasoning first; ids in the wire's own style.
fn two_tool_turns(wire: Wire) -> [Turn; 3] {
    let (first, second, signature) = match wire {
        Wire::OpenAi => ("call_1", "call_2", None),
        Wire::Anthropic => ("toolu_1", "toolu_2", Some("sig-anthropic")),
        Wire::Gemini => ("fc_1", "fc_2", Some("sig-gemini")),
        Wire::Responses => ("call_r1", "call_r2", Some("gAAAA-encrypted")),
        Wire::Bedrock => ("tooluse_1", "tooluse_2", Some("sig-bedrock")),
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

fn responses_body(first: &str, second: &str) -> Value {
    json!({
        "model": "gpt-5",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris, then Rome?"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Checking Paris."}]},
            {"type": "function_call", "call_id": first, "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": first, "output": "Paris: 18 °C"},
            {"type": "function_call", "call_id": second, "name": "get_weather", "arguments": "{\"city\":\"Rome\"}"},
            {"type": "function_call_output", "call_id": second, "output": "Rome: 18 °C"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Paris and Rome are both 18 °C."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "What should I wear?"}]}
        ],
        "tools": [{
            "type": "function",
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name."}},
                "required": ["city"]
            },
            "strict": false
        }],
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "stream": true
    })
}

#[tokio::test]
async fn histories_from_the_other_four_continue_on_responses() {
    for (from, first, second) in [
        (Wire::OpenAi, "call_1", "call_2"),
        (Wire::Anthropic, "toolu_1", "toolu_2"),
        (Wire::Gemini, "fc_1", "fc_2"),
        (Wire::Bedrock, "tooluse_1", "tooluse_2"),
    ] {
        let body = continue_on(from, Wire::Responses).await;
        assert_body(
            &body,
            &responses_body(first, second),
            &format!("{from:?} → responses"),
        );
    }
}

#[tokio::test]
async fn a_history_from_responses_continues_on_chat_completions() {
    let body = continue_on(Wire::Responses, Wire::OpenAi).await;
    let expected = json!([
        {"role": "user", "content": "Weather in Paris, then Rome?"},
        {"role": "assistant", "content": "Checking Paris.", "tool_calls": [
            {"id": "call_r1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "call_r1", "content": "Paris: 18 °C"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_r2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "call_r2", "content": "Rome: 18 °C"},
        {"role": "assistant", "content": "Paris and Rome are both 18 °C."},
        {"role": "user", "content": "What should I wear?"}
    ]);
    assert_body(&body["messages"], &expected, "responses → openai");
}

#[tokio::test]
async fn a_history_from_responses_continues_on_anthropic() {
    let body = continue_on(Wire::Responses, Wire::Anthropic).await;
    let expected = json!([
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris, then Rome?"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking Paris."},
            {"type": "tool_use", "id": "call_r1", "name": "get_weather", "input": {"city": "Paris"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_r1", "content": "Paris: 18 °C", "is_error": false}
        ]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_r2", "name": "get_weather", "input": {"city": "Rome"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_r2", "content": "Rome: 18 °C", "is_error": false}
        ]},
        {"role": "assistant", "content": [{"type": "text", "text": "Paris and Rome are both 18 °C."}]},
        {"role": "user", "content": [{"type": "text", "text": "What should I wear?"}]}
    ]);
    assert_body(&body["messages"], &expected, "responses → anthropic");
}

#[tokio::test]
async fn a_history_from_responses_continues_on_gemini() {
    let body = continue_on(Wire::Responses, Wire::Gemini).await;
    let stand_in = "skip_thought_signature_validator";
    let expected = json!([
        {"role": "user", "parts": [{"text": "Weather in Paris, then Rome?"}]},
        {"role": "model", "parts": [
            {"text": "Checking Paris."},
            {"functionCall": {"id": "call_r1", "name": "get_weather", "args": {"city": "Paris"}},
             "thoughtSignature": stand_in}
        ]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "call_r1", "name": "get_weather", "response": {"output": "Paris: 18 °C"}}}
        ]},
        {"role": "model", "parts": [
            {"functionCall": {"id": "call_r2", "name": "get_weather", "args": {"city": "Rome"}},
             "thoughtSignature": stand_in}
        ]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "call_r2", "name": "get_weather", "response": {"output": "Rome: 18 °C"}}}
        ]},
        {"role": "model", "parts": [{"text": "Paris and Rome are both 18 °C."}]},
        {"role": "user", "parts": [{"text": "What should I wear?"}]}
    ]);
    assert_body(&body["contents"], &expected, "responses → gemini");
}

#[tokio::test]
async fn back_on_responses_its_reasoning_item_returns_whole() {
    // Responses → Anthropic → Responses: the reasoning item survived the detour and goes back
    // before the call it preceded; Anthropic's turn adds none.
    let first = MockServer::start(Wire::Responses, two_tool_turns(Wire::Responses))
        .await
        .unwrap();
    let claude = MockServer::start(Wire::Anthropic, [Turn::text("Pack a light jacket.")])
        .await
        .unwrap();
    let back = MockServer::start(Wire::Responses, [Turn::text("Yes.")])
        .await
        .unwrap();
    let agent = Agent::builder_shared(provider(Wire::Responses, &first))
        .model("gpt-5")
        .tool(weather_tool())
        .build();
    let mut chat = Conversation::new(&agent);
    chat.send("Weather in Paris, then Rome?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    chat.set_model(provider(Wire::Anthropic, &claude), "claude-test");
    chat.send("What should I wear?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    chat.set_model(provider(Wire::Responses, &back), "gpt-5");
    chat.send("Sure?").await.unwrap().finish().await.unwrap();
    let input = &back.requests()[0].body["input"];
    assert_eq!(
        input[1],
        json!({"id": "rs_mock_0_0", "type": "reasoning", "encrypted_content": "gAAAA-encrypted",
               "summary": [{"type": "summary_text", "text": "The user wants weather."}]})
    );
    assert_eq!(
        input[9],
        json!({"role": "assistant", "content": [{"type": "output_text", "text": "Pack a light jacket."}]})
    );
    assert_eq!(input.as_array().map(Vec::len), Some(11));
}
