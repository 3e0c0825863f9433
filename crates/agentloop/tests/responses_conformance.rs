//! Recorded OpenAI Responses streams (`shared/conformance/streams-batch2/openai-responses/
//! *.sse`, provenance in its `SOURCES.md`) assembled with the SSE parser, the Responses decoder
//! and the accumulator, compared with the expectations in
//! `tests/conformance/openai-responses/*.json` (format: `tests/conformance/README.md`, with the
//! extras described at `EXTRAS`), written after reading each recording.
//!
//! Event semantics: OpenAI API reference, "Streaming events" of the Responses API
//! (platform.openai.com/docs/api-reference/responses-streaming) and the streaming guide
//! (developers.openai.com/docs/guides/streaming-responses): `response.output_item.added` /
//! `.done` frame each output item, `response.function_call_arguments.delta` streams a call's
//! arguments, and the stream ends with `response.completed`, `response.incomplete` or
//! `response.failed`.

mod common;
mod recordings;

use agentloop::provider::replay::{self, WireFormat};
use agentloop::provider::responses::ResponsesDecoder;
use agentloop::{ContentBlock, Error, StreamEvent};
use proptest::prelude::*;
use recordings::{Decoded, Extras, Recordings, chunked, comparable, damaged, typed_error};
use serde_json::{Value, json};

const RECORDINGS: usize = 19;

fn recordings() -> Recordings {
    Recordings::new(
        "conformance/streams-batch2/openai-responses",
        "openai-responses",
        ".sse",
    )
}

fn stream_names() -> Vec<String> {
    recordings().names()
}

fn recording(name: &str) -> Vec<u8> {
    recordings().read(name)
}

fn assemble<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Decoded {
    recordings::assemble_sse(ResponsesDecoder::new(), chunks)
}

fn whole(name: &str) -> Decoded {
    let bytes = recording(name);
    assemble([bytes.as_slice()])
}

/// The Responses extras: cache read and write tokens in usage, and `blocks`, where a
/// reasoning block carrying its item is `signed_thinking` and a native block is named by its
/// item's type.
const EXTRAS: Extras = Extras {
    cache_read: true,
    cache_write: true,
    native_label: Some(item_type),
    error: typed_error,
};

/// A native block is named by its item's type; the decoder's annotations (citations) have no
/// `type` and are named by their first key.
fn item_type(value: &Value) -> String {
    value
        .get("type")
        .and_then(Value::as_str)
        .or_else(|| value.as_object()?.keys().next().map(String::as_str))
        .unwrap_or("?")
        .to_owned()
}

fn summary(events: &[StreamEvent], error: Option<&Error>) -> Value {
    recordings::summary(events, error, &EXTRAS)
}

#[test]
fn every_recording_has_an_expectation_and_matches_it() {
    recordings().check_expectations(RECORDINGS, |name| {
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_splits_give_identical_results(
        pick in 0usize..RECORDINGS,
        sizes in prop::collection::vec(1usize..300, 1..40),
    ) {
        let name = recordings().pick(pick);
        let bytes = recording(&name);
        prop_assert_eq!(comparable(assemble(chunked(&bytes, &sizes))), comparable(whole(&name)));
    }

    #[test]
    fn cut_or_damaged_streams_never_panic(
        pick in 0usize..RECORDINGS,
        cut in 0.0f64..1.0,
        damage in prop::collection::vec((0.0f64..1.0, any::<u8>()), 0..8),
    ) {
        let bytes = damaged(recording(&recordings().pick(pick)), cut, &damage);
        let (events, error) = assemble(chunked(&bytes, &[17]));
        let _ = summary(&events, error.as_ref());
        let _ = replay::assemble(WireFormat::OpenAiResponses, &bytes);
    }
}
