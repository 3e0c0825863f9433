//! OpenAI-format stream decoding: the recorded conformance streams, the leniency quirks of
//! compatible servers, and streaming assembly, each also fed in arbitrary network splits.

mod common;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use agentloop::provider::http::SseDecoder;
use agentloop::provider::openai::ChunkDecoder;
use agentloop::sse::SseParser;
use agentloop::stream::{Accumulator, StreamEvent};
use agentloop::{ContentBlock, Error, Response, StopReason, Usage};
use proptest::prelude::*;
use serde_json::{Value, json};

/// What a stream decodes to: every event, and the error that ended it, if any.
#[derive(Debug, Clone, PartialEq)]
struct Decoded {
    events: Vec<StreamEvent>,
    error: Option<String>,
}

/// Feed `pieces` through the SSE parser and the decoder exactly as the HTTP transport does:
/// the first error stops decoding, and the body's end is reported last.
fn decode<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> (Vec<StreamEvent>, Option<Error>) {
    let mut parser = SseParser::new();
    let mut decoder = ChunkDecoder::new("test");
    let mut out = VecDeque::new();
    let mut failure: Option<Error> = None;
    for piece in pieces {
        parser.feed(piece, |event| {
            if failure.is_none()
                && let Err(e) = decoder.event(&event, &mut out)
            {
                failure = Some(e);
            }
        });
        if failure.is_some() {
            break;
        }
    }
    if failure.is_none() {
        parser.finish(|event| {
            if failure.is_none()
                && let Err(e) = decoder.event(&event, &mut out)
            {
                failure = Some(e);
            }
        });
    }
    if failure.is_none()
        && let Err(e) = decoder.end(&mut out)
    {
        failure = Some(e);
    }
    (out.into_iter().collect(), failure)
}

fn decoded<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Decoded {
    let (events, error) = decode(pieces);
    Decoded {
        events,
        error: error.map(|e| format!("{e:?}")),
    }
}

fn whole(text: &str) -> Decoded {
    decoded([text.as_bytes()])
}

fn bytewise(text: &str) -> Decoded {
    decoded(text.as_bytes().chunks(1))
}

/// Assemble events into a response (what `Provider::complete` would return).
fn assemble(events: &[StreamEvent]) -> (Response, bool) {
    let mut acc = Accumulator::new();
    for event in events {
        acc.push(event);
    }
    let stopped = acc.is_stopped();
    (acc.finish(), stopped)
}

// ---------------------------------------------------------------------------------------------
// Conformance: the recorded streams against tests/conformance/<folder>/<name>.json
// ---------------------------------------------------------------------------------------------

/// Every OpenAI-format recording (all folders but `anthropic/`), sorted.
fn recorded_streams() -> Vec<PathBuf> {
    let root = common::shared_path("conformance/streams");
    let mut found = Vec::new();
    for folder in std::fs::read_dir(&root).unwrap() {
        let folder = folder.unwrap().path();
        if !folder.is_dir() || folder.file_name().is_some_and(|n| n == "anthropic") {
            continue;
        }
        for file in std::fs::read_dir(&folder).unwrap() {
            let file = file.unwrap().path();
            if file.extension().is_some_and(|e| e == "sse") {
                found.push(file);
            }
        }
    }
    found.sort();
    found
}

fn expected_path(stream: &Path) -> PathBuf {
    let folder = stream.parent().unwrap().file_name().unwrap();
    let name = stream.file_stem().unwrap();
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance")
        .join(folder)
        .join(name)
        .with_extension("json")
}

