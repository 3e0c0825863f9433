//! The Anthropic provider end to end against the testkit's Anthropic wire server: runs with a
//! tool call in the middle (blocking and streamed), reasoning replayed with its signature,
//! 529 retries, error events inside a stream, cut and damaged streams.

use std::convert::Infallible;

use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::http::{ApiKey, HttpConfig, RetryPolicy};
use agentloop::{
    Agent, Error, Message, Provider, Request, RunEvent, StopReason, StreamEvent, Tool, Usage,
};
use agentloop_testkit::Turn;
use agentloop_testkit::server::{Fault, MockServer, Wire};
use futures::StreamExt;
use serde_json::json;

fn provider(server: &MockServer, max_retries: u32) -> Anthropic {
    let mut config = HttpConfig::new(server.base_url());
    config.api_key = Some(ApiKey::new("sk-ant-wire-test"));
    config.retry = RetryPolicy {
        max_retries,
        ..RetryPolicy::default()
    };
    Anthropic::new(config).expect("provider")
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
}

fn agent(provider: Anthropic) -> Agent {
    let tool = Tool::function(
        "get_weather",
        "Current weather for a city",
        |args: GetWeather| async move {
            let degrees = match args.city.as_str() {
                "Paris" => 18,
                "Rome" => 17,
                _ => 0,
            };
            Ok::<_, Infallible>(format!("{degrees} °C in {}", args.city))
        },
    );
    Agent::builder(provider)
        .model("claude-sonnet-4-5")
        .max_tokens(1024)
        .tool(tool)
        .build()
}

fn script() -> [Turn; 2] {
    [
        Turn::tool_calls([
            ("get_weather", json!({"city": "Paris"})),
            ("get_weather", json!({"city": "Rome"})),
        ])
        .with_thinking("Two cities: call the tool twice.", Some("sig-wire-1"))
        .with_ids(["toolu_paris", "toolu_rome"])
        .with_usage(300, 40),
        Turn::text("Paris 18 °C, Rome 17 °C.").with_usage(380, 12),
    ]
}

/// The second request holds the reasoning (signed, so Anthropic accepts it back), both calls,
/// and both results in one user message.
fn assert_second_request(server: &MockServer, streamed: bool) {
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.path, "/v1/messages");
        assert_eq!(request.header("x-api-key"), Some("sk-ant-wire-test"));
        assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(
            request.body.get("stream").cloned(),
            streamed.then_some(json!(true))
        );
    }
    assert_eq!(
        requests[1].body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Two cities: call the tool twice.", "signature": "sig-wire-1"},
                {"type": "tool_use", "id": "toolu_paris", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_rome", "name": "get_weather", "input": {"city": "Rome"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_paris", "content": "18 °C in Paris", "is_error": false},
                {"type": "tool_result", "tool_use_id": "toolu_rome", "content": "17 °C in Rome", "is_error": false}
            ]}
        ])
    );
}

#[tokio::test]
async fn blocking_run_with_a_tool_call_in_the_middle() {
    let server = MockServer::start(Wire::Anthropic, script()).await.unwrap();
    let result = agent(provider(&server, 0))
        .run("Weather in Paris and Rome?")
        .await
        .unwrap();
    assert_eq!(result.text(), "Paris 18 °C, Rome 17 °C.");
    assert_eq!(result.tool_calls, 2);
    assert_eq!(result.response.stop_reason, StopReason::EndTurn);
    assert_eq!(
        result.usage,
        Usage {
            input_tokens: 680,
            output_tokens: 52,
            ..Usage::default()
        }
    );
    assert_second_request(&server, false);
    server.assert_complete();
}

#[tokio::test]
async fn streamed_run_with_a_tool_call_in_the_middle() {
    let server = MockServer::start(Wire::Anthropic, script()).await.unwrap();
    let mut stream = agent(provider(&server, 0)).run_stream("Weather in Paris and Rome?");
    let (mut text, mut thinking, mut result) = (String::new(), String::new(), None);
    while let Some(event) = stream.next().await {
        match event {
            RunEvent::Model(StreamEvent::TextDelta { text: t }) => text.push_str(&t),
            RunEvent::Model(StreamEvent::ThinkingDelta { text: t }) => thinking.push_str(&t),
            RunEvent::RunFinish { result: r } => result = Some(*r),
            _ => {}
        }
    }
    let result = result.expect("the run finishes");
    assert_eq!(text, "Paris 18 °C, Rome 17 °C.");
    assert_eq!(thinking, "Two cities: call the tool twice.");
    assert_eq!(result.text(), "Paris 18 °C, Rome 17 °C.");
    assert_eq!(result.tool_calls, 2);
    assert_eq!(result.usage.total_tokens(), 732);
    assert_second_request(&server, true);
    server.assert_complete();
}

