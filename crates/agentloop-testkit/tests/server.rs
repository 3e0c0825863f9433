//! The wire-level mock servers, exercised over real HTTP with reqwest.
//!
//! Expected bodies are written out byte for byte. Their shapes follow the recordings in
//! `shared/conformance/streams/` beside the repository (openai/text-basic.sse, openai/parallel-tool-calls-2.sse,
//! anthropic/text-with-ping.sse, anthropic/text-then-tool-use.sse,
//! anthropic/error-overloaded-midstream.ASSEMBLED.sse) and OpenAI's OpenAPI spec v2.3.0.

use std::sync::LazyLock;
use std::time::Duration;

use agentloop::Error;
use agentloop::sse::SseParser;
use agentloop_testkit::server::serve_prerendered_on;
use agentloop_testkit::{Fault, MockServer, Turn, Wire, WriteMode};
use bytes::Bytes;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// helpers

/// One client for all tests (building one loads the system's certificates, which is slow).
/// Without idle pooling no connection outlives the test runtime that opened it.
fn client() -> reqwest::Client {
    static CLIENT: LazyLock<reqwest::Client> = LazyLock::new(|| {
        reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .build()
            .expect("reqwest client")
    });
    CLIENT.clone()
}

fn user_request(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "max_tokens": 100,
        "stream": stream,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    })
}