/// The README's format: text, tool calls, stop reason, usage, thinking, error.
fn summary(events: &[StreamEvent], error: Option<&Error>) -> Value {
    let (response, stopped) = assemble(events);
    let tool_calls: Vec<Value> = response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some(match input {
                Value::String(_) => {
                    json!({"id": id, "name": name, "input": null, "input_error": "invalid JSON"})
                }
                input => json!({"id": id, "name": name, "input": input}),
            }),
            _ => None,
        })
        .collect();
    let thinking: String = response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Thinking { thinking, .. } => Some(thinking.as_str()),
            _ => None,
        })
        .collect();
    let stop_reason = if error.is_some() && !stopped {
        Value::Null
    } else {
        json!(response.stop_reason.as_str())
    };
    let mut out = json!({
        "text": response.text(),
        "tool_calls": tool_calls,
        "stop_reason": stop_reason,
        "usage": {"input_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens},
    });
    if !thinking.is_empty() {
        out["thinking"] = json!(thinking);
    }
    if let Some(error) = error {
        out["error"] = match error {
            Error::Stream {
                error_type,
                message,
                ..
            } => json!({"type": error_type, "message": message}),
            other => json!({"type": other.kind(), "message": other.to_string()}),
        };
    }
    out
}

#[test]
fn recorded_streams_assemble_as_expected() {
    let streams = recorded_streams();
    assert_eq!(
        streams.len(),
        29,
        "OpenAI-format recordings found: {streams:#?}"
    );
    let mut failures = Vec::new();
    for stream in &streams {
        let bytes = std::fs::read(stream).unwrap();
        let (events, error) = decode([bytes.as_slice()]);
        let actual = summary(&events, error.as_ref());
        let expected_file = expected_path(stream);
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(&expected_file)
                .unwrap_or_else(|e| panic!("{}: {e}", expected_file.display())),
        )
        .unwrap();
        if actual != expected {
            failures.push(format!(
                "{}\n  expected {expected}\n  actual   {actual}",
                stream.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn recorded_streams_decode_the_same_byte_by_byte() {
    for stream in recorded_streams() {
        let bytes = std::fs::read(&stream).unwrap();
        let reference = decoded([bytes.as_slice()]);
        assert_eq!(decoded(bytes.chunks(1)), reference, "{}", stream.display());
    }
}

/// Cut `bytes` at the given points (taken modulo its length).
fn split_at(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut pieces = Vec::new();
    let mut start = 0;
    for point in points {
        pieces.push(bytes[start..point].to_vec());
        start = point;
    }
    pieces.push(bytes[start..].to_vec());
    pieces
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn recorded_streams_decode_the_same_in_any_split(
        which in any::<prop::sample::Index>(),
        cuts in prop::collection::vec(any::<usize>(), 0..64),
    ) {
        let streams = recorded_streams();
        let stream = &streams[which.index(streams.len())];
        let bytes = std::fs::read(stream).unwrap();
        let reference = decoded([bytes.as_slice()]);
        let pieces = split_at(&bytes, &cuts);
        prop_assert_eq!(decoded(pieces.iter().map(Vec::as_slice)), reference);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode([data.as_slice()]);
    }

    #[test]
    fn arbitrary_chunk_json_never_panics(
        content in prop::option::of(".{0,8}"),
        index in prop::option::of(0u64..4),
        id in prop::option::of("[a-z_]{0,4}"),
        args in prop::option::of(".{0,6}"),
        finish in prop::option::of("(stop|length|tool_calls|)"),
    ) {
        let chunk = json!({"choices": [{"index": 0, "delta": {
            "content": content,
            "tool_calls": [{"index": index, "id": id, "function": {"name": id, "arguments": args}}]
        }, "finish_reason": finish}]});
        let text = format!("data: {chunk}\n\ndata: [DONE]\n\n");
        let (events, error) = decode([text.as_bytes()]);
        prop_assert!(error.is_none());
        let stopped = matches!(events.last(), Some(StreamEvent::MessageStop { .. }));
        prop_assert!(stopped, "{:?}", events);
    }
}

// ---------------------------------------------------------------------------------------------
// Small streams in each server's shape
// ---------------------------------------------------------------------------------------------

fn chunk(delta: Value, finish: Value) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    })
}

fn sse(chunks: &[Value], done: bool) -> String {
    let mut text: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    if done {
        text.push_str("data: [DONE]\n\n");
    }
    text
}

/// Decode whole and byte by byte; both must agree. Returns the whole-stream result.
fn run(text: &str) -> Decoded {
    let result = whole(text);
    assert_eq!(bytewise(text), result, "1-byte chunks decode differently");
    result
}

fn start() -> StreamEvent {
    StreamEvent::MessageStart {
        id: "chatcmpl-1".into(),
        model: "gpt-4o".into(),
    }
}

fn text(t: &str) -> StreamEvent {
    StreamEvent::TextDelta { text: t.into() }
}

fn thinking(t: &str) -> StreamEvent {
    StreamEvent::ThinkingDelta { text: t.into() }
}

fn call_start(index: usize, id: &str, name: &str) -> StreamEvent {
    StreamEvent::ToolCallStart {
        index,
        id: id.into(),
        name: name.into(),
    }
}

fn args(index: usize, arguments: &str) -> StreamEvent {
    StreamEvent::ToolCallDelta {
        index,
        arguments: arguments.into(),
    }
}

fn call_end(index: usize) -> StreamEvent {
    StreamEvent::ToolCallEnd { index }
}

fn usage(input: u64, output: u64) -> StreamEvent {
    StreamEvent::Usage {
        usage: Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        },
    }
}

