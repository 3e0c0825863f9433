//! Stream assembly for Anthropic: hand-written streams in the documented event shapes
//! (platform.claude.com/docs, "Streaming Messages"), each decoded whole and in 1-byte chunks.

mod anthropic_support;
mod common;
mod recordings;

use agentloop::provider::replay::{self, WireFormat};
use agentloop::{ContentBlock, Error, StopReason, StreamEvent, Usage};
use anthropic_support::{decode, event, response};
use serde_json::json;

fn start(id: &str, usage: &str) -> String {
    event(
        "message_start",
        &format!(
            r#"{{"type":"message_start","message":{{"id":"{id}","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{usage}}}}}"#
        ),
    )
}

fn block_start(index: usize, block: &str) -> String {
    event(
        "content_block_start",
        &format!(r#"{{"type":"content_block_start","index":{index},"content_block":{block}}}"#),
    )
}

fn delta(index: usize, delta: &str) -> String {
    event(
        "content_block_delta",
        &format!(r#"{{"type":"content_block_delta","index":{index},"delta":{delta}}}"#),
    )
}

fn text(index: usize, text: &str) -> String {
    delta(
        index,
        &format!(r#"{{"type":"text_delta","text":{}}}"#, json!(text)),
    )
}

fn json_piece(index: usize, partial: &str) -> String {
    delta(
        index,
        &format!(
            r#"{{"type":"input_json_delta","partial_json":{}}}"#,
            json!(partial)
        ),
    )
}

fn block_stop(index: usize) -> String {
    event(
        "content_block_stop",
        &format!(r#"{{"type":"content_block_stop","index":{index}}}"#),
    )
}

fn message_delta(stop_reason: &str, usage: &str) -> String {
    event(
        "message_delta",
        &format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop_reason}","stop_sequence":null}},"usage":{usage}}}"#
        ),
    )
}

fn stop() -> String {
    event("message_stop", r#"{"type":"message_stop"}"#)
}

fn ping() -> String {
    event("ping", r#"{"type": "ping"}"#)
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

fn text_delta(text: &str) -> StreamEvent {
    StreamEvent::TextDelta { text: text.into() }
}

fn message_start(id: &str) -> StreamEvent {
    StreamEvent::MessageStart {
        id: id.into(),
        model: "claude-sonnet-4-5".into(),
    }
}

#[test]
fn text_only() {
    let sse = [
        start("msg_1", r#"{"input_tokens":25,"output_tokens":1}"#),
        block_start(0, r#"{"type":"text","text":""}"#),
        ping(),
        text(0, "Hello"),
        text(0, ", wörld 👋\n\"quoted\""),
        block_stop(0),
        message_delta("end_turn", r#"{"output_tokens":15}"#),
        stop(),
    ]
    .concat();
    let (events, error) = decode(&sse);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        events,
        [
            message_start("msg_1"),
            StreamEvent::Usage {
                usage: usage(25, 1)
            },
            text_delta("Hello"),
            text_delta(", wörld 👋\n\"quoted\""),
            StreamEvent::Usage {
                usage: usage(25, 15)
            },
            StreamEvent::MessageStop {
                stop_reason: StopReason::EndTurn
            },
        ]
    );
    let response = response(&events);
    assert_eq!(response.id, "msg_1");
    assert_eq!(response.model, "claude-sonnet-4-5");
    assert_eq!(
        response.content,
        [ContentBlock::text("Hello, wörld 👋\n\"quoted\"")]
    );
    assert_eq!(response.usage, usage(25, 15));
}

#[test]
fn one_tool_call_in_many_fragments() {
    let pieces = [
        "",
        "{\"ci",
        "ty\": \"Pa",
        "ris\", \"unit\"",
        ": \"cel",
        "sius\"}",
    ];
    let mut sse = vec![
        start("msg_2", r#"{"input_tokens":400,"output_tokens":2}"#),
        block_start(
            0,
            r#"{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}"#,
        ),
    ];
    sse.extend(pieces.iter().map(|p| json_piece(0, p)));
    sse.extend([
        block_stop(0),
        message_delta("tool_use", r#"{"output_tokens":60}"#),
        stop(),
    ]);
    let (events, error) = decode(&sse.concat());
    assert!(error.is_none(), "{error:?}");
    let mut expected = vec![
        message_start("msg_2"),
        StreamEvent::Usage {
            usage: usage(400, 2),
        },
        StreamEvent::ToolCallStart {
            index: 0,
            id: "toolu_01".into(),
            name: "get_weather".into(),
        },
    ];
    // The empty first fragment carries nothing and is not forwarded.
    expected.extend(pieces[1..].iter().map(|p| StreamEvent::ToolCallDelta {
        index: 0,
        arguments: (*p).into(),
    }));
    expected.extend([
        StreamEvent::ToolCallEnd { index: 0 },
        StreamEvent::Usage {
            usage: usage(400, 60),
        },
        StreamEvent::MessageStop {
            stop_reason: StopReason::ToolUse,
        },
    ]);
    assert_eq!(events, expected);
    let response = response(&events);
    assert_eq!(
        response.content,
        [ContentBlock::ToolUse {
            id: "toolu_01".into(),
            name: "get_weather".into(),
            input: json!({"city": "Paris", "unit": "celsius"}),
        }]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

#[test]
fn thinking_then_tool_call_keeps_the_signature_and_tags_the_provider() {
    let sse = [
        start("msg_3", r#"{"input_tokens":50,"output_tokens":1}"#),
        block_start(0, r#"{"type":"thinking","thinking":"","signature":""}"#),
        delta(
            0,
            r#"{"type":"thinking_delta","thinking":"The user wants "}"#,
        ),
        delta(0, r#"{"type":"thinking_delta","thinking":"the weather."}"#),
        delta(
            0,
            r#"{"type":"signature_delta","signature":"EqQBCgIYAh=="}"#,
        ),
        block_stop(0),
        block_start(
            1,
            r#"{"type":"tool_use","id":"toolu_02","name":"get_weather","input":{}}"#,
        ),
        json_piece(1, r#"{"city":"Rome"}"#),
        block_stop(1),
        message_delta("tool_use", r#"{"output_tokens":80}"#),
        stop(),
    ]
    .concat();
    let (events, error) = decode(&sse);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        events[2..7],
        [
            StreamEvent::ThinkingDelta {
                text: "The user wants ".into()
            },
            StreamEvent::ThinkingDelta {
                text: "the weather.".into()
            },
            StreamEvent::ThinkingSignature {
                signature: "EqQBCgIYAh==".into()
            },
            // Position among tool calls, not Anthropic's block index (1).
            StreamEvent::ToolCallStart {
                index: 0,
                id: "toolu_02".into(),
                name: "get_weather".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: r#"{"city":"Rome"}"#.into(),
            },
        ]
    );
    // Assembled as the provider does it, which tags the reasoning with its maker.
    let response = replay::assemble(WireFormat::Anthropic, sse.as_bytes()).response;
    assert_eq!(
        response.content,
        [
            ContentBlock::Thinking {
                thinking: "The user wants the weather.".into(),
                signature: Some("EqQBCgIYAh==".into()),
                provider: Some("anthropic".into()),
            },
            ContentBlock::ToolUse {
                id: "toolu_02".into(),
                name: "get_weather".into(),
                input: json!({"city": "Rome"}),
            },
        ]
    );
}

#[test]
fn text_then_two_tool_calls_get_positions_zero_and_one() {
    let sse = [
        start("msg_4", r#"{"input_tokens":10,"output_tokens":1}"#),
        block_start(0, r#"{"type":"text","text":"Checking "}"#),
        text(0, "both."),
        block_stop(0),
        block_start(
            1,
            r#"{"type":"tool_use","id":"toolu_a","name":"get_weather","input":{}}"#,
        ),
        json_piece(1, r#"{"city":"#),
        json_piece(1, r#""Paris"}"#),
        block_stop(1),
        block_start(
            2,
            r#"{"type":"tool_use","id":"toolu_b","name":"get_weather","input":{}}"#,
        ),
        json_piece(2, r#"{"city":"Rome"}"#),
        block_stop(2),
        message_delta("tool_use", r#"{"output_tokens":70}"#),
        stop(),
    ]
    .concat();
    let (events, error) = decode(&sse);
    assert!(error.is_none(), "{error:?}");
    let calls: Vec<&StreamEvent> = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                StreamEvent::ToolCallStart { .. } | StreamEvent::ToolCallEnd { .. }
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            &StreamEvent::ToolCallStart {
                index: 0,
                id: "toolu_a".into(),
                name: "get_weather".into()
            },
            &StreamEvent::ToolCallEnd { index: 0 },
            &StreamEvent::ToolCallStart {
                index: 1,
                id: "toolu_b".into(),
                name: "get_weather".into()
            },
            &StreamEvent::ToolCallEnd { index: 1 },
        ]
    );
    let response = response(&events);
    // The start's initial text counts.
    assert_eq!(response.text(), "Checking both.");
    assert_eq!(
        response
            .tool_uses()
            .iter()
            .map(|c| c.input.clone())
            .collect::<Vec<_>>(),
        [json!({"city": "Paris"}), json!({"city": "Rome"})]
    );
}

#[test]
fn usage_maps_cache_fields_and_later_reports_replace_earlier_ones() {
    let sse = [
        start(
            "msg_5",
            r#"{"input_tokens":12,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1,"service_tier":"standard"}"#,
        ),
        block_start(0, r#"{"type":"text","text":""}"#),
        text(0, "Hi"),
        block_stop(0),
        message_delta(
            "end_turn",
            r#"{"input_tokens":15,"cache_read_input_tokens":2100,"output_tokens":0}"#,
        ),
        // An identical report changes nothing and is not repeated.
        message_delta("end_turn", r#"{"output_tokens":0}"#),
        stop(),
    ]
    .concat();
    let (events, error) = decode(&sse);
    assert!(error.is_none(), "{error:?}");
    let usages: Vec<Usage> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Usage { usage } => Some(*usage),
            _ => None,
        })
        .collect();
    assert_eq!(
        usages,
        [
            Usage {
                input_tokens: 12,
                output_tokens: 1,
                cache_read_tokens: 2000,
                cache_write_tokens: 100,
                reasoning_tokens: 0,
            },
            // input replaced, output 0 counts, cache write kept (absent in the delta).
            Usage {
                input_tokens: 15,
                output_tokens: 0,
                cache_read_tokens: 2100,
                cache_write_tokens: 100,
                reasoning_tokens: 0,
            },
        ]
    );
    assert_eq!(response(&events).usage, usages[1]);
}

#[test]
fn duplicate_starts_reset_nothing() {
    let sse = [
        start("msg_first", r#"{"input_tokens":17,"output_tokens":1}"#),
        block_start(
            0,
            r#"{"type":"tool_use","id":"toolu_x","name":"lookup","input":{}}"#,
        ),
        json_piece(0, r#"{"q":"#),
        start("msg_second", r#"{"input_tokens":99,"output_tokens":9}"#),
        block_start(
            0,
            r#"{"type":"tool_use","id":"toolu_y","name":"other","input":{}}"#,
        ),
        json_piece(0, r#""rust"}"#),
        block_stop(0),
        block_stop(0),
        message_delta("tool_use", r#"{"output_tokens":20}"#),
        stop(),
    ]
    .concat();
    let (events, error) = decode(&sse);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        events,
        [
            message_start("msg_first"),
            StreamEvent::Usage {
                usage: usage(17, 1)
            },
            StreamEvent::ToolCallStart {
                index: 0,
                id: "toolu_x".into(),
                name: "lookup".into()
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: r#"{"q":"#.into()
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: r#""rust"}"#.into()
            },
            StreamEvent::ToolCallEnd { index: 0 },
            StreamEvent::Usage {
                usage: usage(17, 20)
            },
            StreamEvent::MessageStop {
                stop_reason: StopReason::ToolUse
            },
        ]
    );
    let response = response(&events);
    assert_eq!(response.id, "msg_first");
    assert_eq!(response.tool_uses()[0].input, json!({"q": "rust"}));
}

#[test]
fn a_start_input_without_deltas_is_the_arguments() {
    let sse = [
        start("msg_6", r#"{"input_tokens":1,"output_tokens":1}"#),
        block_start(
            0,
            r#"{"type":"tool_use","id":"toolu_s","name":"search","input":{"query":"rust sse"}}"#,
        ),
        block_stop(0),
        block_start(
            1,
            r#"{"type":"tool_use","id":"toolu_t","name":"search","input":{"query":"ignored"}}"#,
        ),
        json_piece(1, r#"{"query":"streamed"}"#),
        block_stop(1),
        message_delta("tool_use", r#"{"output_tokens":5}"#),
        stop(),
    ]
    .concat();
    let (events, _) = decode(&sse);
    let inputs: Vec<_> = response(&events)
        .tool_uses()
        .into_iter()
        .map(|c| c.input)
        .collect();
    assert_eq!(
        inputs,
        [json!({"query": "rust sse"}), json!({"query": "streamed"})]
    );
}

#[test]
fn stop_reasons_map_to_the_canonical_ones() {
    let cases = [
        ("end_turn", StopReason::EndTurn),
        ("tool_use", StopReason::ToolUse),
        ("max_tokens", StopReason::MaxTokens),
        ("stop_sequence", StopReason::StopSequence),
        ("refusal", StopReason::Refusal),
        ("pause_turn", StopReason::Other("pause_turn".into())),
        (
            "model_context_window_exceeded",
            StopReason::Other("model_context_window_exceeded".into()),
        ),
    ];
    for (wire, expected) in cases {
        let sse = [
            start("msg_7", r#"{"input_tokens":1,"output_tokens":1}"#),
            message_delta(wire, r#"{"output_tokens":1}"#),
            stop(),
        ]
        .concat();
        let (events, error) = decode(&sse);
        assert!(error.is_none());
        assert_eq!(
            events.last(),
            Some(&StreamEvent::MessageStop {
                stop_reason: expected
            }),
            "{wire}"
        );
    }
}

#[test]
fn a_missing_message_stop_after_a_stop_reason_still_completes() {
    let sse = [
        start("msg_8", r#"{"input_tokens":1,"output_tokens":1}"#),
        block_start(
            0,
            r#"{"type":"tool_use","id":"toolu_m","name":"f","input":{}}"#,
        ),
        json_piece(0, r#"{"a":1"#),
        message_delta("max_tokens", r#"{"output_tokens":9}"#),
    ]
    .concat();
    let (events, error) = decode(&sse);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        events[events.len() - 3..],
        [
            StreamEvent::Usage { usage: usage(1, 9) },
            // The unstopped tool block is closed at the end.
            StreamEvent::ToolCallEnd { index: 0 },
            StreamEvent::MessageStop {
                stop_reason: StopReason::MaxTokens
            },
        ]
    );
    // Cut arguments stay as their raw text, for an "invalid arguments" result.
    assert_eq!(response(&events).tool_uses()[0].input, json!(r#"{"a":1"#));
}

#[test]
fn a_stream_cut_before_any_stop_is_interrupted() {
    let sse = [
        start("msg_9", r#"{"input_tokens":1,"output_tokens":1}"#),
        block_start(0, r#"{"type":"text","text":""}"#),
        text(0, "Hel"),
    ]
    .concat();
    let (events, error) = decode(&sse);
    assert_eq!(events.last(), Some(&text_delta("Hel")));
    assert!(
        matches!(&error, Some(Error::IncompleteStream { message }) if message.contains("message_stop")),
        "{error:?}"
    );

    let (events, error) = decode("");
    assert!(events.is_empty());
    assert!(matches!(error, Some(Error::IncompleteStream { .. })));
}

#[test]
fn error_events_are_typed_errors() {
    let prefix = [
        start("msg_10", r#"{"input_tokens":1,"output_tokens":1}"#),
        block_start(0, r#"{"type":"text","text":""}"#),
        text(0, "Hi"),
    ]
    .concat();
    let overloaded = prefix.clone()
        + &event(
            "error",
            r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
        )
        + &stop();
    let (events, error) = decode(&overloaded);
    assert_eq!(events.last(), Some(&text_delta("Hi")));
    assert!(
        matches!(&error, Some(Error::Overloaded { provider, message }) if provider == "anthropic" && message == "Overloaded"),
        "{error:?}"
    );

    let api = prefix.clone()
        + &event(
            "error",
            r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
        );
    let (_, error) = decode(&api);
    assert!(
        matches!(&error, Some(Error::Stream { error_type: Some(t), message, .. }) if t == "api_error" && message == "Internal server error"),
        "{error:?}"
    );
    assert!(!error.unwrap().is_retryable());

    // Not JSON at all: still a stream error, with the data as its message.
    let garbled = prefix + "event: error\ndata: upstream connect error\n\n";
    let (_, error) = decode(&garbled);
    assert!(
        matches!(&error, Some(Error::Stream { error_type: None, message, .. }) if message == "upstream connect error"),
        "{error:?}"
    );
}

#[test]
fn unknown_events_deltas_and_blocks_are_tolerated() {
    let sse = [
        start("msg_11", r#"{"input_tokens":1,"output_tokens":1}"#),
        event("brand_new_event", "not even json"),
        event("brand_new_event", r#"{"type":"brand_new_event","x":1}"#),
        block_start(0, r#"{"type":"text","text":"","citations":[]}"#),
        delta(0, r#"{"type":"citations_delta","citation":{"type":"web_search_result_location","url":"https://e.x"}}"#),
        delta(0, r#"{"type":"future_delta","value":42}"#),
        text(0, "ok"),
        block_stop(0),
        block_start(1, r#"{"type":"container_upload","file_id":"file_1"}"#),
        block_stop(1),
        message_delta("end_turn", r#"{"output_tokens":3}"#),
        stop(),
        // Anything after message_stop is ignored.
        text(0, "late"),
    ]
    .concat();
    let (events, error) = decode(&sse);
    assert!(error.is_none(), "{error:?}");
    let response = response(&events);
    assert_eq!(
        response.content,
        [
            ContentBlock::text("ok"),
            ContentBlock::Native {
                provider: "anthropic".into(),
                value: json!({"type": "container_upload", "file_id": "file_1"}),
            },
        ]
    );
}

#[test]
fn a_known_event_with_broken_json_is_a_parse_error() {
    let sse = [
        start("msg_12", r#"{"input_tokens":1,"output_tokens":1}"#),
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\n\n"
            .to_owned(),
    ]
    .concat();
    let (_, error) = decode(&sse);
    assert!(
        matches!(&error, Some(Error::Parse { what, .. }) if what.contains("content_block_delta")),
        "{error:?}"
    );
}

#[test]
fn a_message_stop_without_a_stop_reason_infers_one() {
    let sse = [
        start("msg_13", r#"{"input_tokens":1,"output_tokens":1}"#),
        block_start(
            0,
            r#"{"type":"tool_use","id":"toolu_i","name":"f","input":{}}"#,
        ),
        block_stop(0),
        stop(),
    ]
    .concat();
    let (events, error) = decode(&sse);
    assert!(error.is_none());
    assert_eq!(
        events.last(),
        Some(&StreamEvent::MessageStop {
            stop_reason: StopReason::ToolUse
        })
    );
    // A zero-argument call is `{}`.
    assert_eq!(response(&events).tool_uses()[0].input, json!({}));
}
