//! Recorded Gemini streams (`shared/conformance/streams-batch2/gemini/*.sse`, provenance in
//! its `SOURCES.md`) assembled with the SSE parser, the Gemini decoder and the accumulator,
//! compared with the expectations in `tests/conformance/gemini/*.json` (format:
//! `tests/conformance/README.md`, with the Gemini extras described at `EXTRAS`).

mod common;
mod recordings;

use agentloop::provider::gemini::GeminiDecoder;
use agentloop::provider::replay::{self, WireFormat};
use agentloop::{ContentBlock, Error, StreamEvent};
use proptest::prelude::*;
use recordings::{Decoded, Extras, Recordings, chunked, comparable, damaged, typed_error};
use serde_json::{Value, json};

fn recordings() -> Recordings {
    Recordings::new("conformance/streams-batch2/gemini", "gemini", ".sse")
}

fn stream_names() -> Vec<String> {
    recordings().names()
}

fn recording(name: &str) -> Vec<u8> {
    recordings().read(name)
}

fn assemble<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Decoded {
    recordings::assemble_sse(GeminiDecoder::new(), chunks)
}

/// Gemini's extras: `cache_read_tokens` in usage, and `blocks`, where a native block is named
/// by its part's key, which shows where each signature sits.
const EXTRAS: Extras = Extras {
    cache_read: true,
    cache_write: false,
    native_label: Some(part_key),
    error: typed_error,
};

fn part_key(value: &Value) -> String {
    value
        .as_object()
        .and_then(|o| o.keys().find(|k| *k != "thoughtSignature"))
        .map_or("?", String::as_str)
        .to_owned()
}

fn summary(events: &[StreamEvent], error: Option<&Error>) -> Value {
    recordings::summary(events, error, &EXTRAS)
}

/// A recording as the transport would see it. The 404 recording is an error body (plain JSON
/// under `text/event-stream`), which the transport reads through the error mapper and replay
/// reads whole: both are covered by `the_404_body_is_an_error_not_an_empty_answer`.
fn whole(name: &str) -> (Vec<StreamEvent>, Option<Error>) {
    let bytes = recording(name);
    assemble([bytes.as_slice()])
}

#[test]
fn every_recording_has_an_expectation_and_matches_it() {
    recordings().check_expectations(20, |name| {
        let (events, error) = if name.starts_with("error-404") {
            let replayed = replay::assemble(WireFormat::Gemini, &recording(name));
            (Vec::new(), replayed.error)
        } else {
            whole(name)
        };
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
    let replayed = replay::assemble(WireFormat::Gemini, &recording(name));
    assert!(replayed.error.is_none(), "{name}: {:?}", replayed.error);
    replayed.response
}

fn signature_of(block: &ContentBlock) -> Option<(&str, Option<&str>)> {
    match block {
        ContentBlock::Thinking {
            signature: Some(signature),
            provider,
            ..
        } => Some((signature.as_str(), provider.as_deref())),
        _ => None,
    }
}

#[test]
fn a_signature_on_the_first_answer_text_closes_the_thought_summary_before_the_text() {
    let response = replayed("thinking-thought-parts-signature-on-first-text");
    let (signature, provider) = signature_of(&response.content[0]).expect("signed reasoning");
    assert!(signature.starts_with("CiIB0e2Kb6Syj1a961Ef"), "{signature}");
    assert_eq!(provider, Some("gemini"));
    assert!(
        response.content[1]
            .as_text()
            .is_some_and(|t| t.starts_with("This is a great question!"))
    );
}

#[test]
fn a_function_call_keeps_its_id_and_its_signature_sits_right_before_it() {
    let response = replayed("malformed-function-call-after-real-call-with-id");
    let (signature, _) = signature_of(&response.content[0]).expect("signed reasoning");
    assert!(signature.starts_with("FIXTURE_PLACEHOLDER_"), "{signature}");
    assert!(matches!(
        &response.content[1],
        ContentBlock::ToolUse { id, name, .. } if id == "zgtP7IsV" && name == "check_status"
    ));
    // MALFORMED_FUNCTION_CALL keeps its message (the raw call the model failed to format).
    let ContentBlock::Native { provider, value } = &response.content[2] else {
        panic!("expected the finish block, got {:?}", response.content[2]);
    };
    assert_eq!(provider, "gemini");
    assert_eq!(value["finishReason"], "MALFORMED_FUNCTION_CALL");
    assert!(
        value["finishMessage"].as_str().is_some_and(
            |m| m.starts_with("Malformed function call: call:default_api:exec{command: df -")
        ),
        "{value}"
    );
}

#[test]
fn calls_without_an_id_get_stable_synthesized_ids() {
    let first = replayed("parallel-function-calls-finish-message");
    let second = replayed("parallel-function-calls-finish-message");
    let ids: Vec<String> = first.tool_uses().into_iter().map(|c| c.id).collect();
    assert_eq!(
        ids,
        ["gemini_call_id_REDACTED_1_0", "gemini_call_id_REDACTED_1_1"]
    );
    assert_eq!(first, second);
}

#[test]
fn code_execution_and_grounding_are_kept_verbatim_as_native_blocks() {
    let response = replayed("code-execution-outcome-failed");
    let natives: Vec<&Value> = response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Native { value, .. } => Some(value),
            _ => None,
        })
        .collect();
    assert_eq!(natives[0]["executableCode"]["language"], "PYTHON");
    assert_eq!(
        natives[1]["codeExecutionResult"]["outcome"],
        "OUTCOME_FAILED"
    );
    assert!(
        natives[1]["codeExecutionResult"]["output"]
            .as_str()
            .is_some_and(|o| o.contains("Traceback")),
        "{}",
        natives[1]
    );

    let response = replayed("google-search-grounding-metadata");
    let Some(ContentBlock::Native { value, .. }) = response.content.last() else {
        panic!("expected the grounding block last");
    };
    assert_eq!(
        value["groundingMetadata"]["webSearchQueries"],
        json!(["weather in San Francisco today"])
    );
    assert!(value["groundingMetadata"]["searchEntryPoint"]["renderedContent"].is_string());
}

