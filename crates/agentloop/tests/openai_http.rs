//! The OpenAI provider over real HTTP, against a small scripted server on 127.0.0.1: blocking
//! and streamed runs with a tool call in the middle, retries, typed errors, a cut stream.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use agentloop::provider::http::{ApiKey, HttpConfig, RetryPolicy};
use agentloop::provider::openai::{OpenAi, Preset};
use agentloop::stream::StreamEvent;
use agentloop::{Agent, Error, Message, Provider, Request, StopReason, Tool, Usage};
use axum::body::Bytes;
use common::scripted_http::{self, Reply, Script, Seen, json_reply};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Serve `replies` in order on 127.0.0.1 (any port); returns the script and the base URL
/// (with `/v1`, as OpenAI clients expect).
async fn serve(replies: Vec<Reply>) -> (Script, String) {
    let (script, url) = scripted_http::serve("/v1/chat/completions", replies).await;
    (script, format!("{url}/v1"))
}

fn provider(url: &str, retry: RetryPolicy) -> OpenAi {
    let mut config = HttpConfig::new(url);
    config.api_key = Some(ApiKey::new("sk-test-123"));
    config.retry = retry;
    OpenAi::new(config).unwrap()
}

fn error_reply(
    status: u16,
    headers: Vec<(&'static str, String)>,
    message: &str,
    kind: &str,
) -> Reply {
    Reply::Full {
        status,
        headers,
        body: json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
            .to_string(),
    }
}

fn completion(message: Value, finish: &str, usage: (u64, u64)) -> Value {
    json!({
        "id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}
    })
}

fn sse_chunk(delta: Value, finish: Value) -> Bytes {
    let chunk = json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    Bytes::from(format!("data: {chunk}\n\n"))
}

fn sse_usage(input: u64, output: u64) -> Bytes {
    let chunk = json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
                       "choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output}});
    Bytes::from(format!("data: {chunk}\n\n"))
}

fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct GetWeather {
    /// City name.
    city: String,
}

fn weather_agent(provider: OpenAi) -> Agent {
    let tool = Tool::function(
        "get_weather",
        "Current weather for a city",
        |args: GetWeather| async move { Ok::<_, Infallible>(format!("18 °C in {}", args.city)) },
    );
    Agent::builder(provider)
        .model("gpt-4o")
        .system("Be brief.")
        .tool(tool)
        .build()
}

/// The second request must carry the first turn's call and its result, in OpenAI's shape.
fn assert_second_request_has_the_tool_turn(seen: &[Seen], arguments: &str) {
    assert_eq!(seen.len(), 2);
    let messages = &seen[1].body["messages"];
    assert_eq!(
        messages,
        &json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 °C in Paris"}
        ])
    );
    for request in seen {
        assert_eq!(request.header("authorization"), Some("Bearer sk-test-123"));
        assert_eq!(request.body["model"], "gpt-4o");
        assert_eq!(request.body["tools"][0]["function"]["name"], "get_weather");
    }
}

#[tokio::test]
async fn blocking_run_with_a_tool_call_in_the_middle() {
    let (script, url) = serve(vec![
        json_reply(completion(
            json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
            ]}),
            "tool_calls",
            (50, 10),
        )),
        json_reply(completion(
            json!({"role": "assistant", "content": "It is 18 °C in Paris.", "refusal": null}),
            "stop",
            (80, 9),
        )),
    ])
    .await;
    let result = weather_agent(provider(&url, RetryPolicy::none()))
        .run("Weather in Paris?")
        .await
        .unwrap();
    assert_eq!(result.text(), "It is 18 °C in Paris.");
    assert_eq!(result.tool_calls, 1);
    assert_eq!(result.response.stop_reason, StopReason::EndTurn);
    assert_eq!(
        result.usage,
        Usage {
            input_tokens: 130,
            output_tokens: 19,
            ..Usage::default()
        }
    );
    let seen = script.seen();
    assert_eq!(
        seen[0].body.get("stream"),
        None,
        "blocking runs use the non-streamed endpoint"
    );
    assert_second_request_has_the_tool_turn(&seen, "{\"city\":\"Paris\"}");
}

