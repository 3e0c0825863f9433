//! The portability matrix: one conversation moving between any two of the five wires (OpenAI
//! Chat Completions, Anthropic Messages, Gemini, the OpenAI Responses API, Bedrock Converse),
//! over real HTTP against the testkit's wire servers. Two tool turns with signed reasoning run
//! on the source; one more message goes to the target, and the target's request is compared
//! with a golden body, for all 25 ordered pairs (a provider continuing its own history
//! included).
//!
//! What the goldens encode:
//! - call ids are kept as they were, in every provider's shape (they are all in Bedrock's
//!   `[a-zA-Z0-9_-]` alphabet here);
//! - a provider's own reasoning goes back to it whole: Anthropic's signed `thinking` block
//!   (Messages API, "Extended thinking": preserve thinking blocks with tool use), Gemini's
//!   `thoughtSignature` on the part it signed (Gemini API, "Thought signatures"), the Responses
//!   reasoning item with its `encrypted_content` when `store` is false (OpenAI "Reasoning"
//!   guide), Bedrock's `reasoningContent` with its signature (Bedrock API reference
//!   "ReasoningContentBlock");
//! - another provider's reasoning cannot be verified and is left out; Gemini gets its
//!   documented `skip_thought_signature_validator` stand-in on each model turn's first call
//!   instead;
//! - Gemini needs each result's function name, taken from its call; Anthropic groups a turn's
//!   results in one user message; Chat Completions sends one `tool` message per result.

use std::sync::Arc;

use agentloop::conversation::Conversation;
use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::bedrock::{Bedrock, BedrockAuth};
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

const WIRES: [Wire; 5] = [
    Wire::OpenAi,
    Wire::Anthropic,
    Wire::Gemini,
    Wire::Responses,
    Wire::Bedrock,
];

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
            Bedrock::new(
                config,
                "us-east-1",
                BedrockAuth::Bearer(ApiKey::new("test-key")),
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

/// The source's call ids, in its own style, and the signature on its reasoning.
struct Source {
    first: &'static str,
    second: &'static str,
    signature: Option<&'static str>,
}

fn source(wire: Wire) -> Source {
    let (first, second, signature) = match wire {
        Wire::OpenAi => ("call_1", "call_2", None),
        Wire::Anthropic => ("toolu_1", "toolu_2", Some("sig-anthropic")),
        Wire::Gemini => ("fc_1", "fc_2", Some("sig-gemini")),
        Wire::Responses => ("call_r1", "call_r2", Some("gAAAA-encrypted")),
        Wire::Bedrock => ("tooluse_1", "tooluse_2", Some("sig-bedrock")),
    };
    Source {
        first,
        second,
        signature,
    }
}

/// Two tool turns and an answer, with signed reasoning first.
fn two_tool_turns(wire: Wire) -> [Turn; 3] {
    let Source {
        first,
        second,
        signature,
    } = source(wire);
    [
        Turn::text("Checking Paris.")
            .then_tool_call("get_weather", json!({"city": "Paris"}))
            .with_thinking("The user wants weather.", signature)
            .with_ids([first]),
        Turn::tool_call("get_weather", json!({"city": "Rome"})).with_ids([second]),
        Turn::text("Paris and Rome are both 18 °C."),
    ]
}

fn agent_on(wire: Wire, server: &MockServer) -> Agent {
    Agent::builder_shared(provider(wire, server))
        .model(model(wire))
        .tool(weather_tool())
        .build()
}

/// Runs the two tool turns on `from`, then one more message on `to`; the body `to` received.
async fn continue_on(from: Wire, to: Wire) -> Value {
    let source = MockServer::start(from, two_tool_turns(from)).await.unwrap();
    let target = MockServer::start(to, [Turn::text("Pack a light jacket.")])
        .await
        .unwrap();
    let agent = agent_on(from, &source);
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

/// The part of a target's body that carries the history and the tools.
fn history_part(to: Wire, body: &Value) -> Value {
    match to {
        Wire::OpenAi | Wire::Anthropic => json!({"messages": body["messages"]}),
        Wire::Gemini => json!({"contents": body["contents"], "tools": body["tools"]}),
        Wire::Responses => body.clone(),
        Wire::Bedrock => json!({"messages": body["messages"], "toolConfig": body["toolConfig"]}),
    }
}

/// The golden [`history_part`] of `to`'s request for a history made on `from`.
fn expected(from: Wire, to: Wire) -> Value {
    let Source { first, second, .. } = source(from);
    let own = from == to;
    match to {
        Wire::OpenAi => openai_body(first, second),
        Wire::Anthropic => anthropic_body(first, second, own),
        Wire::Gemini => gemini_body(first, second, own),
        Wire::Responses => responses_body(first, second, own),
        Wire::Bedrock => bedrock_body(first, second, own),
    }
}

fn openai_body(first: &str, second: &str) -> Value {
    json!({"messages": [
        {"role": "user", "content": "Weather in Paris, then Rome?"},
        {"role": "assistant", "content": "Checking Paris.", "tool_calls": [
            {"id": first, "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
        ]},
        {"role": "tool", "tool_call_id": first, "content": "Paris: 18 °C"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": second, "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
        ]},
        {"role": "tool", "tool_call_id": second, "content": "Rome: 18 °C"},
        {"role": "assistant", "content": "Paris and Rome are both 18 °C."},
        {"role": "user", "content": "What should I wear?"}
    ]})
}

fn anthropic_body(first: &str, second: &str, own: bool) -> Value {
    let mut first_turn = Vec::new();
    if own {
        first_turn.push(json!({"type": "thinking", "thinking": "The user wants weather.", "signature": "sig-anthropic"}));
    }
    first_turn.push(json!({"type": "text", "text": "Checking Paris."}));
    first_turn.push(
        json!({"type": "tool_use", "id": first, "name": "get_weather", "input": {"city": "Paris"}}),
    );
    json!({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris, then Rome?"}]},
        {"role": "assistant", "content": first_turn},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": first, "content": "Paris: 18 °C", "is_error": false}
        ]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": second, "name": "get_weather", "input": {"city": "Rome"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": second, "content": "Rome: 18 °C", "is_error": false}
        ]},
        {"role": "assistant", "content": [{"type": "text", "text": "Paris and Rome are both 18 °C."}]},
        {"role": "user", "content": [{"type": "text", "text": "What should I wear?"}]}
    ]})
}