#[test]
fn a_safety_stop_is_a_refusal_that_keeps_the_ratings() {
    let response = replayed("safety-blocked-empty-content.DERIVED");
    assert_eq!(response.stop_reason.as_str(), "refusal");
    let Some(ContentBlock::Native { value, .. }) = response.content.first() else {
        panic!("expected the finish block");
    };
    assert_eq!(value["finishReason"], "SAFETY");
    assert_eq!(value["safetyRatings"][0]["blocked"], true);
}

#[test]
fn the_404_body_is_an_error_not_an_empty_answer() {
    let replayed = replay::assemble(
        WireFormat::Gemini,
        &recording("error-404-plain-json-body-on-event-stream"),
    );
    let error = replayed.error.expect("an error");
    assert!(
        matches!(&error, Error::Stream { error_type: Some(t), message, .. }
            if t == "NOT_FOUND" && message.starts_with("models/gemini-nonexistent-rig-test is not found")),
        "{error:?}"
    );
    // Through the SSE parser alone the body holds no event: the stream is cut short, never
    // an empty success.
    let (events, error) = whole("error-404-plain-json-body-on-event-stream");
    assert!(events.is_empty());
    assert!(
        matches!(error, Some(Error::IncompleteStream { .. })),
        "{error:?}"
    );
}

/// Chunks of the documented shape take a fast typed reader; the `Value` reader (every other
/// shape, and whole bodies) must give the same events for them.
#[test]
fn the_typed_reader_and_the_value_reader_agree_on_every_recording() {
    use agentloop::provider::gemini::GeminiDecoder;
    use agentloop::provider::http::SseDecoder;
    use agentloop::sse::SseParser;
    use std::collections::VecDeque;

    for name in stream_names() {
        let mut data = Vec::new();
        let mut parser = SseParser::new();
        parser.feed(&recording(&name), |event| {
            data.push(event.data.into_owned())
        });
        parser.finish(|event| data.push(event.data.into_owned()));
        let mut by_value = GeminiDecoder::new();
        let mut value_events = VecDeque::new();
        let mut value_error = None;
        for chunk in &data {
            let chunk: Value = serde_json::from_str(chunk.trim()).unwrap();
            if let Err(e) = by_value.chunk(&chunk, &mut value_events) {
                value_error = Some(e.to_string());
                break;
            }
        }
        if value_error.is_none() {
            value_error = by_value.end(&mut value_events).err().map(|e| e.to_string());
        }
        let (events, error) = whole(&name);
        assert_eq!(events, Vec::from(value_events), "{name}");
        assert_eq!(error.map(|e| e.to_string()), value_error, "{name}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_splits_give_identical_results(
        pick in 0usize..20,
        sizes in prop::collection::vec(1usize..300, 1..40),
    ) {
        let name = recordings().pick(pick);
        let bytes = recording(&name);
        prop_assert_eq!(comparable(assemble(chunked(&bytes, &sizes))), comparable(whole(&name)));
    }

    #[test]
    fn cut_or_damaged_streams_never_panic(
        pick in 0usize..20,
        cut in 0.0f64..1.0,
        damage in prop::collection::vec((0.0f64..1.0, any::<u8>()), 0..8),
    ) {
        let bytes = damaged(recording(&recordings().pick(pick)), cut, &damage);
        let (events, error) = assemble(chunked(&bytes, &[17]));
        let _ = summary(&events, error.as_ref());
        let _ = replay::assemble(WireFormat::Gemini, &bytes);
    }
}