fn stop(reason: StopReason) -> StreamEvent {
    StreamEvent::MessageStop {
        stop_reason: reason,
    }
}

fn tool_uses(response: &Response) -> Vec<(String, String, Value)> {
    response
        .tool_uses()
        .into_iter()
        .map(|c| (c.id, c.name, c.input))
        .collect()
}

fn usage_chunk(input: u64, output: u64) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
           "choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}})
}

#[test]
fn several_tool_calls_in_one_chunk() {
    let stream = sse(
        &[
            chunk(
                json!({"tool_calls": [
                    {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}},
                    {"index": 1, "id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}}
                ]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
        ],
        true,
    );
    let decoded = run(&stream);
    assert_eq!(
        decoded.events,
        vec![
            start(),
            call_start(0, "call_a", "f"),
            args(0, "{\"x\":1}"),
            call_start(1, "call_b", "g"),
            args(1, "{}"),
            call_end(0),
            call_end(1),
            stop(StopReason::ToolUse),
        ]
    );
}

#[test]
fn missing_index_continues_the_current_call_until_a_new_id_arrives() {
    // Mistral-style: no `index` at all.
    let stream = sse(
        &[
            chunk(
                json!({"tool_calls": [{"id": "a1", "function": {"name": "f", "arguments": "{\"q\":"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"function": {"arguments": "1}"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"id": "a1", "function": {"arguments": ""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"id": "b2", "function": {"name": "g", "arguments": "{}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
        ],
        true,
    );
    let (response, _) = assemble(&run(&stream).events);
    assert_eq!(
        tool_uses(&response),
        vec![
            ("a1".into(), "f".into(), json!({"q": 1})),
            ("b2".into(), "g".into(), json!({})),
        ]
    );
}

#[test]
fn a_reused_index_with_a_new_id_is_a_new_call() {
    // Some servers send every call with index 0; merging them would corrupt both.
    let stream = sse(
        &[
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{\"n\":1}"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "b", "function": {"name": "f", "arguments": "{\"n\":2}"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}),
                json!("tool_calls"),
            ),
        ],
        true,
    );
    let (response, _) = assemble(&run(&stream).events);
    assert_eq!(
        tool_uses(&response),
        vec![
            ("a".into(), "f".into(), json!({"n": 1})),
            ("b".into(), "f".into(), json!({"n": 2})),
        ]
    );
}

#[test]
fn pieces_for_a_reused_index_wait_for_the_new_call_they_belong_to() {
    // The second call reuses index 0 and names its function only after its first piece,
    // which arrives in the same shape as the first call's pieces.
    let piece = |arguments: &str| {
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
            Value::Null,
        )
    };
    let stream = sse(
        &[
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}]}),
                Value::Null,
            ),
            piece("{\"n\":"),
            piece("1}"),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "b", "function": {"arguments": ""}}]}),
                Value::Null,
            ),
            piece("{\"n\":2}"),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"name": "g"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
        ],
        true,
    );
    let decoded = run(&stream);
    assert_eq!(
        decoded.events,
        vec![
            start(),
            call_start(0, "a", "f"),
            args(0, "{\"n\":"),
            args(0, "1}"),
            call_start(1, "b", "g"),
            args(1, "{\"n\":2}"),
            call_end(0),
            call_end(1),
            stop(StopReason::ToolUse),
        ]
    );
}

