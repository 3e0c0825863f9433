//! One conversation moving between Gemini and the other two wires, over real HTTP against the
//! testkit's wire servers: two tool turns started on OpenAI or Anthropic continue on Gemini,
//! and two started on Gemini continue on OpenAI or Anthropic. Each continuing request is
//! compared with a golden body.
//!
//! What the goldens encode (Gemini API "Function calling" and "Thought signatures"; the
//! Anthropic and OpenAI shapes as in `conversation_wire.rs`): call ids are kept in every
//! provider's shape; Gemini needs each result's function name, taken from its call; another
//! provider's reasoning cannot be verified by Gemini and is left out, and each model turn's
//! first call gets the documented `skip_thought_signature_validator` stand-in; Gemini's
//! signature-carrying reasoning is left out by OpenAI and Anthropic (neither can check it).

use std::sync::Arc;

use agentloop::conversation::Conversation;
use agentloop::provider::anthropic::Anthropic;
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
        Wire::Bedrock => unreachable!("Bedrock's portability is in bedrock_portability.rs"),
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
        Wire::Bedrock => unreachable!("Bedrock's portability is in bedrock_portability.rs"),
        Wire::Responses => "gpt-5",
    }
}

/// Two tool turns and an answer, with signed reasoning first; ids in the wire's own style.
fn two_tool_turns(wire: Wire) -> [Turn; 3] {
    let (first, second, signature) = match wire {
        Wire::OpenAi => ("call_1", "call_2", None),
        Wire::Anthropic => ("toolu_1", "toolu_2", Some("sig-anthropic")),
        Wire::Gemini => ("fc_1", "fc_2", Some("sig-gemini")),
        Wire::Bedrock => unreachable!("Bedrock's portability is in bedrock_portability.rs"),
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

fn gemini_body(first: &str, second: &str) -> Value {
    let stand_in = "skip_thought_signature_validator";
    json!({
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris, then Rome?"}]},
            {"role": "model", "parts": [
                {"text": "Checking Paris."},
                {"functionCall": {"id": first, "name": "get_weather", "args": {"city": "Paris"}},
                 "thoughtSignature": stand_in}
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

#[tokio::test]
async fn a_history_from_anthropic_continues_on_gemini() {
    let body = continue_on(Wire::Anthropic, Wire::Gemini).await;
    assert_body(
        &body,
        &gemini_body("toolu_1", "toolu_2"),
        "anthropic → gemini",
    );
}

#[tokio::test]
async fn a_history_from_openai_continues_on_gemini() {
    let body = continue_on(Wire::OpenAi, Wire::Gemini).await;
    assert_body(&body, &gemini_body("call_1", "call_2"), "openai → gemini");
}

/// The messages Anthropic gets for the two tool turns made elsewhere: no reasoning (another
/// provider's cannot be replayed), the call ids as they were.
fn anthropic_messages(first: &str, second: &str) -> Value {
    json!([
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris, then Rome?"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking Paris."},
            {"type": "tool_use", "id": first, "name": "get_weather", "input": {"city": "Paris"}}
        ]},
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
    ])
}

/// The messages Chat Completions gets for the two tool turns made elsewhere.
fn openai_messages(first: &str, second: &str) -> Value {
    json!([
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
    ])
}

#[tokio::test]
async fn histories_from_gemini_and_openai_continue_on_anthropic() {
    for (from, first, second) in [
        (Wire::Gemini, "fc_1", "fc_2"),
        (Wire::OpenAi, "call_1", "call_2"),
    ] {
        let body = continue_on(from, Wire::Anthropic).await;
        assert_body(
            &body["messages"],
            &anthropic_messages(first, second),
            &format!("{from:?} → anthropic"),
        );
    }
}

#[tokio::test]
async fn histories_from_gemini_and_anthropic_continue_on_openai() {
    for (from, first, second) in [
        (Wire::Gemini, "fc_1", "fc_2"),
        (Wire::Anthropic, "toolu_1", "toolu_2"),
    ] {
        let body = continue_on(from, Wire::OpenAi).await;
        assert_body(
            &body["messages"],
            &openai_messages(first, second),
            &format!("{from:?} → openai"),
        );
    }
}

#[tokio::test]
async fn back_on_gemini_its_own_signature_returns_on_the_signed_part() {
    // Gemini → OpenAI → Gemini: Gemini's signature survived the detour and goes back on the
    // call it signed, with no stand-in added to a turn Gemini signed; the turn OpenAI added
    // gets no reasoning.
    let gemini = MockServer::start(Wire::Gemini, two_tool_turns(Wire::Gemini))
        .await
        .unwrap();
    let gpt = MockServer::start(Wire::OpenAi, [Turn::text("Pack a light jacket.")])
        .await
        .unwrap();
    let back = MockServer::start(Wire::Gemini, [Turn::text("Yes.")])
        .await
        .unwrap();
    let agent = Agent::builder_shared(provider(Wire::Gemini, &gemini))
        .model("gemini-3-pro-preview")
        .tool(weather_tool())
        .build();
    let mut chat = Conversation::new(&agent);
    chat.send("Weather in Paris, then Rome?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    chat.set_model(provider(Wire::OpenAi, &gpt), "gpt-4o");
    chat.send("What should I wear?")
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    chat.set_model(provider(Wire::Gemini, &back), "gemini-3-pro-preview");
    chat.send("Sure?").await.unwrap().finish().await.unwrap();
    let contents = &back.requests()[0].body["contents"];
    assert_eq!(
        contents[1],
        json!({"role": "model", "parts": [
            {"text": "Checking Paris."},
            {"functionCall": {"id": "fc_1", "name": "get_weather", "args": {"city": "Paris"}},
             "thoughtSignature": "sig-gemini"}
        ]})
    );
    // A text-only turn from OpenAI needs no signature.
    assert_eq!(
        contents[7],
        json!({"role": "model", "parts": [{"text": "Pack a light jacket."}]})
    );
}
