//! Recorded Bedrock `ConverseStream` bodies (`shared/conformance/streams-batch2/bedrock`:
//! binary `.eventstream` bodies with `.decoded.jsonl` copies, provenance in its `SOURCES.md`)
//! assembled with the event-stream framing, the Bedrock decoder and the accumulator, and
//! compared with the expectations in `tests/conformance/bedrock/*.json` (format:
//! `tests/conformance/README.md`, with the extras described at `EXTRAS`).
//!
//! The event shapes relied on are the Bedrock API reference's "ConverseStreamOutput",
//! "ContentBlockDeltaEvent", "ContentBlockStartEvent", "ReasoningContentBlockDelta"
//! (`text`, `signature`, `redactedContent`), "MessageStopEvent" (stop reasons `end_turn |
//! tool_use | max_tokens | stop_sequence | guardrail_intervened | content_filtered`) and
//! "ConverseStreamMetadataEvent".

mod common;
mod recordings;

use std::collections::VecDeque;

use agentloop::provider::bedrock::{BedrockDecoder, eventstream};
use agentloop::provider::replay::{self, WireFormat};
use agentloop::{ContentBlock, Error, StopReason, StreamEvent};
use proptest::prelude::*;
use recordings::{Decoded, Extras, Recordings, comparable};
use serde_json::{Value, json};

/// Every recording has a decoded copy; all but one also have their binary body.
fn recordings() -> Recordings {
    Recordings::new(
        "conformance/streams-batch2/bedrock",
        "bedrock",
        ".decoded.jsonl",
    )
}

fn stream_names() -> Vec<String> {
    recordings().names()
}

fn binary(name: &str) -> Option<Vec<u8>> {
    recordings().read_as(name, ".eventstream")
}

fn decoded(name: &str) -> Vec<u8> {
    recordings().read(name)
}

fn assemble<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Decoded {
    recordings::assemble_body(BedrockDecoder::new(), chunks)
}

/// Bedrock's extras: cache read and write tokens in usage, and `blocks`, where a native block
/// is named by its first key.
const EXTRAS: Extras = Extras {
    cache_read: true,
    cache_write: true,
    native_label: Some(first_key),
    error: kind_and_message,
};

fn first_key(value: &Value) -> String {
    value
        .as_object()
        .and_then(|o| o.keys().next())
        .map_or("?", String::as_str)
        .to_owned()
}

fn kind_and_message(error: &Error) -> Value {
    json!({"kind": error.kind(), "message": error.to_string()})
}

fn summary(events: &[StreamEvent], error: Option<&Error>) -> Value {
    recordings::summary(events, error, &EXTRAS)
}

/// An event frame with `payload` as JSON.
fn event(kind: &str, payload: Value) -> Vec<u8> {
    eventstream::event(kind, payload.to_string().as_bytes())
}

/// The events of the decoded copy, through the same decoder.
fn from_lines(name: &str) -> (Vec<StreamEvent>, Option<Error>) {
    let mut decoder = BedrockDecoder::new();
    let mut events = VecDeque::new();
    let result = replay::bedrock_lines(&mut decoder, &decoded(name), &mut events)
        .and_then(|()| decoder.end(&mut events));
    (events.into(), result.err())
}

/// A recording as the transport would see it (the decoded copy where there is no binary).
fn whole(name: &str) -> (Vec<StreamEvent>, Option<Error>) {
    match binary(name) {
        Some(bytes) => assemble([bytes.as_slice()]),
        None => from_lines(name),
    }
}

#[test]
fn every_recording_has_an_expectation_and_matches_it() {
    recordings().check_expectations(7, |name| {
        let (events, error) = whole(name);
        summary(&events, error.as_ref())
    });
}

#[test]
fn the_binary_bodies_decode_to_the_same_events_as_their_decoded_copies() {
    let mut compared = 0;
    for name in stream_names() {
        let Some(bytes) = binary(&name) else { continue };
        let (events, error) = assemble([bytes.as_slice()]);
        let (expected, expected_error) = from_lines(&name);
        assert_eq!(events, expected, "{name}");
        assert_eq!(
            error.map(|e| e.to_string()),
            expected_error.map(|e| e.to_string())
        );
        compared += 1;
    }
    assert_eq!(compared, 6);
}

#[test]
fn one_byte_chunks_give_the_same_events() {
    for name in stream_names() {
        let Some(bytes) = binary(&name) else { continue };
        assert_eq!(
            comparable(assemble(bytes.chunks(1))),
            comparable(whole(&name)),
            "{name}"
        );
    }
}

#[test]
fn every_cut_short_body_is_an_incomplete_stream_not_a_panic() {
    for name in stream_names() {
        let Some(bytes) = binary(&name) else { continue };
        for cut in [1, 11, 12, 13, bytes.len() / 2, bytes.len() - 1] {
            let (_, error) = assemble([&bytes[..cut]]);
            assert!(
                matches!(error, Some(Error::IncompleteStream { .. })),
                "{name} cut at {cut}: {error:?}"
            );
        }
    }
}

#[test]
fn replay_reads_the_binary_and_the_decoded_form() {
    let name = "reasoning-text-then-signature-claude";
    let from_binary = replay::assemble(WireFormat::Bedrock, &binary(name).unwrap());
    let from_lines = replay::assemble(WireFormat::Bedrock, &decoded(name));
    assert!(from_binary.error.is_none(), "{:?}", from_binary.error);
    assert_eq!(from_binary.response, from_lines.response);
    let ContentBlock::Thinking {
        signature: Some(signature),
        provider,
        ..
    } = &from_binary.response.content[0]
    else {
        panic!(
            "expected signed reasoning, got {:?}",
            from_binary.response.content
        );
    };
    assert!(signature.starts_with("Eu0CCkgIBxAB"), "{signature}");
    assert_eq!(provider.as_deref(), Some("bedrock"));
    assert_eq!(
        from_binary.response.text(),
        "Hello! It's nice to meet you. How can I help you today?"
    );
}