#[test]
fn empty_name_and_id_in_continuations_never_overwrite() {
    // Alibaba/Qwen repeat `"id": ""` and `type`; Mistral repeats `"name": ""`.
    let stream = sse(
        &[
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "", "type": "function", "function": {"name": "", "arguments": "{\"city\":"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "", "type": "function", "function": {"name": "", "arguments": "\"Oslo\"}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
        ],
        true,
    );
    let decoded = run(&stream);
    assert_eq!(
        decoded.events,
        vec![
            start(),
            call_start(0, "call_1", "weather"),
            args(0, "{\"city\":"),
            args(0, "\"Oslo\"}"),
            call_end(0),
            stop(StopReason::ToolUse),
        ]
    );
}

#[test]
fn a_first_index_of_one_becomes_position_zero() {
    // Anthropic's OpenAI-compatible endpoint numbers calls after the text block.
    let stream = sse(
        &[
            chunk(json!({"content": "Reading."}), Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "toolu_1", "type": "function", "function": {"name": "read", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"p\":\"a\"}"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 2, "id": "toolu_2", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
        ],
        true,
    );
    let decoded = run(&stream);
    assert_eq!(
        decoded.events,
        vec![
            start(),
            text("Reading."),
            call_start(0, "toolu_1", "read"),
            args(0, "{\"p\":\"a\"}"),
            call_start(1, "toolu_2", "read"),
            args(1, "{}"),
            call_end(0),
            call_end(1),
            stop(StopReason::ToolUse),
        ]
    );
}

#[test]
fn an_absent_arguments_key_and_zero_argument_calls() {
    // vLLM sends the name without `arguments`; a zero-argument call never sends any.
    let stream = sse(
        &[
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "c0", "type": "function", "function": {"name": "now"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "c1", "type": "function", "function": {"name": "ls"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"dir\":\"/\"}"}}]}),
                Value::Null,
            ),
            chunk(json!({"content": ""}), json!("tool_calls")),
        ],
        true,
    );
    let decoded = run(&stream);
    assert_eq!(
        decoded.events,
        vec![
            start(),
            call_start(0, "c0", "now"),
            call_start(1, "c1", "ls"),
            args(1, "{\"dir\":\"/\"}"),
            call_end(0),
            call_end(1),
            stop(StopReason::ToolUse),
        ]
    );
    let (response, _) = assemble(&decoded.events);
    assert_eq!(
        tool_uses(&response),
        vec![
            ("c0".into(), "now".into(), json!({})),
            ("c1".into(), "ls".into(), json!({"dir": "/"})),
        ]
    );
}

#[test]
fn a_call_without_an_id_gets_one_at_the_finish() {
    let stream = sse(
        &[
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{\"a\":"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
                json!("tool_calls"),
            ),
        ],
        true,
    );
    let decoded = whole(&stream);
    let (response, _) = assemble(&decoded.events);
    let calls = tool_uses(&response);
    assert_eq!(calls.len(), 1);
    let (id, name, input) = &calls[0];
    assert!(id.starts_with("call_") && id.len() > 5, "{id}");
    assert_eq!((name.as_str(), input), ("f", &json!({"a": 1})));
    // The arguments that waited for the start follow it in one piece.
    assert_eq!(decoded.events[2], args(0, "{\"a\":1}"));
}

#[test]
fn empty_or_null_finish_reason_is_not_a_finish() {
    let stream = sse(
        &[
            chunk(json!({"content": "a"}), json!("")),
            chunk(json!({"content": "b"}), Value::Null),
        ],
        false,
    );
    let decoded = run(&stream);
    assert_eq!(decoded.events, vec![start(), text("a"), text("b")]);
    let error = decoded
        .error
        .expect("no finish and no [DONE] is an interruption");
    assert!(error.starts_with("IncompleteStream"), "{error}");
}