fn openai_request(stream: bool, include_usage: bool) -> Value {
    let mut body = user_request("gpt-4o", stream);
    if include_usage {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

fn anthropic_request(stream: bool) -> Value {
    user_request("claude-sonnet-4-5", stream)
}

async fn post(url: &str, body: &Value) -> reqwest::Response {
    client()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("the server answers")
}

/// The body as the network delivered it: the chunks, and whether it ended in an error.
struct Received {
    chunks: Vec<Bytes>,
    cut: bool,
}

impl Received {
    fn bytes(&self) -> Vec<u8> {
        self.chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    fn text(&self) -> String {
        String::from_utf8(self.bytes()).expect("utf-8 body")
    }
}

async fn receive(mut response: reqwest::Response) -> Received {
    let mut chunks = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => chunks.push(chunk),
            Ok(None) => return Received { chunks, cut: false },
            Err(_) => return Received { chunks, cut: true },
        }
    }
}

/// One call to a fresh server playing `turn`: status, headers and the received body.
async fn play(
    wire: Wire,
    turn: Turn,
    request: &Value,
) -> (reqwest::StatusCode, reqwest::header::HeaderMap, Received) {
    let server = MockServer::start(wire, [turn])
        .await
        .expect("server starts");
    let response = post(&server.endpoint_url(), request).await;
    let status = response.status();
    let headers = response.headers().clone();
    (status, headers, receive(response).await)
}

async fn play_text(wire: Wire, turn: Turn, request: &Value) -> String {
    let (status, _, received) = play(wire, turn, request).await;
    assert_eq!(status, 200);
    assert!(!received.cut, "the body was cut");
    received.text()
}

/// SSE events as `(event, data)`, parsed by agentloop's parser fed one byte at a time.
fn sse_events(body: &[u8]) -> Vec<(String, String)> {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    for byte in body.chunks(1) {
        parser.feed(byte, |e| {
            events.push((e.event.to_owned(), e.data.into_owned()))
        });
    }
    parser.finish(|e| events.push((e.event.to_owned(), e.data.into_owned())));
    events
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn two_calls() -> Turn {
    Turn::tool_calls([
        ("get_weather", json!({"city": "Paris"})),
        ("get_time", json!({"tz": "CET"})),
    ])
}

/// The start of every OpenAI chunk of response 0 for model gpt-4o.
const OPENAI_CHUNK: &str = r#"data: {"id":"chatcmpl-mock-0","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o","choices":"#;

fn openai_delta(delta: &str, finish: &str) -> String {
    format!(
        "{OPENAI_CHUNK}[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n"
    )
}

fn anthropic_event(name: &str, data: &str) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn anthropic_delta(index: usize, delta: &str) -> String {
    anthropic_event(
        "content_block_delta",
        &format!(r#"{{"type":"content_block_delta","index":{index},"delta":{delta}}}"#),
    )
}

// ---------------------------------------------------------------------------------------------
// OpenAI shapes

#[tokio::test]
async fn openai_streams_a_text_turn_with_usage_byte_for_byte() {
    let (status, headers, received) = play(
        Wire::OpenAi,
        Turn::text("Hello there"),
        &openai_request(true, true),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    let expected = [
        openai_delta(r#"{"role":"assistant","content":""}"#, "null"),
        openai_delta(r#"{"content":"Hell"}"#, "null"),
        openai_delta(r#"{"content":"o th"}"#, "null"),
        openai_delta(r#"{"content":"ere"}"#, "null"),
        openai_delta("{}", r#""stop""#),
        format!(
            "{OPENAI_CHUNK}[],\"usage\":{{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15}}}}\n\n"
        ),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    assert_eq!(received.text(), expected);
    // One write per SSE event, and the client sees them as separate chunks.
    assert!(
        received.chunks.len() >= 7,
        "{} chunks",
        received.chunks.len()
    );
}

#[tokio::test]
async fn openai_streams_two_parallel_tool_calls_byte_for_byte_without_usage() {
    let body = play_text(Wire::OpenAi, two_calls(), &openai_request(true, false)).await;
    let start = |index: usize, id: &str, name: &str| {
        openai_delta(
            &format!(
                r#"{{"tool_calls":[{{"index":{index},"id":"{id}","type":"function","function":{{"name":"{name}","arguments":""}}}}]}}"#
            ),
            "null",
        )
    };
    let fragment = |index: usize, arguments: &str| {
        openai_delta(
            &format!(
                r#"{{"tool_calls":[{{"index":{index},"function":{{"arguments":"{arguments}"}}}}]}}"#
            ),
            "null",
        )
    };
    let expected = [
        openai_delta(r#"{"role":"assistant","content":null}"#, "null"),
        start(0, "call_0_0", "get_weather"),
        fragment(0, r#"{\"ci"#),
        fragment(0, r#"ty\":"#),
        fragment(0, r#"\"Par"#),
        fragment(0, r#"is\"}"#),
        start(1, "call_0_1", "get_time"),
        fragment(1, r#"{\"t"#),
        fragment(1, r#"z\":"#),
        fragment(1, r#"\"CE"#),
        fragment(1, r#"T\"}"#),
        openai_delta("{}", r#""tool_calls""#),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    assert_eq!(body, expected);
}

#[tokio::test]
async fn openai_answers_a_text_turn_without_streaming() {
    let (status, headers, received) = play(
        Wire::OpenAi,
        Turn::text("Hello there").with_usage(12, 3),
        &openai_request(false, false),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    assert_eq!(
        received.text(),
        r#"{"id":"chatcmpl-mock-0","object":"chat.completion","created":1735689600,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#
    );
}

#[tokio::test]
async fn openai_answers_two_tool_calls_without_streaming() {
    let body = play_text(Wire::OpenAi, two_calls(), &openai_request(false, false)).await;
    let body: Value = serde_json::from_str(&body).expect("JSON body");
    assert_eq!(
        body,
        json!({
            "id": "chatcmpl-mock-0",
            "object": "chat.completion",
            "created": 1735689600,
            "model": "gpt-4o",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [
                        {"id": "call_0_0", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                        {"id": "call_0_1", "type": "function",
                         "function": {"name": "get_time", "arguments": "{\"tz\":\"CET\"}"}},
                    ],
                    "refusal": null,
                },
                "logprobs": null,
                "finish_reason": "tool_calls",
            }],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })
    );
}

#[tokio::test]
async fn openai_sends_reasoning_as_reasoning_content() {
    let turn = Turn::text("42").with_thinking("Let me think", Some("sig"));
    let body = play_text(Wire::OpenAi, turn.clone(), &openai_request(true, false)).await;
    let reasoning: String = sse_events(body.as_bytes())
        .iter()
        .filter_map(|(_, data)| serde_json::from_str::<Value>(data).ok())
        .filter_map(|chunk| {
            chunk["choices"][0]["delta"]["reasoning_content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(reasoning, "Let me think");

    let body = play_text(Wire::OpenAi, turn, &openai_request(false, false)).await;
    let body: Value = serde_json::from_str(&body).expect("JSON body");
    assert_eq!(
        body["choices"][0]["message"]["reasoning_content"],
        "Let me think"
    );
    assert_eq!(body["choices"][0]["message"]["content"], "42");
}

#[tokio::test]
async fn openai_finish_reasons_follow_the_stop_reason() {
    let turn = Turn::text("cut").with_stop_reason(agentloop::StopReason::MaxTokens);
    let body = play_text(Wire::OpenAi, turn, &openai_request(false, false)).await;
    let body: Value = serde_json::from_str(&body).expect("JSON body");
    assert_eq!(body["choices"][0]["finish_reason"], "length");
}

// ---------------------------------------------------------------------------------------------
// Anthropic shapes

const ANTHROPIC_START: &str = r#"{"type":"message_start","message":{"id":"msg_mock_0","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}"#;

#[tokio::test]
async fn anthropic_streams_a_text_turn_byte_for_byte() {
    let (status, headers, received) = play(
        Wire::Anthropic,
        Turn::text("Hello there"),
        &anthropic_request(true),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    let expected = [
        anthropic_event("message_start", ANTHROPIC_START),
        anthropic_event(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        anthropic_event("ping", r#"{"type":"ping"}"#),
        anthropic_delta(0, r#"{"type":"text_delta","text":"Hell"}"#),
        anthropic_delta(0, r#"{"type":"text_delta","text":"o th"}"#),
        anthropic_delta(0, r#"{"type":"text_delta","text":"ere"}"#),
        anthropic_event(
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        ),
        anthropic_event(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}"#,
        ),
        anthropic_event("message_stop", r#"{"type":"message_stop"}"#),
    ]
    .concat();
    assert_eq!(received.text(), expected);
    assert!(
        received.chunks.len() >= 9,
        "{} chunks",
        received.chunks.len()
    );
}

#[tokio::test]
async fn anthropic_streams_two_parallel_tool_calls_byte_for_byte() {
    let body = play_text(Wire::Anthropic, two_calls(), &anthropic_request(true)).await;
    let start = |index: usize, id: &str, name: &str| {
        anthropic_event(
            "content_block_start",
            &format!(
                r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"tool_use","id":"{id}","name":"{name}","input":{{}}}}}}"#
            ),
        )
    };
    let json_delta = |index: usize, partial: &str| {
        anthropic_delta(
            index,
            &format!(r#"{{"type":"input_json_delta","partial_json":"{partial}"}}"#),
        )
    };
    let stop = |index: usize| {
        anthropic_event(
            "content_block_stop",
            &format!(r#"{{"type":"content_block_stop","index":{index}}}"#),
        )
    };
    let expected = [
        anthropic_event("message_start", ANTHROPIC_START),
        start(0, "call_0_0", "get_weather"),
        anthropic_event("ping", r#"{"type":"ping"}"#),
        json_delta(0, ""),
        json_delta(0, r#"{\"ci"#),
        json_delta(0, r#"ty\":"#),
        json_delta(0, r#"\"Par"#),
        json_delta(0, r#"is\"}"#),
        stop(0),
        start(1, "call_0_1", "get_time"),
        json_delta(1, ""),
        json_delta(1, r#"{\"t"#),
        json_delta(1, r#"z\":"#),
        json_delta(1, r#"\"CE"#),
        json_delta(1, r#"T\"}"#),
        stop(1),
        anthropic_event(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":5}}"#,
        ),
        anthropic_event("message_stop", r#"{"type":"message_stop"}"#),
    ]
    .concat();
    assert_eq!(body, expected);
}

#[tokio::test]
async fn anthropic_answers_without_streaming() {
    let body = play_text(
        Wire::Anthropic,
        Turn::text("Hello there"),
        &anthropic_request(false),
    )
    .await;
    assert_eq!(
        body,
        r#"{"id":"msg_mock_0","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello there"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":5}}"#
    );

    let turn = two_calls().with_thinking("Two tools", Some("sig-1"));
    let body = play_text(Wire::Anthropic, turn, &anthropic_request(false)).await;
    let body: Value = serde_json::from_str(&body).expect("JSON body");
    assert_eq!(
        body["content"],
        json!([
            {"type": "thinking", "thinking": "Two tools", "signature": "sig-1"},
            {"type": "tool_use", "id": "call_0_0", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_0_1", "name": "get_time", "input": {"tz": "CET"}},
        ])
    );
    assert_eq!(body["stop_reason"], "tool_use");
}

#[tokio::test]
async fn anthropic_streams_thinking_with_its_signature() {
    let turn = Turn::text("42").with_thinking("Let me think", Some("c2lnbmF0dXJl"));
    let body = play_text(Wire::Anthropic, turn, &anthropic_request(true)).await;
    let events = sse_events(body.as_bytes());
    let data: Vec<Value> = events
        .iter()
        .map(|(_, d)| serde_json::from_str(d).expect("JSON event"))
        .collect();
    assert_eq!(
        data[1],
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
    );
    assert_eq!(
        data[3..6],
        [
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "thinking_delta", "thinking": "Let me"}}),
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "thinking_delta", "thinking": " think"}}),
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "signature_delta", "signature": "c2lnbmF0dXJl"}}),
        ]
    );
    assert_eq!(
        data[7],
        json!({"type": "content_block_start", "index": 1,
               "content_block": {"type": "text", "text": ""}})
    );
}

// ---------------------------------------------------------------------------------------------
// well-formedness

/// Replays an OpenAI stream: the text, reasoning and each call's `(id, name, arguments)`.
fn replay_openai(body: &[u8]) -> (String, Vec<(String, String, String)>, String, bool) {
    let mut text = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut finish = String::new();
    let mut done = false;
    for (event, data) in sse_events(body) {
        assert_eq!(event, "", "OpenAI streams name no events");
        assert!(!done, "nothing may follow [DONE]");
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(&data).expect("every chunk is JSON");
        assert_eq!(chunk["object"], "chat.completion.chunk");
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        text.push_str(delta["content"].as_str().unwrap_or_default());
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().expect("index") as usize;
            if index == calls.len() {
                calls.push(Default::default());
            }
            let entry = &mut calls[index];
            if let Some(id) = call["id"].as_str() {
                entry.0 = id.to_owned();
            }
            if let Some(name) = call["function"]["name"].as_str() {
                entry.1 = name.to_owned();
            }
            entry
                .2
                .push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            finish = reason.to_owned();
        }
    }
    (text, calls, finish, done)
}

/// Replays an Anthropic stream: each block's text, reasoning or `name(arguments)`.
fn replay_anthropic(body: &[u8]) -> (Vec<String>, String) {
    let mut blocks: Vec<String> = Vec::new();
    let mut stop = String::new();
    for (event, data) in sse_events(body) {
        let data: Value = serde_json::from_str(&data).expect("every event is JSON");
        assert_eq!(data["type"], event.as_str(), "event name matches its type");
        match event.as_str() {
            "content_block_start" => {
                let block = &data["content_block"];
                blocks.push(match block["type"].as_str() {
                    Some("tool_use") => format!("{}:", block["name"].as_str().unwrap_or_default()),
                    _ => String::new(),
                });
            }
            "content_block_delta" => {
                let index = data["index"].as_u64().expect("index") as usize;
                let delta = &data["delta"];
                let piece = ["text", "thinking", "partial_json"]
                    .iter()
                    .find_map(|k| delta[*k].as_str())
                    .unwrap_or_default();
                blocks[index].push_str(piece);
            }
            "message_delta" => {
                stop = data["delta"]["stop_reason"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
            }
            _ => {}
        }
    }
    (blocks, stop)
}

#[tokio::test]
async fn openai_streams_parse_back_into_the_turn() {
    let turn = Turn::text("Checking the weather ")
        .then_tool_call("get_weather", json!({"city": "Paris", "units": "°C"}))
        .then_tool_call("no_args", json!({}));
    let body = play_text(Wire::OpenAi, turn, &openai_request(true, true)).await;
    let (text, calls, finish, done) = replay_openai(body.as_bytes());
    assert_eq!(text, "Checking the weather ");
    assert_eq!(
        calls,
        [
            (
                "call_0_0".into(),
                "get_weather".into(),
                r#"{"city":"Paris","units":"°C"}"#.into()
            ),
            ("call_0_1".into(), "no_args".into(), "{}".into()),
        ]
    );
    assert_eq!(finish, "tool_calls");
    assert!(done);
}

#[tokio::test]
async fn anthropic_streams_parse_back_into_the_turn() {
    let turn = Turn::text("Checking ")
        .then_tool_call("get_weather", json!({"city": "Paris", "units": "°C"}))
        .with_thinking("Weather question.", Some("sig"));
    let body = play_text(Wire::Anthropic, turn, &anthropic_request(true)).await;
    let (blocks, stop) = replay_anthropic(body.as_bytes());
    assert_eq!(
        blocks,
        [
            "Weather question.",
            "Checking ",
            r#"get_weather:{"city":"Paris","units":"°C"}"#
        ]
    );
    assert_eq!(stop, "tool_use");
}

/// OpenAI's schemas with OpenAPI's `nullable: true` turned into JSON Schema's `null` type, so
/// a validator reads them as OpenAI means them.
fn openai_validator(root: &str) -> jsonschema::Validator {
    fn fix_nullable(value: &mut Value) {
        match value {
            Value::Object(map) => {
                if map.remove("nullable") == Some(Value::Bool(true)) {
                    if let Some(Value::String(t)) = map.get("type").cloned() {
                        map.insert("type".into(), json!([t, "null"]));
                    }
                    if let Some(Value::Array(options)) = map.get_mut("enum") {
                        options.push(Value::Null);
                    }
                }
                map.values_mut().for_each(fix_nullable);
            }
            Value::Array(items) => items.iter_mut().for_each(fix_nullable),
            _ => {}
        }
    }
    let fixture = include_str!("fixtures/openai-chat-completion-schemas.json");
    let mut spec: Value = serde_json::from_str(fixture).expect("fixture is JSON");
    fix_nullable(&mut spec);
    let schema = json!({
        "$ref": format!("#/components/schemas/{root}"),
        "components": spec["components"],
    });
    jsonschema::validator_for(&schema).expect("the spec's schemas compile")
}

fn assert_valid(validator: &jsonschema::Validator, instance: &Value) {
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{instance} breaks the spec: {errors:?}");
}

#[tokio::test]
async fn openai_bodies_and_chunks_match_the_openapi_spec() {
    let turn = Turn::text("Let me check.")
        .then_tool_call("get_weather", json!({"city": "Paris"}))
        .with_thinking("hmm", None);
    let chunks = openai_validator("CreateChatCompletionStreamResponse");
    let body = play_text(Wire::OpenAi, turn.clone(), &openai_request(true, true)).await;
    let events = sse_events(body.as_bytes());
    // role, 2 reasoning, 3 text, a call start and 4 fragments, finish, usage, [DONE].
    assert_eq!(events.len(), 14);
    for (_, data) in &events[..events.len() - 1] {
        assert_valid(&chunks, &serde_json::from_str(data).expect("JSON chunk"));
    }

    let completion = openai_validator("CreateChatCompletionResponse");
    let body = play_text(Wire::OpenAi, turn, &openai_request(false, false)).await;
    assert_valid(
        &completion,
        &serde_json::from_str(&body).expect("JSON body"),
    );

    let errors = openai_validator("ErrorResponse");
    for fault in [
        Fault::rate_limited(1),
        Fault::ServerError,
        Fault::Overloaded,
        Fault::bad_request("no"),
    ] {
        let (_, _, received) = play(
            Wire::OpenAi,
            Turn::fault(fault),
            &openai_request(false, false),
        )
        .await;
        assert_valid(
            &errors,
            &serde_json::from_slice(&received.bytes()).expect("JSON error"),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// errors and faults

#[tokio::test]
async fn rate_limit_answers_429_with_retry_headers_in_each_wire_shape() {
    let fault = Fault::RateLimited {
        retry_after_secs: Some(2),
        retry_after_ms: Some(1500),
    };
    let (status, headers, received) = play(
        Wire::Anthropic,
        Turn::fault(fault.clone()),
        &anthropic_request(true),
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(header(&headers, "retry-after"), Some("2"));
    assert_eq!(header(&headers, "retry-after-ms"), Some("1500"));
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    assert_eq!(
        received.text(),
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"Rate limit reached (injected by the mock server)."}}"#
    );

    let (status, headers, received) = play(
        Wire::OpenAi,
        Turn::fault(Fault::rate_limited_ms(250)),
        &openai_request(true, false),
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(header(&headers, "retry-after"), None);
    assert_eq!(header(&headers, "retry-after-ms"), Some("250"));
    assert_eq!(
        received.text(),
        r#"{"error":{"message":"Rate limit reached (injected by the mock server).","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#
    );
}

#[tokio::test]
async fn server_error_overload_and_bad_request_use_each_wire_status_and_body() {
    let cases = [
        (
            Wire::Anthropic,
            Fault::ServerError,
            500,
            r#"{"type":"error","error":{"type":"api_error","message":"Internal server error (injected by the mock server)."}}"#,
        ),
        (
            Wire::OpenAi,
            Fault::ServerError,
            500,
            r#"{"error":{"message":"Internal server error (injected by the mock server).","type":"server_error","param":null,"code":null}}"#,
        ),
        (
            Wire::Anthropic,
            Fault::Overloaded,
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        (
            Wire::OpenAi,
            Fault::Overloaded,
            503,
            r#"{"error":{"message":"Overloaded","type":"server_error","param":null,"code":null}}"#,
        ),
        (
            Wire::Anthropic,
            Fault::bad_request("messages: roles must alternate"),
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}"#,
        ),
        (
            Wire::OpenAi,
            Fault::bad_request("Invalid schema for function 'f'"),
            400,
            r#"{"error":{"message":"Invalid schema for function 'f'","type":"invalid_request_error","param":null,"code":null}}"#,
        ),
        (
            Wire::Anthropic,
            Fault::Status {
                status: 413,
                error_type: "request_too_large".into(),
                message: "Request exceeds the maximum size".into(),
            },
            413,
            r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}"#,
        ),
    ];
    for (wire, fault, status, body) in cases {
        let request = user_request("m", true);
        let (got_status, _, received) = play(wire, Turn::fault(fault.clone()), &request).await;
        assert_eq!(got_status, status, "{wire:?} {fault:?}");
        assert_eq!(received.text(), body, "{wire:?} {fault:?}");
    }
}

#[tokio::test]
async fn scripted_errors_map_to_statuses_headers_and_events() {
    let rate_limited = Error::RateLimited {
        provider: "anthropic".into(),
        retry_after: Some(Duration::from_millis(1500)),
        message: "slow down".into(),
    };
    let (status, headers, received) = play(
        Wire::Anthropic,
        Turn::error(rate_limited),
        &anthropic_request(false),
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(header(&headers, "retry-after"), Some("2"), "rounded up");
    assert_eq!(header(&headers, "retry-after-ms"), Some("1500"));
    assert_eq!(
        received.text(),
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#
    );

    let auth = Error::Auth {
        provider: "openai".into(),
        status: 401,
        message: "Incorrect API key provided".into(),
    };
    let (status, _, received) = play(
        Wire::OpenAi,
        Turn::error(auth),
        &openai_request(true, false),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(
        received.text(),
        r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#
    );

    let in_stream = Error::Stream {
        provider: "anthropic".into(),
        error_type: Some("api_error".into()),
        message: "boom".into(),
    };
    let turn = Turn::text("Hello there").fail_after(2, in_stream);
    let body = play_text(Wire::Anthropic, turn, &anthropic_request(true)).await;
    let events = sse_events(body.as_bytes());
    assert_eq!(events.len(), 3);
    assert_eq!(events[0].0, "message_start");
    assert_eq!(events[1].0, "content_block_start");
    assert_eq!(
        events[2],
        (
            "error".to_owned(),
            r#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#.to_owned()
        )
    );

    let in_stream = Error::Stream {
        provider: "openai".into(),
        error_type: None,
        message: "boom".into(),
    };
    let turn = Turn::text("Hello there").fail_after(2, in_stream);
    let (status, _, received) = play(Wire::OpenAi, turn, &openai_request(false, false)).await;
    assert_eq!(
        status, 500,
        "a non-streamed answer fails with the status instead"
    );
    assert_eq!(
        received.text(),
        r#"{"error":{"message":"boom","type":"server_error","param":null,"code":null}}"#
    );

    let interrupted = Error::IncompleteStream {
        message: "reset".into(),
    };
    let (status, _, received) = play(
        Wire::OpenAi,
        Turn::error(interrupted),
        &openai_request(true, false),
    )
    .await;
    assert_eq!(status, 200);
    assert!(received.cut, "the connection drops after the headers");
    assert!(received.bytes().is_empty());

    let interrupted = Error::IncompleteStream {
        message: "reset".into(),
    };
    let full = play_text(
        Wire::Anthropic,
        Turn::text("Hello there"),
        &anthropic_request(false),
    )
    .await;
    let turn = Turn::text("Hello there").fail_after(3, interrupted);
    let (status, _, received) = play(Wire::Anthropic, turn, &anthropic_request(false)).await;
    assert_eq!(status, 200);
    assert!(received.cut, "the connection drops half-way");
    assert_eq!(received.bytes(), full.as_bytes()[..full.len() / 2]);
}

#[tokio::test]
async fn error_event_mid_stream_ends_each_wire_with_its_error() {
    let turn = Turn::text("Hello there").with_fault(Fault::ErrorEvent { after_events: 3 });
    let body = play_text(Wire::OpenAi, turn.clone(), &openai_request(true, false)).await;
    let expected = [
        openai_delta(r#"{"role":"assistant","content":""}"#, "null"),
        openai_delta(r#"{"content":"Hell"}"#, "null"),
        openai_delta(r#"{"content":"o th"}"#, "null"),
        r#"data: {"error":{"message":"Overloaded","type":"server_error","param":null,"code":null}}"#
            .to_owned() + "\n\n",
    ]
    .concat();
    assert_eq!(body, expected, "no [DONE] after the error");

    let body = play_text(Wire::Anthropic, turn, &anthropic_request(true)).await;
    let events = sse_events(body.as_bytes());
    assert_eq!(events.len(), 4);
    // As conformance/streams/anthropic/error-overloaded-midstream.ASSEMBLED.sse.
    assert_eq!(
        events[3],
        (
            "error".to_owned(),
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
                .to_owned()
        )
    );
}

#[tokio::test]
async fn malformed_chunk_is_inserted_and_the_stream_goes_on() {
    let turn = Turn::text("Hello there").with_fault(Fault::MalformedChunk { after_events: 2 });
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let request = user_request("m", true);
        let clean = play_text(wire, Turn::text("Hello there"), &request).await;
        let body = play_text(wire, turn.clone(), &request).await;
        let clean = sse_events(clean.as_bytes());
        let events = sse_events(body.as_bytes());
        assert_eq!(events.len(), clean.len() + 1, "{wire:?}");
        assert!(
            serde_json::from_str::<Value>(&events[2].1).is_err(),
            "{wire:?}: {}",
            events[2].1
        );
        assert_eq!(events[..2], clean[..2], "{wire:?}");
        assert_eq!(events[3..], clean[2..], "{wire:?}");
    }

    let (status, _, received) = play(
        Wire::Anthropic,
        Turn::text("Hello there").with_fault(Fault::MalformedChunk { after_events: 0 }),
        &anthropic_request(false),
    )
    .await;
    assert_eq!(status, 200);
    assert!(serde_json::from_slice::<Value>(&received.bytes()).is_err());
}

#[tokio::test]
async fn disconnect_cuts_the_body_after_exactly_n_bytes() {
    for (wire, stream) in [
        (Wire::OpenAi, true),
        (Wire::Anthropic, true),
        (Wire::Anthropic, false),
    ] {
        let request = user_request("m", stream);
        let full = play_text(wire, Turn::text("Hello there"), &request).await;
        let turn = Turn::text("Hello there").with_fault(Fault::Disconnect { after_bytes: 100 });
        let (status, _, received) = play(wire, turn, &request).await;
        assert_eq!(status, 200);
        assert!(received.cut, "{wire:?}: the body ends in an error");
        assert_eq!(received.bytes(), full.as_bytes()[..100], "{wire:?}");
    }
}

#[tokio::test]
async fn one_byte_writes_arrive_one_byte_per_chunk() {
    let request = anthropic_request(true);
    let full = play_text(Wire::Anthropic, two_calls(), &request).await;
    let (status, _, received) = play(
        Wire::Anthropic,
        two_calls().with_fault(Fault::OneByteWrites),
        &request,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(received.text(), full);
    assert_eq!(received.chunks.len(), full.len());
    assert!(received.chunks.iter().all(|c| c.len() == 1));
}

#[tokio::test]
async fn whole_body_mode_sends_one_piece_with_a_content_length() {
    let server = MockServer::builder(Wire::OpenAi)
        .turn(Turn::text("Hello there"))
        .write_mode(WriteMode::WholeBody)
        .start()
        .await
        .expect("server starts");
    let response = post(&server.endpoint_url(), &openai_request(true, true)).await;
    let length = response.content_length();
    let body = receive(response).await.text();
    let per_event = play_text(
        Wire::OpenAi,
        Turn::text("Hello there"),
        &openai_request(true, true),
    )
    .await;
    assert_eq!(body, per_event);
    assert_eq!(length, Some(body.len() as u64));
}

#[tokio::test(start_paused = true)]
async fn slow_chunks_wait_between_writes_in_tokio_time() {
    let turn = Turn::text("Hello there").with_fault(Fault::SlowChunks(Duration::from_secs(2)));
    let server = MockServer::start(Wire::OpenAi, [turn])
        .await
        .expect("server starts");
    let start = tokio::time::Instant::now();
    let response = post(&server.endpoint_url(), &openai_request(true, true)).await;
    assert_eq!(start.elapsed(), Duration::ZERO, "headers come at once");
    let received = receive(response).await;
    // 7 events, one write each: 6 waits between them.
    assert_eq!(start.elapsed(), Duration::from_secs(12));
    assert_eq!(sse_events(&received.bytes()).len(), 7);
}

#[tokio::test(start_paused = true)]
async fn delays_hold_the_answer_and_chunk_delays_space_the_events() {
    let turn = Turn::text("Hello there")
        .with_delay(Duration::from_secs(5))
        .with_chunk_delay(Duration::from_millis(100));
    let server = MockServer::builder(Wire::Anthropic)
        .turn(turn)
        .inject(Fault::Delay(Duration::from_secs(1)), 1)
        .start()
        .await
        .expect("server starts");
    let start = tokio::time::Instant::now();
    let response = post(&server.endpoint_url(), &anthropic_request(true)).await;
    assert_eq!(start.elapsed(), Duration::from_secs(6));
    receive(response).await;
    // 9 events: 8 waits of 100 ms.
    assert_eq!(start.elapsed(), Duration::from_millis(6800));
}

// ---------------------------------------------------------------------------------------------
// script, recording, injection

#[tokio::test]
async fn requests_are_recorded_with_method_path_headers_and_body() {
    let server = MockServer::start(Wire::Anthropic, [Turn::text("a"), Turn::text("b")])
        .await
        .expect("server starts");
    assert_eq!(server.base_url(), format!("http://{}", server.addr()));
    let url = format!("{}/v1/messages", server.base_url());
    let first = anthropic_request(false);
    let mut second = anthropic_request(true);
    second["messages"][0]["content"] = json!("second");
    for body in [&first, &second] {
        let response = client()
            .post(&url)
            .header("x-api-key", "sk-test")
            .header("anthropic-version", "2023-06-01")
            .json(body)
            .send()
            .await
            .expect("answer");
        assert_eq!(response.status(), 200);
        receive(response).await;
    }
    let requests = server.requests();
    assert_eq!(server.calls(), 2);
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some("sk-test"));
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(requests[0].body, first);
    assert_eq!(requests[1].body, second);
    assert_eq!(server.last_request().map(|r| r.body), Some(second));
    server.assert_complete();
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn openai_base_url_includes_v1() {
    let server = MockServer::start(Wire::OpenAi, [Turn::text("a")])
        .await
        .expect("server starts");
    assert_eq!(server.base_url(), format!("http://{}/v1", server.addr()));
    let response = post(
        &format!("{}/chat/completions", server.base_url()),
        &openai_request(false, false),
    )
    .await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn injected_rejections_are_recorded_and_leave_the_turn_for_the_retry() {
    let server = MockServer::start(Wire::Anthropic, [Turn::text("finally")])
        .await
        .expect("server starts");
    server.inject(Fault::Overloaded, 2);
    server.inject(Fault::rate_limited(3), 1);
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let response = post(&server.endpoint_url(), &anthropic_request(false)).await;
        statuses.push(response.status().as_u16());
        let retry_after = header(response.headers(), "retry-after").map(str::to_owned);
        let body: Value = serde_json::from_slice(&receive(response).await.bytes()).expect("JSON");
        if statuses.len() == 3 {
            assert_eq!(retry_after.as_deref(), Some("3"));
            assert_eq!(body["error"]["type"], "rate_limit_error");
        }
        if statuses.len() == 4 {
            assert_eq!(body["content"][0]["text"], "finally");
        }
    }
    assert_eq!(statuses, [529, 529, 429, 200]);
    assert_eq!(server.calls(), 4, "every attempt is recorded");
    server.assert_complete();
}

#[tokio::test]
async fn injected_disturbances_apply_to_the_next_turn() {
    let server = MockServer::builder(Wire::OpenAi)
        .turns([Turn::text("Hello there"), Turn::text("Hello there")])
        .inject(Fault::OneByteWrites, 1)
        .start()
        .await
        .expect("server starts");
    let first = receive(post(&server.endpoint_url(), &openai_request(true, false)).await).await;
    let second = receive(post(&server.endpoint_url(), &openai_request(true, false)).await).await;
    assert_eq!(first.chunks.len(), first.bytes().len());
    assert!(second.chunks.len() < second.bytes().len() / 10);
    // Same content apart from the response number.
    assert_eq!(first.text().replace("mock-0", "mock-1"), second.text());
}

#[tokio::test]
async fn a_call_past_the_script_gets_a_clear_500() {
    let server = MockServer::start(Wire::OpenAi, [Turn::text("only")])
        .await
        .expect("server starts");
    receive(post(&server.endpoint_url(), &openai_request(false, false)).await).await;
    server.assert_complete();
    let response = post(&server.endpoint_url(), &openai_request(true, false)).await;
    assert_eq!(response.status(), 500);
    let body: Value = serde_json::from_slice(&receive(response).await.bytes()).expect("JSON");
    assert_eq!(
        body,
        json!({"error": {
            "message": "agentloop-testkit mock server: the script is exhausted: call 2 arrived but only 1 turn(s) were scripted; script more turns or add them with MockServer::push_turn",
            "type": "server_error", "param": null, "code": null,
        }})
    );
    let complete =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.assert_complete()));
    assert!(
        complete.is_err(),
        "assert_complete sees the unscripted call"
    );

    server.push_turn(Turn::text("more"));
    assert_eq!(server.remaining_turns(), 1);
    let body: Value = serde_json::from_slice(
        &receive(post(&server.endpoint_url(), &openai_request(false, false)).await)
            .await
            .bytes(),
    )
    .expect("JSON");
    assert_eq!(body["choices"][0]["message"]["content"], "more");
    assert_eq!(
        body["id"], "chatcmpl-mock-1",
        "turns are numbered by script position"
    );
}

#[tokio::test]
#[should_panic(expected = "1 scripted turn(s) were never requested")]
async fn assert_complete_fails_on_unplayed_turns() {
    let server = MockServer::start(Wire::Anthropic, [Turn::text("unused")])
        .await
        .expect("server starts");
    server.assert_complete();
}

#[tokio::test]
async fn bad_json_wrong_routes_and_health() {
    let server = MockServer::start(Wire::Anthropic, [Turn::text("kept")])
        .await
        .expect("server starts");
    let response = client()
        .post(server.endpoint_url())
        .body("{not json")
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), 400);
    let body: Value = serde_json::from_slice(&receive(response).await.bytes()).expect("JSON");
    assert_eq!(body["error"]["type"], "invalid_request_error");

    let response = post(
        &format!("http://{}/v1/chat/completions", server.addr()),
        &json!({}),
    )
    .await;
    assert_eq!(response.status(), 404);
    let body: Value = serde_json::from_slice(&receive(response).await.bytes()).expect("JSON");
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "not_found_error",
            "message": "mock server: no route for POST /v1/chat/completions; this server speaks the Anthropic Messages API at POST /v1/messages"}})
    );

    let health = client()
        .get(format!("http://{}/health", server.addr()))
        .send()
        .await
        .expect("answer");
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.expect("body"), r#"{"status":"ok"}"#);

    let requests = server.requests();
    assert_eq!(requests.len(), 2, "the health check is not a call");
    assert_eq!(requests[0].body, Value::Null);
    assert_eq!(requests[1].path, "/v1/chat/completions");
    assert_eq!(server.remaining_turns(), 1, "neither took the turn");
}

// ---------------------------------------------------------------------------------------------
// pre-rendered

fn conversation(model: &str, stream: bool, assistant_turns: usize) -> Value {
    let mut messages = vec![
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "user", "content": "Weather?"}),
    ];
    for i in 0..assistant_turns {
        messages.push(json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": format!("call_{i}"), "type": "function",
                            "function": {"name": "get_weather", "arguments": "{}"}}]}));
        messages
            .push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": "18"}));
    }
    json!({"model": model, "stream": stream, "messages": messages})
}

#[tokio::test]
async fn prerendered_picks_the_turn_by_assistant_messages_and_cycles() {
    let turns = [
        Turn::tool_call("get_weather", json!({"city": "Paris"})),
        Turn::text("18 °C in Paris."),
    ];
    let server = MockServer::prerendered(Wire::OpenAi, turns.clone())
        .await
        .expect("server starts");
    for (assistant_turns, stream) in [(0, true), (1, true), (0, false), (1, false)] {
        let request = conversation("mock-model", stream, assistant_turns);
        let pre = receive(post(&server.endpoint_url(), &request).await)
            .await
            .text();
        // The scripted server renders the same bytes once it reaches the same turn.
        let live = MockServer::start(Wire::OpenAi, turns.clone())
            .await
            .expect("server starts");
        for _ in 0..assistant_turns {
            receive(post(&live.endpoint_url(), &request).await).await;
        }
        let expected = receive(post(&live.endpoint_url(), &request).await)
            .await
            .text();
        assert_eq!(pre, expected, "turn {assistant_turns}, stream {stream}");
    }
    // Two assistant messages: back to turn 0.
    let body = receive(post(&server.endpoint_url(), &conversation("x", false, 2)).await).await;
    let body: Value = serde_json::from_slice(&body.bytes()).expect("JSON");
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        body["model"], "mock-model",
        "pre-rendered bodies name the configured model"
    );
    assert_eq!(server.calls(), 5);
}

#[tokio::test]
async fn prerendered_honours_include_usage_and_anthropic() {
    let server = MockServer::prerendered(Wire::OpenAi, [Turn::text("hi")])
        .await
        .expect("server starts");
    let mut request = conversation("x", true, 0);
    let without = receive(post(&server.endpoint_url(), &request).await)
        .await
        .text();
    request["stream_options"] = json!({"include_usage": true});
    let with = receive(post(&server.endpoint_url(), &request).await)
        .await
        .text();
    assert_eq!(
        sse_events(with.as_bytes()).len(),
        sse_events(without.as_bytes()).len() + 1
    );
    assert!(with.contains(r#""choices":[],"usage":{"prompt_tokens":10"#));

    let server = MockServer::prerendered(Wire::Anthropic, [Turn::text("hi")])
        .await
        .expect("server starts");
    let body = receive(post(&server.endpoint_url(), &anthropic_request(true)).await).await;
    let (blocks, stop) = replay_anthropic(&body.bytes());
    assert_eq!(
        (blocks, stop),
        (vec!["hi".to_owned()], "end_turn".to_owned())
    );
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn serve_prerendered_on_a_listener() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(serve_prerendered_on(
        listener,
        Wire::Anthropic,
        vec![Turn::text("hi")],
    ));
    let body = receive(
        post(
            &format!("http://{addr}/v1/messages"),
            &anthropic_request(false),
        )
        .await,
    )
    .await;
    let body: Value = serde_json::from_slice(&body.bytes()).expect("JSON");
    assert_eq!(body["content"][0]["text"], "hi");
    task.abort();
}
