//! Recorded OpenAI Responses streams (`shared/conformance/streams-batch2/openai-responses/
//! *.sse`, provenance in its `SOURCES.md`) assembled with the SSE parser, the Responses decoder
//! and the accumulator, compared with the expectations in
//! `tests/conformance/openai-responses/*.json` (format: `tests/conformance/README.md`, with the
//! extras described in `responses_support`), written after reading each recording.
//!
//! Event semantics: OpenAI API reference, "Streaming events" of the Responses API
//! (platform.openai.com/docs/api-reference/responses-streaming) and the streaming guide
//! (developers.openai.com/docs/guides/streaming-responses): `response.output_item.added` /
//! `.done` frame each output item, `response.function_call_arguments.delta` streams a call's
//! arguments, and the stream ends with `response.completed`, `response.incomplete` or
//! `response.failed`.

mod common;
mod responses_support;

use std::path::{Path, PathBuf};

use agentloop::provider::replay::{self, WireFormat};
use agentloop::{ContentBlock, Error, StreamEvent};
use proptest::prelude::*;
use responses_support::{assemble, summary};
use serde_json::{Value, json};

const RECORDINGS: usize = 19;

fn streams_dir() -> PathBuf {
    common::shared_path("conformance/streams-batch2/openai-responses")
}

fn expected_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/openai-responses")
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

fn whole(name: &str) -> (Vec<StreamEvent>, Option<Error>) {
    let bytes = recording(name);
    assemble([bytes.as_slice()])
}

#[test]
fn every_recording_has_an_expectation_and_matches_it() {
    let names = stream_names();
    assert_eq!(names.len(), RECORDINGS, "recordings found: {names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let path = expected_dir().join(format!("{name}.json"));
        let (events, error) = whole(name);
        let actual = summary(&events, error.as_ref());
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

fn replayed(name: &str) -> agentloop::Response {
    let replayed = replay::assemble(WireFormat::OpenAiResponses, &recording(name));
    assert!(replayed.error.is_none(), "{name}: {:?}", replayed.error);
    replayed.response
}

#[test]
fn the_reasoning_item_is_kept_whole_as_the_signature_of_its_summary() {
    let response = replayed("reasoning-encrypted-content-summary-then-function-call");
    let ContentBlock::Thinking {
        thinking,
        signature: Some(signature),
        provider,
    } = &response.content[0]
    else {
        panic!("expected signed reasoning, got {:?}", response.content[0]);
    };
    assert!(
        thinking.starts_with("**Calculating step-by-step"),
        "{thinking}"
    );
    assert_eq!(provider.as_deref(), Some("openai-responses"));
    let item: Value = serde_json::from_str(signature).expect("the item as JSON");
    assert_eq!(item["type"], "reasoning");
    assert_eq!(
        item["id"],
        "rs_01830d662ab3856501693c321405c88190be3ab04d5782d5f9"
    );
    // The blob of `output_item.done` (it differs from the one in `.added`).
    let done = String::from_utf8(recording(
        "reasoning-encrypted-content-summary-then-function-call",
    ))
    .unwrap();
    let encrypted = item["encrypted_content"]
        .as_str()
        .expect("encrypted content");
    let added_at = done.find("response.output_item.added").unwrap();
    let done_at = done.find("response.output_item.done").unwrap();
    assert!(done[done_at..].contains(encrypted));
    assert!(!done[added_at..done_at].contains(encrypted));
    assert!(matches!(&response.content[1], ContentBlock::ToolUse { .. }));
}

#[test]
fn items_are_followed_by_output_index_when_their_ids_rotate() {
    let response = replayed("github-copilot-rotating-item-ids");
    assert!(!response.text().is_empty());
    assert_eq!(response.stop_reason.as_str(), "end_turn");
}

#[test]
fn built_in_tool_items_are_kept_verbatim_as_native_blocks() {
    let natives = |name: &str| -> Vec<Value> {
        replayed(name)
            .content
            .into_iter()
            .filter_map(|block| match block {
                ContentBlock::Native { provider, value } => {
                    assert_eq!(provider, "openai-responses");
                    Some(value)
                }
                _ => None,
            })
            .collect()
    };
    let search = natives("web-search-call-url-citation-annotation");
    assert_eq!(search[0]["type"], "web_search_call");
    assert_eq!(search[0]["status"], "completed");
    let code = natives("code-interpreter-call-with-reasoning-summary");
    assert_eq!(code.len(), 3);
    assert!(code.iter().all(|c| c["type"] == "code_interpreter_call"
        && c["code"].as_str().is_some_and(|c| !c.is_empty())));
    let mcp = natives("mcp-list-tools-then-approval-request");
    assert_eq!(mcp[0]["type"], "mcp_list_tools");
    assert_eq!(mcp[1]["type"], "mcp_approval_request");
}

#[test]
fn a_call_cut_off_by_max_output_tokens_keeps_its_raw_arguments() {
    let response = replayed("incomplete-max-output-tokens-mid-function-call");
    assert_eq!(response.stop_reason.as_str(), "max_tokens");
    let calls = response.tool_uses();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].input, Value::String(r#"{"x":48151"#.to_owned()));
}

/// `annotations` on a message's `output_text` (Responses API reference, "output_text":
/// `url_citation {url, title, start_index, end_index}`, `file_citation {file_id, filename,
/// index}`) are kept after the text they annotate; there is no canonical citation type.
#[test]
fn citations_are_kept_after_the_text_they_annotate() {
    let response = replayed("web-search-call-url-citation-annotation");
    let n = response.content.len();
    assert!(response.content[n - 2].as_text().is_some());
    assert_eq!(
        response.content[n - 1],
        ContentBlock::Native {
            provider: "openai-responses".into(),
            value: json!({
                "annotations": [{
                    "type": "url_citation",
                    "end_index": 179,
                    "start_index": 94,
                    "title": "Mount Columbia | mountain, Alberta, Canada | Britannica",
                    "url": "https://www.britannica.com/place/Mount-Columbia?utm_source=openai"
                }],
                "content_index": 0,
                "item_id": "msg_0b5cbf1ce3f8b01c00696d5e6e9c00819c80af19e49f76161c"
            }),
        }
    );
    let response = replayed("file-search-call-file-citation-annotation");
    let Some(ContentBlock::Native { value, .. }) = response.content.last() else {
        panic!("expected the citations last: {:?}", response.content);
    };
    assert_eq!(
        value["annotations"],
        json!([{"type": "file_citation", "file_id": "file-9RhPAs9YqVajpGXRfcgavJ", "filename": "tmp8l5_2pzy.txt", "index": 30}])
    );
}

#[test]
fn an_error_event_is_a_typed_error_that_is_not_retried() {
    let replayed = replay::assemble(
        WireFormat::OpenAiResponses,
        &recording("error-event-then-response-failed"),
    );
    let error = replayed.error.expect("an error");
    assert!(
        matches!(&error, Error::Stream { error_type: Some(t), message, .. }
            if t == "insufficient_quota" && message.starts_with("You exceeded your current quota")),
        "{error:?}"
    );
    assert!(!error.is_retryable());
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
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_splits_give_identical_results(
        pick in 0usize..RECORDINGS,
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
        pick in 0usize..RECORDINGS,
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
        let _ = summary(&events, error.as_ref());
        let _ = replay::assemble(WireFormat::OpenAiResponses, &bytes);
    }
}