#[test]
fn a_later_null_finish_does_not_erase_an_earlier_one() {
    let stream = sse(
        &[
            chunk(json!({"content": "cut"}), json!("length")),
            chunk(json!({"content": ""}), Value::Null),
            chunk(json!({}), json!("")),
        ],
        true,
    );
    assert_eq!(
        run(&stream).events,
        vec![start(), text("cut"), stop(StopReason::MaxTokens)]
    );
}

#[test]
fn finish_reasons_map_to_stop_reasons() {
    for (finish, reason) in [
        ("stop", StopReason::EndTurn),
        ("tool_calls", StopReason::ToolUse),
        ("function_call", StopReason::ToolUse),
        ("length", StopReason::MaxTokens),
        ("content_filter", StopReason::Other("content_filter".into())),
        ("eos_token", StopReason::Other("eos_token".into())),
    ] {
        let stream = sse(&[chunk(json!({"content": "x"}), json!(finish))], true);
        assert_eq!(run(&stream).events.last(), Some(&stop(reason)), "{finish}");
    }
}

#[test]
fn a_usage_only_chunk_with_empty_choices() {
    let stream = sse(
        &[
            chunk(
                json!({"role": "assistant", "content": "", "refusal": null}),
                Value::Null,
            ),
            chunk(json!({"content": "Hi"}), Value::Null),
            chunk(json!({}), json!("stop")),
            usage_chunk(12, 3),
        ],
        true,
    );
    assert_eq!(
        run(&stream).events,
        vec![start(), text("Hi"), usage(12, 3), stop(StopReason::EndTurn)]
    );
}

#[test]
fn usage_on_the_finish_chunk_with_cached_tokens() {
    let mut last = chunk(json!({"content": "."}), json!("stop"));
    last["usage"] = json!({"prompt_tokens": 100, "completion_tokens": 5,
                           "prompt_tokens_details": {"cached_tokens": 64}});
    let stream = sse(&[chunk(json!({"content": "Hi"}), Value::Null), last], true);
    let events = run(&stream).events;
    assert_eq!(
        events[3],
        StreamEvent::Usage {
            usage: Usage {
                input_tokens: 100,
                output_tokens: 5,
                cache_read_tokens: 64,
                cache_write_tokens: 0,
                reasoning_tokens: 0
            }
        }
    );
    assert_eq!(events.len(), 5);
}

#[test]
fn x_groq_usage_is_a_fallback_only() {
    let mut groq_only = chunk(json!({"content": "Hi"}), json!("stop"));
    groq_only["x_groq"] =
        json!({"id": "req_1", "usage": {"prompt_tokens": 7, "completion_tokens": 2}});
    assert_eq!(
        run(&sse(&[groq_only.clone()], true)).events,
        vec![start(), text("Hi"), usage(7, 2), stop(StopReason::EndTurn)]
    );
    // A top-level usage wins, whichever comes first.
    let mut both = groq_only.clone();
    both["usage"] = json!({"prompt_tokens": 9, "completion_tokens": 4});
    let mut late_groq = chunk(json!({}), Value::Null);
    late_groq["x_groq"] = json!({"usage": {"prompt_tokens": 1, "completion_tokens": 1}});
    let events = run(&sse(&[both, late_groq], true)).events;
    assert_eq!(events[2], usage(9, 4));
}

#[test]
fn an_error_object_in_a_chunk_is_a_stream_error_after_its_content() {
    // OpenRouter: a numeric `code`, usage in the same chunk, after a finish.
    let mut failing = chunk(json!({"content": ""}), Value::Null);
    failing["error"] = json!({"code": 502, "message": "Upstream failed"});
    failing["usage"] = json!({"prompt_tokens": 43, "completion_tokens": 10});
    let stream = sse(
        &[
            chunk(json!({"content": "Hel"}), json!("length")),
            failing,
            chunk(json!({"content": "never"}), Value::Null),
        ],
        true,
    );
    let (events, error) = decode([stream.as_bytes()]);
    assert_eq!(
        events,
        vec![
            start(),
            text("Hel"),
            usage(43, 10),
            stop(StopReason::MaxTokens)
        ]
    );
    match error {
        Some(Error::Stream {
            provider,
            error_type,
            message,
        }) => {
            assert_eq!(provider, "test");
            assert_eq!(error_type.as_deref(), Some("502"));
            assert_eq!(message, "Upstream failed");
        }
        other => panic!("expected a stream error, got {other:?}"),
    }
}