#[tokio::test]
async fn streamed_run_with_a_tool_call_in_the_middle() {
    let (script, url) = serve(vec![
        Reply::Sse(vec![
            sse_chunk(json!({"role": "assistant", "content": null, "tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
            ]}), Value::Null),
            sse_chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}), Value::Null),
            sse_chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}), Value::Null),
            sse_chunk(json!({}), json!("tool_calls")),
            sse_usage(50, 10),
            done(),
        ]),
        // The answer arrives split mid-event, as networks do.
        Reply::Sse({
            let body = [
                sse_chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                sse_chunk(json!({"content": "It is 18 °C"}), Value::Null),
                sse_chunk(json!({"content": " in Paris."}), Value::Null),
                sse_chunk(json!({}), json!("stop")),
                sse_usage(80, 9),
                done(),
            ]
            .concat();
            body.chunks(7).map(Bytes::copy_from_slice).collect::<Vec<_>>()
        }),
    ])
    .await;
    let mut stream =
        weather_agent(provider(&url, RetryPolicy::none())).run_stream("Weather in Paris?");
    let mut deltas = String::new();
    let mut result = None;
    while let Some(event) = stream.next().await {
        match event {
            agentloop::RunEvent::Model(agentloop::StreamEvent::TextDelta { text }) => {
                deltas.push_str(&text)
            }
            agentloop::RunEvent::RunFinish { result: r } => result = Some(*r),
            _ => {}
        }
    }
    let result = result.expect("the run finishes");
    assert_eq!(deltas, "It is 18 °C in Paris.");
    assert_eq!(result.text(), "It is 18 °C in Paris.");
    assert_eq!(result.tool_calls, 1);
    assert_eq!(result.usage.total_tokens(), 149);
    let seen = script.seen();
    assert_eq!(seen[0].body["stream"], true);
    assert_eq!(
        seen[0].body["stream_options"],
        json!({"include_usage": true})
    );
    assert_second_request_has_the_tool_turn(&seen, "{\"city\":\"Paris\"}");
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Weather {
    /// Where.
    location: String,
}

