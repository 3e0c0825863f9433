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