#[test]
fn an_error_event_is_a_stream_error() {
    // Groq: `event: error` with the error object; `type` wins over `code`.
    let stream = format!(
        "{}event: error\ndata: {}\n\n",
        sse(
            &[chunk(json!({"reasoning": "thinking"}), Value::Null)],
            false
        ),
        json!({"error": {"message": "Tool call validation failed", "type": "invalid_request_error", "code": "tool_use_failed"}})
    );
    let (events, error) = decode([stream.as_bytes()]);
    assert_eq!(events, vec![start(), thinking("thinking")]);
    match error {
        Some(Error::Stream {
            error_type,
            message,
            ..
        }) => {
            assert_eq!(error_type.as_deref(), Some("invalid_request_error"));
            assert_eq!(message, "Tool call validation failed");
        }
        other => panic!("expected a stream error, got {other:?}"),
    }
    // A bare error object and a plain-text payload are read too.
    let (_, error) = decode([
        b"event: error\ndata: {\"code\":\"overloaded\",\"message\":\"busy\"}\n\n".as_slice(),
    ]);
    assert!(
        matches!(error, Some(Error::Stream { error_type: Some(t), message, .. }) if t == "overloaded" && message == "busy")
    );
    let (_, error) = decode([b"event: error\ndata: upstream closed\n\n".as_slice()]);
    assert!(
        matches!(error, Some(Error::Stream { error_type: None, message, .. }) if message == "upstream closed")
    );
}

#[test]
fn refusal_is_text_and_the_stop_reason() {
    let stream = sse(
        &[
            chunk(
                json!({"role": "assistant", "content": null, "refusal": ""}),
                Value::Null,
            ),
            chunk(json!({"content": null, "refusal": "I can't"}), Value::Null),
            chunk(json!({"content": null, "refusal": " help."}), Value::Null),
            chunk(json!({}), json!("stop")),
        ],
        true,
    );
    assert_eq!(
        run(&stream).events,
        vec![
            start(),
            text("I can't"),
            text(" help."),
            stop(StopReason::Refusal)
        ]
    );
}

#[test]
fn reasoning_content_and_the_reasoning_fallback() {
    let stream = sse(
        &[
            // DeepSeek and xAI: reasoning_content.
            chunk(
                json!({"reasoning_content": "Let me", "content": null}),
                Value::Null,
            ),
            // Both present: reasoning_content wins, the duplicate is not repeated.
            chunk(
                json!({"reasoning_content": " think", "reasoning": " think"}),
                Value::Null,
            ),
            // OpenRouter and Groq: reasoning alone (or with reasoning_content null).
            chunk(
                json!({"reasoning_content": null, "reasoning": "."}),
                Value::Null,
            ),
            chunk(json!({"content": "Answer"}), json!("stop")),
        ],
        true,
    );
    let decoded = run(&stream);
    assert_eq!(
        decoded.events,
        vec![
            start(),
            thinking("Let me"),
            thinking(" think"),
            thinking("."),
            text("Answer"),
            stop(StopReason::EndTurn),
        ]
    );
    let (response, _) = assemble(&decoded.events);
    assert_eq!(
        response.content,
        vec![
            ContentBlock::Thinking {
                thinking: "Let me think.".into(),
                signature: None,
                provider: None
            },
            ContentBlock::text("Answer"),
        ]
    );
}

#[test]
fn ending_after_a_finish_without_done_is_complete() {
    // Ollama and llama.cpp may close the body without `[DONE]`.
    let stream = sse(&[chunk(json!({"content": "ok"}), json!("stop"))], false);
    let decoded = run(&stream);
    assert_eq!(decoded.error, None);
    assert_eq!(
        decoded.events,
        vec![start(), text("ok"), stop(StopReason::EndTurn)]
    );
}