#[tokio::test]
async fn one_byte_writes_assemble_the_same_answer() {
    let server = MockServer::start(
        Wire::Anthropic,
        [Turn::tool_call("get_weather", json!({"city": "Zürich 🌧"}))
            .with_thinking("Umlaut and emoji.", Some("sig-bytes"))
            .with_fault(Fault::OneByteWrites)],
    )
    .await
    .unwrap();
    let request = Request::new("claude-sonnet-4-5", vec![Message::user("Weather?")]);
    let response = agentloop::stream::collect(provider(&server, 0).stream(&request))
        .await
        .unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.tool_uses()[0].input, json!({"city": "Zürich 🌧"}));
    assert!(matches!(
        &response.content[0],
        agentloop::ContentBlock::Thinking { thinking, signature: Some(s), .. }
            if thinking == "Umlaut and emoji." && s == "sig-bytes"
    ));
}

#[tokio::test(start_paused = true)]
async fn overloaded_is_retried_up_to_the_maximum_then_typed() {
    let server = MockServer::builder(Wire::Anthropic)
        .turn(Turn::text("never reached"))
        .inject(Fault::Overloaded, 3)
        .start()
        .await
        .unwrap();
    let request = Request::new("claude-sonnet-4-5", vec![Message::user("hi")]);
    let error = provider(&server, 2).complete(&request).await.unwrap_err();
    assert!(
        matches!(&error, Error::Overloaded { provider, .. } if provider == "anthropic"),
        "{error:?}"
    );
    assert_eq!(server.calls(), 3, "one attempt and two retries");

    // Streams are retried the same way before anything is yielded.
    let events: Vec<_> = provider(&server, 2).stream(&request).collect().await;
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    assert_eq!(server.calls(), 4);
    server.assert_complete();
}

#[tokio::test(start_paused = true)]
async fn overloads_within_the_budget_recover() {
    let server = MockServer::builder(Wire::Anthropic)
        .turn(Turn::text("recovered"))
        .inject(Fault::Overloaded, 2)
        .start()
        .await
        .unwrap();
    let request = Request::new("claude-sonnet-4-5", vec![Message::user("hi")]);
    let response = provider(&server, 2).complete(&request).await.unwrap();
    assert_eq!(response.text(), "recovered");
    assert_eq!(server.calls(), 3);
}

#[tokio::test]
async fn an_error_event_mid_stream_is_typed_and_not_retried() {
    let server = MockServer::start(
        Wire::Anthropic,
        [Turn::text("Hello there, world").with_fault(Fault::ErrorEvent { after_events: 4 })],
    )
    .await
    .unwrap();
    let request = Request::new("claude-sonnet-4-5", vec![Message::user("hi")]);
    let events: Vec<_> = provider(&server, 3).stream(&request).collect().await;
    let (last, before) = events.split_last().expect("events");
    assert!(
        matches!(last, Err(Error::Overloaded { provider, .. }) if provider == "anthropic"),
        "{last:?}"
    );
    assert!(before.iter().all(Result::is_ok), "{before:?}");
    assert!(
        before
            .iter()
            .any(|e| matches!(e, Ok(agentloop::StreamEvent::TextDelta { .. }))),
        "content came before the error: {before:?}"
    );
    assert_eq!(server.calls(), 1, "no retry after content was yielded");
}

#[tokio::test]
async fn a_dropped_connection_is_interrupted() {
    let server =
        MockServer::start(
            Wire::Anthropic,
            [Turn::text("This answer is cut short")
                .with_fault(Fault::Disconnect { after_bytes: 600 })],
        )
        .await
        .unwrap();
    let request = Request::new("claude-sonnet-4-5", vec![Message::user("hi")]);
    let events: Vec<_> = provider(&server, 3).stream(&request).collect().await;
    assert!(
        matches!(events.last(), Some(Err(Error::IncompleteStream { .. }))),
        "{events:?}"
    );
    assert_eq!(server.calls(), 1);
}

#[tokio::test]
async fn a_damaged_event_is_a_parse_error_rather_than_lost_text() {
    let server = MockServer::start(
        Wire::Anthropic,
        [Turn::text("Some text").with_fault(Fault::MalformedChunk { after_events: 3 })],
    )
    .await
    .unwrap();
    let request = Request::new("claude-sonnet-4-5", vec![Message::user("hi")]);
    let events: Vec<_> = provider(&server, 3).stream(&request).collect().await;
    assert!(
        matches!(events.last(), Some(Err(Error::Parse { what, .. })) if what.contains("content_block_delta")),
        "{events:?}"
    );
    assert_eq!(server.calls(), 1);
}

#[tokio::test]
async fn a_bad_request_is_typed_and_not_retried() {
    let server = MockServer::builder(Wire::Anthropic)
        .turn(Turn::text("never reached"))
        .inject(
            Fault::bad_request("messages.1: tool_use ids were found without tool_result blocks"),
            1,
        )
        .start()
        .await
        .unwrap();
    let request = Request::new("claude-sonnet-4-5", vec![Message::user("hi")]);
    let error = provider(&server, 3).complete(&request).await.unwrap_err();
    assert!(
        matches!(&error, Error::InvalidRequest { status: 400, error_type: Some(t), message, .. }
            if t == "invalid_request_error" && message.contains("without tool_result")),
        "{error:?}"
    );
    assert_eq!(server.calls(), 1);
}
