//! Recorded Anthropic streams (`shared/conformance/streams/anthropic/*.sse`) assembled with the
//! SSE parser, the Anthropic decoder and the accumulator, compared with the expectations in
//! `tests/conformance/anthropic/*.json` (format: `tests/conformance/README.md`).

mod anthropic_support;
mod common;

use std::path::{Path, PathBuf};

use agentloop::provider::replay::{self, WireFormat};
use agentloop::{Accumulator, ContentBlock, Error, StreamEvent};
use anthropic_support::assemble;
use proptest::prelude::*;
use serde_json::{Value, json};

fn streams_dir() -> PathBuf {
    common::shared_path("conformance/streams/anthropic")
}

fn expected_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/anthropic")
}

fn stream_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(streams_dir())
        .expect("read the streams folder")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".sse").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

fn recording(name: &str) -> Vec<u8> {
    std::fs::read(streams_dir().join(format!("{name}.sse"))).expect("read the recording")
}

/// The assembled result in the README's format.
fn summary(events: &[StreamEvent], error: Option<&Error>) -> Value {
    let mut acc = Accumulator::new();
    for event in events {
        acc.push(event);
    }
    let stopped = acc.is_stopped();
    let response = acc.finish();
    let tool_calls: Vec<Value> = response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some(match input {
                Value::String(raw) if serde_json::from_str::<Value>(raw).is_err() => {
                    json!({"id": id, "name": name, "input": null, "input_error": "invalid JSON"})
                }
                _ => json!({"id": id, "name": name, "input": input}),
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
    let mut summary = json!({
        "text": response.text(),
        "tool_calls": tool_calls,
        "stop_reason": stop_reason,
        "usage": {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        },
    });
    if !thinking.is_empty() {
        summary["thinking"] = json!(thinking);
    }
    if let Some(error) = error {
        let (kind, message) = match error {
            Error::Overloaded { message, .. } => ("overloaded_error".to_owned(), message.clone()),
            Error::Stream {
                error_type,
                message,
                ..
            } => (error_type.clone().unwrap_or_default(), message.clone()),
            other => (other.kind().to_owned(), other.to_string()),
        };
        summary["error"] = json!({"type": kind, "message": message});
    }
    summary
}

fn whole(name: &str) -> (Vec<StreamEvent>, Option<Error>) {
    let bytes = recording(name);
    assemble([bytes.as_slice()])
}

#[test]
fn every_recording_has_an_expectation_and_matches_it() {
    let names = stream_names();
    assert_eq!(names.len(), 13, "recordings found: {names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let path = expected_dir().join(format!("{name}.json"));
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .expect("expectation is JSON");
        let (events, error) = whole(name);
        let actual = summary(&events, error.as_ref());
        if actual != expected {
            failures.push(format!(
                "{name}:\n  expected {expected}\n  actual   {actual}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn one_byte_chunks_give_the_same_events() {
    for name in stream_names() {
        let bytes = recording(&name);
        let (events, error) = assemble(bytes.chunks(1));
        let (expected_events, expected_error) = whole(&name);
        assert_eq!(events, expected_events, "{name}");
        assert_eq!(
            error.map(|e| e.to_string()),
            expected_error.map(|e| e.to_string()),
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

fn chunked<'a>(bytes: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut chunks = Vec::new();
    let mut rest = bytes;
    let mut sizes = sizes.iter().cycle();
    while !rest.is_empty() {
        let size = (*sizes.next().unwrap_or(&1)).clamp(1, rest.len());
        let (head, tail) = rest.split_at(size);
        chunks.push(head);
        rest = tail;
    }
    chunks
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_splits_give_identical_results(
        pick in 0usize..13,
        sizes in prop::collection::vec(1usize..300, 1..40),
    ) {
        let names = stream_names();
        let name = &names[pick % names.len()];
        let bytes = recording(name);
        let (events, error) = assemble(chunked(&bytes, &sizes));
        let (expected_events, expected_error) = whole(name);
        prop_assert_eq!(events, expected_events);
        prop_assert_eq!(error.map(|e| e.to_string()), expected_error.map(|e| e.to_string()));
    }

    #[test]
    fn cut_or_damaged_streams_never_panic(
        pick in 0usize..13,
        cut in 0.0f64..1.0,
        damage in prop::collection::vec((0.0f64..1.0, any::<u8>()), 0..8),
    ) {
        let names = stream_names();
        let mut bytes = recording(&names[pick % names.len()]);
        bytes.truncate((bytes.len() as f64 * cut) as usize);
        let len = bytes.len();
        for (at, byte) in damage {
            if len > 0 {
                bytes[((len as f64 * at) as usize).min(len - 1)] = byte;
            }
        }
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

fn batch2_dir() -> PathBuf {
    common::shared_path("conformance/streams-batch2/anthropic")
}

fn batch2_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(batch2_dir())
        .expect("read the batch-2 folder")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".sse").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

fn batch2_recording(name: &str) -> Vec<u8> {
    std::fs::read(batch2_dir().join(format!("{name}.sse"))).expect("read the recording")
}

fn batch2_whole(name: &str) -> (Vec<StreamEvent>, Option<Error>) {
    assemble([batch2_recording(name).as_slice()])
}

/// [`summary`] plus the batch-2 extras described above.
fn batch2_summary(events: &[StreamEvent], error: Option<&Error>) -> Value {
    let mut summary = summary(events, error);
    let response = anthropic_support::response(events);
    summary["usage"]["cache_read_tokens"] = json!(response.usage.cache_read_tokens);
    let blocks: Vec<String> = response
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Thinking {
                signature: Some(_), ..
            } => "signed_thinking".to_owned(),
            ContentBlock::Thinking { .. } => "thinking".to_owned(),
            ContentBlock::Text { .. } => "text".to_owned(),
            ContentBlock::ToolUse { .. } => "tool_use".to_owned(),
            ContentBlock::Native { value, .. } => match value.get("type").and_then(Value::as_str) {
                Some(kind) => format!("native:{kind}"),
                None => format!(
                    "native:{}",
                    value
                        .as_object()
                        .and_then(|o| o.keys().next())
                        .map_or("?", String::as_str)
                ),
            },
            other => format!("{other:?}"),
        })
        .collect();
    summary["blocks"] = json!(blocks);
    summary
}

#[test]
fn every_batch2_recording_has_an_expectation_and_matches_it() {
    let names = batch2_names();
    assert_eq!(names.len(), 8, "recordings found: {names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let (events, error) = batch2_whole(name);
        let actual = batch2_summary(&events, error.as_ref());
        let path = expected_dir().join(format!("batch2/{name}.json"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            failures.push(format!(
                "{name}: no expectation; actual:\n{}",
                serde_json::to_string_pretty(&actual).unwrap()
            ));
            continue;
        };
        let expected: Value = serde_json::from_str(&text).expect("expectation is JSON");
        if actual != expected {
            failures.push(format!(
                "{name}:\n  expected {expected}\n  actual   {}",
                serde_json::to_string_pretty(&actual).unwrap()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn batch2_one_byte_chunks_give_the_same_events() {
    for name in batch2_names() {
        let bytes = batch2_recording(&name);
        let (events, error) = assemble(bytes.chunks(1));
        let (expected_events, expected_error) = batch2_whole(&name);
        assert_eq!(events, expected_events, "{name}");
        assert_eq!(
            error.map(|e| e.to_string()),
            expected_error.map(|e| e.to_string()),
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
        let names = batch2_names();
        let name = &names[pick % names.len()];
        let bytes = batch2_recording(name);
        let (events, error) = assemble(chunked(&bytes, &sizes));
        let (expected_events, expected_error) = batch2_whole(name);
        prop_assert_eq!(events, expected_events);
        prop_assert_eq!(error.map(|e| e.to_string()), expected_error.map(|e| e.to_string()));
    }

    #[test]
    fn batch2_cut_or_damaged_streams_never_panic(
        pick in 0usize..8,
        cut in 0.0f64..1.0,
        damage in prop::collection::vec((0.0f64..1.0, any::<u8>()), 0..8),
    ) {
        let names = batch2_names();
        let mut bytes = batch2_recording(&names[pick % names.len()]);
        bytes.truncate((bytes.len() as f64 * cut) as usize);
        let len = bytes.len();
        for (at, byte) in damage {
            if len > 0 {
                bytes[((len as f64 * at) as usize).min(len - 1)] = byte;
            }
        }
        let (events, error) = assemble(chunked(&bytes, &[17]));
        let _ = batch2_summary(&events, error.as_ref());
        let _ = replay::assemble(WireFormat::Anthropic, &bytes);
    }
}