#[test]
fn ending_without_finish_or_done_is_interrupted() {
    let stream = sse(
        &[chunk(
            json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{\"a\""}}]}),
            Value::Null,
        )],
        false,
    );
    let (events, error) = decode([stream.as_bytes()]);
    assert_eq!(
        events,
        vec![start(), call_start(0, "c", "f"), args(0, "{\"a\"")]
    );
    assert!(
        matches!(error, Some(Error::IncompleteStream { .. })),
        "{error:?}"
    );
}

#[test]
fn done_without_a_finish_reason_infers_the_stop() {
    let tool = sse(
        &[chunk(
            json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]}),
            Value::Null,
        )],
        true,
    );
    assert_eq!(run(&tool).events.last(), Some(&stop(StopReason::ToolUse)));
    let plain = sse(&[chunk(json!({"content": "x"}), Value::Null)], true);
    assert_eq!(run(&plain).events.last(), Some(&stop(StopReason::EndTurn)));
}

#[test]
fn other_choices_are_ignored() {
    let mut other = chunk(json!({"content": "second"}), json!("stop"));
    other["choices"][0]["index"] = json!(1);
    let stream = sse(
        &[
            chunk(json!({"content": "first"}), Value::Null),
            other,
            chunk(json!({}), json!("stop")),
        ],
        true,
    );
    assert_eq!(
        run(&stream).events,
        vec![start(), text("first"), stop(StopReason::EndTurn)]
    );
}

