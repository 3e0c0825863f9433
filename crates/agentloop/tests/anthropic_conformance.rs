//! Recorded Anthropic streams (`shared/conformance/streams/anthropic/*.sse`) assembled with the
//! SSE parser, the Anthropic decoder and the accumulator, compared with the expectations in
//! `tests/conformance/anthropic/*.json` (format: `tests/conformance/README.md`).

mod common;
mod recordings;

use agentloop::provider::anthropic::AnthropicDecoder;
use agentloop::provider::replay::{self, WireFormat};
use agentloop::{ContentBlock, Error, StreamEvent};
use proptest::prelude::*;
use recordings::{Decoded, Extras, Recordings, chunked, comparable, damaged};
use serde_json::{Value, json};

fn recordings() -> Recordings {
    Recordings::new("conformance/streams/anthropic", "anthropic", ".sse")
}

fn stream_names() -> Vec<String> {
    recordings().names()
}

fn recording(name: &str) -> Vec<u8> {
    recordings().read(name)
}

fn assemble<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Decoded {
    recordings::assemble_sse(AnthropicDecoder::new(), chunks)
}

/// The README's format, with no extras.
const EXTRAS: Extras = Extras {
    cache_read: false,
    cache_write: false,
    native_label: None,
    error: anthropic_error,
};

/// Anthropic's error type: an overload keeps the name Anthropic gave it.
fn anthropic_error(error: &Error) -> Value {
    match error {
        Error::Overloaded { message, .. } => {
            json!({"type": "overloaded_error", "message": message})
        }
        other => recordings::typed_error(other),
    }
}

fn summary(events: &[StreamEvent], error: Option<&Error>) -> Value {
    recordings::summary(events, error, &EXTRAS)
}

fn whole(name: &str) -> (Vec<StreamEvent>, Option<Error>) {
    let bytes = recording(name);
    assemble([bytes.as_slice()])
}

#[test]
fn every_recording_has_an_expectation_and_matches_it() {
    recordings().check_expectations(13, |name| {
        let (events, error) = whole(name);
        summary(&events, error.as_ref())
    });
}

#[test]
fn one_byte_chunks_give_the_same_events() {
    for name in stream_names() {
        let bytes = recording(&name);
        assert_eq!(
            comparable(assemble(bytes.chunks(1))),
            comparable(whole(&name)),
            "{name}"
        );
    }
}

#[test]
fn server_tool_blocks_arrive_whole_with_their_streamed_input() {
    let (events, error) = whole("web-search-server-tool");
    assert!(error.is_none());
    let natives: Vec<&Value> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::NativeBlock { provider, value } if provider == "anthropic" => Some(value),
            _ => None,
        })
        .collect();
    let kinds: Vec<&str> = natives
        .iter()
        .map(|v| v["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "server_tool_use",
            "web_search_tool_result",
            "server_tool_use",
            "web_search_tool_result"
        ]
    );
    assert_eq!(natives[0]["id"], "srvtoolu_01NcU4XNwyxWK6a9tcJZ8wGY");
    assert_eq!(
        natives[0]["input"],
        json!({"query": "top world news today"})
    );
    assert_eq!(
        natives[1]["tool_use_id"],
        "srvtoolu_01NcU4XNwyxWK6a9tcJZ8wGY"
    );
    assert!(
        natives[1]["content"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
    );
    // No client tool calls come out of server blocks.
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, StreamEvent::ToolCallStart { .. }))
    );
}

#[test]
fn mcp_blocks_are_native_and_keep_their_input() {
    let (events, _) = whole("mcp-connector-tool");
    let natives: Vec<&Value> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::NativeBlock { value, .. } => Some(value),
            _ => None,
        })
        .collect();
    assert_eq!(natives.len(), 2);
    assert_eq!(
        natives[0],
        &json!({
            "type": "mcp_tool_use",
            "id": "mcptoolu_017CuqaJcXe5ZHJjaz3KS1AT",
            "name": "echo",
            "input": {"message": "hello world"},
            "server_name": "echo"
        })
    );
    assert_eq!(natives[1]["type"], "mcp_tool_result");
}