fn gemini_body(first: &str, second: &str, own: bool) -> Value {
    // Gemini's own signature goes back on the part it signed; any model turn without one (made
    // elsewhere, or unsigned) gets the stand-in on its first call, since Gemini 3 refuses a
    // call without a signature.
    let stand_in = "skip_thought_signature_validator";
    let first_signature = if own { "sig-gemini" } else { stand_in };
    json!({
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris, then Rome?"}]},
            {"role": "model", "parts": [
                {"text": "Checking Paris."},
                {"functionCall": {"id": first, "name": "get_weather", "args": {"city": "Paris"}},
                 "thoughtSignature": first_signature}
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"id": first, "name": "get_weather", "response": {"output": "Paris: 18 °C"}}}
            ]},
            {"role": "model", "parts": [
                {"functionCall": {"id": second, "name": "get_weather", "args": {"city": "Rome"}},
                 "thoughtSignature": stand_in}
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"id": second, "name": "get_weather", "response": {"output": "Rome: 18 °C"}}}
            ]},
            {"role": "model", "parts": [{"text": "Paris and Rome are both 18 °C."}]},
            {"role": "user", "parts": [{"text": "What should I wear?"}]}
        ],
        "tools": [{"functionDeclarations": [{
            "name": "get_weather",
            "description": "Current weather for a city",
            "parametersJsonSchema": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name."}},
                "required": ["city"]
            }
        }]}]
    })
}

