//! Helpers shared by the Anthropic test files: replay SSE bytes through the parser and the
//! decoder the way the HTTP transport does.
#![allow(dead_code)]

use agentloop::provider::anthropic::AnthropicDecoder;
use agentloop::{Accumulator, Error, Response, StreamEvent};

/// Feed `chunks` like the transport (see [`crate::recordings::assemble_sse`]).
pub fn assemble<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<StreamEvent>, Option<Error>) {
    crate::recordings::assemble_sse(AnthropicDecoder::new(), chunks)
}

/// Decode `sse` whole and in 1-byte chunks; both must give the same result, which is returned.
pub fn decode(sse: &str) -> (Vec<StreamEvent>, Option<Error>) {
    let whole = assemble([sse.as_bytes()]);
    let bytewise = assemble(sse.as_bytes().chunks(1));
    assert_eq!(whole.0, bytewise.0, "1-byte chunks changed the events");
    assert_eq!(
        whole.1.as_ref().map(ToString::to_string),
        bytewise.1.as_ref().map(ToString::to_string),
        "1-byte chunks changed the error"
    );
    whole
}

/// The response `events` assemble to (reasoning blocks untagged: the provider tags them, see
/// `replay::assemble`).
pub fn response(events: &[StreamEvent]) -> Response {
    let mut acc = Accumulator::new();
    for event in events {
        acc.push(event);
    }
    acc.finish()
}

/// One SSE event in Anthropic's framing.
pub fn event(name: &str, data: &str) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}