#[test]
fn redacted_thinking_and_signatures_are_kept_for_replay() {
    let (events, _) = whole("redacted-thinking");
    let redacted: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::RedactedThinking { data } => Some(data.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(redacted.len(), 2);
    assert!(redacted[0].starts_with("EqkECkYIBxgCKkA8AZ4n"));
    assert!(redacted[1].starts_with("EtgBCkYIBxgCKkDQfGkw"));

    let replayed = replay::assemble(
        WireFormat::Anthropic,
        &recording("thinking-signature-padded"),
    );
    assert!(replayed.error.is_none(), "{:?}", replayed.error);
    let response = replayed.response;
    match &response.content[0] {
        ContentBlock::Thinking {
            signature,
            provider,
            ..
        } => {
            assert!(
                signature
                    .as_deref()
                    .is_some_and(|s| s.starts_with("EvMCCkYICxgCKkCHP2cS") && s.ends_with("YAQ==")),
                "{signature:?}"
            );
            assert_eq!(provider.as_deref(), Some("anthropic"));
        }
        other => panic!("expected thinking first, got {other:?}"),
    }
}

#[test]
fn usage_reports_carry_running_totals_including_cache() {
    let (events, _) = whole("text-with-ping");
    let usages: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::Usage { usage } => Some((usage.input_tokens, usage.output_tokens)),
            _ => None,
        })
        .collect();
    assert_eq!(usages, [(12, 1), (12, 30)]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_splits_give_identical_results(
        pick in 0usize..13,
        sizes in prop::collection::vec(1usize..300, 1..40),
    ) {
        let name = recordings().pick(pick);
        let bytes = recording(&name);
        prop_assert_eq!(comparable(assemble(chunked(&bytes, &sizes))), comparable(whole(&name)));
    }

    #[test]
    fn cut_or_damaged_streams_never_panic(
        pick in 0usize..13,
        cut in 0.0f64..1.0,
        damage in prop::collection::vec((0.0f64..1.0, any::<u8>()), 0..8),
    ) {
        let bytes = damaged(recording(&recordings().pick(pick)), cut, &damage);
        let (events, error) = assemble(chunked(&bytes, &[17]));
        // Whatever came out still assembles.
        let _ = summary(&events, error.as_ref());
    }
}

// Batch 2: newer recordings (`shared/conformance/streams-batch2/anthropic/*.sse`, provenance in
// its `SOURCES.md`): compaction, code execution, web fetch, tool search, programmatic tool
// calling, a `message_start` carrying the whole message, a signature-only thinking block.
// Expectations in `tests/conformance/anthropic/batch2/*.json`: the README's format plus
// `cache_read_tokens` in usage and `blocks`, the content blocks' kinds in order
// (`signed_thinking`, `thinking`, `text`, `tool_use`, `native:<type>`, and for the decoder's
// annotations, which have no `type`, `native:<first key>`).
//
// References: "Streaming Messages" (event flow, `message_start` holds a Message);
// "Compaction" (platform.claude.com/docs/en/build-with-claude/compaction: the `compaction`
// block streams as one `compaction_delta` and goes back unchanged on the next request);
// "Programmatic tool calling" (a client `tool_use` names its `caller`, the code execution
// call it came from, and the container it ran in must be reused).

fn batch2() -> Recordings {
    Recordings::new(
        "conformance/streams-batch2/anthropic",
        "anthropic/batch2",
        ".sse",
    )
}

fn batch2_recording(name: &str) -> Vec<u8> {
    batch2().read(name)
}

fn batch2_whole(name: &str) -> Decoded {
    assemble([batch2_recording(name).as_slice()])
}

/// The batch-2 extras described above.
const BATCH2_EXTRAS: Extras = Extras {
    cache_read: true,
    cache_write: false,
    native_label: Some(type_or_first_key),
    error: anthropic_error,
};

fn type_or_first_key(value: &Value) -> String {
    value
        .get("type")
        .and_then(Value::as_str)
        .or_else(|| value.as_object()?.keys().next().map(String::as_str))
        .unwrap_or("?")
        .to_owned()
}

fn batch2_summary(events: &[StreamEvent], error: Option<&Error>) -> Value {
    recordings::summary(events, error, &BATCH2_EXTRAS)
}

#[test]
fn every_batch2_recording_has_an_expectation_and_matches_it() {
    batch2().check_expectations(8, |name| {
        let (events, error) = batch2_whole(name);
        batch2_summary(&events, error.as_ref())
    });
}

#[test]
fn batch2_one_byte_chunks_give_the_same_events() {
    for name in batch2().names() {
        let bytes = batch2_recording(&name);
        assert_eq!(
            comparable(assemble(bytes.chunks(1))),
            comparable(batch2_whole(&name)),
            "{name}"
        );
    }
}

fn batch2_replayed(name: &str) -> agentloop::Response {
    let replayed = replay::assemble(WireFormat::Anthropic, &batch2_recording(name));
    assert!(replayed.error.is_none(), "{name}: {:?}", replayed.error);
    replayed.response
}

#[test]
fn a_compaction_block_is_kept_whole_with_its_streamed_summary() {
    let response = batch2_replayed("compaction-block-context-management-iterations");
    assert_eq!(
        response.content[0],
        ContentBlock::Native {
            provider: "anthropic".into(),
            value: json!({
                "type": "compaction",
                "content": "The user provided a very long context consisting entirely of the repeated sentence \"The quick brown fox jumps over the lazy dog.\" thousands of times, followed by the instruction \"Now say hello.\"\n\nThe task is simply to respond to \"Now say hello.\" - i.e., say hello.\n\nNext step: Say hello to the user."
            }),
        }
    );
    assert_eq!(response.content[1], ContentBlock::text("Hello! 👋"));
    assert_eq!(response.content.len(), 2);
}

