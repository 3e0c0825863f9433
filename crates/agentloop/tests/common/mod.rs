//! Shared fixtures for the integration tests.
#![allow(dead_code)]

use agentloop::{
    ContentBlock, FunctionDefinition, Message, Request, Role, ToolChoice, ToolDefinition,
    ToolResult,
};
use serde_json::json;

/// The canonical request the golden body tests serialize for every provider: a system prompt,
/// a multi-turn history with two parallel tool calls and their results, an image, two tools, a
/// specific tool choice and parallel calls off.
pub fn canonical_request() -> Request {
    Request {
        model: "test-model".into(),
        system: Some("You are a helpful travel assistant.".into()),
        messages: vec![
            Message::new(
                Role::User,
                vec![
                    ContentBlock::text(
                        "What is the weather in Paris and in Rome? Here is a photo of my suitcase.",
                    ),
                    ContentBlock::image_base64(
                        "image/png",
                        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQABpfZFQAAAAABJRU5ErkJggg==",
                    ),
                ],
            ),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text("Let me check both cities."),
                    ContentBlock::ToolUse {
                        id: "call_paris".into(),
                        name: "get_weather".into(),
                        input: json!({"city": "Paris", "unit": "celsius"}),
                    },
                    ContentBlock::ToolUse {
                        id: "call_rome".into(),
                        name: "get_weather".into(),
                        input: json!({"city": "Rome"}),
                    },
                ],
            ),
            Message::new(
                Role::User,
                vec![
                    ContentBlock::ToolResult(ToolResult::text("call_paris", "18 °C, cloudy")),
                    ContentBlock::ToolResult(ToolResult::error(
                        "call_rome",
                        "weather service unavailable",
                    )),
                ],
            ),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::text(
                    "Paris is 18 °C and cloudy; Rome is unavailable right now.",
                )],
            ),
            Message::user("Then find me a hotel in Paris for tonight."),
        ],
        max_tokens: Some(1024),
        temperature: Some(0.5),
        top_p: None,
        top_k: None,
        stop_sequences: vec!["END".into()],
        tools: vec![
            ToolDefinition::from(FunctionDefinition {
                name: "get_weather".into(),
                description: "Current weather for a city".into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "description": "City name"},
                        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
                    },
                    "required": ["city"]
                }),
                strict: false,
            }),
            ToolDefinition::from(FunctionDefinition {
                name: "search_hotels".into(),
                description: "Search hotels in a city".into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "city": {"type": "string"},
                        "max_price": {"type": "integer", "minimum": 0}
                    },
                    "required": ["city"]
                }),
                strict: false,
            }),
        ],
        tool_choice: Some(ToolChoice::tool("search_hotels")),
        parallel_tool_calls: Some(false),
        metadata: None,
        extensions: None,
        cache: Vec::new(),
        output: None,
    }
}

/// A path under the project's `shared/` directory (conformance streams, specs), which sits
/// beside the repository: found by walking up from this crate, so it works from the main
/// checkout, a worktree or CI's clone alike.
pub fn shared_path(relative: &str) -> std::path::PathBuf {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .map(|dir| dir.join("shared"))
        .find(|shared| shared.join("conformance").is_dir())
        .unwrap_or_else(|| {
            panic!(
                "no shared/conformance directory above {}",
                crate_dir.display()
            )
        })
        .join(relative)
}

/// An agent builder on `wire`'s provider pointed at a testkit wire server, with `retry` and
/// 5 s idle and request timeouts (tests that inject faults want short, bounded waits).
pub fn wire_agent(
    server: &agentloop_testkit::MockServer,
    wire: agentloop_testkit::Wire,
    retry: agentloop::provider::http::RetryPolicy,
) -> agentloop::AgentBuilder {
    use agentloop::Agent;
    use agentloop::provider::anthropic::Anthropic;
    use agentloop::provider::http::{ApiKey, HttpConfig};
    use agentloop::provider::openai::{OpenAi, Preset};
    use std::time::Duration;

    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-wire-test"));
    config.retry = retry;
    config.idle_timeout = Duration::from_secs(5);
    config.request_timeout = Duration::from_secs(5);
    match wire {
        agentloop_testkit::Wire::OpenAi => {
            Agent::builder(OpenAi::from_preset(Preset::Compatible, config).unwrap())
        }
        agentloop_testkit::Wire::Anthropic => Agent::builder(Anthropic::new(config).unwrap()),
        agentloop_testkit::Wire::Gemini => {
            Agent::builder(agentloop::provider::gemini::Gemini::new(config).unwrap())
        }
        // Signed like the real service (the test server does not check it), so every wire
        // test goes through SigV4 too.
        agentloop_testkit::Wire::Bedrock => {
            use agentloop::provider::bedrock::{AwsCredentials, Bedrock, BedrockAuth};
            let credentials = AwsCredentials {
                access_key_id: "AKIDEXAMPLE".into(),
                secret_access_key: ApiKey::new("wire-test-secret"),
                session_token: None,
            };
            Agent::builder(
                Bedrock::new(config, "us-east-1", BedrockAuth::SigV4(credentials)).unwrap(),
            )
        }
        agentloop_testkit::Wire::Responses => {
            Agent::builder(agentloop::provider::responses::OpenAiResponses::new(config).unwrap())
        }
    }
}
pub mod scripted_http;