#[test]
fn content_as_parts_and_odd_field_types_are_tolerated() {
    let stream = sse(
        &[
            json!({"id": 17, "model": null, "choices": [{"index": 0, "delta": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, "finish_reason": null}]}),
            json!({"choices": [{"delta": {"content": "c", "tool_calls": null}, "finish_reason": 3}], "usage": "n/a"}),
            json!({"choices": [{"index": 0.0, "delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 2.0, "completion_tokens": "1"}}),
        ],
        true,
    );
    assert_eq!(
        run(&stream).events,
        vec![
            StreamEvent::MessageStart {
                id: String::new(),
                model: String::new()
            },
            text("ab"),
            text("c"),
            usage(2, 1),
            stop(StopReason::EndTurn),
        ]
    );
}

#[test]
fn a_malformed_chunk_is_a_parse_error() {
    let stream =
        "data: {\"choices\": [{\"delta\": {\"content\": \"hi\"}}]}\n\ndata: {\"choices\": [\n\n";
    let (events, error) = decode([stream.as_bytes()]);
    assert_eq!(
        events,
        vec![
            StreamEvent::MessageStart {
                id: String::new(),
                model: String::new()
            },
            text("hi")
        ]
    );
    match error {
        Some(Error::Parse { what, message }) => {
            assert_eq!(what, "test stream chunk");
            assert!(message.contains("{\"choices\": ["), "{message}");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn events_after_done_are_ignored() {
    let stream = format!(
        "{}{}",
        sse(&[chunk(json!({"content": "x"}), json!("stop"))], true),
        sse(&[chunk(json!({"content": "late"}), Value::Null)], false)
    );
    assert_eq!(
        run(&stream).events,
        vec![start(), text("x"), stop(StopReason::EndTurn)]
    );
}

// ---------------------------------------------------------------------------------------------
// Streaming assembly
// ---------------------------------------------------------------------------------------------

#[test]
fn assembles_text_only() {
    let words = ["The", " sky", " is", " blue", "."];
    let mut chunks = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    chunks.extend(
        words
            .iter()
            .map(|w| chunk(json!({"content": w}), Value::Null)),
    );
    chunks.push(chunk(json!({}), json!("stop")));
    let decoded = run(&sse(&chunks, true));
    let mut expected = vec![start()];
    expected.extend(words.iter().map(|w| text(w)));
    expected.push(stop(StopReason::EndTurn));
    assert_eq!(decoded.events, expected);
    let (response, _) = assemble(&decoded.events);
    assert_eq!(
        response,
        Response {
            id: "chatcmpl-1".into(),
            model: "gpt-4o".into(),
            content: vec![ContentBlock::text("The sky is blue.")],
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        }
    );
}

#[test]
fn assembles_one_tool_call_from_many_fragments() {
    let arguments = r#"{"city": "San Francisco", "unit": "celsius", "days": [1, 2, 3]}"#;
    let mut chunks = vec![chunk(
        json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_w", "type": "function", "function": {"name": "weather", "arguments": ""}}]}),
        Value::Null,
    )];
    let fragments: Vec<String> = arguments
        .chars()
        .collect::<Vec<_>>()
        .chunks(3)
        .map(|c| c.iter().collect())
        .collect();
    chunks.extend(fragments.iter().map(|f| {
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": f}}]}),
            Value::Null,
        )
    }));
    chunks.push(chunk(json!({}), json!("tool_calls")));
    let decoded = run(&sse(&chunks, true));
    let mut expected = vec![start(), call_start(0, "call_w", "weather")];
    expected.extend(fragments.iter().map(|f| args(0, f)));
    expected.extend([call_end(0), stop(StopReason::ToolUse)]);
    assert_eq!(decoded.events, expected);
    let (response, _) = assemble(&decoded.events);
    assert_eq!(
        tool_uses(&response),
        vec![(
            "call_w".into(),
            "weather".into(),
            json!({"city": "San Francisco", "unit": "celsius", "days": [1, 2, 3]})
        )]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

#[test]
fn assembles_three_parallel_calls_interleaved() {
    let call = |i: u64, id: Option<&str>, name: Option<&str>, a: &str| {
        let mut c = json!({"index": i, "function": {"arguments": a}});
        if let Some(id) = id {
            c["id"] = json!(id);
            c["type"] = json!("function");
        }
        if let Some(name) = name {
            c["function"]["name"] = json!(name);
        }
        chunk(json!({"tool_calls": [c]}), Value::Null)
    };
    let chunks = vec![
        call(0, Some("c0"), Some("a"), "{\"n\":"),
        call(1, Some("c1"), Some("b"), ""),
        call(2, Some("c2"), Some("c"), "{\"s\":\""),
        call(1, None, None, "{\"m\":"),
        call(0, None, None, "0}"),
        call(2, None, None, "x\"}"),
        call(1, None, None, "true}"),
        chunk(json!({}), json!("tool_calls")),
    ];
    let decoded = run(&sse(&chunks, true));
    assert_eq!(
        decoded.events,
        vec![
            start(),
            call_start(0, "c0", "a"),
            args(0, "{\"n\":"),
            call_start(1, "c1", "b"),
            call_start(2, "c2", "c"),
            args(2, "{\"s\":\""),
            args(1, "{\"m\":"),
            args(0, "0}"),
            args(2, "x\"}"),
            args(1, "true}"),
            call_end(0),
            call_end(1),
            call_end(2),
            stop(StopReason::ToolUse),
        ]
    );
    let (response, _) = assemble(&decoded.events);
    assert_eq!(
        tool_uses(&response),
        vec![
            ("c0".into(), "a".into(), json!({"n": 0})),
            ("c1".into(), "b".into(), json!({"m": true})),
            ("c2".into(), "c".into(), json!({"s": "x"})),
        ]
    );
}

#[test]
fn assembles_text_then_a_tool_call() {
    let chunks = vec![
        chunk(json!({"content": "Let me check"}), Value::Null),
        chunk(json!({"content": " the weather."}), Value::Null),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
    ];
    let decoded = run(&sse(&chunks, true));
    let (response, _) = assemble(&decoded.events);
    assert_eq!(
        response.content,
        vec![
            ContentBlock::text("Let me check the weather."),
            ContentBlock::ToolUse {
                id: "c".into(),
                name: "weather".into(),
                input: json!({"city": "Rome"})
            },
        ]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

#[test]
fn assembles_usage() {
    let chunks = vec![
        chunk(json!({"content": "Hi"}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage_chunk(21, 2),
    ];
    let decoded = run(&sse(&chunks, true));
    let (response, _) = assemble(&decoded.events);
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 21,
            output_tokens: 2,
            ..Usage::default()
        }
    );
    assert_eq!(response.usage.total_tokens(), 23);
}