#[test]
fn a_programmatic_tool_call_keeps_its_caller_and_the_container() {
    let response = batch2_replayed("programmatic-tool-call-caller-and-container");
    let n = response.content.len();
    assert_eq!(
        response.content[n - 3],
        ContentBlock::ToolUse {
            id: "toolu_019jKkXz4jAdwHweHBw92CVY".into(),
            name: "rollDie".into(),
            input: json!({"player": "player1"}),
        }
    );
    // The caller rides on an annotation right after its call (a tool use has no field for
    // it); the request puts it back on the call.
    assert_eq!(
        response.content[n - 2],
        ContentBlock::Native {
            provider: "anthropic".into(),
            value: json!({
                "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_01MzSrFWsmzBdcoQkGWLyRjK"},
                "tool_use_id": "toolu_019jKkXz4jAdwHweHBw92CVY"
            }),
        }
    );
    assert_eq!(
        response.content[n - 1],
        ContentBlock::Native {
            provider: "anthropic".into(),
            value: json!({"container": {"id": "container_011CWHPPTDTn1XufeRB9uHeH", "expires_at": "2025-12-20T05:33:35.789626Z"}}),
        }
    );
    // The server call that runs the code keeps its streamed input and its direct caller.
    let ContentBlock::Native { value, .. } = &response.content[1] else {
        panic!(
            "expected the code execution call, got {:?}",
            response.content[1]
        );
    };
    assert_eq!(value["type"], "server_tool_use");
    assert_eq!(value["caller"], json!({"type": "direct"}));
    assert!(
        value["input"]["code"]
            .as_str()
            .is_some_and(|code| code.contains("rollDie")),
        "{value}"
    );
}

#[test]
fn a_message_start_with_the_whole_message_is_the_whole_answer() {
    let response = batch2_replayed("message-start-carries-full-content-no-block-events");
    assert_eq!(response.id, "msg_01KSVw3xmXbMNJPNMt46BC5W");
    assert_eq!(response.stop_reason.as_str(), "tool_use");
    assert_eq!(
        response.content,
        vec![
            ContentBlock::ToolUse {
                id: "toolu_015dGLMbwBKv1ZRQr6KdJzeH".into(),
                name: "rollDie".into(),
                input: json!({"player": "player2"}),
            },
            ContentBlock::Native {
                provider: "anthropic".into(),
                value: json!({
                    "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_01MzSrFWsmzBdcoQkGWLyRjK"},
                    "tool_use_id": "toolu_015dGLMbwBKv1ZRQr6KdJzeH"
                }),
            },
            ContentBlock::Native {
                provider: "anthropic".into(),
                value: json!({"container": {"id": "container_011CWHPPTDTn1XufeRB9uHeH", "expires_at": "2025-12-20T05:33:37.969567Z"}}),
            },
        ]
    );
}

#[test]
fn a_signature_only_thinking_block_is_kept_signed_and_empty() {
    let response = batch2_replayed("advisor-tool-result-signature-only-thinking");
    match &response.content[0] {
        ContentBlock::Thinking {
            thinking,
            signature,
            provider,
        } => {
            assert_eq!(thinking, "");
            assert!(
                signature
                    .as_deref()
                    .is_some_and(|s| s.starts_with("EpADCokBCA8YAipA") && s.ends_with("zhgB")),
                "{signature:?}"
            );
            assert_eq!(provider.as_deref(), Some("anthropic"));
        }
        other => panic!("expected thinking first, got {other:?}"),
    }
}

#[test]
fn back_to_back_server_calls_each_get_their_own_streamed_input() {
    let response = batch2_replayed("text-editor-code-execution-consecutive-server-tool-use");
    let calls: Vec<&Value> = response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Native { value, .. } if value["type"] == "server_tool_use" => Some(value),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 3);
    for call in &calls {
        assert!(call["input"]["command"].is_string(), "{call}");
    }
    assert_ne!(calls[0]["input"], calls[1]["input"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn batch2_random_splits_give_identical_results(
        pick in 0usize..8,
        sizes in prop::collection::vec(1usize..300, 1..40),
    ) {
        let name = batch2().pick(pick);
        let bytes = batch2_recording(&name);
        prop_assert_eq!(comparable(assemble(chunked(&bytes, &sizes))), comparable(batch2_whole(&name)));
    }

    #[test]
    fn batch2_cut_or_damaged_streams_never_panic(
        pick in 0usize..8,
        cut in 0.0f64..1.0,
        damage in prop::collection::vec((0.0f64..1.0, any::<u8>()), 0..8),
    ) {
        let bytes = damaged(batch2_recording(&batch2().pick(pick)), cut, &damage);
        let (events, error) = assemble(chunked(&bytes, &[17]));
        let _ = batch2_summary(&events, error.as_ref());
        let _ = replay::assemble(WireFormat::Anthropic, &bytes);
    }
}
