//! The OpenAI Responses provider end to end against the testkit's Responses wire server: a run
//! with two parallel calls after encrypted reasoning (blocking and streamed) whose second
//! request carries the reasoning item back, routing (`openai-responses/<model>` and
//! `openai/<model>` with the option), and errors typed from OpenAI's error bodies and `error`
//! events.

use std::convert::Infallible;

use agentloop::provider::http::{ApiKey, HttpConfig, RetryPolicy};
use agentloop::provider::responses::OpenAiResponses;
use agentloop::provider::route::{self, RouteOptions};
use agentloop::{Agent, ContentBlock, Error, Message, Provider, Request, Role, Tool};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{Fault, MockServer, Wire};
use serde_json::{Value, json};

fn config(server: &MockServer) -> HttpConfig {
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-wire-test"));
    config.retry = RetryPolicy {
        max_retries: 1,
        initial_backoff: std::time::Duration::from_millis(1),
        ..RetryPolicy::default()
    };
    config
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
}

fn agent(provider: impl Provider) -> Agent {
    let tool = Tool::function(
        "get_weather",
        "Current weather for a city",
        |args: GetWeather| async move {
            let degrees = if args.city == "Paris" { 18 } else { 17 };
            Ok::<_, Infallible>(format!("{degrees} °C in {}", args.city))
        },
    );
    Agent::builder(provider).model("gpt-5").tool(tool).build()
}

fn script() -> [Turn; 2] {
    [
        Turn::tool_calls([
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": "Rome"})),
        ])
        .with_thinking("Two cities: call the tool twice.", Some("gAAAA-wire-1"))
        .with_ids(["call_paris", "call_rome"])
        .with_usage(300, 40),
        Turn::text("Paris 18 °C, Rome 17 °C.").with_usage(380, 12),
    ]
}