/// A recorded DeepSeek stream (reasoning, then a `weather` call; see shared/conformance) through
/// a whole run with the DeepSeek preset: the next request must give the reasoning back as
/// `reasoning_content` beside the call, which DeepSeek's thinking mode requires
/// (api-docs.deepseek.com/guides/thinking_mode, "Tool Calls").
#[tokio::test]
async fn deepseek_reasoning_goes_back_with_the_tool_call() {
    let recorded = std::fs::read(common::shared_path(
        "conformance/streams/deepseek/tool-call-with-reasoning.sse",
    ))
    .unwrap();
    let (script, url) = serve(vec![
        Reply::Sse(recorded.chunks(97).map(Bytes::copy_from_slice).collect()),
        Reply::Sse(vec![
            sse_chunk(json!({"reasoning_content": "Got it."}), Value::Null),
            sse_chunk(json!({"content": "Sunny, 18 °C."}), json!("stop")),
            done(),
        ]),
    ])
    .await;
    let mut config = HttpConfig::new(url);
    config.api_key = Some(ApiKey::new("sk-test-123"));
    config.retry = RetryPolicy::none();
    let deepseek = OpenAi::from_preset(Preset::DeepSeek, config).unwrap();
    let agent =
        Agent::builder(deepseek)
            .model("deepseek-v4-flash")
            .tool(Tool::function(
                "weather",
                "Current weather",
                |args: Weather| async move {
                    Ok::<_, Infallible>(format!("Sunny in {}", args.location))
                },
            ))
            .build();
    let mut stream = agent.run_stream("Weather in San Francisco?");
    let mut result = None;
    while let Some(event) = stream.next().await {
        if let agentloop::RunEvent::RunFinish { result: r } = event {
            result = Some(*r);
        }
    }
    let result = result.expect("the run finishes");
    assert_eq!(result.text(), "Sunny, 18 °C.");
    let seen = script.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].body["messages"],
        json!([{"role": "user", "content": "Weather in San Francisco?"}])
    );
    assert_eq!(
        seen[1].body["messages"],
        json!([
            {"role": "user", "content": "Weather in San Francisco?"},
            {"role": "assistant", "content": null,
             "reasoning_content": "The user is asking for the weather in San Francisco. I need to use the weather tool to get this information. Let me invoke the weather tool with the location parameter set to \"San Francisco\".",
             "tool_calls": [{"id": "call_00_ioIn7yN9p1ZOMNpDLwd4MgAF", "type": "function",
                             "function": {"name": "weather", "arguments": "{\"location\":\"San Francisco\"}"}}]},
            {"role": "tool", "tool_call_id": "call_00_ioIn7yN9p1ZOMNpDLwd4MgAF", "content": "Sunny in San Francisco"}
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn rate_limited_requests_wait_the_stated_delay() {
    let (script, url) = serve(vec![
        error_reply(
            429,
            vec![("retry-after", "7".into())],
            "Rate limit reached",
            "requests",
        ),
        json_reply(completion(
            json!({"role": "assistant", "content": "ok"}),
            "stop",
            (1, 1),
        )),
    ])
    .await;
    let openai = provider(&url, RetryPolicy::default());
    let request = Request::new("gpt-4o", vec![Message::user("hi")]);
    let response = openai.complete(&request).await.unwrap();
    assert_eq!(response.text(), "ok");
    let seen = script.seen();
    assert_eq!(seen.len(), 2);
    let waited = seen[1].at - seen[0].at;
    assert!(
        waited >= Duration::from_secs(7) && waited < Duration::from_millis(7500),
        "waited {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn rate_limits_are_retried_for_streams_too() {
    let (script, url) = serve(vec![
        error_reply(
            429,
            vec![("retry-after-ms", "1500".into())],
            "slow down",
            "requests",
        ),
        Reply::Sse(vec![
            sse_chunk(json!({"content": "ok"}), json!("stop")),
            done(),
        ]),
    ])
    .await;
    let openai = provider(&url, RetryPolicy::default());
    let events: Vec<_> = openai
        .stream(&Request::new("gpt-4o", vec![Message::user("hi")]))
        .collect()
        .await;
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    let seen = script.seen();
    let waited = seen[1].at - seen[0].at;
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(2),
        "waited {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn server_errors_are_retried_up_to_the_maximum_then_typed() {
    let replies = (0..4)
        .map(|_| {
            error_reply(
                500,
                vec![],
                "The server had an error while processing your request.",
                "server_error",
            )
        })
        .collect();
    let (script, url) = serve(replies).await;
    let retry = RetryPolicy {
        max_retries: 3,
        ..RetryPolicy::default()
    };
    let error = provider(&url, retry)
        .complete(&Request::new("gpt-4o", vec![Message::user("hi")]))
        .await
        .unwrap_err();
    match error {
        Error::Api {
            provider,
            status,
            error_type,
            message,
        } => {
            assert_eq!(provider, "openai");
            assert_eq!(status, 500);
            assert_eq!(error_type.as_deref(), Some("server_error"));
            assert_eq!(
                message,
                "The server had an error while processing your request."
            );
        }
        other => panic!("expected an API error, got {other:?}"),
    }
    assert_eq!(script.seen().len(), 4, "one attempt and three retries");
}

#[tokio::test]
async fn bad_requests_are_not_retried() {
    let message = "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.";
    let (script, url) = serve(vec![error_reply(
        400,
        vec![],
        message,
        "invalid_request_error",
    )])
    .await;
    let events: Vec<_> = provider(&url, RetryPolicy::default())
        .stream(&Request::new("gpt-4o", vec![Message::user("hi")]))
        .collect()
        .await;
    assert_eq!(events.len(), 1);
    match &events[0] {
        Err(Error::InvalidRequest {
            status,
            error_type,
            message: got,
            ..
        }) => {
            assert_eq!(*status, 400);
            assert_eq!(error_type.as_deref(), Some("invalid_request_error"));
            assert_eq!(got, message);
        }
        other => panic!("expected an invalid-request error, got {other:?}"),
    }
    assert_eq!(script.seen().len(), 1);
}

#[tokio::test]
async fn exhausted_quota_is_not_retried() {
    let (script, url) = serve(vec![error_reply(
        429,
        vec![("retry-after", "1".into())],
        "You exceeded your current quota, please check your plan and billing details.",
        "insufficient_quota",
    )])
    .await;
    let error = provider(&url, RetryPolicy::default())
        .complete(&Request::new("gpt-4o", vec![Message::user("hi")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Api { status: 429, error_type: Some(t), .. } if t == "insufficient_quota"),
        "{error:?}"
    );
    assert_eq!(script.seen().len(), 1);
}

#[tokio::test]
async fn a_stream_cut_after_the_first_delta_is_an_error_and_not_retried() {
    let cut = Arc::new(Notify::new());
    let (script, url) = serve(vec![
        Reply::SseThenCut(
            vec![sse_chunk(json!({"content": "Hel"}), Value::Null)],
            cut.clone(),
        ),
        Reply::Sse(vec![
            sse_chunk(json!({"content": "never"}), json!("stop")),
            done(),
        ]),
    ])
    .await;
    let mut stream = provider(&url, RetryPolicy::default())
        .stream(&Request::new("gpt-4o", vec![Message::user("hi")]));
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        StreamEvent::MessageStart {
            id: "chatcmpl-s".into(),
            model: "gpt-4o".into()
        }
    );
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        StreamEvent::TextDelta { text: "Hel".into() }
    );
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

/// The transport's idle timeout counts from the last chunk: chunks 100 ms apart pass it while
/// its timer fires and re-arms, and the stall after them ends the stream a second after the
/// last chunk. Real time: loopback I/O does not advance paused time.
#[tokio::test]
async fn the_idle_timeout_counts_from_the_last_chunk() {
    let pieces: Vec<Bytes> = ["a", "b", "c", "d", "e", "f", "g", "h"]
        .into_iter()
        .map(|text| sse_chunk(json!({ "content": text }), Value::Null))
        .collect();
    let (_, url) = serve(vec![Reply::SseThenStall(
        pieces,
        Duration::from_millis(100),
    )])
    .await;
    let mut config = HttpConfig::new(&url);
    config.api_key = Some(ApiKey::new("sk-test-123"));
    config.idle_timeout = Duration::from_secs(1);
    let provider = OpenAi::new(config).unwrap();
    let started = Instant::now();
    let stream = provider.stream(&Request::new("gpt-4o", vec![Message::user("hi")]));
    let events: Vec<_> = tokio::time::timeout(Duration::from_secs(30), stream.collect())
        .await
        .expect("the idle timeout never fired");
    let elapsed = started.elapsed();
    let (last, events) = events.split_last().unwrap();
    let text: String = events
        .iter()
        .filter_map(|event| match event {
            Ok(StreamEvent::TextDelta { text }) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "abcdefgh");
    assert!(
        matches!(
            last,
            Err(Error::Timeout {
                kind: agentloop::TimeoutKind::Idle,
                after
            }) if *after == Duration::from_secs(1)
        ),
        "{last:?}"
    );
    // 8 chunks take 0.8 s; the timeout comes a second after the last of them.
    assert!(elapsed >= Duration::from_millis(1800), "{elapsed:?}");
}

#[tokio::test]
async fn an_in_stream_error_after_content_is_a_stream_error() {
    let (script, url) = serve(vec![Reply::Sse(vec![
        sse_chunk(json!({"content": "Hel"}), Value::Null),
        Bytes::from(format!(
            "event: error\ndata: {}\n\n",
            json!({"error": {"message": "The server is overloaded", "type": "server_error"}})
        )),
    ])])
    .await;
    let events: Vec<_> = provider(&url, RetryPolicy::default())
        .stream(&Request::new("gpt-4o", vec![Message::user("hi")]))
        .collect()
        .await;
    assert!(
        matches!(events.last(), Some(Err(Error::Stream { error_type: Some(t), message, .. }))
            if t == "server_error" && message == "The server is overloaded"),
        "{events:?}"
    );
    assert_eq!(script.seen().len(), 1);
}

#[tokio::test]
async fn complete_maps_a_non_streamed_answer() {
    let (script, url) = serve(vec![json_reply(json!({
        "id": "chatcmpl-r", "object": "chat.completion", "created": 1, "model": "deepseek-reasoner",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant",
            "reasoning_content": "Need the weather.",
            "content": "Checking.",
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "now", "arguments": ""}}
            ]
        }}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 12, "prompt_tokens_details": {"cached_tokens": 16}}
    }))])
    .await;
    let mut config = HttpConfig::new(url);
    config.retry = RetryPolicy::none();
    let deepseek = OpenAi::from_preset(Preset::Compatible, config).unwrap();
    let mut request = Request::new("deepseek-reasoner", vec![Message::user("Weather in Oslo?")]);
    request.max_tokens = Some(100);
    let response = deepseek.complete(&request).await.unwrap();
    assert_eq!(
        response,
        agentloop::Response {
            id: "chatcmpl-r".into(),
            model: "deepseek-reasoner".into(),
            content: vec![
                agentloop::ContentBlock::Thinking {
                    thinking: "Need the weather.".into(),
                    signature: None,
                    provider: Some("openai-compatible".into()),
                },
                agentloop::ContentBlock::text("Checking."),
                agentloop::ContentBlock::ToolUse {
                    id: "call_a".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Oslo"})
                },
                agentloop::ContentBlock::ToolUse {
                    id: "call_b".into(),
                    name: "now".into(),
                    input: json!({})
                },
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 30,
                output_tokens: 12,
                cache_read_tokens: 16,
                cache_write_tokens: 0,
                reasoning_tokens: 0
            },
        }
    );
    let seen = script.seen();
    assert_eq!(
        seen[0].header("authorization"),
        None,
        "no key configured, no header"
    );
    assert_eq!(seen[0].body["max_tokens"], 100);
}