fn responses_body(first: &str, second: &str, own: bool) -> Value {
    let mut input = vec![
        json!({"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris, then Rome?"}]}),
    ];
    if own {
        input.push(json!({"id": "rs_mock_0_0", "type": "reasoning", "encrypted_content": "gAAAA-encrypted",
                          "summary": [{"type": "summary_text", "text": "The user wants weather."}]}));
    }
    input.extend([
        json!({"role": "assistant", "content": [{"type": "output_text", "text": "Checking Paris."}]}),
        json!({"type": "function_call", "call_id": first, "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}),
        json!({"type": "function_call_output", "call_id": first, "output": "Paris: 18 °C"}),
        json!({"type": "function_call", "call_id": second, "name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}),
        json!({"type": "function_call_output", "call_id": second, "output": "Rome: 18 °C"}),
        json!({"role": "assistant", "content": [{"type": "output_text", "text": "Paris and Rome are both 18 °C."}]}),
        json!({"role": "user", "content": [{"type": "input_text", "text": "What should I wear?"}]}),
    ]);
    json!({
        "model": "gpt-5",
        "input": input,
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

fn bedrock_body(first: &str, second: &str, own: bool) -> Value {
    let mut first_turn = Vec::new();
    if own {
        first_turn.push(json!({"reasoningContent": {"reasoningText": {
            "text": "The user wants weather.",
            "signature": "sig-bedrock"
        }}}));
    }
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

#[tokio::test]
async fn every_ordered_pair_of_providers_continues_with_the_exact_body() {
    let mut mismatches = Vec::new();
    for from in WIRES {
        for to in WIRES {
            let actual = history_part(to, &continue_on(from, to).await);
            let expected = expected(from, to);
            if actual != expected {
                mismatches.push(format!(
                    "{from:?} → {to:?}\nexpected: {}\nactual:   {}",
                    serde_json::to_string_pretty(&expected).unwrap(),
                    serde_json::to_string_pretty(&actual).unwrap()
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n\n"));
}

/// Runs the two tool turns on `home`, one message on `detour`, and one back on `home`; the
/// request `home` got last.
async fn detour(home: Wire, detour: Wire) -> Value {
    let first = MockServer::start(home, two_tool_turns(home)).await.unwrap();
    let away = MockServer::start(detour, [Turn::text("Pack a light jacket.")])
        .await
        .unwrap();
    let back = MockServer::start(home, [Turn::text("Yes.")]).await.unwrap();
    let agent = agent_on(home, &first);
    let mut chat = Conversation::new(&agent);
    chat.send("Weather in Paris, then Rome?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    chat.set_model(provider(detour, &away), model(detour));
    chat.send("What should I wear?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    chat.set_model(provider(home, &back), model(home));
    chat.send("Sure?").await.unwrap().finish().await.unwrap();
    history::validate(&chat.history()).unwrap();
    back.requests()[0].body.clone()
}

#[tokio::test]
async fn back_on_gemini_its_own_signature_returns_on_the_signed_part() {
    // Gemini → OpenAI → Gemini: the signature survived the detour and goes back on the call it
    // signed instead of the stand-in; the text-only turn OpenAI added needs none.
    let contents = &detour(Wire::Gemini, Wire::OpenAi).await["contents"];
    assert_eq!(
        contents[1],
        json!({"role": "model", "parts": [
            {"text": "Checking Paris."},
            {"functionCall": {"id": "fc_1", "name": "get_weather", "args": {"city": "Paris"}},
             "thoughtSignature": "sig-gemini"}
        ]})
    );
    assert_eq!(
        contents[7],
        json!({"role": "model", "parts": [{"text": "Pack a light jacket."}]})
    );
}

#[tokio::test]
async fn back_on_responses_its_reasoning_item_returns_whole() {
    // Responses → Anthropic → Responses: the reasoning item survived the detour and goes back
    // before the call it preceded; Anthropic's turn adds none.
    let input = &detour(Wire::Responses, Wire::Anthropic).await["input"];
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

#[tokio::test]
async fn back_on_bedrock_its_signed_reasoning_returns_whole() {
    // Bedrock → Gemini → Bedrock: the reasoning block survived the detour, signature and all.
    let messages = &detour(Wire::Bedrock, Wire::Gemini).await["messages"];
    assert_eq!(
        messages[1]["content"][0],
        json!({"reasoningContent": {"reasoningText": {
            "text": "The user wants weather.",
            "signature": "sig-bedrock"
        }}})
    );
    assert_eq!(
        messages[7],
        json!({"role": "assistant", "content": [{"text": "Pack a light jacket."}]})
    );
}
