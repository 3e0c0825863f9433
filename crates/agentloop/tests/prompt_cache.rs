//! Prompt caching end to end against the testkit's wire servers: the agent option puts
//! Anthropic breakpoints on the last tool and the system prompt of every request, usage reports
//! the cache reads and writes (blocking and streamed), and OpenAI-style bodies never carry
//! `cache_control` (OpenAI caches prompts on its own).

mod common;

use std::convert::Infallible;

use agentloop::provider::http::RetryPolicy;
use agentloop::{
    Agent, CacheControl, CacheTarget, CacheTtl, RunEvent, Tool, Usage, stream::collect,
};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{MockServer, Wire};
use futures::StreamExt;
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    /// City name.
    city: String,
}

fn city_tool(name: &str) -> Tool {
    Tool::function(name, "Weather for a city", |args: City| async move {
        Ok::<_, Infallible>(format!("18 °C in {}", args.city))
    })
}

fn agent(server: &MockServer, wire: Wire) -> Agent {
    common::wire_agent(server, wire, RetryPolicy::none())
        .model("claude-sonnet-4-5")
        .max_tokens(256)
        .system("You are a weather assistant.")
        .tool(city_tool("get_forecast"))
        .tool(city_tool("get_weather"))
        .prompt_caching(CacheControl::with_ttl(CacheTtl::OneHour))
        .build()
}

fn script() -> [Turn; 2] {
    [
        Turn::tool_call("get_weather", json!({"city": "Paris"}))
            .with_usage(20, 10)
            .with_cache_usage(0, 1500),
        Turn::text("18 °C.")
            .with_usage(40, 5)
            .with_cache_usage(1500, 0),
    ]
}

/// Both requests carry the two breakpoints: Anthropic's cache is read by prefix, so every
/// request has to mark the same places.
fn assert_anthropic_breakpoints(server: &MockServer) {
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let hour = json!({"type": "ephemeral", "ttl": "1h"});
    for request in &requests {
        let body = &request.body;
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "You are a weather assistant.", "cache_control": hour}])
        );
        assert_eq!(body["tools"][0].get("cache_control"), None);
        assert_eq!(body["tools"][1]["name"], "get_weather");
        assert_eq!(body["tools"][1]["cache_control"], hour);
    }
}

const CACHED: Usage = Usage {
    input_tokens: 60,
    output_tokens: 15,
    cache_read_tokens: 1500,
    cache_write_tokens: 1500,
    reasoning_tokens: 0,
};

#[tokio::test]
async fn anthropic_blocking_run_marks_tools_and_system_and_reports_cache_usage() {
    let server = MockServer::start(Wire::Anthropic, script()).await.unwrap();
    let result = agent(&server, Wire::Anthropic)
        .run("Weather in Paris?")
        .await
        .unwrap();
    assert_eq!(result.text(), "18 °C.");
    assert_eq!(result.usage, CACHED);
    assert_anthropic_breakpoints(&server);
}

#[tokio::test]
async fn anthropic_streamed_run_marks_tools_and_system_and_reports_cache_usage() {
    let server = MockServer::start(Wire::Anthropic, script()).await.unwrap();
    let mut stream = agent(&server, Wire::Anthropic).run_stream("Weather in Paris?");
    let mut result = None;
    while let Some(event) = stream.next().await {
        if let RunEvent::RunFinish { result: r } = event {
            result = Some(*r);
        }
    }
    let result = result.expect("the run finishes");
    assert_eq!(result.usage, CACHED);
    assert_anthropic_breakpoints(&server);
}

#[tokio::test]
async fn a_streamed_response_reports_the_cache_tokens_of_message_start() {
    let server = MockServer::start(
        Wire::Anthropic,
        [Turn::text("hi").with_usage(7, 3).with_cache_usage(900, 100)],
    )
    .await
    .unwrap();
    let agent = agent(&server, Wire::Anthropic);
    let request = agent.base_request().clone();
    let response = collect(agent.provider().stream(&request)).await.unwrap();
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 7,
            output_tokens: 3,
            cache_read_tokens: 900,
            cache_write_tokens: 100,
            reasoning_tokens: 0,
        }
    );
}

fn has_key(value: &Value, key: &str) -> bool {
    match value {
        Value::Object(map) => map.contains_key(key) || map.values().any(|v| has_key(v, key)),
        Value::Array(items) => items.iter().any(|v| has_key(v, key)),
        _ => false,
    }
}

#[tokio::test]
async fn openai_bodies_never_carry_cache_control() {
    let server = MockServer::start(Wire::OpenAi, script()).await.unwrap();
    let result = agent(&server, Wire::OpenAi)
        .run("Weather in Paris?")
        .await
        .unwrap();
    assert_eq!(result.text(), "18 °C.");
    // OpenAI reports cached reads (`prompt_tokens_details.cached_tokens`), never writes.
    assert_eq!(result.usage.cache_read_tokens, 1500);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert!(!has_key(&request.body, "cache_control"), "{}", request.body);
        assert_eq!(
            request.body["messages"][0]["content"],
            "You are a weather assistant."
        );
    }
}

#[test]
fn an_explicit_breakpoint_does_not_change_an_openai_body() {
    use agentloop::provider::http::HttpConfig;
    use agentloop::provider::openai::{OpenAi, Preset};

    let request = common::canonical_request();
    let cached = request
        .clone()
        .cache_at(CacheTarget::Tools, CacheControl::ephemeral())
        .cache_at(CacheTarget::LastMessage, CacheControl::ephemeral())
        .cache_at(CacheTarget::Automatic, CacheControl::ephemeral());
    for preset in [
        Preset::OpenAi,
        Preset::Xai,
        Preset::Groq,
        Preset::Compatible,
    ] {
        let provider = OpenAi::from_preset(preset, HttpConfig::new("http://127.0.0.1:9")).unwrap();
        assert_eq!(
            provider.request_body(&cached, false).unwrap(),
            provider.request_body(&request, false).unwrap(),
            "{preset}"
        );
    }
}

/// Saved runs serialize their request: the breakpoints must come back as they were.
#[test]
fn breakpoints_round_trip_through_json() {
    let request = common::canonical_request()
        .cache_at(
            CacheTarget::Tools,
            CacheControl::with_ttl(CacheTtl::OneHour),
        )
        .cache_at(
            CacheTarget::Message {
                message: 1,
                block: Some(0),
            },
            CacheControl::ephemeral(),
        )
        .cache_at(CacheTarget::LastMessage, CacheControl::ephemeral());
    let json = serde_json::to_value(&request).unwrap();
    assert_eq!(
        json["cache"],
        json!([
            {"at": "tools", "control": {"ttl": "1h"}},
            {"at": "message", "message": 1, "block": 0, "control": {}},
            {"at": "last_message", "control": {}}
        ])
    );
    let back: agentloop::Request = serde_json::from_value(json).unwrap();
    assert_eq!(back, request);
}