#[test]
fn redacted_reasoning_is_kept_as_two_redacted_blocks_tagged_bedrock() {
    let replayed = replay::assemble(
        WireFormat::Bedrock,
        &binary("reasoning-redacted-content-claude").unwrap(),
    );
    let redacted: Vec<_> = replayed
        .response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::RedactedThinking { data, provider } => Some((data, provider)),
            _ => None,
        })
        .collect();
    assert_eq!(redacted.len(), 2);
    assert!(redacted[0].0.starts_with("RXRrRUNrZ0lCeEFC"));
    assert!(redacted[1].0.starts_with("RXFBRENrZ0lCeEFC"));
    assert!(
        redacted
            .iter()
            .all(|(_, p)| p.as_deref() == Some("bedrock"))
    );
}

#[test]
fn a_server_tool_and_its_result_are_native_blocks_and_only_the_client_tool_is_a_call() {
    let replayed = replay::assemble(
        WireFormat::Bedrock,
        &binary("server-tool-use-code-interpreter-nova").unwrap(),
    );
    let response = replayed.response;
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    let ContentBlock::Native { provider, value } = &response.content[0] else {
        panic!("{:?}", response.content);
    };
    assert_eq!(provider, "bedrock");
    assert_eq!(
        value,
        &json!({"toolUse": {
            "name": "nova_code_interpreter",
            "toolUseId": "tooluse_VQNZJRUFMoqZzszVsRd4og",
            "type": "server_tool_use",
            "input": {"snippet": "1234 * 5678"},
        }})
    );
    let ContentBlock::Native { value, .. } = &response.content[1] else {
        panic!("{:?}", response.content);
    };
    assert_eq!(
        value,
        &json!({"toolResult": {
            "status": "success",
            "toolUseId": "tooluse_VQNZJRUFMoqZzszVsRd4og",
            "type": "nova_code_interpreter_result",
            "content": [{"json": {"stdOut": "7006652", "stdErr": "", "exitCode": 0, "isError": false}}],
        }})
    );
    let calls = response.tool_uses();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "final_result");
    assert_eq!(calls[0].input, json!({"result": 7006652.0}));
}

fn chunks_at<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    for &cut in cuts {
        out.push(&bytes[at..cut]);
        at = cut;
    }
    out.push(&bytes[at..]);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_splits_give_the_same_events(
        which in 0usize..6,
        at in proptest::collection::vec(any::<prop::sample::Index>(), 0..24),
    ) {
        let names: Vec<String> = stream_names().into_iter().filter(|n| binary(n).is_some()).collect();
        let name = &names[which % names.len()];
        let bytes = binary(name).unwrap();
        let mut cuts: Vec<usize> = at.iter().map(|i| i.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let (events, error) = assemble(chunks_at(&bytes, &cuts));
        let (expected, expected_error) = whole(name);
        prop_assert_eq!(events, expected);
        prop_assert_eq!(error.map(|e| e.to_string()), expected_error.map(|e| e.to_string()));
    }

    #[test]
    fn damaged_bytes_never_panic(which in 0usize..6, at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let names: Vec<String> = stream_names().into_iter().filter(|n| binary(n).is_some()).collect();
        let mut bytes = binary(&names[which % names.len()]).unwrap();
        let i = at.index(bytes.len());
        bytes[i] = byte;
        let _ = assemble(bytes.chunks(7));
    }
}

/// Exceptions delivered as frames mid-stream (Bedrock API reference, "ConverseStreamOutput":
/// `internalServerException`, `modelStreamErrorException`, `serviceUnavailableException`,
/// `throttlingException`, `validationException`) end the stream after the events before them,
/// typed like the HTTP errors of the same name.
#[test]
fn exception_frames_are_typed_like_their_http_errors() {
    let start = event("messageStart", json!({"role": "assistant"}));
    let text = event(
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"text": "Hel"}}),
    );
    for (kind, check) in [
        (
            "throttlingException",
            (|e: &Error| matches!(e, Error::RateLimited { .. })) as fn(&Error) -> bool,
        ),
        ("serviceUnavailableException", |e| {
            matches!(e, Error::Overloaded { .. })
        }),
        ("internalServerException", |e| {
            matches!(e, Error::Api { status: 500, .. })
        }),
        ("validationException", |e| {
            matches!(e, Error::InvalidRequest { status: 400, .. })
        }),
        // "A streaming error occurred. Retry your request." (HTTP 424, API reference,
        // "ConverseStreamOutput").
        (
            "modelStreamErrorException",
            |e| matches!(e, Error::Api { status: 424, error_type: Some(t), .. } if t == "modelStreamErrorException"),
        ),
        ("modelTimeoutException", |e| {
            matches!(e, Error::Api { status: 408, .. })
        }),
    ] {
        let body = [
            start.clone(),
            text.clone(),
            eventstream::exception(kind, br#"{"message":"try again"}"#),
        ]
        .concat();
        let (events, error) = assemble([body.as_slice()]);
        let error = error.expect("the exception ends the stream");
        assert!(check(&error), "{kind}: {error:?}");
        assert!(error.to_string().contains("try again"), "{kind}: {error}");
        assert_eq!(events.len(), 2, "{kind}: the events before it arrive");
        assert_eq!(
            check(&error)
                && matches!(
                    kind,
                    "throttlingException"
                        | "serviceUnavailableException"
                        | "internalServerException"
                        | "modelStreamErrorException"
                        | "modelTimeoutException"
                ),
            error.is_retryable(),
            "{kind}"
        );
    }
}
