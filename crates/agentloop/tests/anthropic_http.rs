//! The Anthropic provider over real HTTP, against a small scripted server on 127.0.0.1:
//! blocking and streamed runs with tool calls in the middle, retries of 429/529, typed errors,
//! errors inside a stream, a cut connection.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use agentloop::provider::anthropic::Anthropic;
use agentloop::provider::http::{ApiKey, HttpConfig, RetryPolicy};
use agentloop::{
    Agent, ContentBlock, Error, Message, Provider, Request, RunEvent, StopReason, StreamEvent,
    Tool, Usage,
};
use axum::body::Bytes;
use common::scripted_http::{self, Reply, Script, Seen, json_reply};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Serve `replies` in order on 127.0.0.1 (any port); returns the script and the base URL
/// (the bare host, as Anthropic clients expect).
async fn serve(replies: Vec<Reply>) -> (Script, String) {
    scripted_http::serve("/v1/messages", replies).await
}

fn provider(url: &str, retry: RetryPolicy) -> Anthropic {
    let mut config = HttpConfig::new(url);
    config.api_key = Some(ApiKey::new("sk-ant-test-123"));
    config.retry = retry;
    Anthropic::new(config).unwrap()
}

fn fast_retries(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        ..RetryPolicy::default()
    }
}

/// Anthropic's error body: `{"type":"error","error":{"type","message"},"request_id"}`.
fn error_reply(
    status: u16,
    headers: Vec<(&'static str, String)>,
    kind: &str,
    message: &str,
) -> Reply {
    Reply::Full {
        status,
        headers,
        body: json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"})
            .to_string(),
    }
}

fn message(id: &str, content: Value, stop_reason: &str, usage: (u64, u64)) -> Value {
    json!({
        "id": id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
        "content": content, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": usage.0, "output_tokens": usage.1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    })
}

fn sse(name: &str, data: Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

fn sse_start(id: &str, input_tokens: u64) -> Bytes {
    sse(
        "message_start",
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "content": [],
            "model": "claude-sonnet-4-5-20250929", "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}),
    )
}

fn sse_block_start(index: usize, block: Value) -> Bytes {
    sse(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

fn sse_delta(index: usize, delta: Value) -> Bytes {
    sse(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

fn sse_block_stop(index: usize) -> Bytes {
    sse(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    )
}

fn sse_finish(stop_reason: &str, output_tokens: u64) -> Vec<Bytes> {
    vec![
        sse(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": output_tokens}}),
        ),
        sse("message_stop", json!({"type": "message_stop"})),
    ]
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
}

fn weather_agent(provider: Anthropic) -> Agent {
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
        .system("Be brief.")
        .max_tokens(512)
        .tool(tool)
        .build()
}

/// The second request carries the first turn's calls and, in ONE user message, their results.
fn assert_second_request_has_the_tool_turn(seen: &[Seen]) {
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "toolu_paris", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_rome", "name": "get_weather", "input": {"city": "Rome"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_paris", "content": "18 °C in Paris", "is_error": false},
                {"type": "tool_result", "tool_use_id": "toolu_rome", "content": "17 °C in Rome", "is_error": false}
            ]}
        ])
    );
    for request in seen {
        assert_eq!(request.header("x-api-key"), Some("sk-ant-test-123"));
        assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(request.header("authorization"), None);
        assert_eq!(request.body["model"], "claude-sonnet-4-5");
        assert_eq!(request.body["system"], "Be brief.");
        assert_eq!(request.body["max_tokens"], 512);
        assert_eq!(request.body["tools"][0]["name"], "get_weather");
    }
}

#[tokio::test]
async fn blocking_run_with_tool_calls_in_the_middle() {
    let (script, url) = serve(vec![
        json_reply(message(
            "msg_1",
            json!([
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "toolu_paris", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_rome", "name": "get_weather", "input": {"city": "Rome"}}
            ]),
            "tool_use",
            (300, 40),
        )),
        json_reply(message(
            "msg_2",
            json!([{"type": "text", "text": "Paris 18 °C, Rome 17 °C."}]),
            "end_turn",
            (380, 12),
        )),
    ])
    .await;
    let result = weather_agent(provider(&url, RetryPolicy::none()))
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
    let seen = script.seen();
    assert_eq!(
        seen[0].body.get("stream"),
        None,
        "blocking runs use the non-streamed endpoint"
    );
    assert_second_request_has_the_tool_turn(&seen);
}

#[tokio::test]
async fn streamed_run_with_tool_calls_in_the_middle() {
    let first = [
        vec![
            sse_start("msg_1", 300),
            sse_block_start(0, json!({"type": "text", "text": ""})),
            sse("ping", json!({"type": "ping"})),
            sse_delta(0, json!({"type": "text_delta", "text": "Checking both."})),
            sse_block_stop(0),
            sse_block_start(
                1,
                json!({"type": "tool_use", "id": "toolu_paris", "name": "get_weather", "input": {}}),
            ),
            sse_delta(1, json!({"type": "input_json_delta", "partial_json": ""})),
            sse_delta(
                1,
                json!({"type": "input_json_delta", "partial_json": "{\"city\": \"Pa"}),
            ),
            sse_delta(1, json!({"type": "input_json_delta", "partial_json": "ris\"}"})),
            sse_block_stop(1),
            sse_block_start(
                2,
                json!({"type": "tool_use", "id": "toolu_rome", "name": "get_weather", "input": {}}),
            ),
            sse_delta(
                2,
                json!({"type": "input_json_delta", "partial_json": "{\"city\": \"Rome\"}"}),
            ),
            sse_block_stop(2),
        ],
        sse_finish("tool_use", 40),
    ]
    .concat();
    let second = [
        vec![
            sse_start("msg_2", 380),
            sse_block_start(0, json!({"type": "text", "text": ""})),
            sse_delta(0, json!({"type": "text_delta", "text": "Paris 18 °C,"})),
            sse_delta(0, json!({"type": "text_delta", "text": " Rome 17 °C."})),
            sse_block_stop(0),
        ],
        sse_finish("end_turn", 12),
    ]
    .concat()
    .concat();
    let (script, url) = serve(vec![
        Reply::Sse(first),
        // The answer arrives split mid-event (and mid-character), as networks do.
        Reply::Sse(second.chunks(5).map(Bytes::copy_from_slice).collect()),
    ])
    .await;
    let mut stream =
        weather_agent(provider(&url, RetryPolicy::none())).run_stream("Weather in Paris and Rome?");
    let mut deltas = String::new();
    let mut starts = Vec::new();
    let mut result = None;
    while let Some(event) = stream.next().await {
        match event {
            RunEvent::Model(StreamEvent::TextDelta { text }) => deltas.push_str(&text),
            RunEvent::Model(StreamEvent::ToolCallStart { index, id, name }) => {
                starts.push((index, id, name))
            }
            RunEvent::RunFinish { result: r } => result = Some(*r),
            _ => {}
        }
    }
    let result = result.expect("the run finishes");
    assert_eq!(deltas, "Checking both.Paris 18 °C, Rome 17 °C.");
    assert_eq!(
        starts,
        [
            (0, "toolu_paris".to_owned(), "get_weather".to_owned()),
            (1, "toolu_rome".to_owned(), "get_weather".to_owned())
        ]
    );
    assert_eq!(result.text(), "Paris 18 °C, Rome 17 °C.");
    assert_eq!(result.tool_calls, 2);
    assert_eq!(
        result.usage,
        Usage {
            input_tokens: 680,
            output_tokens: 52,
            ..Usage::default()
        }
    );
    let seen = script.seen();
    assert_eq!(seen[0].body["stream"], true);
    assert_eq!(seen[1].body["stream"], true);
    assert_second_request_has_the_tool_turn(&seen);
}

#[tokio::test(start_paused = true)]
async fn overloaded_529_is_retried_up_to_the_maximum_then_typed() {
    let replies = (0..3)
        .map(|_| error_reply(529, vec![], "overloaded_error", "Overloaded"))
        .collect();
    let (script, url) = serve(replies).await;
    let anthropic = provider(&url, fast_retries(2));
    let request = Request::new("claude-sonnet-4-5", vec![Message::user("hi")]);
    let error = anthropic.complete(&request).await.unwrap_err();
    match &error {
        Error::Overloaded { provider, message } => {
            assert_eq!(provider, "anthropic");
            assert_eq!(message, "Overloaded");
        }
        other => panic!("expected Overloaded, got {other:?}"),
    }
    assert_eq!(script.seen().len(), 3, "one attempt and two retries");
}

#[tokio::test(start_paused = true)]
async fn overloaded_529_is_retried_for_streams_and_can_recover() {
    let (script, url) = serve(vec![
        error_reply(529, vec![], "overloaded_error", "Overloaded"),
        Reply::Sse(
            [
                vec![
                    sse_start("msg_ok", 5),
                    sse_block_start(0, json!({"type": "text", "text": "ok"})),
                    sse_block_stop(0),
                ],
                sse_finish("end_turn", 2),
            ]
            .concat(),
        ),
    ])
    .await;
    let events: Vec<_> = provider(&url, fast_retries(2))
        .stream(&Request::new(
            "claude-sonnet-4-5",
            vec![Message::user("hi")],
        ))
        .collect()
        .await;
    let events: Vec<StreamEvent> = events.into_iter().map(|e| e.unwrap()).collect();
    assert_eq!(
        events,
        [
            StreamEvent::MessageStart {
                id: "msg_ok".into(),
                model: "claude-sonnet-4-5-20250929".into()
            },
            StreamEvent::Usage {
                usage: Usage {
                    input_tokens: 5,
                    output_tokens: 1,
                    ..Usage::default()
                }
            },
            StreamEvent::TextDelta { text: "ok".into() },
            StreamEvent::Usage {
                usage: Usage {
                    input_tokens: 5,
                    output_tokens: 2,
                    ..Usage::default()
                }
            },
            StreamEvent::MessageStop {
                stop_reason: StopReason::EndTurn
            },
        ]
    );
    assert_eq!(script.seen().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn rate_limits_wait_the_stated_delay() {
    let (script, url) = serve(vec![
        error_reply(
            429,
            vec![("retry-after", "7".into())],
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        ),
        json_reply(message(
            "msg_1",
            json!([{"type": "text", "text": "ok"}]),
            "end_turn",
            (1, 1),
        )),
    ])
    .await;
    let response = provider(&url, RetryPolicy::default())
        .complete(&Request::new(
            "claude-sonnet-4-5",
            vec![Message::user("hi")],
        ))
        .await
        .unwrap();
    assert_eq!(response.text(), "ok");
    let seen = script.seen();
    assert_eq!(seen.len(), 2);
    let waited = seen[1].at - seen[0].at;
    assert!(
        waited >= Duration::from_secs(7) && waited < Duration::from_millis(7500),
        "waited {waited:?}"
    );
}

#[tokio::test]
async fn an_error_event_mid_stream_is_typed_and_not_retried() {
    let (script, url) = serve(vec![
        Reply::Sse(vec![
            sse_start("msg_1", 12),
            sse_block_start(0, json!({"type": "text", "text": ""})),
            sse_delta(0, json!({"type": "text_delta", "text": "Hello"})),
            Bytes::from_static(
                b"event: error\ndata: {\"type\":\"error\",\"error\":{\"details\":null,\"type\":\"overloaded_error\",\"message\":\"Overloaded\"} }\n\n",
            ),
        ]),
        // Would be served if the client retried.
        Reply::Sse(sse_finish("end_turn", 1)),
    ])
    .await;
    let events: Vec<_> = provider(&url, fast_retries(3))
        .stream(&Request::new(
            "claude-sonnet-4-5",
            vec![Message::user("hi")],
        ))
        .collect()
        .await;
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(
        events[2].as_ref().unwrap(),
        &StreamEvent::TextDelta {
            text: "Hello".into()
        }
    );
    assert!(
        matches!(&events[3], Err(Error::Overloaded { message, .. }) if message == "Overloaded"),
        "{:?}",
        events[3]
    );
    assert_eq!(script.seen().len(), 1);
}

#[tokio::test]
async fn an_error_event_fails_a_streamed_run_with_the_typed_error() {
    let (script, url) = serve(vec![Reply::Sse(vec![
        sse_start("msg_1", 12),
        sse(
            "error",
            json!({"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}),
        ),
    ])])
    .await;
    let mut stream = weather_agent(provider(&url, fast_retries(3))).run_stream("hi");
    let mut result = None;
    while let Some(event) = stream.next().await {
        if let RunEvent::RunFinish { result: r } = event {
            result = Some(*r);
        }
    }
    let result = result.expect("the run reports how it ended");
    let error = result.finished().unwrap_err();
    assert!(
        matches!(&error, Error::Stream { provider, error_type: Some(t), message }
            if provider == "anthropic" && t == "api_error" && message == "Internal server error"),
        "{error:?}"
    );
    assert_eq!(script.seen().len(), 1);
}

#[tokio::test]
async fn a_cut_connection_after_content_is_interrupted_and_not_retried() {
    let cut = Arc::new(Notify::new());
    let (script, url) = serve(vec![
        Reply::SseThenCut(
            vec![
                sse_start("msg_1", 3),
                sse_block_start(0, json!({"type": "text", "text": ""})),
                sse_delta(0, json!({"type": "text_delta", "text": "Hel"})),
            ],
            cut.clone(),
        ),
        Reply::Sse(sse_finish("end_turn", 1)),
    ])
    .await;
    let mut stream = provider(&url, fast_retries(3)).stream(&Request::new(
        "claude-sonnet-4-5",
        vec![Message::user("hi")],
    ));
    let mut seen_text = false;
    while !seen_text {
        if let StreamEvent::TextDelta { text } = stream.next().await.unwrap().unwrap() {
            assert_eq!(text, "Hel");
            seen_text = true;
        }
    }
    cut.notify_one();
    let rest: Vec<_> = stream.collect().await;
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert!(
        matches!(&rest[0], Err(Error::IncompleteStream { .. })),
        "{:?}",
        rest[0]
    );
    assert_eq!(script.seen().len(), 1);
}

#[tokio::test]
async fn a_body_that_ends_without_a_stop_is_interrupted() {
    let (_, url) = serve(vec![Reply::Sse(vec![
        sse_start("msg_1", 3),
        sse_block_start(0, json!({"type": "text", "text": ""})),
        sse_delta(0, json!({"type": "text_delta", "text": "Hel"})),
    ])])
    .await;
    let events: Vec<_> = provider(&url, RetryPolicy::none())
        .stream(&Request::new(
            "claude-sonnet-4-5",
            vec![Message::user("hi")],
        ))
        .collect()
        .await;
    assert!(
        matches!(events.last(), Some(Err(Error::IncompleteStream { .. }))),
        "{events:?}"
    );
}

#[tokio::test]
async fn client_errors_are_typed_and_not_retried() {
    let cases: [(u16, &str, &str); 4] = [
        (400, "invalid_request_error", "invalid_request"),
        (401, "authentication_error", "auth"),
        (413, "request_too_large", "invalid_request"),
        (404, "not_found_error", "invalid_request"),
    ];
    for (status, kind, expected) in cases {
        let message = format!("{kind} happened");
        let (script, url) = serve(vec![error_reply(status, vec![], kind, &message)]).await;
        let error = provider(&url, fast_retries(3))
            .complete(&Request::new(
                "claude-sonnet-4-5",
                vec![Message::user("hi")],
            ))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), expected, "{status}: {error:?}");
        assert!(error.to_string().contains(&message), "{error}");
        assert_eq!(script.seen().len(), 1, "{status} must not be retried");
    }
}

#[tokio::test]
async fn native_tools_send_their_beta_header() {
    let (script, url) = serve(vec![json_reply(message(
        "msg_1",
        json!([
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "code_execution", "input": {"code": "print(1+1)"}},
            {"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_1", "content": {"type": "code_execution_result", "stdout": "2\n", "stderr": "", "return_code": 0}},
            {"type": "text", "text": "2"}
        ]),
        "end_turn",
        (10, 5),
    ))])
    .await;
    let mut request = Request::new("claude-sonnet-4-5", vec![Message::user("1+1?")]);
    request.tools = vec![agentloop::ToolDefinition::Native(
        agentloop::provider::anthropic::tools::code_execution(Default::default()),
    )];
    let response = provider(&url, RetryPolicy::none())
        .complete(&request)
        .await
        .unwrap();
    assert_eq!(response.text(), "2");
    assert!(matches!(
        &response.content[0],
        ContentBlock::Native { provider, value } if provider == "anthropic" && value["type"] == "server_tool_use"
    ));
    let seen = script.seen();
    assert_eq!(
        seen[0].header("anthropic-beta"),
        Some("code-execution-2025-08-25")
    );
}

#[tokio::test]
async fn a_base_url_ending_in_v1_reaches_the_same_endpoint() {
    let (script, url) = serve(vec![json_reply(message(
        "msg_1",
        json!([{"type": "text", "text": "ok"}]),
        "end_turn",
        (1, 1),
    ))])
    .await;
    let anthropic = provider(&format!("{url}/v1/"), RetryPolicy::none());
    let response = anthropic
        .complete(&Request::new(
            "claude-sonnet-4-5",
            vec![Message::user("hi")],
        ))
        .await
        .unwrap();
    assert_eq!(response.text(), "ok");
    assert_eq!(script.seen().len(), 1);
}