/// The second request's input: the reasoning item as the server sent it (id, encrypted
/// content, summary), both calls, both outputs.
fn assert_second_request(server: &MockServer) {
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.path == "/v1/responses"));
    let second = &requests[1].body;
    assert_eq!(second["store"], false);
    assert_eq!(second["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        second["input"],
        json!([
            {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris and Rome?"}]},
            {"id": "rs_mock_0_0", "type": "reasoning", "encrypted_content": "gAAAA-wire-1",
             "summary": [{"type": "summary_text", "text": "Two cities: call the tool twice."}]},
            {"type": "function_call", "call_id": "call_paris", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call", "call_id": "call_rome", "name": "get_weather", "arguments": "{\"city\":\"Rome\"}"},
            {"type": "function_call_output", "call_id": "call_paris", "output": "18 °C in Paris"},
            {"type": "function_call_output", "call_id": "call_rome", "output": "17 °C in Rome"}
        ])
    );
}

#[tokio::test]
async fn a_tool_run_sends_the_reasoning_item_back() {
    for streamed in [false, true] {
        let server = MockServer::start(Wire::Responses, script()).await.unwrap();
        let agent = agent(OpenAiResponses::new(config(&server)).unwrap());
        let result = if streamed {
            use futures::StreamExt;
            let events: Vec<_> = agent
                .run_stream("Weather in Paris and Rome?")
                .collect()
                .await;
            match events.last() {
                Some(agentloop::RunEvent::RunFinish { result }) => (**result).clone(),
                other => panic!("{other:?}"),
            }
        } else {
            agent.run("Weather in Paris and Rome?").await.unwrap()
        };
        assert!(result.error.is_none(), "{:?}", result.error);
        assert_eq!(result.text(), "Paris 18 °C, Rome 17 °C.");
        assert_second_request(&server);
        for request in server.requests() {
            assert_eq!(request.header("authorization"), Some("Bearer sk-wire-test"));
            assert_eq!(request.body["stream"].as_bool().unwrap_or(false), streamed);
        }
        let assistant = &result.messages[1];
        assert_eq!(assistant.role, Role::Assistant);
        let ContentBlock::Thinking {
            thinking,
            signature: Some(signature),
            provider: Some(provider),
        } = &assistant.content[0]
        else {
            panic!("{:?}", assistant.content[0]);
        };
        assert_eq!(thinking, "Two cities: call the tool twice.");
        assert_eq!(provider, "openai-responses");
        let item: Value = serde_json::from_str(signature).unwrap();
        assert_eq!(item["encrypted_content"], "gAAAA-wire-1");
        assert_eq!(result.usage.input_tokens, 680);
        server.assert_complete();
    }
}

#[tokio::test]
async fn routing_selects_responses_by_prefix_or_by_option() {
    let server = MockServer::start(Wire::Responses, [Turn::text("OK"), Turn::text("OK")])
        .await
        .unwrap();
    for (spec, responses) in [("openai-responses/gpt-5", false), ("openai/gpt-5", true)] {
        let (provider, model) = route::from_model(
            spec,
            RouteOptions {
                base_url: Some(server.base_url()),
                api_key: Some(ApiKey::new("sk-route")),
                responses,
                ..RouteOptions::default()
            },
        )
        .unwrap();
        assert_eq!(provider.name(), "openai-responses");
        let response = provider
            .complete(&Request::new(model, vec![Message::user("hi")]))
            .await
            .unwrap();
        assert_eq!(response.text(), "OK");
    }
    // Without the option, `openai/` stays on Chat Completions.
    let (provider, _) = route::from_model(
        "openai/gpt-5",
        RouteOptions {
            base_url: Some(server.base_url()),
            api_key: Some(ApiKey::new("sk-route")),
            ..RouteOptions::default()
        },
    )
    .unwrap();
    assert_eq!(provider.name(), "openai");
    assert!(
        route::known_providers().contains(&"openai-responses"),
        "{:?}",
        route::known_providers()
    );
}

#[tokio::test]
async fn error_bodies_and_error_events_become_typed_errors() {
    let server = MockServer::builder(Wire::Responses)
        .turn(Turn::text("never"))
        .inject(Fault::bad_request("Unsupported parameter: 'stop'"), 1)
        .start()
        .await
        .unwrap();
    let provider = OpenAiResponses::new(config(&server)).unwrap();
    let error = provider
        .complete(&Request::new("m", vec![Message::user("hi")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::InvalidRequest { status: 400, message, .. }
            if message == "Unsupported parameter: 'stop'"),
        "{error:?}"
    );

    // A rate limit reported as an `error` event after content keeps its retryable kind (and
    // is not retried: content came).
    let server = MockServer::start(
        Wire::Responses,
        [Turn::text("Hello there").fail_after(
            5,
            Error::RateLimited {
                provider: "openai-responses".into(),
                retry_after: None,
                message: "slow down".into(),
            },
        )],
    )
    .await
    .unwrap();
    let provider = OpenAiResponses::new(config(&server)).unwrap();
    let error =
        agentloop::stream::collect(provider.stream(&Request::new("m", vec![Message::user("hi")])))
            .await
            .unwrap_err();
    assert!(
        matches!(&error, Error::RateLimited { message, .. } if message == "slow down"),
        "{error:?}"
    );
    assert_eq!(server.calls(), 1);
}

/// An `error` event with the reference's `server_error` code (a `ResponseError` code: the
/// server failed, not the request) right after `response.created` / `response.in_progress`
/// is retried like an HTTP 500 before any content; after content it ends the stream typed
/// as that 500 and nothing is sent again.
#[tokio::test]
async fn a_server_error_event_before_content_is_retried_and_typed_after_it() {
    let server_error = || Error::Stream {
        provider: "openai-responses".into(),
        error_type: Some("server_error".into()),
        message: "The server had an error while processing your request.".into(),
    };
    let request = Request::new("m", vec![Message::user("hi")]);
    let server = MockServer::start(
        Wire::Responses,
        [
            Turn::text("never seen").fail_after(2, server_error()),
            Turn::text("after the retry"),
        ],
    )
    .await
    .unwrap();
    let provider = OpenAiResponses::new(config(&server)).unwrap();
    let response = agentloop::stream::collect(provider.stream(&request))
        .await
        .unwrap();
    assert_eq!(response.text(), "after the retry");
    assert_eq!(server.calls(), 2);

    let server = MockServer::start(
        Wire::Responses,
        [
            Turn::text("Hello there, world").fail_after(5, server_error()),
            Turn::text("never sent"),
        ],
    )
    .await
    .unwrap();
    let provider = OpenAiResponses::new(config(&server)).unwrap();
    let error = agentloop::stream::collect(provider.stream(&request))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Api { status: 500, error_type: Some(t), .. } if t == "server_error"),
        "{error:?}"
    );
    assert_eq!(server.calls(), 1);
}

#[tokio::test]
async fn max_output_tokens_and_refusals_keep_their_stop_reasons() {
    let server = MockServer::start(
        Wire::Responses,
        [
            Turn::text("cut").with_stop_reason(agentloop::StopReason::MaxTokens),
            Turn::text("I can't help with that.").with_stop_reason(agentloop::StopReason::Refusal),
        ],
    )
    .await
    .unwrap();
    let provider = OpenAiResponses::new(config(&server)).unwrap();
    let request = Request::new("m", vec![Message::user("hi")]);
    let cut = agentloop::stream::collect(provider.stream(&request))
        .await
        .unwrap();
    assert_eq!(cut.stop_reason.as_str(), "max_tokens");
    let refused = provider.complete(&request).await.unwrap();
    assert_eq!(refused.stop_reason.as_str(), "refusal");
    assert_eq!(refused.text(), "I can't help with that.");
}
